//! The engine's limits (issue 13): publish rates per client and per user (v5
//! DISCONNECT 0x96, 3.x read less), subscriptions per client, retained-message
//! limits and expiry cap, bytes queued per session, and the memory budget that
//! holds publishers' input instead of dropping what they send.

mod support;

use ferromq_core::codec::{Packet, ProtocolVersion::*, QoS, ReasonCode};
use ferromq_core::engine::{EngineConfig, PublishRateLimits, RetainedLimits};
use support::*;

fn harness(config: EngineConfig) -> Harness {
    Harness::new(config)
}

fn rates(rate: PublishRateLimits) -> EngineConfig {
    EngineConfig {
        publish_rate: rate,
        ..EngineConfig::default()
    }
}

fn as_user(mut c: ferromq_core::codec::Connect, user: &str) -> ferromq_core::codec::Connect {
    c.username = Some(s(user));
    c
}

fn disconnect_reason(packets: &[Packet]) -> Option<ReasonCode> {
    packets.iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some(d.reason),
        _ => None,
    })
}

fn ack_reasons(packets: &[Packet]) -> Vec<ReasonCode> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::PubAck(ack) => Some(ack.reason),
            Packet::SubAck(suback) => suback.reasons.last().copied(),
            _ => None,
        })
        .collect()
}

#[test]
fn v5_over_the_message_rate_gets_0x96() {
    let mut h = harness(rates(PublishRateLimits {
        messages_per_client: 5,
        ..Default::default()
    }));
    let (mut client, _) = h.connect(connect("fast", V5, true));
    for _ in 0..5 {
        h.send(&client, publish("t", b"x", QoS::AtMostOnce, 0, false));
    }
    assert!(!h.is_closed(&client), "a second's worth is allowed at once");
    h.advance(200); // one more token
    h.send(&client, publish("t", b"x", QoS::AtMostOnce, 0, false));
    assert!(!h.is_closed(&client));
    h.send(&client, publish("t", b"x", QoS::AtMostOnce, 0, false));
    let got = h.recv(&mut client);
    assert_eq!(
        disconnect_reason(&got),
        Some(ReasonCode::MessageRateTooHigh)
    );
    assert!(h.is_closed(&client));
    assert_eq!(h.engine.stats().publish_rate_exceeded, 1);
}

#[test]
fn v5_over_the_byte_rate_gets_0x96() {
    let mut h = harness(rates(PublishRateLimits {
        bytes_per_client: 100,
        ..Default::default()
    }));
    let (mut client, _) = h.connect(connect("big", V5, true));
    h.send(&client, publish("t", &[0; 60], QoS::AtMostOnce, 0, false));
    assert!(!h.is_closed(&client));
    h.send(&client, publish("t", &[0; 60], QoS::AtMostOnce, 0, false));
    assert_eq!(
        disconnect_reason(&h.recv(&mut client)),
        Some(ReasonCode::MessageRateTooHigh)
    );
}

#[test]
fn v311_over_the_rate_is_read_less_and_loses_nothing() {
    let mut h = harness(rates(PublishRateLimits {
        messages_per_client: 10,
        ..Default::default()
    }));
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, true));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V3_1_1, true));
    // One read holding 25 PUBLISHes: 10 pass, the rest wait in the engine.
    let mut wire = Vec::new();
    for i in 0..25u16 {
        let packet = publish("t", &i.to_be_bytes(), QoS::AtLeastOnce, i + 1, false);
        wire.extend_from_slice(&packet.to_bytes(V3_1_1).unwrap());
    }
    h.send_raw(&publisher, &wire);
    assert!(
        !h.is_read(&publisher),
        "the IO layer is told to stop reading"
    );
    assert_eq!(h.wakes, vec![h.now + 100], "one token is 100 ms away");
    let acks = |got: &[Packet]| {
        got.iter()
            .filter(|p| matches!(p, Packet::PubAck(_)))
            .count()
    };
    assert_eq!(acks(&h.recv(&mut publisher)), 10);
    assert_eq!(payloads(&h.recv(&mut sub)).len(), 10);
    // A second later the bucket is full again: ten more, and still held.
    h.advance(1000);
    assert_eq!(acks(&h.recv(&mut publisher)), 10);
    assert!(!h.is_read(&publisher));
    h.advance(500);
    assert_eq!(acks(&h.recv(&mut publisher)), 5);
    assert!(
        h.is_read(&publisher),
        "ResumeReading once nothing is parked"
    );
    assert!(!h.is_closed(&publisher));
    let got: Vec<u16> = payloads(&h.recv(&mut sub))
        .iter()
        .map(|p| u16::from_be_bytes([p[0], p[1]]))
        .collect();
    assert_eq!(got, (10..25).collect::<Vec<_>>(), "in order, none lost");
    assert_eq!(h.engine.stats().publish_dropped, 0);
}

