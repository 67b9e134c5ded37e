//! Two engines as two shards of one node, joined by bus rings as the IO layer will
//! join them (engine/shards.rs, bus/ring.rs): subscriptions are replicated, a
//! PUBLISH is matched where it arrives and crosses to the other shard once, retained
//! messages are everywhere.

mod support;

use bytes::{Bytes, BytesMut};
use ferromq_core::bus::ring::{OwnedRegion, Reader, Writer};
use ferromq_core::codec::{Packet, ProtocolVersion, QoS, Unsubscribe};
use ferromq_core::engine::EngineConfig;
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

/// Shards 0 and 1 and a ring each way.
struct Node {
    shards: [Harness; 2],
    rings: [(Writer, Reader); 2],
    /// Records each shard applied from the other, in total.
    applied: [usize; 2],
    /// The stores apply batches per client, as Redis does (`set_store_per_client`).
    per_client: bool,
    _regions: [OwnedRegion; 2],
}

impl Node {
    fn new() -> Node {
        let mut regions = [OwnedRegion::new(1 << 16), OwnedRegion::new(1 << 16)];
        let to_0 = regions[0].ring();
        let to_1 = regions[1].ring();
        let mut shards = [
            Harness::new(EngineConfig::default()),
            Harness::new(EngineConfig::default()),
        ];
        for (me, shard) in shards.iter_mut().enumerate() {
            shard.engine.set_shards(me as u16, 2);
        }
        Node {
            shards,
            // rings[k]: the ring into shard k.
            rings: [
                (to_0.writer(), to_0.reader()),
                (to_1.writer(), to_1.reader()),
            ],
            applied: [0, 0],
            per_client: false,
            _regions: regions,
        }
    }

    /// One tick of the bus: each shard's outbox into the other's ring, then each
    /// shard drains its ring into its engine.
    fn exchange(&mut self) {
        for from in 0..2 {
            let to = 1 - from;
            if let Some(records) = self.shards[from].engine.take_bus(to as u16) {
                assert!(self.rings[to].0.push(&records), "ring full");
                self.rings[to].0.publish();
            }
        }
        for to in 0..2 {
            let mut batches = Vec::new();
            self.rings[to]
                .1
                .drain(|batch| batches.push(Bytes::copy_from_slice(batch)));
            for batch in batches {
                let shard = &mut self.shards[to];
                let now = shard.now;
                self.applied[to] += shard.engine.bus_receive(1 - to as u16, batch, now).unwrap();
                shard.pump();
            }
        }
    }
}

fn connected(h: &mut Harness, id: &str) -> Client {
    let (client, connack) = h.connect(connect(id, V311, true));
    assert!(matches!(connack, Packet::ConnAck(_)));
    client
}

fn subscribed(node: &mut Node, shard: usize, id: &str, filter: &str, qos: QoS) -> Client {
    let (client, rest) = subscribed_with(node, shard, id, filter, qos);
    assert!(rest.is_empty());
    client
}

/// Subscribe and return what came after the SUBACK (retained messages). The SUBACK
/// comes once the other shard confirmed it holds the filter: two bus ticks.
fn subscribed_with(
    node: &mut Node,
    shard: usize,
    id: &str,
    filter: &str,
    qos: QoS,
) -> (Client, Vec<Packet>) {
    let mut client = connected(&mut node.shards[shard], id);
    node.shards[shard].send(&client, subscribe(1, filter, qos));
    assert!(
        node.shards[shard].recv(&mut client).is_empty(),
        "the SUBACK waits for the other shard"
    );
    node.exchange();
    node.exchange();
    let mut got = node.shards[shard].recv(&mut client);
    assert!(matches!(got.first(), Some(Packet::SubAck(_))));
    got.remove(0);
    (client, got)
}

