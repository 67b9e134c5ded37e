//! Shared subscriptions through the engine: the group queue when no member is
//! online, redistribution of a leaving member's unacknowledged messages, QoS 2
//! staying with its member, the end of a group, and no retained messages on a shared
//! subscribe. Payloads are message numbers so each test can check order and that
//! every message is with exactly one member.

mod support;

use ferromq_core::codec::{
    Ack, Packet, Property, ProtocolVersion, ProtocolVersion::*, Publish, QoS, Unsubscribe,
};
use ferromq_core::engine::EngineConfig;
use support::*;

const GROUP: &str = "$share/g/jobs/+";

fn harness() -> Harness {
    Harness::new(EngineConfig::default())
}

/// A member of `GROUP` at `qos`; `receive_maximum` is sent by v5 members only.
fn member(
    h: &mut Harness,
    id: &str,
    version: ProtocolVersion,
    clean: bool,
    receive_maximum: Option<u16>,
    qos: QoS,
) -> Client {
    let mut c = connect(id, version, clean);
    if version == V5 && !clean {
        c = with_expiry(c, 3600);
    }
    if let Some(n) = receive_maximum {
        c.properties.0.push(Property::ReceiveMaximum(n));
    }
    let (mut client, _) = h.connect(c);
    h.send(&client, subscribe(1, GROUP, qos));
    h.recv(&mut client);
    client
}

fn publish_numbered(h: &mut Harness, publisher: &mut Client, range: std::ops::RangeInclusive<u16>) {
    for n in range {
        let qos = QoS::AtLeastOnce;
        h.send(
            publisher,
            publish("jobs/a", n.to_string().as_bytes(), qos, n, false),
        );
    }
    h.recv(publisher);
}

fn numbers(got: &[&Publish]) -> Vec<u16> {
    got.iter()
        .map(|p| std::str::from_utf8(&p.payload).unwrap().parse().unwrap())
        .collect()
}

/// Receive and acknowledge everything `client` is sent until nothing more comes.
fn take_all(h: &mut Harness, client: &mut Client) -> Vec<u16> {
    let mut all = Vec::new();
    loop {
        let got = h.recv(client);
        let got = publishes(&got);
        if got.is_empty() {
            return all;
        }
        all.extend(numbers(&got));
        for p in &got {
            if p.qos == QoS::AtLeastOnce {
                let id = p.packet_id;
                h.send(client, puback(id));
            }
        }
    }
}

#[test]
fn a_group_with_no_member_online_queues_until_one_connects() {
    let mut h = harness();
    let m1 = member(&mut h, "m1", V3_1_1, false, None, QoS::AtLeastOnce);
    h.send(&m1, disconnect());
    let (mut publisher, _) = h.connect(connect("pub", V5, true));
    publish_numbered(&mut h, &mut publisher, 1..=5);
    h.send(
        &publisher,
        publish("jobs/a", b"q0", QoS::AtMostOnce, 0, false),
    );
    let stats = h.engine.stats();
    assert_eq!(stats.shared_queued, 5);
    assert_eq!(
        stats.publish_dropped, 1,
        "QoS 0 is not held for an offline group"
    );

    let (mut m1, _) = h.connect(connect("m1", V3_1_1, false));
    assert_eq!(take_all(&mut h, &mut m1), vec![1, 2, 3, 4, 5]);
    assert_eq!(h.engine.stats().shared_queued, 0);
}

#[test]
fn the_group_queue_drains_as_the_members_window_frees() {
    let mut h = harness();
    let m1 = member(&mut h, "m1", V5, false, None, QoS::AtLeastOnce);
    h.send(&m1, disconnect());
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    publish_numbered(&mut h, &mut publisher, 1..=6);

    let mut c = with_expiry(connect("m1", V5, false), 3600);
    c.properties.0.push(Property::ReceiveMaximum(2));
    let (mut m1, _) = h.connect(c);
    let first = h.recv(&mut m1);
    assert_eq!(numbers(&publishes(&first)), vec![1, 2], "a window of 2");
    assert_eq!(
        h.engine.stats().shared_queued,
        4,
        "the rest waits in the group"
    );
    // A message published now goes behind the held ones.
    publish_numbered(&mut h, &mut publisher, 7..=7);
    for p in publishes(&first) {
        h.send(&m1, puback(p.packet_id));
    }
    assert_eq!(take_all(&mut h, &mut m1), vec![3, 4, 5, 6, 7]);
}