#[test]
fn acknowledgements_pass_a_held_connection() {
    let mut h = harness(rates(PublishRateLimits {
        messages_per_client: 1,
        ..Default::default()
    }));
    let (mut both, _) = h.connect(connect("both", V3_1_1, true));
    h.send(&both, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut both);
    let mut wire = Vec::new();
    for i in 1..=3u16 {
        let packet = publish("t", b"m", QoS::AtLeastOnce, i, false);
        wire.extend_from_slice(&packet.to_bytes(V3_1_1).unwrap());
    }
    // The delivery of the first message is acknowledged in the same read, behind
    // two held PUBLISHes: the PUBACK is handled at once.
    wire.extend_from_slice(&puback(1).to_bytes(V3_1_1).unwrap());
    h.send_raw(&both, &wire);
    assert!(!h.is_read(&both));
    assert_eq!(h.engine.stats().messages_inflight, 0);
}

#[test]
fn a_users_connections_share_its_bucket() {
    let mut h = harness(rates(PublishRateLimits {
        messages_per_user: 4,
        ..Default::default()
    }));
    let (a, _) = h.connect(as_user(connect("a", V5, true), "ann"));
    let (mut b, _) = h.connect(as_user(connect("b", V5, true), "ann"));
    let (other, _) = h.connect(as_user(connect("c", V5, true), "bob"));
    for _ in 0..2 {
        h.send(&a, publish("t", b"x", QoS::AtMostOnce, 0, false));
        h.send(&b, publish("t", b"x", QoS::AtMostOnce, 0, false));
    }
    for _ in 0..4 {
        h.send(&other, publish("t", b"x", QoS::AtMostOnce, 0, false));
    }
    assert!(!h.is_closed(&other), "bob has a bucket of his own");
    h.send(&b, publish("t", b"x", QoS::AtMostOnce, 0, false));
    assert_eq!(
        disconnect_reason(&h.recv(&mut b)),
        Some(ReasonCode::MessageRateTooHigh)
    );
    assert!(!h.is_closed(&a));
}

#[test]
fn subscriptions_beyond_the_quota_are_refused_per_filter() {
    for (version, refused) in [
        (V5, ReasonCode::QuotaExceeded),
        (V3_1_1, ReasonCode::UnspecifiedError),
    ] {
        let mut h = harness(EngineConfig {
            max_subscriptions_per_client: 2,
            ..EngineConfig::default()
        });
        let (mut c, _) = h.connect(connect("c", version, true));
        h.send(&c, subscribe(1, "a", QoS::AtLeastOnce));
        h.send(&c, subscribe(2, "b/+", QoS::AtLeastOnce));
        h.send(&c, subscribe(3, "c", QoS::AtLeastOnce));
        h.send(&c, subscribe(4, "a", QoS::AtMostOnce));
        let granted = ReasonCode::GrantedQos1;
        assert_eq!(
            ack_reasons(&h.recv(&mut c)),
            vec![granted, granted, refused, ReasonCode::Success],
            "{version:?}: a third filter is refused, replacing one is not"
        );
        h.send(
            &c,
            Packet::Unsubscribe(ferromq_core::codec::Unsubscribe {
                packet_id: 5,
                properties: Default::default(),
                filters: vec![s("a")],
            }),
        );
        h.send(&c, subscribe(6, "c", QoS::AtLeastOnce));
        let got = h.recv(&mut c);
        assert_eq!(ack_reasons(&got).last(), Some(&granted));
        assert_eq!(h.engine.stats().subscriptions_refused, 1);
    }
}

fn retained(limits: RetainedLimits) -> EngineConfig {
    EngineConfig {
        retained_limits: limits,
        ..EngineConfig::default()
    }
}