#[test]
fn a_publish_on_one_shard_reaches_a_subscriber_on_the_other_once_at_its_qos() {
    let mut node = Node::new();
    let mut sub = subscribed(&mut node, 0, "sub", "sensors/+/temp", QoS::AtLeastOnce);
    node.exchange();
    let mut publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(
        &publisher,
        publish("sensors/7/temp", b"21.5", QoS::AtLeastOnce, 9, false),
    );
    assert!(
        node.shards[1].recv(&mut publisher).is_empty(),
        "the PUBACK waits for the subscriber's shard"
    );
    node.exchange();
    let got = node.shards[0].recv(&mut sub);
    let publishes = publishes(&got);
    assert_eq!(publishes.len(), 1);
    assert_eq!(&*publishes[0].topic, "sensors/7/temp");
    assert_eq!(&publishes[0].payload[..], b"21.5");
    node.exchange(); // shard 0 confirms the round
    assert!(matches!(
        node.shards[1].recv(&mut publisher)[..],
        [Packet::PubAck(_)]
    ));
    assert_eq!(publishes[0].qos, QoS::AtLeastOnce);
    assert!(!publishes[0].retain);
}

#[test]
fn two_subscribers_on_a_shard_cost_one_routed_message_and_each_gets_it() {
    let mut node = Node::new();
    let mut first = subscribed(&mut node, 0, "a", "t/#", QoS::AtMostOnce);
    let mut second = subscribed(&mut node, 0, "b", "t/x", QoS::AtMostOnce);
    node.exchange();
    let before = node.applied[0];
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(&publisher, publish("t/x", b"m", QoS::AtMostOnce, 0, false));
    node.exchange();
    assert_eq!(
        node.applied[0] - before,
        2,
        "one MESSAGE and one ROUTE record"
    );
    assert_eq!(
        payloads(&node.shards[0].recv(&mut first)),
        vec![b"m".to_vec()]
    );
    assert_eq!(
        payloads(&node.shards[0].recv(&mut second)),
        vec![b"m".to_vec()]
    );
}

#[test]
fn nothing_crosses_to_a_shard_without_a_matching_subscriber() {
    let mut node = Node::new();
    let _sub = subscribed(&mut node, 0, "sub", "a/b", QoS::AtMostOnce);
    node.exchange();
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(&publisher, publish("a/c", b"m", QoS::AtMostOnce, 0, false));
    assert!(node.shards[1].engine.take_bus(0).is_none());
}

#[test]
fn routing_stops_when_the_last_subscriber_of_a_filter_leaves() {
    let mut node = Node::new();
    let mut stays = subscribed(&mut node, 0, "stays", "f", QoS::AtMostOnce);
    let mut leaves = subscribed(&mut node, 0, "leaves", "f", QoS::AtMostOnce);
    node.exchange();
    node.shards[0].send(
        &leaves,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 2,
            filters: vec![s("f")],
            properties: Default::default(),
        }),
    );
    node.shards[0].recv(&mut leaves);
    node.exchange();
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(&publisher, publish("f", b"1", QoS::AtMostOnce, 0, false));
    node.exchange();
    assert_eq!(
        payloads(&node.shards[0].recv(&mut stays)),
        vec![b"1".to_vec()]
    );
    assert!(node.shards[0].recv(&mut leaves).is_empty());

    node.shards[0].send(&stays, disconnect());
    node.exchange();
    node.shards[1].send(&publisher, publish("f", b"2", QoS::AtMostOnce, 0, false));
    assert!(
        node.shards[1].engine.take_bus(0).is_none(),
        "the clean session's end removed the filter"
    );
}

#[test]
fn a_shards_subscriptions_are_not_counted_as_the_others() {
    let mut node = Node::new();
    let _sub = subscribed(&mut node, 0, "sub", "x/#", QoS::AtMostOnce);
    node.exchange();
    assert_eq!(node.shards[0].engine.stats().subscriptions, 1);
    assert_eq!(node.shards[1].engine.stats().subscriptions, 0);
}