#[test]
fn a_leaving_members_inflight_and_queued_messages_go_to_another_member_in_order() {
    let mut h = Harness::new(EngineConfig {
        max_inflight: 2,
        ..EngineConfig::default()
    });
    let mut m1 = member(&mut h, "m1", V3_1_1, true, None, QoS::AtLeastOnce);
    let mut m2 = member(&mut h, "m2", V5, true, None, QoS::AtLeastOnce);
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    publish_numbered(&mut h, &mut publisher, 1..=10);

    // Each member got half (round robin); m1 has two in flight, three queued.
    let m1_got = h.recv(&mut m1);
    let m1_sent = numbers(&publishes(&m1_got));
    assert_eq!(m1_sent.len(), 2);
    let m2_first = take_all(&mut h, &mut m2);
    assert_eq!(m2_first.len(), 5);
    h.drop_connection(&m1); // nothing acknowledged

    let moved = take_all(&mut h, &mut m2);
    let mut m1_share: Vec<u16> = (1..=10).filter(|n| !m2_first.contains(n)).collect();
    assert_eq!(moved, m1_share, "m1's five, in their order");
    assert_eq!(&moved[..2], &m1_sent[..], "in flight first");
    m1_share.extend(&m2_first);
    m1_share.sort_unstable();
    assert_eq!(m1_share, (1..=10).collect::<Vec<_>>());
    let stats = h.engine.stats();
    assert_eq!(stats.shared_released, 5);
    assert_eq!(stats.publish_dropped, 0);
}

#[test]
fn a_persistent_group_keeps_receiving_while_members_come_and_go() {
    let mut h = harness();
    let mut m1 = member(&mut h, "m1", V3_1_1, false, None, QoS::AtLeastOnce);
    let m2 = member(&mut h, "m2", V5, false, None, QoS::AtLeastOnce);
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(&m2, disconnect());
    publish_numbered(&mut h, &mut publisher, 1..=3);
    let got = h.recv(&mut m1);
    assert_eq!(numbers(&publishes(&got)), vec![1, 2, 3]);
    h.drop_connection(&m1); // unacknowledged: back to the group, nobody online

    publish_numbered(&mut h, &mut publisher, 4..=4);
    assert_eq!(h.engine.stats().shared_queued, 4);
    let (mut m2, _) = h.connect(with_expiry(connect("m2", V5, false), 3600));
    assert_eq!(take_all(&mut h, &mut m2), vec![1, 2, 3, 4]);

    // m1 comes back to its session: nothing of what moved is resent to it.
    let (mut m1, _) = h.connect(connect("m1", V3_1_1, false));
    assert!(publishes(&h.recv(&mut m1)).is_empty());
}

#[test]
fn takeover_releases_the_old_connections_messages() {
    let mut h = harness();
    let mut m1 = member(&mut h, "m1", V5, false, None, QoS::AtLeastOnce);
    let mut m2 = member(&mut h, "m2", V3_1_1, true, None, QoS::AtLeastOnce);
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    publish_numbered(&mut h, &mut publisher, 1..=2);
    let m1_got = numbers(&publishes(&h.recv(&mut m1)));
    assert_eq!(m1_got.len(), 1);
    let (mut m1_again, _) = h.connect(with_expiry(connect("m1", V5, false), 3600));
    assert!(h.is_closed(&m1));
    let m2_all = take_all(&mut h, &mut m2);
    assert!(m2_all.contains(&m1_got[0]), "m1's message moved to m2");
    assert_eq!(m2_all.len(), 2);
    assert!(publishes(&h.recv(&mut m1_again)).is_empty());
}

