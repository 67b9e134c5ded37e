//! Durability in the engine: acknowledgements wait for the store, and a restart
//! from the journal gives persistent sessions back everything they had.

mod support;

use bytes::BytesMut;
use ferromq_core::codec::{Ack, Packet, ProtocolVersion, QoS, ReasonCode};
use ferromq_core::durability::{ClientType, Record, RecordReader};
use ferromq_core::engine::{EngineConfig, Event};
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

fn durable_harness() -> Harness {
    let mut h = Harness::new(durable_config());
    h.store = Some(BytesMut::new());
    h
}

/// A broker restarted on what the store holds.
fn restart(h: &Harness) -> Harness {
    let mut next = durable_harness();
    let stored = h.store.clone().unwrap().freeze();
    let report = next.engine.restore(stored, next.now);
    assert_eq!(report.error, None);
    next.store = h.store.clone();
    next
}

fn offline_subscriber(h: &mut Harness, id: &str, filter: &str) {
    let (mut sub, _) = h.connect(connect(id, V311, false));
    h.send(&sub, subscribe(1, filter, QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.send(&sub, disconnect());
}

#[test]
fn puback_waits_until_the_store_has_the_message() {
    let mut h = Harness::new(durable_config());
    offline_subscriber(&mut h, "sub", "t");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(&publisher, publish("t", b"m", QoS::AtLeastOnce, 7, false));
    assert!(
        h.recv(&mut publisher).is_empty(),
        "no PUBACK before the store confirms"
    );
    let (batch, bytes) = h.engine.take_journal().expect("records to store");
    let kinds: Vec<Record> = RecordReader::new(bytes).map(Result::unwrap).collect();
    assert!(kinds
        .iter()
        .any(|r| matches!(r, Record::Enqueue { client, .. } if client == "sub")));
    h.engine.journal_done(batch);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(7))]);
}

#[test]
fn puback_is_immediate_when_nothing_waits_for_the_store() {
    let mut h = Harness::new(durable_config());
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(
        &publisher,
        publish("nobody/listens", b"m", QoS::AtLeastOnce, 7, false),
    );
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(7))]);
}

#[test]
fn acks_keep_publish_order_across_batches() {
    let mut h = Harness::new(durable_config());
    offline_subscriber(&mut h, "sub", "t");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(&publisher, publish("t", b"1", QoS::AtLeastOnce, 1, false));
    let (first, _) = h.engine.take_journal().unwrap();
    h.send(
        &publisher,
        publish("other", b"2", QoS::AtLeastOnce, 2, false),
    );
    h.send(&publisher, publish("t", b"3", QoS::AtLeastOnce, 3, false));
    let (second, _) = h.engine.take_journal().unwrap();
    assert!(h.recv(&mut publisher).is_empty());
    // 2 needed no store but came after 1: it waits for batch 1, not for batch 2.
    h.engine.journal_done(first);
    assert_eq!(
        h.recv(&mut publisher),
        vec![Packet::PubAck(Ack::new(1)), Packet::PubAck(Ack::new(2))]
    );
    h.engine.journal_done(second);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(3))]);
}

#[test]
fn a_restart_gives_back_sessions_subscriptions_queues_and_retained() {
    let mut h = durable_harness();
    offline_subscriber(&mut h, "sub", "t/#");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    for i in 0..5u16 {
        h.send(
            &publisher,
            publish("t/x", &[i as u8], QoS::AtLeastOnce, i + 1, false),
        );
    }
    h.send(&publisher, publish("r", b"kept", QoS::AtLeastOnce, 9, true));
    assert_eq!(
        h.recv(&mut publisher).len(),
        6,
        "all acknowledged once stored"
    );

    let mut h = restart(&h);
    let (mut sub, connack) = h.connect(connect("sub", V311, false));
    assert!(matches!(connack, Packet::ConnAck(c) if c.session_present));
    let got = h.recv(&mut sub);
    assert_eq!(
        payloads(&got),
        (0..5u8).map(|i| vec![i]).collect::<Vec<_>>()
    );
    // The subscription came back too: a new message reaches the session.
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(
        &publisher,
        publish("t/y", b"live", QoS::AtLeastOnce, 1, false),
    );
    h.recv(&mut publisher);
    assert_eq!(payloads(&h.recv(&mut sub)), vec![b"live".to_vec()]);
    // And the retained message.
    let (mut late, _) = h.connect(connect("late", V311, true));
    h.send(&late, subscribe(1, "r", QoS::AtLeastOnce));
    assert_eq!(payloads(&h.recv(&mut late)), vec![b"kept".to_vec()]);
}

