//! Two engines as two nodes of a cluster, joined as `ferromq.cluster.bus` joins them
//! through Kafka (engine/cluster.rs): subscriptions travel as per-filter changes of a
//! compacted topic, a PUBLISH crosses once to the node with subscribers, and its
//! PUBACK waits for Kafka's acknowledgement of the record that carries it.

mod support;

use ferromq_core::codec::{Packet, ProtocolVersion, QoS, ReasonCode, Unsubscribe};
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;
const V5: ProtocolVersion = ProtocolVersion::V5;

/// Nodes 0 and 1; `slot[k]` is the other node's slot in node k's engine.
struct Cluster {
    nodes: [Harness; 2],
    slot: [u16; 2],
    /// Records produced and not yet acknowledged by "Kafka": (from, to, records,
    /// round, how far the sender had read the subscription topic).
    in_kafka: Vec<(usize, usize, bytes::Bytes, u64, u64)>,
    /// Records in the subscription topic, which both nodes read at each tick.
    topic: u64,
    /// The next offset of each node's topic.
    offsets: [u64; 2],
}

const NODE_IDS: [&str; 2] = ["node-0", "node-1"];

impl Cluster {
    fn new() -> Cluster {
        let mut nodes = [
            Harness::new(durable_config()),
            Harness::new(durable_config()),
        ];
        for node in &mut nodes {
            node.store = Some(Default::default());
            // A cluster's store is Redis: kept routes are dropped once confirmed.
            node.engine.set_store_per_client(true);
        }
        let slot = [
            nodes[0].engine.add_peer(NODE_IDS[1]),
            nodes[1].engine.add_peer(NODE_IDS[0]),
        ];
        Cluster {
            nodes,
            slot,
            in_kafka: Vec::new(),
            topic: 0,
            offsets: [0; 2],
        }
    }

    /// One tick: each node's subscription changes written to the topic and read by
    /// both, its routed records produced (not yet acknowledged).
    fn tick(&mut self) {
        for from in 0..2 {
            let to = 1 - from;
            if let Some((changes, round)) = self.nodes[from].engine.take_cluster_subscriptions() {
                for (filter, present) in changes {
                    let (slot, offset) = (self.slot[to], self.topic);
                    self.topic += 1;
                    self.nodes[to]
                        .engine
                        .peer_subscription(slot, &filter, present, offset);
                }
                for node in &mut self.nodes {
                    node.engine.set_subscriptions_seen(self.topic);
                }
                let topic = self.nodes[from].engine.cluster_slot();
                self.nodes[from].engine.peer_confirmed(topic, round);
                self.nodes[from].pump();
            }
            if let Some((records, round)) = self.nodes[from].engine.take_peer(self.slot[from]) {
                self.in_kafka.push((from, to, records, round, self.topic));
            }
        }
    }

    /// "Kafka" acknowledges every produced record, and the receivers apply them.
    fn deliver(&mut self) {
        for (from, to, records, round, seen) in std::mem::take(&mut self.in_kafka) {
            let slot = self.slot[from];
            self.nodes[from].engine.peer_confirmed(slot, round);
            self.nodes[from].pump();
            let offset = self.offsets[to];
            self.offsets[to] += 1;
            self.apply(to, records, offset, seen);
        }
    }

    /// Node `to` applies `records` from node `from`, at `offset` of its topic.
    fn apply(&mut self, to: usize, records: bytes::Bytes, offset: u64, seen: u64) {
        let now = self.nodes[to].now;
        let into = self.slot[to];
        let topic = NODE_IDS[to];
        self.nodes[to]
            .engine
            .peer_receive(into, records, topic, offset, seen, now)
            .unwrap();
        self.nodes[to].pump();
    }
}