#[test]
fn retained_count_limit_keeps_existing_and_refuses_new() {
    let mut h = harness(retained(RetainedLimits {
        max_messages: 2,
        ..Default::default()
    }));
    // The broker's own retained messages ($SYS) are outside the limit.
    for topic in ["$SYS/a", "$SYS/b", "$SYS/c"] {
        h.engine.publish(topic, b"1", QoS::AtMostOnce, true, h.now);
    }
    let (mut v5, _) = h.connect(connect("p5", V5, true));
    let (v3, _) = h.connect(connect("p3", V3_1_1, true));
    let (mut live, _) = h.connect(connect("live", V5, true));
    h.send(&live, subscribe(1, "r/#", QoS::AtLeastOnce));
    h.recv(&mut live);
    h.send(&v5, publish("r/1", b"one", QoS::AtLeastOnce, 1, true));
    h.send(&v5, publish("r/2", b"two", QoS::AtLeastOnce, 2, true));
    h.send(&v5, publish("r/3", b"three", QoS::AtLeastOnce, 3, true));
    h.send(&v5, publish("r/1", b"one again", QoS::AtLeastOnce, 4, true));
    assert_eq!(
        ack_reasons(&h.recv(&mut v5)),
        vec![
            ReasonCode::Success,
            ReasonCode::Success,
            ReasonCode::QuotaExceeded,
            ReasonCode::Success
        ],
        "replacing a topic's message does not count twice"
    );
    // 3.1.1 has no code for it: delivered live, not stored.
    h.send(&v3, publish("r/4", b"four", QoS::AtLeastOnce, 1, true));
    let live_got = payloads(&h.recv(&mut live));
    assert_eq!(
        live_got,
        vec![
            b"one".to_vec(),
            b"two".to_vec(),
            b"one again".to_vec(),
            b"four".to_vec()
        ],
        "a v5 QoS 1 refusal is not routed"
    );
    let (mut late, _) = h.connect(connect("late", V5, true));
    h.send(&late, subscribe(1, "r/#", QoS::AtMostOnce));
    let mut got = payloads(&h.recv(&mut late));
    got.sort();
    assert_eq!(got, vec![b"one again".to_vec(), b"two".to_vec()]);
    assert_eq!(h.engine.stats().retained_refused, 2);
}

#[test]
fn retained_bytes_and_per_user_limits() {
    let mut h = harness(retained(RetainedLimits {
        max_bytes: 1000,
        max_messages_per_user: 1,
        ..Default::default()
    }));
    let (mut ann, _) = h.connect(as_user(connect("ann", V5, true), "ann"));
    let (mut bob, _) = h.connect(as_user(connect("bob", V5, true), "bob"));
    h.send(&ann, publish("a/1", b"x", QoS::AtLeastOnce, 1, true));
    h.send(&ann, publish("a/2", b"x", QoS::AtLeastOnce, 2, true));
    h.send(&bob, publish("b/1", &[0; 995], QoS::AtLeastOnce, 1, true));
    h.send(&bob, publish("b/1", &[0; 900], QoS::AtLeastOnce, 2, true));
    // Nobody subscribes, so an accepted one is 0x10 No matching subscribers.
    let quota = |got: Vec<Packet>| -> Vec<bool> {
        ack_reasons(&got)
            .iter()
            .map(|r| *r == ReasonCode::QuotaExceeded)
            .collect()
    };
    assert_eq!(
        quota(h.recv(&mut ann)),
        vec![false, true],
        "ann owns one retained message"
    );
    assert_eq!(
        quota(h.recv(&mut bob)),
        vec![true, false],
        "3 + 995 bytes pass 1000 beside ann's 4; 3 + 900 fit"
    );
    // Clearing her message frees ann's quota.
    h.send(&ann, publish("a/1", b"", QoS::AtLeastOnce, 3, true));
    h.send(&ann, publish("a/2", b"y", QoS::AtLeastOnce, 4, true));
    assert_eq!(quota(h.recv(&mut ann)), vec![false, false]);
}