#[test]
fn acknowledged_deliveries_do_not_come_back_after_a_restart() {
    let mut h = durable_harness();
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    for i in 0..4u16 {
        h.send(
            &publisher,
            publish("t", &[i as u8], QoS::AtLeastOnce, i + 1, false),
        );
    }
    h.recv(&mut publisher);
    let got = h.recv(&mut sub);
    // The subscriber acknowledges the first two only, then the broker dies.
    for p in &publishes(&got)[..2] {
        h.send(&sub, puback(p.packet_id));
    }
    let mut h = restart(&h);
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    assert_eq!(payloads(&h.recv(&mut sub)), vec![vec![2], vec![3]]);
}

#[test]
fn order_holds_across_packet_id_wrap_and_restart() {
    let mut h = durable_harness();
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    // Walk the subscriber's packet ids close to the wrap.
    for i in 0..65_530u32 {
        h.send(
            &publisher,
            publish("t", b"x", QoS::AtLeastOnce, (i % 60_000 + 1) as u16, false),
        );
        h.recv(&mut publisher);
        for p in publishes(&h.recv(&mut sub)) {
            h.send(&sub, puback(p.packet_id));
        }
    }
    h.send(&sub, disconnect());
    for i in 0..10u16 {
        h.send(
            &publisher,
            publish("t", &[i as u8], QoS::AtLeastOnce, i + 1, false),
        );
    }
    h.recv(&mut publisher);
    let mut h = restart(&h);
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    let got = h.recv(&mut sub);
    let got = publishes(&got);
    let ids: Vec<u16> = got.iter().map(|p| p.packet_id).collect();
    assert_eq!(ids, vec![65531, 65532, 65533, 65534, 65535, 1, 2, 3, 4, 5]);
    let order: Vec<u8> = got.iter().map(|p| p.payload[0]).collect();
    assert_eq!(order, (0..10).collect::<Vec<u8>>());
}

#[test]
fn inbound_qos2_state_survives_a_restart() {
    let mut h = durable_harness();
    offline_subscriber(&mut h, "sub", "t");
    let (mut publisher, _) = h.connect(connect("pub", V311, false));
    h.send(
        &publisher,
        publish("t", b"once", QoS::ExactlyOnce, 5, false),
    );
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubRec(Ack::new(5))]);
    let mut h = restart(&h);
    let (mut publisher, _) = h.connect(connect("pub", V311, false));
    // The publisher never saw its PUBCOMP: it sends the PUBLISH again (DUP).
    let mut again = publish("t", b"once", QoS::ExactlyOnce, 5, false);
    if let Packet::Publish(p) = &mut again {
        p.dup = true;
    }
    h.send(&publisher, again);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubRec(Ack::new(5))]);
    h.send(&publisher, Packet::PubRel(Ack::new(5)));
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubComp(Ack::new(5))]);
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    assert_eq!(
        payloads(&h.recv(&mut sub)),
        vec![b"once".to_vec()],
        "routed once"
    );
}

#[test]
fn a_snapshot_reads_back_as_the_same_state() {
    let mut h = durable_harness();
    offline_subscriber(&mut h, "sub", "t");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    for i in 0..3u16 {
        h.send(
            &publisher,
            publish("t", &[i as u8], QoS::AtLeastOnce, i + 1, false),
        );
    }
    h.recv(&mut publisher);
    let snapshot = h.engine.snapshot();
    // Records the snapshot already covers, replayed after it, change nothing.
    let mut log = BytesMut::from(&snapshot[..]);
    log.extend_from_slice(h.store.as_ref().unwrap());
    for data in [snapshot, log.freeze()] {
        let mut next = durable_harness();
        next.engine.restore(data, next.now);
        let (mut sub, _) = next.connect(connect("sub", V311, false));
        assert_eq!(
            payloads(&next.recv(&mut sub)),
            vec![vec![0], vec![1], vec![2]]
        );
    }
}

#[test]
fn a_clean_start_forgets_the_stored_session() {
    let mut h = durable_harness();
    offline_subscriber(&mut h, "sub", "t");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(&publisher, publish("t", b"old", QoS::AtLeastOnce, 1, false));
    h.recv(&mut publisher);
    let (_sub, _) = h.connect(connect("sub", V311, true));
    let mut h = restart(&h);
    let (mut sub, connack) = h.connect(connect("sub", V311, false));
    assert!(matches!(connack, Packet::ConnAck(c) if !c.session_present));
    assert!(h.recv(&mut sub).is_empty());
}