#[test]
fn one_publishers_messages_arrive_in_order_across_shards() {
    let mut node = Node::new();
    let mut sub = subscribed(&mut node, 0, "sub", "seq", QoS::AtMostOnce);
    node.exchange();
    let publisher = connected(&mut node.shards[1], "pub");
    let mut expected = Vec::new();
    for i in 0..300u32 {
        node.shards[1].send(
            &publisher,
            publish("seq", &i.to_be_bytes(), QoS::AtMostOnce, 0, false),
        );
        expected.push(i.to_be_bytes().to_vec());
        if i % 7 == 0 {
            node.exchange();
        }
    }
    node.exchange();
    assert_eq!(payloads(&node.shards[0].recv(&mut sub)), expected);
}

#[test]
fn a_retained_message_published_on_one_shard_is_found_by_a_subscribe_on_the_other() {
    let mut node = Node::new();
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(
        &publisher,
        publish("state/door", b"open", QoS::AtMostOnce, 0, true),
    );
    node.exchange();
    let (_sub, got) = subscribed_with(&mut node, 0, "sub", "state/#", QoS::AtMostOnce);
    assert_eq!(payloads(&got), vec![b"open".to_vec()]);
    assert!(publishes(&got)[0].retain);

    node.shards[1].send(
        &publisher,
        publish("state/door", b"", QoS::AtMostOnce, 0, true),
    );
    node.exchange();
    let mut late = subscribed(&mut node, 0, "late", "state/#", QoS::AtMostOnce);
    assert!(
        node.shards[0].recv(&mut late).is_empty(),
        "the clear reached shard 0"
    );
}

#[test]
fn bus_bytes_that_do_not_decode_are_refused_and_deliver_nothing() {
    let mut node = Node::new();
    let mut sub = subscribed(&mut node, 0, "sub", "#", QoS::AtMostOnce);
    let now = node.shards[0].now;
    let cut = Bytes::from_static(&[64, 8, 0, 0, 0, 1]);
    assert!(node.shards[0].engine.bus_receive(1, cut, now).is_err());
    node.shards[0].pump();
    assert!(node.shards[0].recv(&mut sub).is_empty());
}

#[test]
fn a_shared_group_spanning_shards_gets_each_message_once() {
    let mut node = Node::new();
    let mut here = subscribed(&mut node, 0, "w0", "$share/g/jobs", QoS::AtLeastOnce);
    node.exchange();
    let mut publisher = connected(&mut node.shards[1], "pub");
    // The group's only member is on shard 0: every message crosses to it.
    for i in 0..4u16 {
        node.shards[1].send(
            &publisher,
            publish("jobs", &i.to_be_bytes(), QoS::AtLeastOnce, i + 1, false),
        );
    }
    node.shards[1].recv(&mut publisher);
    node.exchange();
    assert_eq!(payloads(&node.shards[0].recv(&mut here)).len(), 4);

    // A member on each shard: each message reaches exactly one of them.
    let mut there = subscribed(&mut node, 1, "w1", "$share/g/jobs", QoS::AtLeastOnce);
    node.exchange();
    for i in 0..40u16 {
        node.shards[1].send(
            &publisher,
            publish("jobs", &i.to_be_bytes(), QoS::AtLeastOnce, 100 + i, false),
        );
        if i % 5 == 0 {
            node.exchange();
        }
    }
    node.exchange();
    let (a, b) = (
        payloads(&node.shards[0].recv(&mut here)),
        payloads(&node.shards[1].recv(&mut there)),
    );
    assert_eq!(a.len() + b.len(), 40, "each message once in the group");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both shards' members take a share"
    );
    let mut all: Vec<_> = a.into_iter().chain(b).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 40);
}