/// "mover", subscribed to m/# on node 0, claimed by node 1: node 0 evicts it towards
/// node 1 (a 5 s stub), node 1 reads the session from node 0's store (as it would from
/// Redis) and the client connects there; returns that connection.
fn moved_to_node_1(cluster: &mut Cluster) -> Client {
    let persistent = || with_expiry(connect("mover", V5, false), 600);
    let (mut old, _) = cluster.nodes[0].connect(persistent());
    cluster.nodes[0].send(&old, subscribe(1, "m/#", QoS::AtLeastOnce));
    cluster.nodes[0].pump();
    cluster.nodes[0].recv(&mut old);
    cluster.tick();
    let (to, now) = (cluster.slot[0], cluster.nodes[0].now);
    cluster.nodes[0].engine.evict("mover", to, 5_000, now);
    cluster.nodes[0].pump();
    let stored = cluster.nodes[0].store.clone().expect("a store").freeze();
    let report = cluster.nodes[1].engine.restore(stored, now);
    assert_eq!(report.sessions, 1, "mover only");
    cluster.nodes[1].connect(persistent()).0
}

fn connected(h: &mut Harness, id: &str, version: ProtocolVersion) -> Client {
    let (client, connack) = h.connect(connect(id, version, true));
    assert!(matches!(connack, Packet::ConnAck(_)));
    client
}

/// A client of node `at` subscribed to `filter`; its SUBACK waits for the subscription
/// topic to have the change.
fn subscribed(cluster: &mut Cluster, at: usize, id: &str, filter: &str) -> Client {
    let mut client = connected(&mut cluster.nodes[at], id, V311);
    cluster.nodes[at].send(&client, subscribe(1, filter, QoS::AtLeastOnce));
    assert!(
        cluster.nodes[at].recv(&mut client).is_empty(),
        "the SUBACK waits for the subscription topic"
    );
    cluster.tick();
    assert!(matches!(
        cluster.nodes[at].recv(&mut client).as_slice(),
        [Packet::SubAck(_)]
    ));
    client
}

#[test]
fn a_publish_crosses_once_and_its_puback_waits_for_kafka() {
    let mut cluster = Cluster::new();
    let mut sub_a = subscribed(&mut cluster, 1, "sub-a", "sensors/+/temp");
    let mut sub_b = subscribed(&mut cluster, 1, "sub-b", "sensors/#");
    let mut publisher = connected(&mut cluster.nodes[0], "pub", V311);
    cluster.nodes[0].send(
        &publisher,
        publish("sensors/7/temp", b"21.5", QoS::AtLeastOnce, 9, false),
    );
    cluster.tick();
    assert_eq!(
        cluster.in_kafka.len(),
        1,
        "one record for node 1, two subscribers"
    );
    assert!(
        cluster.nodes[0].recv(&mut publisher).is_empty(),
        "no PUBACK before Kafka has the record"
    );
    cluster.deliver();
    assert!(matches!(
        cluster.nodes[0].recv(&mut publisher).as_slice(),
        [Packet::PubAck(_)]
    ));
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut sub_a)),
        vec![b"21.5".to_vec()]
    );
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut sub_b)),
        vec![b"21.5".to_vec()]
    );
}

#[test]
fn nothing_crosses_to_a_node_without_a_matching_subscriber() {
    let mut cluster = Cluster::new();
    let _sub = subscribed(&mut cluster, 1, "sub", "a/b");
    let mut publisher = connected(&mut cluster.nodes[0], "pub", V311);
    cluster.nodes[0].send(&publisher, publish("a/c", b"x", QoS::AtLeastOnce, 1, false));
    cluster.tick();
    assert!(cluster.in_kafka.is_empty());
    assert!(matches!(
        cluster.nodes[0].recv(&mut publisher).as_slice(),
        [Packet::PubAck(_)]
    ));
}

#[test]
fn a_filter_is_announced_by_its_first_subscriber_and_withdrawn_by_its_last() {
    let mut cluster = Cluster::new();
    let first = subscribed(&mut cluster, 0, "one", "t/#");
    let second = subscribed(&mut cluster, 0, "two", "t/#");
    assert_eq!(cluster.nodes[1].engine.peer_filters(cluster.slot[1]), 1);
    assert_eq!(
        cluster.nodes[0].engine.cluster_filters(),
        vec!["t/#".to_string()]
    );
    let unsubscribe = |id| {
        Packet::Unsubscribe(Unsubscribe {
            packet_id: id,
            filters: vec![s("t/#")],
            properties: Default::default(),
        })
    };
    cluster.nodes[0].send(&first, unsubscribe(2));
    cluster.tick();
    assert_eq!(cluster.nodes[1].engine.peer_filters(cluster.slot[1]), 1);
    cluster.nodes[0].send(&second, unsubscribe(2));
    cluster.tick();
    assert_eq!(cluster.nodes[1].engine.peer_filters(cluster.slot[1]), 0);
    assert!(cluster.nodes[0].engine.cluster_filters().is_empty());
}

