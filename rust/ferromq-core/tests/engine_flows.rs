//! The engine's protocol behaviour, driven packet by packet through the codec:
//! CONNECT rules, QoS 0/1/2 both ways with downgrade, retained messages, wills,
//! persistent sessions, keep alive, takeover and bad input.

mod support;

use ferromq_core::codec::{Ack, ConnAck, Packet, ProtocolVersion::*, QoS, ReasonCode, SubAck};
use ferromq_core::engine::{EngineConfig, Event};
use support::*;

fn harness() -> Harness {
    Harness::new(EngineConfig::default())
}

fn connack(packet: &Packet) -> &ConnAck {
    match packet {
        Packet::ConnAck(c) => c,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

#[test]
fn connect_accepts_and_reports_session_present() {
    let mut h = harness();
    let (client, ack) = h.connect(connect("dev1", V3_1_1, false));
    assert_eq!(connack(&ack).code, 0);
    assert!(!connack(&ack).session_present);
    h.send(&client, disconnect());
    let (_, ack) = h.connect(connect("dev1", V3_1_1, false));
    assert!(connack(&ack).session_present, "persistent session resumed");
    let (_, ack) = h.connect(connect("dev1", V3_1_1, true));
    assert!(!connack(&ack).session_present, "clean session discards it");
}

#[test]
fn empty_client_id_rules() {
    let mut h = harness();
    // 3.1.1: empty id with clean session 0 is refused with 0x02 [MQTT-3.1.3-8].
    let (client, ack) = h.connect(connect("", V3_1_1, false));
    assert_eq!(connack(&ack).code, 2);
    assert!(h.is_closed(&client));
    // 3.1.1 with clean session 1: accepted.
    let (_, ack) = h.connect(connect("", V3_1_1, true));
    assert_eq!(connack(&ack).code, 0);
    // 5.0: assigned and returned [MQTT-3.2.2-16].
    let (_, ack) = h.connect(connect("", V5, true));
    let assigned = connack(&ack)
        .properties
        .iter()
        .any(|p| matches!(p, ferromq_core::codec::Property::AssignedClientIdentifier(id) if id.starts_with("ferromq-")));
    assert!(assigned);
    // 3.1: 1 to 23 characters.
    let (_, ack) = h.connect(connect(&"x".repeat(24), V3_1, true));
    assert_eq!(connack(&ack).code, 2);
}

#[test]
fn qos_flows_and_downgrade() {
    let mut h = harness();
    let (mut sub1, _) = h.connect(connect("sub1", V3_1_1, true));
    let (mut sub2, _) = h.connect(connect("sub2", V5, true));
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(&sub1, subscribe(1, "a/+", QoS::AtLeastOnce));
    h.send(&sub2, subscribe(1, "a/#", QoS::ExactlyOnce));
    assert!(
        matches!(&h.recv(&mut sub1)[..], [Packet::SubAck(SubAck { reasons, .. })] if reasons == &[ReasonCode::GrantedQos1])
    );
    h.recv(&mut sub2);

    h.send(
        &publisher,
        publish("a/b", b"two", QoS::ExactlyOnce, 5, false),
    );
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubRec(Ack::new(5))]);
    let got1 = h.recv(&mut sub1);
    let got2 = h.recv(&mut sub2);
    // Downgraded to the subscription's QoS 1 for sub1, QoS 2 for sub2.
    assert_eq!(publishes(&got1)[0].qos, QoS::AtLeastOnce);
    assert_eq!(publishes(&got2)[0].qos, QoS::ExactlyOnce);
    let id2 = publishes(&got2)[0].packet_id;

    // A repeated QoS 2 PUBLISH (same id) is not routed again [MQTT-4.3.3-9].
    h.send(
        &publisher,
        publish("a/b", b"two", QoS::ExactlyOnce, 5, false),
    );
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubRec(Ack::new(5))]);
    assert!(h.recv(&mut sub1).is_empty());
    h.send(&publisher, Packet::PubRel(Ack::new(5)));
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubComp(Ack::new(5))]);

    // The outbound QoS 2 flow to sub2.
    h.send(&sub2, Packet::PubRec(Ack::new(id2)));
    assert_eq!(h.recv(&mut sub2), vec![Packet::PubRel(Ack::new(id2))]);
    h.send(&sub2, Packet::PubComp(Ack::new(id2)));
    assert!(h.recv(&mut sub2).is_empty());
}