#[test]
fn a_message_for_a_group_whose_members_here_are_offline_waits_in_this_shards_queue() {
    let mut node = Node::new();
    let (client, _) =
        node.shards[0].connect(with_expiry(connect("w0", ProtocolVersion::V5, true), 300));
    node.shards[0].send(&client, subscribe(1, "$share/g/jobs", QoS::AtLeastOnce));
    node.exchange();
    node.shards[0].drop_connection(&client);
    node.exchange();
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(
        &publisher,
        publish("jobs", b"later", QoS::AtLeastOnce, 1, false),
    );
    node.exchange();
    let (mut back, connack) =
        node.shards[0].connect(with_expiry(connect("w0", ProtocolVersion::V5, false), 300));
    assert!(matches!(connack, Packet::ConnAck(ref ack) if ack.session_present));
    assert_eq!(
        payloads(&node.shards[0].recv(&mut back)),
        vec![b"later".to_vec()]
    );
}

#[test]
fn a_restarted_shard_replaces_its_subscriptions_and_learns_the_others() {
    let mut node = Node::new();
    let _old = subscribed(&mut node, 0, "gone", "old/#", QoS::AtMostOnce);
    let _kept = subscribed(&mut node, 1, "stays", "kept/#", QoS::AtMostOnce);
    node.exchange();
    // Shard 0's process dies and a new one starts with no session (a clean one).
    node.shards[0] = Harness::new(EngineConfig::default());
    node.shards[0].engine.set_shards(0, 2);
    node.shards[0].engine.bus_hello();
    node.exchange();
    node.exchange(); // shard 1's answer to the HELLO
    let publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(
        &publisher,
        publish("old/x", b"m", QoS::AtMostOnce, 0, false),
    );
    assert!(
        node.shards[1].engine.take_bus(0).is_none(),
        "the dead shard's filters were replaced by the new one's (none)"
    );
    let other = connected(&mut node.shards[0], "pub0");
    node.shards[0].send(&other, publish("kept/y", b"m", QoS::AtMostOnce, 0, false));
    assert!(
        node.shards[0].engine.take_bus(1).is_some(),
        "the new shard learned shard 1's filters"
    );
}

#[test]
fn a_puback_waits_until_the_receiving_shard_has_stored_the_message() {
    let mut node = Node::new();
    node.shards = [
        Harness::new(durable_config()),
        Harness::new(durable_config()),
    ];
    for (me, shard) in node.shards.iter_mut().enumerate() {
        shard.engine.set_shards(me as u16, 2);
        shard.store = Some(BytesMut::new());
    }
    let (sub, _) =
        node.shards[0].connect(with_expiry(connect("sub", ProtocolVersion::V5, true), 300));
    node.shards[0].send(&sub, subscribe(1, "orders/#", QoS::AtLeastOnce));
    node.exchange();
    node.shards[0].drop_connection(&sub);
    node.shards[0].pump();
    let mut publisher = connected(&mut node.shards[1], "pub");
    node.shards[1].send(
        &publisher,
        publish("orders/1", b"x", QoS::AtLeastOnce, 5, false),
    );
    // By hand, to stop between the receiving shard's journal and its store.
    let routed = node.shards[1].engine.take_bus(0).expect("routed");
    let now = node.shards[0].now;
    node.shards[0].engine.bus_receive(1, routed, now).unwrap();
    assert!(
        node.shards[0].engine.take_bus(1).is_none(),
        "no confirmation before shard 0's store has the message"
    );
    assert!(node.shards[1].recv(&mut publisher).is_empty());
    node.shards[0].persist();
    let confirmation = node.shards[0].engine.take_bus(1).expect("confirmed");
    let now = node.shards[1].now;
    node.shards[1]
        .engine
        .bus_receive(0, confirmation, now)
        .unwrap();
    assert!(matches!(
        node.shards[1].recv(&mut publisher)[..],
        [Packet::PubAck(_)]
    ));
}

#[test]
fn an_admin_publish_counts_the_subscribers_on_every_shard() {
    let mut node = Node::new();
    let _a = subscribed(&mut node, 0, "a", "cmd/#", QoS::AtMostOnce);
    let _b = subscribed(&mut node, 0, "b", "cmd/light", QoS::AtMostOnce);
    let _c = subscribed(&mut node, 1, "c", "cmd/+", QoS::AtMostOnce);
    let now = node.shards[1].now;
    let delivered = node.shards[1]
        .engine
        .publish("cmd/light", b"on", QoS::AtMostOnce, false, now);
    assert_eq!(delivered, 3, "one here, two on shard 0");
}