#[test]
fn while_kafka_holds_a_record_local_traffic_is_acknowledged_and_order_kept_per_connection() {
    let mut cluster = Cluster::new();
    let _remote = subscribed(&mut cluster, 1, "remote", "cross/#");
    let mut local_sub = subscribed(&mut cluster, 0, "local-sub", "local/#");
    let mut crossing = connected(&mut cluster.nodes[0], "crossing", V311);
    let mut local = connected(&mut cluster.nodes[0], "local", V311);
    cluster.nodes[0].send(
        &crossing,
        publish("cross/1", b"c1", QoS::AtLeastOnce, 1, false),
    );
    cluster.nodes[0].send(
        &crossing,
        publish("local/1", b"c2", QoS::AtLeastOnce, 2, false),
    );
    cluster.nodes[0].send(
        &local,
        publish("local/2", b"l1", QoS::AtLeastOnce, 3, false),
    );
    cluster.tick(); // produced, Kafka silent
    cluster.nodes[0].pump();
    assert!(
        cluster.nodes[0].recv(&mut crossing).is_empty(),
        "both PUBACKs of the crossing publisher wait, the second behind the first"
    );
    assert!(matches!(
        cluster.nodes[0].recv(&mut local).as_slice(),
        [Packet::PubAck(_)]
    ));
    assert_eq!(
        payloads(&cluster.nodes[0].recv(&mut local_sub)),
        vec![b"c2".to_vec(), b"l1".to_vec()]
    );
    cluster.deliver();
    let acks: Vec<u16> = cluster.nodes[0]
        .recv(&mut crossing)
        .iter()
        .map(|p| match p {
            Packet::PubAck(ack) => ack.packet_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(acks, vec![1, 2]);
}

#[test]
fn an_evicted_session_is_taken_over_and_stays_in_the_store() {
    let mut cluster = Cluster::new();
    let node = &mut cluster.nodes[0];
    let (mut client, _) = node.connect(with_expiry(connect("mover", V5, false), 600));
    node.send(&client, subscribe(1, "m/#", QoS::AtLeastOnce));
    node.pump();
    node.recv(&mut client);
    let stored_before = node.store.as_ref().unwrap().len();
    let batch = node
        .engine
        .evict("mover", 1, 5_000, node.now)
        .expect("the session is here");
    node.pump();
    assert!(node.engine.journal_confirmed(batch));
    let got = node.recv(&mut client);
    assert!(
        matches!(got.as_slice(), [Packet::Disconnect(d)] if d.reason == ReasonCode::SessionTakenOver),
        "{got:?}"
    );
    assert!(node.is_closed(&client));
    assert_eq!(
        node.store.as_ref().unwrap().len(),
        stored_before,
        "the session's end is not journaled: the new owner reads it from the store"
    );
    cluster.tick();
    assert_eq!(
        cluster.nodes[1].engine.peer_filters(cluster.slot[1]),
        1,
        "the forwarding stub keeps the filter routed here"
    );
}

#[test]
fn retained_messages_reach_other_nodes_but_their_sys_trees_stay_their_own() {
    let mut cluster = Cluster::new();
    let publisher = connected(&mut cluster.nodes[0], "pub", V311);
    cluster.nodes[0].send(
        &publisher,
        publish("status/door", b"open", QoS::AtMostOnce, 0, true),
    );
    let now = cluster.nodes[0].now;
    cluster.nodes[0]
        .engine
        .publish("$SYS/broker/uptime", b"5", QoS::AtMostOnce, true, now);
    cluster.tick();
    cluster.deliver();
    let mut reader = connected(&mut cluster.nodes[1], "reader", V311);
    cluster.nodes[1].send(&reader, subscribe(1, "status/#", QoS::AtMostOnce));
    cluster.nodes[1].send(&reader, subscribe(2, "$SYS/broker/uptime", QoS::AtMostOnce));
    cluster.tick();
    let got = cluster.nodes[1].recv(&mut reader);
    assert_eq!(payloads(&got), vec![b"open".to_vec()]);
}

#[test]
fn assigned_client_ids_carry_the_node() {
    let mut cluster = Cluster::new();
    cluster.nodes[0].engine.set_assigned_id_prefix("ferromq-a-");
    let (_, connack) = cluster.nodes[0].connect(connect("", V5, true));
    let Packet::ConnAck(connack) = connack else {
        panic!("{connack:?}")
    };
    let assigned = format!("{:?}", connack.properties);
    assert!(assigned.contains("ferromq-a-"), "{assigned}");
}

#[test]
fn what_reaches_the_old_owner_during_a_move_is_forwarded_to_the_new_one() {
    let mut cluster = Cluster::new();
    let mut new = moved_to_node_1(&mut cluster);
    // Published on node 0 before node 0 has read node 1's key.
    let publisher = connected(&mut cluster.nodes[0], "pub", V5);
    cluster.nodes[0].send(
        &publisher,
        publish("m/2", b"during", QoS::AtLeastOnce, 1, false),
    );
    cluster.nodes[0].pump();
    cluster.tick();
    cluster.deliver();
    assert!(
        payloads(&cluster.nodes[1].recv(&mut new)).is_empty(),
        "held by the stub until its grace period ends"
    );
    cluster.nodes[0].advance(5_000);
    cluster.tick();
    cluster.deliver();
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut new)),
        vec![b"during".to_vec()]
    );
    let (to, now) = (cluster.slot[0], cluster.nodes[0].now);
    assert_eq!(
        cluster.nodes[0].engine.evict("mover", to, 5_000, now),
        None,
        "the stub ended"
    );
}