#[test]
fn the_client_type_authentication_gives_goes_with_the_stored_session() {
    let mut h = Harness::new(EngineConfig {
        authenticate: true,
        application_client_prefixes: vec!["app-".into()],
        ..durable_config()
    });
    let mut stored_types = Vec::new();
    for (client_id, decided) in [
        ("backend-1", Some(ClientType::Application)),
        ("app-2", None),
        ("sensor-3", None),
    ] {
        let client = h.open(V311);
        h.send(
            &client,
            Packet::Connect(Box::new(connect(client_id, V311, false))),
        );
        let Some(Event::Authenticate { token, .. }) = h.auth_events.pop() else {
            panic!("an Authenticate event");
        };
        if let Some(client_type) = decided {
            h.engine.set_client_type(client.conn, token, client_type);
        }
        h.engine
            .complete_auth(client.conn, token, ReasonCode::Success, None, h.now);
        let (_, bytes) = h.engine.take_journal().unwrap();
        for record in RecordReader::new(bytes).map(Result::unwrap) {
            if let Record::Session {
                client,
                client_type,
                ..
            } = record
            {
                stored_types.push((client, client_type));
            }
        }
    }
    assert_eq!(
        stored_types,
        vec![
            ("backend-1".to_owned(), ClientType::Application),
            ("app-2".to_owned(), ClientType::Application),
            ("sensor-3".to_owned(), ClientType::Device),
        ]
    );
}

#[test]
fn persist_is_raised_again_when_a_batch_reaches_the_store_s_size() {
    let mut h = Harness::new(durable_config()); // no store: records stay pending
    h.engine.set_journal_flush_records(4);
    offline_subscriber(&mut h, "sub", "t");
    assert_eq!(h.persists, 1, "once for the session's records");
    h.engine.take_journal();
    let (publisher, _) = h.connect(connect("pub", V311, true));
    h.send(&publisher, publish("t", b"1", QoS::AtLeastOnce, 1, false));
    assert_eq!(h.persists, 2, "Message + Enqueue: a new batch starts");
    h.send(&publisher, publish("t", b"2", QoS::AtLeastOnce, 2, false));
    assert_eq!(h.persists, 3, "four records pending: the batch is full");
    h.send(&publisher, publish("t", b"3", QoS::AtLeastOnce, 3, false));
    assert_eq!(h.persists, 3, "once per batch, not per record");
    h.engine.take_journal();
    h.send(&publisher, publish("t", b"4", QoS::AtLeastOnce, 4, false));
    assert_eq!(h.persists, 4, "the next batch is signalled again");
}

#[test]
fn a_shared_group_queue_is_stored_and_comes_back_after_a_restart() {
    let mut h = durable_harness();
    offline_subscriber(&mut h, "member-a", "$share/workers/jobs");
    offline_subscriber(&mut h, "member-b", "$share/workers/jobs");
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    // No member online: the group holds the messages. Its PUBACKs wait for the store.
    let mut unstored = Harness::new(durable_config());
    offline_subscriber(&mut unstored, "member-a", "$share/workers/jobs");
    let (mut quiet, _) = unstored.connect(connect("pub", V311, true));
    while let Some((batch, _)) = unstored.engine.take_journal() {
        unstored.engine.journal_done(batch); // the session is stored: nothing waits
    }
    unstored.send(&quiet, publish("jobs", b"j", QoS::AtLeastOnce, 1, false));
    assert!(
        unstored.recv(&mut quiet).is_empty(),
        "the group's message is held until stored"
    );
    for i in 0..3u16 {
        h.send(
            &publisher,
            publish("jobs", &[i as u8], QoS::AtLeastOnce, i + 1, false),
        );
    }
    assert_eq!(h.recv(&mut publisher).len(), 3);

    let mut h = restart(&h);
    let (mut member, _) = h.connect(connect("member-b", V311, false));
    let got = h.recv(&mut member);
    assert_eq!(payloads(&got), vec![vec![0], vec![1], vec![2]]);
    for p in publishes(&got) {
        h.send(&member, puback(p.packet_id));
    }
    // Handed to a member and acknowledged: a second restart has nothing left to give.
    let mut h = restart(&h);
    let (mut other, _) = h.connect(connect("member-a", V311, false));
    assert!(h.recv(&mut other).is_empty());
}

#[test]
fn a_suback_leaves_once_the_store_has_the_subscription() {
    let mut h = Harness::new(durable_config()); // nothing stores until told
    let (mut client, _) = h.connect(connect("keeper", ProtocolVersion::V3_1_1, false));
    h.send(&client, subscribe(1, "alarms/#", QoS::AtLeastOnce));
    assert!(
        h.recv(&mut client).is_empty(),
        "a kill now would lose the subscription: no SUBACK yet"
    );
    while let Some((batch, _)) = h.engine.take_journal() {
        h.engine.journal_done(batch);
    }
    h.pump();
    assert!(matches!(
        h.recv(&mut client).as_slice(),
        [Packet::SubAck(_)]
    ));
    // A clean session keeps nothing: its SUBACK does not wait.
    let (mut passing, _) = h.connect(connect("passing", ProtocolVersion::V3_1_1, true));
    h.send(&passing, subscribe(1, "alarms/#", QoS::AtLeastOnce));
    assert!(matches!(
        h.recv(&mut passing).as_slice(),
        [Packet::SubAck(_)]
    ));
}
