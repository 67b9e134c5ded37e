//! Auto-subscribe through the engine (engine/auto_subscribe.rs): placeholders
//! rendered per connection, a filter without a value or under an ACL deny skipped,
//! retained messages sent once, not again to a resumed session.

mod support;

use std::sync::Arc;

use ferromq_core::acl::{template, AclTable, Action, Permission, Rule, Subject};
use ferromq_core::codec::{ProtocolVersion, QoS};
use ferromq_core::engine::{AutoSubscription, EngineConfig};
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;

fn auto(filter: &str, qos: QoS) -> AutoSubscription {
    AutoSubscription {
        filter: template(filter).unwrap(),
        qos,
    }
}

#[test]
fn each_client_gets_its_rendered_subscriptions_at_connect() {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.set_auto_subscribe(vec![
        auto("devices/%c/cmd", QoS::AtLeastOnce),
        auto("users/%u/#", QoS::AtMostOnce),
    ]);
    let mut named = connect("dev-1", V5, true);
    named.username = Some(s("alice"));
    let (mut alice, _) = h.connect(named);
    let (mut anonymous, _) = h.connect(connect("dev-2", V5, true));
    assert_eq!(
        h.engine.stats().auto_subscribe_skipped,
        1,
        "dev-2 has no user name"
    );
    let (publisher, _) = h.connect(connect("pub", V5, true));
    for topic in [
        "devices/dev-1/cmd",
        "users/alice/x",
        "devices/dev-2/cmd",
        "users/x/y",
    ] {
        h.send(
            &publisher,
            publish(topic, topic.as_bytes(), QoS::AtLeastOnce, 1, false),
        );
    }
    assert_eq!(
        payloads(&h.recv(&mut alice)),
        vec![b"devices/dev-1/cmd".to_vec(), b"users/alice/x".to_vec()]
    );
    let got = h.recv(&mut anonymous);
    assert_eq!(payloads(&got), vec![b"devices/dev-2/cmd".to_vec()]);
    assert_eq!(publishes(&got)[0].qos, QoS::AtLeastOnce);
}

#[test]
fn retained_messages_come_once_and_a_resumed_session_keeps_its_subscription() {
    let mut h = Harness::new(EngineConfig::default());
    h.engine
        .set_auto_subscribe(vec![auto("devices/%c/cmd", QoS::AtLeastOnce)]);
    let now = h.now;
    h.engine.publish(
        "devices/dev-1/cmd",
        b"standing order",
        QoS::AtLeastOnce,
        true,
        now,
    );
    let (mut first, _) = h.connect(with_expiry(connect("dev-1", V5, true), 600));
    assert_eq!(
        payloads(&h.recv(&mut first)),
        vec![b"standing order".to_vec()]
    );
    h.send(&first, puback(1));
    h.send(&first, disconnect());
    let (mut again, _) = h.connect(with_expiry(connect("dev-1", V5, false), 600));
    assert!(payloads(&h.recv(&mut again)).is_empty(), "not sent again");
    assert_eq!(h.engine.stats().subscriptions, 1);
}

#[test]
fn the_acl_still_decides() {
    let mut h = Harness::new(EngineConfig::default());
    let deny = Rule::new(
        Permission::Deny,
        Action::Subscribe as u8,
        Subject::All,
        "secret/#",
    );
    h.engine
        .set_acl(Some(Arc::new(AclTable::new([deny.unwrap()]))), true, true);
    h.engine.set_auto_subscribe(vec![
        auto("secret/%c", QoS::AtMostOnce),
        auto("open/%c", QoS::AtMostOnce),
    ]);
    h.connect(connect("dev-1", V5, true));
    assert_eq!(h.engine.stats().subscriptions, 1);
    assert_eq!(h.engine.stats().auto_subscribe_skipped, 1);
}