#[test]
fn retained_set_replace_clear_and_retain_flag() {
    let mut h = harness();
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(&publisher, publish("r/1", b"old", QoS::AtMostOnce, 0, true));
    h.send(&publisher, publish("r/1", b"new", QoS::AtMostOnce, 0, true));
    h.send(&publisher, publish("r/2", b"two", QoS::AtMostOnce, 0, true));
    h.send(&publisher, publish("r/2", b"", QoS::AtMostOnce, 0, true));
    h.recv(&mut publisher);
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, true));
    h.send(&sub, subscribe(1, "r/#", QoS::AtMostOnce));
    let got = h.recv(&mut sub);
    assert!(matches!(got[0], Packet::SubAck(_)), "SUBACK comes first");
    let retained = publishes(&got);
    assert_eq!(retained.len(), 1);
    assert_eq!(&retained[0].payload[..], b"new");
    assert!(retained[0].retain, "sent on subscribe with RETAIN=1");
    // A live retained publish reaches an existing 3.1.1 subscription with RETAIN=0.
    h.send(
        &publisher,
        publish("r/3", b"live", QoS::AtMostOnce, 0, true),
    );
    let got = h.recv(&mut sub);
    assert!(!publishes(&got)[0].retain);
}

#[test]
fn will_on_abnormal_end_only() {
    let mut h = harness();
    let (mut watcher, _) = h.connect(connect("watcher", V5, true));
    h.send(&watcher, subscribe(1, "wills/#", QoS::AtLeastOnce));
    h.recv(&mut watcher);

    let (dying, _) = h.connect(with_will(
        connect("d1", V3_1_1, true),
        "wills/d1",
        b"gone",
        None,
    ));
    h.drop_connection(&dying);
    let got = h.recv(&mut watcher);
    assert_eq!(&publishes(&got)[0].payload[..], b"gone");

    let (polite, _) = h.connect(with_will(
        connect("d2", V3_1_1, true),
        "wills/d2",
        b"gone",
        None,
    ));
    h.send(&polite, disconnect());
    h.drop_connection(&polite);
    assert!(h.recv(&mut watcher).is_empty(), "no will after DISCONNECT");
}

#[test]
fn will_delay_is_cancelled_by_a_return() {
    let mut h = harness();
    let (mut watcher, _) = h.connect(connect("watcher", V5, true));
    h.send(&watcher, subscribe(1, "wills/#", QoS::AtMostOnce));
    h.recv(&mut watcher);
    let c = with_expiry(
        with_will(connect("d", V5, false), "wills/d", b"late", Some(5)),
        60,
    );
    let (dying, _) = h.connect(c.clone());
    h.drop_connection(&dying);
    h.advance(2_000);
    assert!(h.recv(&mut watcher).is_empty());
    let (back, _) = h.connect(with_expiry(connect("d", V5, false), 60));
    h.advance(10_000);
    assert!(h.recv(&mut watcher).is_empty(), "returned in time: no will");
    h.drop_connection(&back);
    // The new connection had no will, so nothing is published now either; a will
    // whose delay runs out is published.
    let (dying, _) = h.connect(c);
    h.drop_connection(&dying);
    h.advance(6_000);
    assert_eq!(&publishes(&h.recv(&mut watcher))[0].payload[..], b"late");
}

#[test]
fn offline_messages_are_queued_and_inflight_resent_with_dup() {
    let mut h = harness();
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, false));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(&publisher, publish("t", b"1", QoS::AtLeastOnce, 1, false));
    let first = h.recv(&mut sub);
    let first_id = publishes(&first)[0].packet_id;
    h.drop_connection(&sub); // never acknowledged message 1
    h.send(&publisher, publish("t", b"2", QoS::AtLeastOnce, 2, false));
    h.send(&publisher, publish("t", b"3", QoS::AtMostOnce, 0, false)); // QoS 0 offline: dropped
    h.recv(&mut publisher);

    let (mut sub, ack) = h.connect(connect("sub", V3_1_1, false));
    assert!(connack(&ack).session_present);
    let got = h.recv(&mut sub);
    let got = publishes(&got);
    assert_eq!(got.len(), 2);
    assert!(got[0].dup && got[0].packet_id == first_id && &got[0].payload[..] == b"1");
    assert!(!got[1].dup && &got[1].payload[..] == b"2");
}