#[test]
fn the_stub_forwards_nothing_the_new_owner_got_directly() {
    let mut cluster = Cluster::new();
    // Another subscriber of the filter on node 1 already: node 0 routes m/# there.
    let mut other = subscribed(&mut cluster, 1, "other", "m/#");
    // Restored on node 1, the session's m/# is announced again (though "other" holds it
    // there already), and node 0 reads that.
    let mut new = moved_to_node_1(&mut cluster);
    cluster.tick();
    let publisher = connected(&mut cluster.nodes[0], "pub", V5);
    cluster.nodes[0].send(
        &publisher,
        publish("m/2", b"after", QoS::AtLeastOnce, 1, false),
    );
    cluster.nodes[0].pump();
    cluster.tick();
    cluster.deliver();
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut new)),
        vec![b"after".to_vec()]
    );
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut other)),
        vec![b"after".to_vec()]
    );
    cluster.nodes[0].advance(5_000);
    cluster.tick();
    cluster.deliver();
    assert!(
        payloads(&cluster.nodes[1].recv(&mut new)).is_empty(),
        "routed to node 1 by a node that had read the announcement: not forwarded again"
    );
}

#[test]
fn a_node_topic_record_read_again_delivers_nothing_twice() {
    let mut cluster = Cluster::new();
    let mut sub = subscribed(&mut cluster, 1, "sub", "again/#");
    let publisher = connected(&mut cluster.nodes[0], "pub", V311);
    cluster.nodes[0].send(
        &publisher,
        publish("again/1", b"x", QoS::AtLeastOnce, 1, false),
    );
    cluster.tick();
    let (_, _, records, _, seen) = cluster.in_kafka[0].clone();
    cluster.deliver();
    let got = cluster.nodes[1].recv(&mut sub);
    assert!(matches!(got.as_slice(), [Packet::Publish(_)]), "{got:?}");
    // Read again from an older committed offset (a restart, an adopter): skipped.
    cluster.apply(1, records.clone(), 0, seen);
    assert!(cluster.nodes[1].recv(&mut sub).is_empty());
    // The same bytes at a later offset are another record.
    cluster.apply(1, records, 1, seen);
    assert_eq!(cluster.nodes[1].recv(&mut sub).len(), 1);
}