#[test]
fn qos2_sent_stays_with_its_member_and_is_completed_on_return() {
    let mut h = harness();
    let mut m1 = member(&mut h, "m1", V5, false, None, QoS::ExactlyOnce);
    let mut m2 = member(&mut h, "m2", V5, true, None, QoS::ExactlyOnce);
    let (mut publisher, _) = h.connect(connect("pub", V5, true));
    h.send(
        &publisher,
        publish("jobs/a", b"1", QoS::ExactlyOnce, 1, false),
    );
    h.send(
        &publisher,
        publish("jobs/a", b"2", QoS::ExactlyOnce, 2, false),
    );
    h.recv(&mut publisher);
    let m1_got = h.recv(&mut m1);
    let m1_got = publishes(&m1_got);
    assert_eq!(m1_got.len(), 1);
    let (sent_id, payload) = (m1_got[0].packet_id, m1_got[0].payload.clone());
    assert_eq!(publishes(&h.recv(&mut m2)).len(), 1);
    h.drop_connection(&m1); // before PUBREC

    assert!(
        publishes(&h.recv(&mut m2)).is_empty(),
        "QoS 2 goes to no other member [MQTT-4.8.2-4]"
    );
    let (mut m1, _) = h.connect(with_expiry(connect("m1", V5, false), 3600));
    let again = h.recv(&mut m1);
    let again = publishes(&again);
    assert_eq!(again.len(), 1);
    assert!(again[0].dup && again[0].packet_id == sent_id && again[0].payload == payload);
    h.send(&m1, Packet::PubRec(Ack::new(sent_id)));
    assert!(matches!(h.recv(&mut m1)[..], [Packet::PubRel(_)]));
}

#[test]
fn the_end_of_a_group_drops_its_queue_counted() {
    let mut h = harness();
    let m1 = member(&mut h, "m1", V5, false, None, QoS::AtLeastOnce);
    h.send(&m1, disconnect());
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    publish_numbered(&mut h, &mut publisher, 1..=3);

    // Back with a window of one: one message moves, two stay with the group.
    let mut c = with_expiry(connect("m1", V5, false), 3600);
    c.properties.0.push(Property::ReceiveMaximum(1));
    let (mut m1, _) = h.connect(c);
    assert_eq!(numbers(&publishes(&h.recv(&mut m1))), vec![1]);
    assert_eq!(h.engine.stats().shared_queued, 2);
    h.send(
        &m1,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 2,
            properties: Default::default(),
            filters: vec![s(GROUP)],
        }),
    );
    let stats = h.engine.stats();
    assert_eq!((stats.shared_queued, stats.publish_dropped), (0, 2));

    // The same for a group whose last member's session expires.
    let m2 = member(&mut h, "m2", V5, false, None, QoS::AtLeastOnce);
    h.send(&m2, disconnect());
    publish_numbered(&mut h, &mut publisher, 4..=5);
    assert_eq!(h.engine.stats().shared_queued, 2);
    h.send(&m1, disconnect());
    h.connect(connect("m2", V5, true)); // a clean start ends the old session
    let stats = h.engine.stats();
    assert_eq!((stats.shared_queued, stats.publish_dropped), (0, 4));
}

#[test]
fn a_shared_subscribe_gets_no_retained_messages() {
    let mut h = harness();
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(
        &publisher,
        publish("jobs/a", b"kept", QoS::AtLeastOnce, 1, true),
    );
    h.recv(&mut publisher);
    for version in [V3_1_1, V5] {
        let (mut c, _) = h.connect(connect(&format!("s{version:?}"), version, true));
        h.send(&c, subscribe(1, GROUP, QoS::AtLeastOnce));
        h.send(&c, subscribe(2, "jobs/+", QoS::AtLeastOnce));
        let got = h.recv(&mut c);
        assert!(matches!(got[0], Packet::SubAck(_)));
        assert_eq!(
            numbers_or_text(&publishes(&got)),
            vec!["kept".to_string()],
            "only the plain subscription gets it (MQTT 5.0 §3.3.1.3: retained messages go to new non-shared subscriptions)"
        );
    }
}

fn numbers_or_text(got: &[&Publish]) -> Vec<String> {
    got.iter()
        .map(|p| String::from_utf8(p.payload.to_vec()).unwrap())
        .collect()
}