#[test]
fn the_brokers_own_retained_sys_topics_reach_every_shard() {
    let mut node = Node::new();
    let now = node.shards[1].now;
    node.shards[1]
        .engine
        .publish("$SYS/broker/uptime", b"7", QoS::AtMostOnce, true, now);
    node.exchange();
    let (_sub, got) = subscribed_with(&mut node, 0, "sub", "$SYS/#", QoS::AtMostOnce);
    assert_eq!(payloads(&got), vec![b"7".to_vec()]);
}

#[test]
fn nothing_a_client_subscribed_to_overtakes_its_held_suback() {
    let mut node = Node::new();
    let mut client = connected(&mut node.shards[0], "sub");
    node.shards[0].send(&client, subscribe(1, "news", QoS::AtLeastOnce));
    // Its own message, pipelined behind the SUBSCRIBE, matches at once here.
    node.shards[0].send(&client, publish("news", b"x", QoS::AtMostOnce, 0, false));
    assert!(node.shards[0].recv(&mut client).is_empty());
    node.exchange();
    node.exchange();
    let got = node.shards[0].recv(&mut client);
    assert!(
        matches!(got[..], [Packet::SubAck(_), Packet::Publish(_)]),
        "{got:?}"
    );
}

/// Two durable shards: each store confirms every batch when its shard pumps.
fn durable_node() -> Node {
    durable_node_kept(false)
}

/// Two durable shards whose stores apply batches per client (`per_client`, Redis)
/// or whole (the embedded log).
fn durable_node_kept(per_client: bool) -> Node {
    let mut node = Node::new();
    node.per_client = per_client;
    node.shards = [
        Harness::new(durable_config()),
        Harness::new(durable_config()),
    ];
    for (me, shard) in node.shards.iter_mut().enumerate() {
        shard.engine.set_shards(me as u16, 2);
        shard.engine.set_store_per_client(per_client);
        shard.store = Some(BytesMut::new());
    }
    node
}

/// Shard `k` dies (`kill -9`) and a new process restores its store and says HELLO.
fn restart(node: &mut Node, k: usize) {
    let stored = node.shards[k].store.clone().expect("durable").freeze();
    let mut shard = Harness::new(durable_config());
    shard.now = node.shards[k].now + 1_000;
    shard.engine.set_shards(k as u16, 2);
    shard.engine.set_store_per_client(node.per_client);
    let report = shard.engine.restore(stored.clone(), shard.now);
    assert_eq!(report.error, None);
    shard.store = Some(BytesMut::from(&stored[..]));
    shard.engine.bus_hello();
    node.shards[k] = shard;
}

/// A client id shard `k` of two owns (a restart restores only those).
fn owned_by(k: usize, prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|id| usize::from(ferromq_core::bus::shard_of(id, 2)) == k)
        .expect("some id")
}

/// A persistent v5 subscriber of `filter` on shard `k`, then offline.
fn offline_subscriber(node: &mut Node, k: usize, id: &str, filter: &str, qos: QoS) {
    let (sub, _) = node.shards[k].connect(with_expiry(connect(id, ProtocolVersion::V5, true), 300));
    node.shards[k].send(&sub, subscribe(1, filter, qos));
    node.exchange();
    node.exchange();
    node.shards[k].drop_connection(&sub);
    node.shards[k].pump();
}

/// What a persistent subscriber gets when it comes back to shard `k`.
fn resumed_payloads(node: &mut Node, k: usize, id: &str) -> Vec<Vec<u8>> {
    let (mut sub, connack) =
        node.shards[k].connect(with_expiry(connect(id, ProtocolVersion::V5, false), 300));
    assert!(matches!(connack, Packet::ConnAck(_)));
    payloads(&node.shards[k].recv(&mut sub))
}

