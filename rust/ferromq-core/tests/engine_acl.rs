//! Access control through the engine (engine/acl.rs): denied PUBLISH, SUBSCRIBE,
//! will and retained read, and new rules applied to connected sessions at once.

mod support;

use std::sync::Arc;

use ferromq_core::acl::{AclTable, Action, Binding, Permission, Rule, Subject};
use ferromq_core::codec::{Packet, ProtocolVersion, QoS, ReasonCode};
use ferromq_core::engine::EngineConfig;
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;
const V5: ProtocolVersion = ProtocolVersion::V5;
const PUB: u8 = Action::Publish as u8;
const SUB: u8 = Action::Subscribe as u8;
const READ: u8 = Action::Read as u8;

fn rule(permission: Permission, actions: u8, filter: &str) -> Rule {
    Rule::new(permission, actions, Subject::All, filter).unwrap()
}

fn table(rules: Vec<Rule>) -> Option<Arc<AclTable>> {
    Some(Arc::new(AclTable::new(rules)))
}

/// Rules with the default handling of wildcards: withhold per message.
fn with_rules(rules: Vec<Rule>, default_allow: bool) -> Harness {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.set_acl(table(rules), default_allow, true);
    h
}

fn suback_reasons(packets: &[Packet]) -> Vec<ReasonCode> {
    packets
        .iter()
        .find_map(|p| match p {
            Packet::SubAck(ack) => Some(ack.reasons.clone()),
            _ => None,
        })
        .expect("a SUBACK")
}

fn ack_reason(packets: &[Packet]) -> ReasonCode {
    packets
        .iter()
        .find_map(|p| match p {
            Packet::PubAck(ack) | Packet::PubRec(ack) => Some(ack.reason),
            _ => None,
        })
        .expect("an ack")
}

#[test]
fn denied_publish_is_refused_in_v5_acked_in_311_and_never_routed() {
    let mut h = with_rules(vec![rule(Permission::Deny, PUB, "secret/#")], true);
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    h.send(&sub, subscribe(1, "#", QoS::AtLeastOnce));
    h.recv(&mut sub);
    for version in [V5, V311] {
        let (mut publisher, _) = h.connect(connect("pub", version, true));
        for (qos, id) in [(QoS::AtLeastOnce, 1), (QoS::ExactlyOnce, 2)] {
            h.send(&publisher, publish("secret/x", b"no", qos, id, false));
            let expected = if version == V5 {
                ReasonCode::NotAuthorized
            } else {
                ReasonCode::Success
            };
            assert_eq!(ack_reason(&h.recv(&mut publisher)), expected);
        }
        h.send(
            &publisher,
            publish("secret/x", b"no", QoS::AtMostOnce, 0, false),
        );
        h.send(
            &publisher,
            publish("open/x", b"yes", QoS::AtMostOnce, 0, false),
        );
        assert_eq!(payloads(&h.recv(&mut sub)), vec![b"yes".to_vec()]);
        h.send(&publisher, disconnect());
    }
    assert_eq!(h.engine.stats().acl_denied_publish, 6);
}

#[test]
fn denied_filter_gets_its_own_suback_code() {
    let mut h = with_rules(vec![rule(Permission::Allow, SUB, "a/#")], false);
    for (version, refused) in [
        (V5, ReasonCode::NotAuthorized),
        (V311, ReasonCode::UnspecifiedError),
    ] {
        let (mut c, _) = h.connect(connect("c", version, true));
        let mut packet = subscribe(1, "a/b", QoS::AtLeastOnce);
        if let Packet::Subscribe(s) = &mut packet {
            let options = s.filters[0].1;
            s.filters.push((support::s("b"), options));
            s.filters.push((support::s("$share/g/a/+"), options));
            s.filters.push((support::s("$share/g/b"), options));
        }
        h.send(&c, packet);
        assert_eq!(
            suback_reasons(&h.recv(&mut c)),
            vec![
                ReasonCode::GrantedQos1,
                refused,
                ReasonCode::GrantedQos1,
                refused
            ]
        );
        h.send(&c, disconnect());
    }
    assert_eq!(h.engine.stats().acl_denied_subscribe, 4);
}