#[test]
fn retained_expiry_cap_shortens_how_long_it_is_kept() {
    let mut h = harness(retained(RetainedLimits {
        max_expiry_ms: 10_000,
        ..Default::default()
    }));
    let (p, _) = h.connect(connect("p", V5, true));
    h.send(&p, publish("r", b"kept 10 s", QoS::AtMostOnce, 0, true));
    h.advance(9_000);
    let (mut early, _) = h.connect(connect("early", V5, true));
    h.send(&early, subscribe(1, "r", QoS::AtMostOnce));
    assert_eq!(payloads(&h.recv(&mut early)).len(), 1);
    h.advance(1_000);
    let (mut late, _) = h.connect(connect("late", V5, true));
    h.send(&late, subscribe(1, "r", QoS::AtMostOnce));
    assert!(payloads(&h.recv(&mut late)).is_empty());
    assert_eq!(h.engine.stats().retained_messages, 0);
}

#[test]
fn queued_bytes_per_session_bound_a_slow_subscriber() {
    let mut h = harness(EngineConfig {
        max_queued_bytes: 2_000,
        ..EngineConfig::default()
    });
    let (mut sub, _) = h.connect(with_expiry(connect("slow", V5, false), 60));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.drop_connection(&sub);
    let (p, _) = h.connect(connect("p", V5, true));
    for i in 0..100u8 {
        h.send(
            &p,
            publish("t", &[i; 100], QoS::AtLeastOnce, 1 + u16::from(i), false),
        );
    }
    let stats = h.engine.stats();
    assert!(
        stats.memory_used <= 2_000,
        "{} bytes queued",
        stats.memory_used
    );
    assert!(stats.messages_queued > 0 && stats.messages_queued < 100);
    assert_eq!(stats.dropped.session_bytes, 100 - stats.messages_queued);
    assert_eq!(stats.publish_dropped, stats.dropped.session_bytes);
    // The newest are kept (drop_oldest).
    let (mut back, _) = h.connect(with_expiry(connect("slow", V5, false), 60));
    let got = payloads(&h.recv(&mut back));
    assert_eq!(got.last().map(|p| p[0]), Some(99));
}

#[test]
fn memory_budget_holds_publishers_and_loses_nothing() {
    let mut h = harness(EngineConfig {
        memory_budget: 20_000,
        max_inflight: 10,
        queue_limit: 10_000,
        ..EngineConfig::default()
    });
    let (mut sub, _) = h.connect(connect("sub", V3_1_1, true));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V5, true));
    let mut sent = 0u16;
    // The subscriber does not acknowledge: its window fills, the rest queues
    // until the budget is passed and the publisher is held.
    while h.is_read(&publisher) {
        sent += 1;
        h.send(
            &publisher,
            publish("t", &[0; 200], QoS::AtLeastOnce, sent, false),
        );
        assert!(sent < 1000, "the publisher was never held");
    }
    let stats = h.engine.stats();
    assert!(stats.memory_used > 20_000 && stats.memory_used < 21_000);
    assert_eq!(stats.publishers_paused, 1);
    assert_eq!(stats.connections_held, 1);
    let acked = h.recv(&mut publisher).len();
    assert_eq!(
        acked,
        usize::from(sent) - 1,
        "the held PUBLISH is not acknowledged yet"
    );
    // The subscriber takes its deliveries at its pace: the publisher resumes once
    // three quarters of the budget are left, and every message arrives.
    let mut received = 0usize;
    while received < usize::from(sent) {
        let got = h.recv(&mut sub);
        let ids: Vec<u16> = publishes(&got).iter().map(|p| p.packet_id).collect();
        assert!(!ids.is_empty(), "delivery stalled after {received}");
        received += ids.len();
        for id in ids {
            h.send(&sub, puback(id));
        }
    }
    assert!(h.is_read(&publisher), "resumed below the low-water mark");
    assert_eq!(h.recv(&mut publisher).len(), 1);
    assert!(!h.is_closed(&publisher));
    assert_eq!(h.engine.stats().publish_dropped, 0);
    assert_eq!(h.engine.stats().memory_used, 0);
}