#[test]
fn a_route_the_dead_receiver_read_but_never_stored_goes_to_its_new_process() {
    let mut node = durable_node();
    let (sub, publisher_id) = (owned_by(0, "sub"), owned_by(1, "pub"));
    offline_subscriber(&mut node, 0, &sub, "orders/#", QoS::AtLeastOnce);
    let mut publisher = connected(&mut node.shards[1], &publisher_id);
    node.shards[1].send(
        &publisher,
        publish("orders/1", b"x", QoS::AtLeastOnce, 5, false),
    );
    // Shard 0 reads the route from its ring and dies before its store has it.
    let routed = node.shards[1].engine.take_bus(0).expect("routed");
    let now = node.shards[0].now;
    node.shards[0].engine.bus_receive(1, routed, now).unwrap();
    restart(&mut node, 0);
    for _ in 0..4 {
        node.exchange();
    }
    assert!(
        matches!(node.shards[1].recv(&mut publisher)[..], [Packet::PubAck(_)]),
        "acknowledged once the new process stored it"
    );
    assert_eq!(resumed_payloads(&mut node, 0, &sub), vec![b"x".to_vec()]);
}

#[test]
fn a_route_sent_again_after_its_receiver_stored_it_is_applied_once() {
    route_sent_again_after_its_receiver_stored_it(false);
}

#[test]
fn a_route_sent_again_to_a_store_kept_per_client_is_applied_once_per_session() {
    route_sent_again_after_its_receiver_stored_it(true);
}

fn route_sent_again_after_its_receiver_stored_it(per_client: bool) {
    let mut node = durable_node_kept(per_client);
    let (sub, publisher_id) = (owned_by(0, "sub"), owned_by(1, "pub"));
    offline_subscriber(&mut node, 0, &sub, "orders/#", QoS::AtLeastOnce);
    let publisher = connected(&mut node.shards[1], &publisher_id);
    node.shards[1].send(
        &publisher,
        publish("orders/1", b"x", QoS::AtLeastOnce, 5, false),
    );
    // Shard 0 stores the route and dies before its confirmation leaves.
    let routed = node.shards[1].engine.take_bus(0).expect("routed");
    let now = node.shards[0].now;
    node.shards[0].engine.bus_receive(1, routed, now).unwrap();
    node.shards[0].persist();
    restart(&mut node, 0);
    for _ in 0..4 {
        node.exchange();
    }
    assert_eq!(resumed_payloads(&mut node, 0, &sub), vec![b"x".to_vec()]);
}

/// A persistent QoS 2 subscriber of `orders/#` owned by shard 0, offline, and a
/// persistent v5 publisher connected to shard 1.
fn qos2_pair(node: &mut Node) -> (String, Client) {
    let (sub, publisher_id) = (owned_by(0, "sub"), owned_by(1, "pub"));
    offline_subscriber(node, 0, &sub, "orders/#", QoS::ExactlyOnce);
    let (publisher, _) = node.shards[1].connect(with_expiry(
        connect(&publisher_id, ProtocolVersion::V5, true),
        300,
    ));
    (sub, publisher)
}

/// A QoS 2 PUBLISH to `topic` fed to `shard` without a pump: its store has not
/// confirmed the batch holding it.
fn feed_unstored(shard: &mut Harness, publisher: &Client, topic: &str) {
    let wire = publish(topic, b"x", QoS::ExactlyOnce, 5, false)
        .to_bytes(ProtocolVersion::V5)
        .unwrap();
    let now = shard.now;
    shard.engine.feed(publisher.conn, &wire, now);
}

