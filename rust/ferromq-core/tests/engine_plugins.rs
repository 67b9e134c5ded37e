//! Plugins through the engine (engine/plugins.rs): an intercepting plugin's message
//! waits for its verdict, with the publisher's later packets parked behind it and its
//! acknowledgement after it; verdicts pass, rewrite, drop or reject; plugins decide in
//! turn; an observing plugin gets copies of routed messages; a verdict for a closed
//! connection routes QoS 0 only.

mod support;

use ferromq_core::codec::{Packet, ProtocolVersion, QoS, ReasonCode};
use ferromq_core::engine::{EngineConfig, PluginFilters, Verdict};
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;

fn plugin(filters: &[&str], intercepts: bool) -> PluginFilters {
    let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
    PluginFilters::new(&filters, intercepts).unwrap()
}

fn acks(packets: &[Packet]) -> Vec<(u16, ReasonCode)> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::PubAck(ack) | Packet::PubRec(ack) => Some((ack.packet_id, ack.reason)),
            _ => None,
        })
        .collect()
}

/// A harness with `plugins`, a subscriber to `#` and a v5 device.
fn setup(plugins: Vec<PluginFilters>) -> (Harness, Client, Client) {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.set_plugins(plugins, h.now);
    let (mut subscriber, _) = h.connect(connect("sub", V5, true));
    h.send(&subscriber, subscribe(1, "#", QoS::AtLeastOnce));
    h.recv(&mut subscriber);
    let (device, _) = h.connect(connect("device", V5, true));
    (h, subscriber, device)
}

/// The wire bytes of `packets`, one after another, as one read brings them.
fn one_read(packets: &[Packet]) -> Vec<u8> {
    packets
        .iter()
        .flat_map(|p| p.to_bytes(V5).unwrap().to_vec())
        .collect()
}

fn decide(h: &mut Harness, verdict: Verdict) {
    let id = h.plugin_messages.last().unwrap().id;
    let now = h.now;
    h.engine.decide(id, verdict, now);
    h.pump();
}

#[test]
fn an_intercepted_message_and_what_follows_wait_for_the_verdict() {
    let (mut h, mut subscriber, mut device) = setup(vec![plugin(&["chat/#"], true)]);
    // One read with both: the second is parked behind the first.
    let wire = one_read(&[
        publish("chat/a", b"1", QoS::AtLeastOnce, 1, false),
        publish("other", b"2", QoS::AtLeastOnce, 2, false),
    ]);
    h.send_raw(&device, &wire);
    assert!(
        h.recv(&mut device).is_empty(),
        "no PUBACK before the verdict"
    );
    assert!(
        h.recv(&mut subscriber).is_empty(),
        "nothing routed before the verdict"
    );
    assert!(h.engine.input_held(device.conn));
    let message = h.plugin_messages.last().unwrap();
    assert!(message.intercepted);
    assert_eq!(
        (message.topic.as_str(), &message.payload[..]),
        ("chat/a", &b"1"[..])
    );
    assert_eq!(message.client_id, "device");
    assert_eq!(h.engine.plugin_pending(), 1);
    decide(&mut h, Verdict::Pass);
    assert_eq!(
        acks(&h.recv(&mut device)),
        vec![(1, ReasonCode::Success), (2, ReasonCode::Success)],
        "in the order sent"
    );
    assert_eq!(
        payloads(&h.recv(&mut subscriber)),
        vec![b"1".to_vec(), b"2".to_vec()]
    );
    assert!(!h.engine.input_held(device.conn));
    assert_eq!(h.engine.plugin_pending(), 0);
}