#[test]
fn keepalive_timeout_closes_with_0x8d_and_publishes_will() {
    let mut h = harness();
    let (mut watcher, _) = h.connect(connect("watcher", V3_1_1, true));
    h.send(&watcher, subscribe(1, "w", QoS::AtMostOnce));
    h.recv(&mut watcher);
    let mut c = with_will(connect("idle", V5, true), "w", b"timeout", None);
    c.keep_alive = 10;
    let (mut idle, _) = h.connect(c);
    h.advance(14_000);
    assert!(!h.is_closed(&idle), "1.5 x keep alive not reached");
    h.advance(2_000);
    assert!(h.is_closed(&idle));
    assert!(
        matches!(&h.recv(&mut idle)[..], [Packet::Disconnect(d)] if d.reason == ReasonCode::KeepAliveTimeout)
    );
    assert_eq!(publishes(&h.recv(&mut watcher)).len(), 1);
}

#[test]
fn takeover_disconnects_the_old_connection_with_0x8e() {
    let mut h = harness();
    let (mut old, _) = h.connect(connect("same", V5, true));
    let (_new, ack) = h.connect(connect("same", V5, true));
    assert_eq!(connack(&ack).code, 0);
    assert!(h.is_closed(&old));
    assert!(
        matches!(&h.recv(&mut old)[..], [Packet::Disconnect(d)] if d.reason == ReasonCode::SessionTakenOver)
    );
}

#[test]
fn malformed_input_closes_only_that_connection() {
    let mut h = harness();
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, true));
    h.send(&sub, subscribe(1, "x", QoS::AtMostOnce));
    h.recv(&mut sub);
    let (mut bad, _) = h.connect(connect("bad", V5, true));
    h.send_raw(&bad, b"\x30\x04\x00\x01+\x00"); // wildcard in a topic name
    assert!(h.is_closed(&bad));
    assert!(
        matches!(&h.recv(&mut bad)[..], [Packet::Disconnect(d)] if d.reason == ReasonCode::TopicNameInvalid)
    );
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(
        &publisher,
        publish("x", b"still here", QoS::AtMostOnce, 0, false),
    );
    h.recv(&mut publisher);
    assert_eq!(publishes(&h.recv(&mut sub)).len(), 1);
    assert!(!h.is_closed(&sub));
}

#[test]
fn second_connect_and_packets_before_connect_are_protocol_errors() {
    let mut h = harness();
    let (mut c, _) = h.connect(connect("c", V5, true));
    h.send(&c, Packet::Connect(Box::new(connect("c", V5, true))));
    assert!(h.is_closed(&c));
    assert!(
        matches!(&h.recv(&mut c)[..], [Packet::Disconnect(d)] if d.reason == ReasonCode::ProtocolError)
    );
    let early = h.open(V3_1_1);
    h.send_raw(&early, b"\xc0\x00");
    assert!(h.is_closed(&early));
}

#[test]
fn connect_timeout_closes_silent_sockets() {
    let mut h = harness();
    let silent = h.open(V3_1_1);
    h.advance(9_000);
    assert!(!h.is_closed(&silent));
    h.advance(2_000);
    assert!(h.is_closed(&silent));
    assert_eq!(h.engine.stats().connect_timeouts, 1);
}

#[test]
fn queue_limit_drops_and_counts() {
    let mut h = Harness::new(EngineConfig {
        queue_limit: 3,
        ..EngineConfig::default()
    });
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, false));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.drop_connection(&sub);
    let (publisher, _) = h.connect(connect("pub", V3_1_1, true));
    for i in 1..=5u8 {
        h.send(
            &publisher,
            publish("t", &[b'0' + i], QoS::AtLeastOnce, i.into(), false),
        );
    }
    assert_eq!(h.engine.stats().publish_dropped, 2);
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, false));
    let payloads: Vec<u8> = publishes(&h.recv(&mut sub))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(payloads, b"345", "drop oldest keeps the newest three");
}