#[test]
fn a_dead_nodes_record_goes_only_to_the_sessions_adopted_from_it() {
    // Node 1 has a subscriber of its own and adopts "mover" (restored from another
    // store, as an adopter restores a dead node's sessions): a message for both comes
    // to node 1 once, on its own topic, and again on the dead node's, which node 1
    // reads as the adopter. Each subscriber takes it once.
    let mut cluster = Cluster::new();
    let mut native = subscribed(&mut cluster, 1, "native", "m/#");
    let mut mover = moved_to_node_1(&mut cluster);
    cluster.tick();
    cluster.deliver();
    let publisher = connected(&mut cluster.nodes[0], "pub", V311);
    cluster.nodes[0].send(&publisher, publish("m/1", b"x", QoS::AtLeastOnce, 1, false));
    cluster.tick();
    let (_, to, records, _, seen) = cluster.in_kafka.pop().expect("a record for node 1");
    assert_eq!(to, 1);
    let now = cluster.nodes[1].now;
    cluster.nodes[1]
        .engine
        .adopt_sessions(&["mover".to_string()], "dead-node", seen + 1);
    let into = cluster.slot[1];
    cluster.nodes[1]
        .engine
        .peer_receive(into, records.clone(), "dead-node", 0, seen, now)
        .unwrap();
    cluster.nodes[1].pump();
    assert_eq!(
        cluster.nodes[1].recv(&mut mover).len(),
        1,
        "the adopted session"
    );
    assert!(
        cluster.nodes[1].recv(&mut native).is_empty(),
        "node 1's own session had its copy routed to node 1's topic"
    );
    cluster.apply(1, records, 0, seen);
    assert_eq!(cluster.nodes[1].recv(&mut native).len(), 1);
    assert!(
        cluster.nodes[1].recv(&mut mover).is_empty(),
        "matched before the marker: the adopted session took it from the dead node's topic"
    );
}

/// Node 0 with a persistent QoS 2 publisher "pub", node 1 with a subscriber "sub" of
/// "t" (its SUBACK given).
fn publisher_and_subscriber() -> (Cluster, Client, Client) {
    let mut cluster = Cluster::new();
    let sub = subscribed(&mut cluster, 1, "sub", "t");
    let (publisher, _) = cluster.nodes[0].connect(with_expiry(connect("pub", V5, false), 600));
    cluster.nodes[0].pump();
    (cluster, publisher, sub)
}

/// Node 0 restarted on its store, Kafka having what `in_kafka` says: the restored
/// crossings settled as `ferromq.cluster.ownership` settles them (sent again to node
/// 1 when Kafka lacked them); returns the restarted node and its `restored` list.
fn restarted_node_0(cluster: &mut Cluster) -> (Harness, Vec<(String, u64, String)>) {
    let store = cluster.nodes[0].store.clone().expect("a store").freeze();
    let mut restarted = Harness::new(durable_config());
    restarted.store = Some(Default::default());
    restarted.engine.set_store_per_client(true);
    restarted.now = cluster.nodes[0].now + 1_000;
    let slot = restarted.engine.add_peer(NODE_IDS[1]);
    restarted.engine.restore(store, restarted.now);
    restarted.engine.peer_subscription(slot, "t", true, 0);
    let restored = restarted.engine.restored_crossings();
    (restarted, restored)
}

/// "pub" back on `node`, retransmitting its QoS 2 PUBLISH 7 with DUP: whether it was
/// routed to node 1 again, and whether its PUBREC came.
fn retransmission_routed(node: &mut Harness) -> (bool, bool) {
    let (mut publisher, _) = node.connect(with_expiry(connect("pub", V5, false), 600));
    let mut again = publish("t", b"m", QoS::ExactlyOnce, 7, false);
    if let Packet::Publish(p) = &mut again {
        p.dup = true;
    }
    node.send(&publisher, again);
    let pubrec = node
        .recv(&mut publisher)
        .iter()
        .any(|packet| matches!(packet, Packet::PubRec(ack) if ack.packet_id == 7));
    let slot = node.engine.cluster_slot() - 1;
    (node.engine.take_peer(slot).is_some(), pubrec)
}