#[test]
fn a_subscriber_that_never_reads_is_trimmed_and_stalls_nobody_for_long() {
    let mut h = harness(EngineConfig {
        memory_budget: 20_000,
        max_inflight: 10,
        queue_limit: 10_000,
        ..EngineConfig::default()
    });
    let (mut stuck, _) = h.connect(connect("stuck", V3_1_1, true));
    h.send(&stuck, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut stuck);
    // Its transport stopped taking output: the IO layer said so.
    h.engine.set_writable(stuck.conn, false, h.now);
    let (mut honest, _) = h.connect(connect("honest", V3_1_1, true));
    h.send(&honest, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut honest);
    let (publisher, _) = h.connect(connect("pub", V3_1_1, true));
    let mut received = 0;
    let mut sent = 0u16;
    let mut trims = 0;
    while sent < 300 {
        if !h.is_read(&publisher) {
            // Held: the stuck subscriber's backlog is what fills the budget. A
            // second later the engine trims it and the publisher goes on.
            let before = h.engine.stats().dropped.memory_budget;
            h.advance(1_000);
            assert!(h.engine.stats().dropped.memory_budget > before);
            assert!(h.is_read(&publisher), "resumed after the trim");
            trims += 1;
            continue;
        }
        sent += 1;
        h.send(
            &publisher,
            publish("t", &[0; 200], QoS::AtLeastOnce, sent, false),
        );
        for p in publishes(&h.recv(&mut honest)) {
            received += 1;
            let id = p.packet_id;
            h.send(&honest, puback(id));
        }
    }
    for p in publishes(&h.recv(&mut honest)) {
        received += 1;
        let id = p.packet_id;
        h.send(&honest, puback(id));
    }
    assert_eq!(received, 300, "the honest subscriber got everything");
    assert!(trims > 0);
    let stats = h.engine.stats();
    assert!(stats.memory_used <= 21_000, "{} bytes", stats.memory_used);
    assert_eq!(stats.publish_dropped, stats.dropped.memory_budget);
    assert_eq!(
        stats.dropped.memory_budget + stats.messages_queued,
        300,
        "what the stuck subscriber did not get was dropped and counted"
    );
}

#[test]
fn a_shared_group_nobody_takes_from_is_trimmed_too() {
    let mut h = harness(EngineConfig {
        memory_budget: 10_000,
        queue_limit: 10_000,
        ..EngineConfig::default()
    });
    let (mut member, _) = h.connect(with_expiry(connect("member", V5, false), 600));
    h.send(&member, subscribe(1, "$share/g/t", QoS::AtLeastOnce));
    h.recv(&mut member);
    h.drop_connection(&member);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    let mut sent = 0u16;
    while h.is_read(&publisher) {
        sent += 1;
        h.send(
            &publisher,
            publish("t", &[0; 200], QoS::AtLeastOnce, sent, false),
        );
        assert!(sent < 1000, "the publisher was never held");
    }
    assert_eq!(h.engine.stats().shared_queued, u64::from(sent) - 1);
    h.advance(1_000);
    assert!(
        h.is_read(&publisher),
        "resumed once the group's queue was trimmed"
    );
    let stats = h.engine.stats();
    assert!(stats.dropped.memory_budget > 0);
    // Trimmed to the low-water mark (7,500), then the held PUBLISH went in.
    assert!(stats.memory_used <= 8_000, "{} bytes", stats.memory_used);
}

#[test]
fn an_acl_denial_is_answered_before_the_retained_limit() {
    use ferromq_core::acl::{AclTable, Action, Permission, Rule, Subject};
    let mut h = harness(retained(RetainedLimits {
        max_messages: 1,
        ..Default::default()
    }));
    let deny = Rule::new(
        Permission::Deny,
        Action::Publish as u8,
        Subject::All,
        "secret/#",
    );
    let table = AclTable::new(vec![deny.unwrap()]);
    h.engine
        .set_acl(Some(std::sync::Arc::new(table)), true, true);
    let (mut p, _) = h.connect(connect("p", V5, true));
    h.send(&p, publish("open/1", b"kept", QoS::AtLeastOnce, 1, true));
    h.send(&p, publish("open/2", b"over", QoS::AtLeastOnce, 2, true));
    h.send(
        &p,
        publish("secret/1", b"denied", QoS::AtLeastOnce, 3, true),
    );
    let reasons = ack_reasons(&h.recv(&mut p));
    assert_eq!(
        &reasons[1..],
        [ReasonCode::QuotaExceeded, ReasonCode::NotAuthorized]
    );
    assert_eq!(h.engine.stats().retained_refused, 1);
}