#[test]
fn a_denied_will_is_not_published() {
    let mut h = with_rules(vec![rule(Permission::Deny, PUB, "wills/secret")], true);
    let (mut sub, _) = h.connect(connect("sub", V311, true));
    h.send(&sub, subscribe(1, "wills/#", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (denied, _) = h.connect(with_will(
        connect("a", V311, true),
        "wills/secret",
        b"x",
        None,
    ));
    let (allowed, _) = h.connect(with_will(
        connect("b", V311, true),
        "wills/open",
        b"y",
        None,
    ));
    h.drop_connection(&denied);
    h.drop_connection(&allowed);
    assert_eq!(payloads(&h.recv(&mut sub)), vec![b"y".to_vec()]);
    assert_eq!(h.engine.stats().acl_denied_publish, 1);
}

#[test]
fn retained_messages_the_subscriber_may_not_read_are_skipped() {
    let mut h = with_rules(
        vec![
            rule(Permission::Deny, READ, "r/secret"),
            rule(Permission::Allow, SUB, "r/#"),
        ],
        true,
    );
    let now = h.now;
    for topic in ["r/open", "r/secret", "r/other"] {
        h.engine
            .publish(topic, topic.as_bytes(), QoS::AtMostOnce, true, now);
    }
    let (mut c, _) = h.connect(connect("c", V5, true));
    h.send(&c, subscribe(1, "r/#", QoS::AtMostOnce));
    let mut got = payloads(&h.recv(&mut c));
    got.sort();
    assert_eq!(got, vec![b"r/open".to_vec(), b"r/other".to_vec()]);
    assert_eq!(h.engine.stats().acl_denied_read, 1);
}

#[test]
fn placeholders_bind_the_connection_and_own_rules_come_first() {
    let mut h = with_rules(vec![rule(Permission::Allow, PUB, "users/%u/%c")], false);
    let mut authed = durable_config();
    authed.authenticate = true;
    let mut h2 = Harness::new(authed);
    h2.engine.set_acl(
        table(vec![rule(Permission::Allow, PUB, "users/%u/%c")]),
        false,
        true,
    );
    // Without authentication the CONNECT's user name binds %u.
    let mut named = connect("dev-1", V5, true);
    named.username = Some(s("alice"));
    let (mut alice, _) = h.connect(named);
    h.send(
        &alice,
        publish("users/alice/dev-1", b"", QoS::AtLeastOnce, 1, false),
    );
    assert_eq!(
        ack_reason(&h.recv(&mut alice)),
        ReasonCode::NoMatchingSubscribers
    );
    h.send(
        &alice,
        publish("users/bob/dev-1", b"", QoS::AtLeastOnce, 2, false),
    );
    assert_eq!(ack_reason(&h.recv(&mut alice)), ReasonCode::NotAuthorized);
    // With it, Python's binding (a JWT's claims) and own rules apply.
    let mut c = h2.open(V5);
    h2.send(&c, Packet::Connect(Box::new(connect("dev-2", V5, true))));
    let token = match h2.auth_events.pop() {
        Some(ferromq_core::engine::Event::Authenticate { token, .. }) => token,
        other => panic!("expected Authenticate, got {other:?}"),
    };
    let binding = Binding {
        username: Some("carol".into()),
        claims: vec![("tenant".into(), "t9".into())],
        ..Binding::default()
    };
    let own = table(vec![
        rule(Permission::Deny, PUB, "users/carol/#"),
        rule(Permission::Allow, PUB, "tenants/%{tenant}/#"),
    ]);
    h2.engine.set_acl_binding(c.conn, token, binding, own);
    h2.engine
        .complete_auth(c.conn, token, ReasonCode::Success, None, h2.now);
    h2.recv(&mut c);
    for (topic, expected) in [
        ("users/carol/dev-2", ReasonCode::NotAuthorized),
        ("tenants/t9/x", ReasonCode::NoMatchingSubscribers),
        ("tenants/t1/x", ReasonCode::NotAuthorized),
    ] {
        h2.send(&c, publish(topic, b"", QoS::AtLeastOnce, 1, false));
        assert_eq!(ack_reason(&h2.recv(&mut c)), expected, "{topic}");
    }
}

#[test]
fn new_rules_revoke_subscriptions_at_once_and_apply_to_the_next_publish() {
    for withhold in [true, false] {
        let mut h = with_rules(vec![rule(Permission::Allow, PUB | SUB, "#")], false);
        let (mut sub, _) = h.connect(connect("sub", V5, true));
        h.send(&sub, subscribe(1, "a/#", QoS::AtMostOnce));
        h.send(&sub, subscribe(2, "$share/g/b/#", QoS::AtMostOnce));
        h.send(&sub, subscribe(3, "c", QoS::AtMostOnce));
        h.recv(&mut sub);
        let (mut publisher, _) = h.connect(connect("pub", V5, true));
        h.send(&publisher, publish("d", b"", QoS::AtLeastOnce, 1, false));
        assert_eq!(
            ack_reason(&h.recv(&mut publisher)),
            ReasonCode::NoMatchingSubscribers
        );

        let revoked = h.engine.set_acl(
            table(vec![
                rule(Permission::Deny, SUB, "a/#"),
                rule(Permission::Deny, SUB, "b/x"),
                rule(Permission::Deny, PUB, "d"),
                rule(Permission::Allow, PUB | SUB, "#"),
            ]),
            false,
            withhold,
        );
        let mut revoked: Vec<String> = revoked.into_iter().map(|(_, filter)| filter).collect();
        revoked.sort();
        // `b/#` reaches b/x, now denied, and b/y, still allowed: withheld, the
        // whole filter is kept; refused, it goes.
        let expected = if withhold {
            vec!["a/#".to_string()]
        } else {
            vec!["$share/g/b/#".to_string(), "a/#".to_string()]
        };
        assert_eq!(revoked, expected, "withhold: {withhold}");
        for topic in ["a/1", "b/x", "c", "b/y"] {
            h.send(
                &publisher,
                publish(topic, topic.as_bytes(), QoS::AtMostOnce, 0, false),
            );
        }
        let expected: Vec<&[u8]> = if withhold {
            vec![b"c", b"b/y"]
        } else {
            vec![b"c"]
        };
        assert_eq!(
            payloads(&h.recv(&mut sub)),
            expected,
            "withhold: {withhold}"
        );
        h.send(&publisher, publish("d", b"", QoS::AtLeastOnce, 2, false));
        assert_eq!(
            ack_reason(&h.recv(&mut publisher)),
            ReasonCode::NotAuthorized
        );
        assert_eq!(h.engine.stats().acl_revoked, revoked.len() as u64);
        assert_eq!(h.engine.stats().acl_withheld, u64::from(withhold));
    }
}

#[test]
fn a_wildcard_beside_a_denied_topic_is_granted_and_that_topic_withheld() {
    // The Paho clean-up case: `#` once test/nosubscribe is denied.
    for (withhold, granted) in [
        (true, ReasonCode::GrantedQos1),
        (false, ReasonCode::NotAuthorized),
    ] {
        let mut h = Harness::new(EngineConfig::default());
        h.engine.set_acl(
            table(vec![rule(Permission::Deny, SUB, "test/nosubscribe")]),
            true,
            withhold,
        );
        let now = h.now;
        for topic in ["test/nosubscribe", "test/open"] {
            h.engine
                .publish(topic, topic.as_bytes(), QoS::AtMostOnce, true, now);
        }
        let (mut sub, _) = h.connect(connect("sub", V5, true));
        h.send(&sub, subscribe(1, "#", QoS::AtLeastOnce));
        let packets = h.recv(&mut sub);
        assert_eq!(suback_reasons(&packets), vec![granted]);
        if !withhold {
            continue;
        }
        assert_eq!(payloads(&packets), vec![b"test/open".to_vec()], "retained");
        let (publisher, _) = h.connect(connect("pub", V311, true));
        for (id, topic) in [
            (1, "test/nosubscribe"),
            (2, "test/x"),
            (3, "test/nosubscribe/x"),
        ] {
            h.send(
                &publisher,
                publish(topic, topic.as_bytes(), QoS::ExactlyOnce, id, false),
            );
        }
        assert_eq!(
            payloads(&h.recv(&mut sub)),
            vec![b"test/x".to_vec(), b"test/nosubscribe/x".to_vec()]
        );
        assert_eq!(h.engine.stats().acl_withheld, 2, "one retained, one live");
        assert_eq!(h.engine.stats().acl_denied_subscribe, 0);
    }
}

#[test]
fn under_default_deny_a_wildcard_reaching_an_allowed_topic_receives_only_that() {
    let mut h = with_rules(
        vec![
            rule(Permission::Allow, SUB, "a/x"),
            rule(Permission::Deny, SUB, "#"),
            rule(Permission::Allow, SUB, "b/#"),
            rule(Permission::Allow, PUB, "#"),
        ],
        false,
    );
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    let mut packet = subscribe(1, "a/+", QoS::AtMostOnce);
    if let Packet::Subscribe(s) = &mut packet {
        let options = s.filters[0].1;
        s.filters.push((support::s("b/+"), options));
        s.filters.push((support::s("c/+"), options));
    }
    h.send(&sub, packet);
    assert_eq!(
        suback_reasons(&h.recv(&mut sub)),
        vec![
            ReasonCode::Success,
            ReasonCode::NotAuthorized, // `deny #` covers b/+ before `allow b/#`
            ReasonCode::NotAuthorized
        ]
    );
    let (publisher, _) = h.connect(connect("pub", V5, true));
    for topic in ["a/y", "a/x", "b/x"] {
        h.send(
            &publisher,
            publish(topic, topic.as_bytes(), QoS::AtMostOnce, 0, false),
        );
    }
    assert_eq!(payloads(&h.recv(&mut sub)), vec![b"a/x".to_vec()]);
}

#[test]
fn a_queued_message_is_checked_against_the_rules_when_it_is_sent() {
    let mut h = with_rules(vec![rule(Permission::Deny, SUB, "t/secret")], true);
    let (mut sub, _) = h.connect(with_expiry(connect("sub", V5, true), 600));
    h.send(&sub, subscribe(1, "t/#", QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.send(&sub, disconnect());
    let (publisher, _) = h.connect(connect("pub", V5, true));
    for (id, topic) in [(1, "t/secret"), (2, "t/late"), (3, "t/open")] {
        h.send(
            &publisher,
            publish(topic, topic.as_bytes(), QoS::AtLeastOnce, id, false),
        );
    }
    // t/late was allowed when it was queued; new rules deny it before it is sent.
    h.engine.set_acl(
        table(vec![
            rule(Permission::Deny, SUB, "t/secret"),
            rule(Permission::Deny, SUB, "t/late"),
        ]),
        true,
        true,
    );
    let (mut again, _) = h.connect(with_expiry(connect("sub", V5, false), 600));
    assert_eq!(payloads(&h.recv(&mut again)), vec![b"t/open".to_vec()]);
    assert_eq!(h.engine.stats().acl_withheld, 2);
    let _ = &mut sub;
}

#[test]
fn a_resumed_session_is_checked_against_its_new_connection() {
    let mut h = with_rules(vec![rule(Permission::Allow, SUB, "users/%u/#")], false);
    let mut first = with_expiry(connect("dev", V5, true), 600);
    first.username = Some(s("alice"));
    let (mut c, _) = h.connect(first);
    h.send(&c, subscribe(1, "users/alice/#", QoS::AtLeastOnce));
    assert_eq!(
        suback_reasons(&h.recv(&mut c)),
        vec![ReasonCode::GrantedQos1]
    );
    h.send(&c, disconnect());
    let mut again = with_expiry(connect("dev", V5, false), 600);
    again.username = Some(s("mallory"));
    h.connect(again);
    assert_eq!(h.engine.stats().subscriptions, 0);
    assert_eq!(h.engine.stats().acl_revoked, 1);
}

#[test]
fn a_shared_message_withheld_from_the_chosen_member_goes_to_one_that_may_read_it() {
    // worker-a may not read jobs/secret; its group's messages on it go to worker-b.
    let mut h = with_rules(
        vec![Rule::new(
            Permission::Deny,
            SUB,
            Subject::Client("worker-a".into()),
            "jobs/secret",
        )
        .unwrap()],
        true,
    );
    let mut workers = Vec::new();
    for id in ["worker-a", "worker-b"] {
        let (mut worker, _) = h.connect(connect(id, V5, true));
        h.send(&worker, subscribe(1, "$share/g/jobs/#", QoS::AtLeastOnce));
        assert_eq!(
            suback_reasons(&h.recv(&mut worker)),
            vec![ReasonCode::GrantedQos1]
        );
        workers.push(worker);
    }
    let (publisher, _) = h.connect(connect("pub", V5, true));
    for id in 1..=6 {
        // open, secret, secret, open, …: by round robin some secret ones fall to a.
        let topic = if id % 3 == 1 {
            "jobs/open"
        } else {
            "jobs/secret"
        };
        h.send(
            &publisher,
            publish(
                topic,
                format!("{id}").as_bytes(),
                QoS::AtLeastOnce,
                id,
                false,
            ),
        );
    }
    let [a, b] = &mut workers[..] else {
        unreachable!()
    };
    let to_a = payloads(&h.recv(a));
    let to_b = payloads(&h.recv(b));
    assert!(
        to_a.iter().all(|p| p == b"1" || p == b"4"),
        "worker-a got only jobs/open: {to_a:?}"
    );
    assert_eq!(to_a.len() + to_b.len(), 6, "every message went to a member");
    assert_eq!(h.engine.stats().acl_withheld, 0, "none was lost to the ACL");
}