#[test]
fn a_qos2_crossing_goes_to_kafka_only_once_its_packet_id_is_stored() {
    let (mut cluster, publisher, mut sub) = publisher_and_subscriber();
    // The store takes the batch but has not confirmed it yet.
    let store = cluster.nodes[0].store.take();
    cluster.nodes[0].send(&publisher, publish("t", b"m", QoS::ExactlyOnce, 7, false));
    cluster.tick();
    assert!(
        cluster.in_kafka.is_empty(),
        "nothing for Kafka before the store has it"
    );
    cluster.nodes[0].store = store;
    cluster.nodes[0].pump();
    cluster.tick();
    let crossings = cluster.nodes[0]
        .engine
        .take_crossings(cluster.slot[0])
        .expect("the record lists the kept route");
    let listed = ferromq_core::engine::crossing_entries(&crossings);
    assert!(
        matches!(listed.as_slice(), [(publisher, _)] if publisher == "pub"),
        "{listed:?}"
    );
    cluster.deliver();
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut sub)),
        vec![b"m".to_vec()]
    );
}

#[test]
fn a_crossing_kafka_confirmed_is_not_restored() {
    let (mut cluster, publisher, _sub) = publisher_and_subscriber();
    cluster.nodes[0].send(&publisher, publish("t", b"m", QoS::ExactlyOnce, 7, false));
    cluster.tick();
    cluster.deliver();
    cluster.nodes[0].pump();
    let (mut restarted, restored) = restarted_node_0(&mut cluster);
    assert!(
        restored.is_empty(),
        "dropped from the store at Kafka's round: {restored:?}"
    );
    assert_eq!(
        retransmission_routed(&mut restarted),
        (false, true),
        "PUBRECed, not routed"
    );
}

#[test]
fn a_crossing_the_store_has_and_kafka_lacks_is_sent_again_once() {
    let (mut cluster, publisher, mut sub) = publisher_and_subscriber();
    cluster.nodes[0].send(&publisher, publish("t", b"m", QoS::ExactlyOnce, 7, false));
    // Node 0 dies after its store took the batch, before Kafka took the record.
    cluster.tick();
    cluster.in_kafka.clear();
    let (mut restarted, restored) = restarted_node_0(&mut cluster);
    let [(client, route, to_node)] = restored.as_slice() else {
        panic!("one kept route: {restored:?}");
    };
    assert_eq!((client.as_str(), to_node.as_str()), ("pub", NODE_IDS[1]));
    // Not in node 1's topic: sent again, then settled.
    let (records, listed) = restarted
        .engine
        .crossing_records(*route)
        .expect("its records");
    assert_eq!(
        ferromq_core::engine::crossing_entries(&listed),
        [("pub".to_string(), *route)]
    );
    restarted.engine.crossing_settled(*route);
    cluster.apply(1, records, 0, cluster.topic);
    assert_eq!(
        payloads(&cluster.nodes[1].recv(&mut sub)),
        vec![b"m".to_vec()]
    );
    assert!(restarted.engine.restored_crossings().is_empty());
    // The retransmission is the same message: PUBRECed, not routed again.
    assert_eq!(retransmission_routed(&mut restarted), (false, true));
    // Settled in the store too: a second restart has nothing to send.
    restarted.pump();
    cluster.nodes[0] = restarted;
    assert!(restarted_node_0(&mut cluster).1.is_empty());
}

#[test]
fn a_node_handing_a_session_over_waits_for_its_crossings() {
    let (mut cluster, publisher, _sub) = publisher_and_subscriber();
    cluster.nodes[0].send(&publisher, publish("t", b"m", QoS::ExactlyOnce, 7, false));
    cluster.tick();
    assert!(
        cluster.nodes[0].engine.crossings_pending("pub"),
        "Kafka has not confirmed it"
    );
    assert!(!cluster.nodes[0].engine.crossings_pending("other"));
    cluster.deliver();
    assert!(!cluster.nodes[0].engine.crossings_pending("pub"));
}