#[test]
fn session_expiry_removes_offline_sessions() {
    let mut h = harness();
    let (sub, _) = h.connect(with_expiry(connect("s", V5, false), 5));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.drop_connection(&sub);
    h.advance(4_000);
    assert_eq!(h.engine.stats().clients_disconnected, 1);
    h.advance(2_000);
    assert_eq!(h.engine.stats().sessions_expired, 1);
    let (_, ack) = h.connect(with_expiry(connect("s", V5, false), 5));
    assert!(!connack(&ack).session_present);
}

#[test]
fn receive_maximum_bounds_the_outbound_window() {
    let mut h = harness();
    let mut c = connect("slow", V5, true);
    c.properties
        .0
        .push(ferromq_core::codec::Property::ReceiveMaximum(2));
    let (mut slow, _) = h.connect(c);
    h.send(&slow, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut slow);
    let (publisher, _) = h.connect(connect("pub", V3_1_1, true));
    for i in 1..=5u16 {
        h.send(&publisher, publish("t", b"x", QoS::AtLeastOnce, i, false));
    }
    let first = h.recv(&mut slow);
    assert_eq!(publishes(&first).len(), 2, "window of 2");
    h.send(&slow, puback(publishes(&first)[0].packet_id));
    assert_eq!(
        publishes(&h.recv(&mut slow)).len(),
        1,
        "one ack frees one slot"
    );
}

#[test]
fn a_lost_connection_leaves_no_close_for_the_next_socket_with_its_id() {
    let mut h = harness();
    let (a, _) = h.connect(connect("a", V5, true));
    // The peer goes away and a new socket is accepted before Python takes the events.
    h.engine.connection_lost(a.conn, h.now);
    let b = h.engine.open(h.now);
    assert_eq!(b, a.conn, "connection ids are reused");
    assert!(!h.engine.take_events().contains(&Event::Close { conn: b }));
}

#[test]
fn partial_packets_do_not_reset_keep_alive() {
    let mut h = harness();
    let mut c = connect("dribbler", V5, true);
    c.keep_alive = 10;
    let (dribbler, _) = h.connect(c);
    // A PUBLISH whose remaining length promises 100 bytes, sent a byte at a time.
    // The caller keeps unused bytes and feeds them again with the next read.
    let partial = [0x30u8, 100, 0, 1, b't'];
    for len in 1..=partial.len() {
        h.advance(3_000);
        assert_eq!(h.engine.feed(dribbler.conn, &partial[..len], h.now), 0);
    }
    h.advance(1_000);
    assert!(
        h.is_closed(&dribbler),
        "16 s with no whole packet exceeds 1.5 x 10 s"
    );
}

#[test]
fn packets_and_bytes_are_counted_by_type_both_ways() {
    use ferromq_core::codec::PacketType;
    let mut h = harness();
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    h.send(&sub, subscribe(1, "t/#", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let before = h.engine.stats();
    for id in 1..=3u16 {
        h.send(
            &publisher,
            publish("t/a", b"12345", QoS::AtLeastOnce, id, false),
        );
    }
    h.recv(&mut publisher);
    h.recv(&mut sub);
    let after = h.engine.stats();
    let (publish, puback) = (PacketType::Publish as usize, PacketType::PubAck as usize);
    let rose = |counts: fn(&ferromq_core::engine::Stats) -> [u64; 16], i: usize| {
        counts(&after)[i] - counts(&before)[i]
    };
    assert_eq!(rose(|s| s.received.packets, publish), 3);
    // 2 (fixed header) + 2 + 3 (topic) + 2 (packet id) + 5 (payload) per PUBLISH.
    assert_eq!(rose(|s| s.received.bytes, publish), 3 * 14);
    assert_eq!(rose(|s| s.sent.packets, puback), 3);
    assert_eq!(rose(|s| s.sent.bytes, puback), 3 * 4);
    // Out to the v5 subscriber: one more byte each, its empty property length.
    assert_eq!(rose(|s| s.sent.packets, publish), 3);
    assert_eq!(rose(|s| s.sent.bytes, publish), 3 * 15);
    assert_eq!(after.received.packets[PacketType::Connect as usize], 2);
    assert_eq!(after.sent.packets[PacketType::ConnAck as usize], 2);
    assert_eq!(after.clients_connected_by_version, [0, 1, 1]);
}