#[test]
fn verdicts_rewrite_drop_and_reject() {
    let (mut h, mut subscriber, mut device) = setup(vec![plugin(&["chat/#"], true)]);
    h.send(&device, publish("chat/a", b"x", QoS::AtLeastOnce, 1, false));
    decide(
        &mut h,
        Verdict::Rewrite {
            topic: Some("chat/b".into()),
            payload: Some(b"y".to_vec().into()),
        },
    );
    let got = h.recv(&mut subscriber);
    assert_eq!(publishes(&got)[0].topic.as_str(), "chat/b");
    assert_eq!(payloads(&got), vec![b"y".to_vec()]);
    h.send(
        &device,
        publish("chat/a", b"spam", QoS::ExactlyOnce, 2, false),
    );
    decide(&mut h, Verdict::Drop);
    h.send(
        &device,
        publish("chat/a", b"secret", QoS::AtLeastOnce, 3, false),
    );
    decide(&mut h, Verdict::Reject(ReasonCode::NotAuthorized));
    assert_eq!(
        acks(&h.recv(&mut device)),
        vec![
            (1, ReasonCode::Success),
            (2, ReasonCode::Success),
            (3, ReasonCode::NotAuthorized)
        ]
    );
    assert!(h.recv(&mut subscriber).is_empty());
    assert_eq!(h.engine.stats().plugin_dropped, 2);
}

#[test]
fn intercepting_plugins_decide_in_turn_on_the_rewritten_topic() {
    let (mut h, mut subscriber, device) = setup(vec![
        plugin(&["a/#"], true),
        plugin(&["b/#"], true),
        plugin(&["a/#"], true),
    ]);
    h.send(&device, publish("a/1", b"x", QoS::AtMostOnce, 0, false));
    assert_eq!(h.plugin_messages.last().unwrap().plugin, 0);
    decide(
        &mut h,
        Verdict::Rewrite {
            topic: Some("b/1".into()),
            payload: None,
        },
    );
    assert_eq!(
        h.plugin_messages.last().unwrap().plugin,
        1,
        "b/# matches now; a/# no more"
    );
    assert!(h.recv(&mut subscriber).is_empty());
    decide(&mut h, Verdict::Pass);
    assert_eq!(publishes(&h.recv(&mut subscriber))[0].topic.as_str(), "b/1");
}

#[test]
fn an_observing_plugin_gets_copies_of_routed_messages_and_holds_nothing() {
    let (mut h, mut subscriber, mut device) = setup(vec![plugin(&["sensors/#"], false)]);
    h.send(
        &device,
        publish("sensors/t", b"20", QoS::AtLeastOnce, 1, false),
    );
    h.send(&device, publish("other", b"21", QoS::AtLeastOnce, 2, false));
    assert_eq!(acks(&h.recv(&mut device)).len(), 2);
    assert_eq!(payloads(&h.recv(&mut subscriber)).len(), 2);
    let copies: Vec<_> = h.plugin_messages.iter().map(|m| m.topic.clone()).collect();
    assert_eq!(copies, vec!["sensors/t".to_string()]);
    assert!(!h.plugin_messages[0].intercepted);
    assert_eq!(h.engine.plugin_pending(), 0);
}

#[test]
fn a_verdict_after_the_connection_closed_routes_qos0_only() {
    let (mut h, mut subscriber, device) = setup(vec![plugin(&["chat/#"], true)]);
    h.send(
        &device,
        publish("chat/a", b"q1", QoS::AtLeastOnce, 1, false),
    );
    let first = h.plugin_messages.last().unwrap().id;
    h.drop_connection(&device);
    let now = h.now;
    h.engine.decide(first, Verdict::Pass, now);
    h.pump();
    assert!(
        h.recv(&mut subscriber).is_empty(),
        "never acknowledged: sent again on resumption"
    );
    let (device, _) = h.connect(connect("device", V5, false));
    let wire = one_read(&[
        publish("chat/a", b"q0", QoS::AtMostOnce, 0, false),
        disconnect(),
    ]);
    h.send_raw(&device, &wire);
    let id = h.plugin_messages.last().unwrap().id;
    h.drop_connection(&device);
    h.engine.decide(id, Verdict::Pass, now);
    h.pump();
    assert_eq!(payloads(&h.recv(&mut subscriber)), vec![b"q0".to_vec()]);
}

#[test]
fn a_shared_or_malformed_filter_is_refused() {
    assert!(PluginFilters::new(&["$share/g/a".into()], true).is_err());
    assert!(PluginFilters::new(&["a/#/b".into()], false).is_err());
}