#[test]
fn a_held_qos2_message_crosses_only_once_its_publishers_shard_stored_it() {
    let mut node = durable_node();
    let (sub, publisher) = qos2_pair(&mut node);
    // Without the store's confirmation (no pump), nothing may cross.
    feed_unstored(&mut node.shards[1], &publisher, "orders/1");
    let early = node.shards[1].engine.take_bus(0).unwrap_or_default();
    assert!(
        !early.windows(b"orders/1".len()).any(|w| w == b"orders/1"),
        "the message crossed before its packet id was stored"
    );
    // The publisher's shard dies with its batch stored: the new process sends the
    // message from its journal, and the subscriber gets it once.
    node.shards[1].persist();
    restart(&mut node, 1);
    for _ in 0..4 {
        node.exchange();
    }
    assert_eq!(resumed_payloads(&mut node, 0, &sub), vec![b"x".to_vec()]);
}

/// The whole node dies once the publisher's shard stored its QoS 2 message (the
/// packet id and the kept route) and the subscriber's shard stored the delivery, but
/// before the confirmation came back: both restart, the route is sent again from
/// the publisher's store, and the subscriber gets the message once.
fn qos2_route_kept_across_a_whole_node_kill(per_client: bool) {
    let mut node = durable_node_kept(per_client);
    let (sub, publisher) = qos2_pair(&mut node);
    feed_unstored(&mut node.shards[1], &publisher, "orders/1");
    node.shards[1].persist();
    let routed = node.shards[1]
        .engine
        .take_bus(0)
        .expect("routed once stored");
    let now = node.shards[0].now;
    node.shards[0].engine.bus_receive(1, routed, now).unwrap();
    node.shards[0].persist();
    restart(&mut node, 0);
    restart(&mut node, 1);
    for _ in 0..4 {
        node.exchange();
    }
    assert_eq!(resumed_payloads(&mut node, 0, &sub), vec![b"x".to_vec()]);
}

#[test]
fn a_qos2_route_crosses_once_across_a_whole_node_kill() {
    qos2_route_kept_across_a_whole_node_kill(false);
}

#[test]
fn a_qos2_route_crosses_once_across_a_whole_node_kill_with_a_store_kept_per_client() {
    qos2_route_kept_across_a_whole_node_kill(true);
}

#[test]
fn a_confirmed_route_is_dropped_from_a_store_kept_per_client() {
    let mut node = durable_node_kept(true);
    let (_, publisher) = qos2_pair(&mut node);
    node.shards[1].send(
        &publisher,
        publish("orders/1", b"x", QoS::ExactlyOnce, 5, false),
    );
    for _ in 0..4 {
        node.exchange();
    }
    node.shards[1].persist();
    let stored = node.shards[1].store.clone().expect("durable").freeze();
    let kinds = record_kinds(&stored);
    assert_eq!(
        kinds.iter().filter(|kind| **kind == 11).count(),
        1,
        "one Outbox record: {kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|kind| **kind == 16).count(),
        1,
        "dropped once its receiver confirmed it: {kinds:?}"
    );
}

/// The kinds of the records in batch framing (`kind u8 | length u32 | body`).
fn record_kinds(mut batch: &[u8]) -> Vec<u8> {
    let mut kinds = Vec::new();
    while batch.len() >= 5 {
        let len = u32::from_le_bytes(batch[1..5].try_into().unwrap()) as usize;
        kinds.push(batch[0]);
        batch = &batch[5 + len..];
    }
    kinds
}

#[test]
fn a_routed_message_reaches_a_persistent_subscriber_once_its_shard_stored_it() {
    let mut node = durable_node();
    let (sub_id, publisher_id) = (owned_by(0, "sub"), owned_by(1, "pub"));
    let (mut sub, _) = node.shards[0].connect(with_expiry(
        connect(&sub_id, ProtocolVersion::V5, true),
        300,
    ));
    node.shards[0].send(&sub, subscribe(1, "orders/#", QoS::ExactlyOnce));
    node.exchange();
    node.exchange();
    node.shards[0].recv(&mut sub);
    let publisher = connected(&mut node.shards[1], &publisher_id);
    node.shards[1].send(
        &publisher,
        publish("orders/1", b"x", QoS::ExactlyOnce, 5, false),
    );
    let routed = node.shards[1].engine.take_bus(0).expect("routed");
    let now = node.shards[0].now;
    node.shards[0].engine.bus_receive(1, routed, now).unwrap();
    let mut early = Vec::new();
    node.shards[0]
        .engine
        .take_output(|_, bytes: Bytes| early.push(bytes));
    assert!(
        early.is_empty(),
        "sent before the store had it: a crash would send it again as new"
    );
    node.shards[0].pump();
    assert_eq!(
        payloads(&node.shards[0].recv(&mut sub)),
        vec![b"x".to_vec()]
    );
}

