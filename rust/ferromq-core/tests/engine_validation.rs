//! Validation at ingress through the engine (engine/validation.rs): every matching
//! rule is checked and the first that fails decides; failures are counted each and
//! logged at most once a second per rule, with the number not logged since.

mod support;

use ferromq_core::codec::{Packet, ProtocolVersion, QoS, ReasonCode};
use ferromq_core::engine::{EngineConfig, Event, OnInvalid, ValidationRule};
use ferromq_core::schema::{JsonSchema, PayloadSchema};
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;

fn rule(filter: &str, schema: &str, on_invalid: OnInvalid) -> ValidationRule {
    let schema = PayloadSchema::Json(JsonSchema::compile(schema).unwrap());
    ValidationRule::new(filter, schema, on_invalid).unwrap()
}

fn ack_reason(packets: &[Packet]) -> Vec<ReasonCode> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::PubAck(ack) => Some(ack.reason),
            _ => None,
        })
        .collect()
}

#[test]
fn the_first_failing_rule_decides() {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.set_validation(vec![
        rule("a/#", r#"{"type": "number"}"#, OnInvalid::Drop),
        rule("a/b", r#"{"minimum": 10}"#, OnInvalid::Disconnect),
    ]);
    let (mut subscriber, _) = h.connect(connect("sub", V5, true));
    h.send(&subscriber, subscribe(1, "a/#", QoS::AtLeastOnce));
    h.recv(&mut subscriber);
    let (mut device, _) = h.connect(connect("device", V5, true));
    h.send(
        &device,
        publish("a/b", b"\"text\"", QoS::AtLeastOnce, 1, false),
    );
    h.send(&device, publish("a/b", b"12", QoS::AtLeastOnce, 2, false));
    assert_eq!(
        ack_reason(&h.recv(&mut device)),
        vec![ReasonCode::Success, ReasonCode::Success],
        "the first dropped, acknowledged as usual; the second passes both"
    );
    assert_eq!(payloads(&h.recv(&mut subscriber)), vec![b"12".to_vec()]);
    h.send(&device, publish("a/b", b"3", QoS::AtLeastOnce, 3, false));
    h.recv(&mut device);
    assert!(
        h.is_closed(&device),
        "a number below 10 fails the second rule"
    );
    assert_eq!(
        h.rejected.last().unwrap().1,
        ReasonCode::PayloadFormatInvalid
    );
    assert_eq!(h.engine.stats().payloads_invalid, 2);
}

#[test]
fn failures_are_logged_at_most_once_a_second_per_rule() {
    let mut h = Harness::new(EngineConfig::default());
    h.engine
        .set_validation(vec![rule("t", r#"{"type": "object"}"#, OnInvalid::Reject)]);
    let (mut device, _) = h.connect(connect("device", V5, true));
    for id in 1..=5 {
        h.send(&device, publish("t", b"[]", QoS::AtLeastOnce, id, false));
    }
    assert_eq!(
        ack_reason(&h.recv(&mut device)),
        vec![ReasonCode::PayloadFormatInvalid; 5]
    );
    h.advance(1000);
    h.send(&device, publish("t", b"1", QoS::AtLeastOnce, 6, false));
    h.recv(&mut device);
    let logged: Vec<(String, u64)> = h
        .invalid
        .iter()
        .map(|event| match event {
            Event::PayloadInvalid {
                problem, unlogged, ..
            } => (problem.clone(), *unlogged),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        logged,
        vec![
            ("at /: expected object, got array".to_owned(), 0),
            ("at /: expected object, got number".to_owned(), 4),
        ]
    );
    assert_eq!(h.engine.stats().payloads_invalid, 6);
}