#[test]
fn a_restarted_shard_is_synced_once_every_other_shard_sent_its_subscriptions() {
    let mut node = durable_node();
    offline_subscriber(
        &mut node,
        0,
        &owned_by(0, "sub"),
        "orders/#",
        QoS::AtLeastOnce,
    );
    restart(&mut node, 1);
    assert!(
        !node.shards[1].engine.bus_synced(),
        "a PUBLISH now would miss shard 0's subscriber"
    );
    node.exchange(); // shard 0 reads the HELLO and answers
    node.exchange(); // shard 1 reads the SYNC and the subscriptions
    assert!(node.shards[1].engine.bus_synced());
}

#[test]
fn a_message_routed_behind_a_held_qos2_one_does_not_overtake_and_drop_it() {
    let mut node = durable_node();
    let sub = owned_by(0, "sub");
    offline_subscriber(&mut node, 0, &sub, "orders/#", QoS::ExactlyOnce);
    let (durable_publisher, _) = node.shards[1].connect(with_expiry(
        connect(&owned_by(1, "pub"), ProtocolVersion::V5, true),
        300,
    ));
    let clean_publisher = connected(&mut node.shards[1], &owned_by(1, "other"));
    // The first waits for its publisher's store (its packet id); the second, from a
    // clean session, needs no store but is numbered after it.
    for (publisher, version, payload, qos) in [
        (
            &durable_publisher,
            ProtocolVersion::V5,
            b"first",
            QoS::ExactlyOnce,
        ),
        (&clean_publisher, V311, b"later", QoS::AtLeastOnce),
    ] {
        let wire = publish("orders/1", payload, qos, 5, false)
            .to_bytes(version)
            .unwrap();
        let now = node.shards[1].now;
        node.shards[1].engine.feed(publisher.conn, &wire, now);
    }
    node.exchange();
    for _ in 0..4 {
        node.shards[1].pump();
        node.exchange();
    }
    assert_eq!(
        resumed_payloads(&mut node, 0, &sub),
        vec![b"first".to_vec(), b"later".to_vec()]
    );
}

/// A shard of a clustered node restores the sessions its store is given (the store
/// reads the clients the cluster lists for this member), even one whose client id
/// another shard owns: an adopted dead member's sessions hash to any shard.
#[test]
fn a_cluster_member_restores_a_session_another_shard_would_own() {
    let mut node = durable_node_kept(true);
    let other = owned_by(1, "adopted");
    offline_subscriber(&mut node, 1, &other, "orders/#", QoS::AtLeastOnce);
    let stored = node.shards[1].store.clone().expect("durable").freeze();

    let mut plain = Harness::new(durable_config());
    plain.engine.set_shards(0, 2);
    assert_eq!(
        plain.engine.restore(stored.clone(), 0).sessions,
        0,
        "a shard alone keeps the sessions it owns"
    );

    let mut member = Harness::new(durable_config());
    member.engine.set_shards(0, 2);
    member.engine.enable_cluster();
    assert_eq!(member.engine.restore(stored, 0).sessions, 1);
    let (_, connack) = member.connect(with_expiry(
        connect(&other, ProtocolVersion::V5, false),
        300,
    ));
    assert!(matches!(connack, Packet::ConnAck(ref ack) if ack.session_present));
}
