//! The admin API's engine side (engine/admin.rs): listings page through every
//! session exactly once whatever the filter, within the per-call scan budget;
//! actions for a client behave as the client's own packets would.

mod support;

use ferromq_core::codec::{
    Packet, Properties, Property, ProtocolVersion, QoS, ReasonCode, SubscriptionOptions,
};
use ferromq_core::engine::{AdminError, EngineConfig, SessionFilter, MAX_PAGE, SCAN_BUDGET};
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;
const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

fn listed(h: &Harness, filter: &SessionFilter<'_>, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        let page = h.engine.sessions(filter, at, limit);
        assert!(page.items.len() <= limit.min(MAX_PAGE));
        ids.extend(page.items.into_iter().map(|s| s.client_id));
        cursor = page.next;
    }
    ids
}

#[test]
fn pages_list_every_session_once_with_filters() {
    let mut h = Harness::new(EngineConfig::default());
    let mut clients = Vec::new();
    for n in 0..25 {
        let mut c = connect(&format!("dev-{n:02}"), V311, n % 2 == 0);
        if n % 5 == 0 {
            c.username = Some(s("ops"));
        }
        clients.push(h.connect(c).0);
    }
    // Odd clients keep their sessions (3.1.1 clean session off) after going away.
    for (_, client) in clients.iter().enumerate().filter(|(n, _)| n % 3 == 0) {
        h.drop_connection(client);
    }
    let mut all = listed(&h, &SessionFilter::default(), 4);
    all.sort();
    let kept: Vec<String> = (0..25)
        .filter(|n| n % 3 != 0 || n % 2 == 1)
        .map(|n| format!("dev-{n:02}"))
        .collect();
    assert_eq!(all, kept);

    let offline = SessionFilter {
        connected: Some(false),
        ..SessionFilter::default()
    };
    let mut gone = listed(&h, &offline, 2);
    gone.sort();
    assert_eq!(gone, ["dev-03", "dev-09", "dev-15", "dev-21"]);

    let ops = SessionFilter {
        username: Some("ops"),
        client_id_contains: Some("-1"),
        ..SessionFilter::default()
    };
    assert_eq!(
        listed(&h, &ops, 10),
        ["dev-10", "dev-15"],
        "dev-15 is offline, still ops'"
    );
    let prefixed = SessionFilter {
        client_id_prefix: Some("dev-2"),
        connected: Some(true),
        ..SessionFilter::default()
    };
    assert_eq!(listed(&h, &prefixed, 10), ["dev-20", "dev-22", "dev-23"]);
}

#[test]
fn a_listing_call_examines_at_most_the_scan_budget() {
    let mut h = Harness::new(EngineConfig::default());
    let total = SCAN_BUDGET + 10;
    let mut clients = Vec::with_capacity(total);
    for n in 0..total {
        clients.push(h.connect(connect(&format!("c{n}"), V311, true)).0);
    }
    let last = SessionFilter {
        client_id_prefix: Some("no-such-prefix"),
        ..SessionFilter::default()
    };
    let page = h.engine.sessions(&last, 0, 10);
    assert!(page.items.is_empty());
    assert_eq!(page.next, Some(SCAN_BUDGET as u64), "stopped at the budget");
    let page = h.engine.sessions(&last, page.next.unwrap(), 10);
    assert_eq!(page.next, None);
}

#[test]
fn session_detail_counts_queue_inflight_and_subscriptions() {
    let mut h = Harness::new(EngineConfig::default());
    let (mut sub, _) = h.connect(with_expiry(connect("keeper", V5, true), 600));
    h.send(&sub, subscribe(1, "k/#", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let now = h.now;
    h.engine
        .publish("k/1", b"one", QoS::AtLeastOnce, false, now);
    h.pump();
    let info = h.engine.session("keeper").expect("a session");
    let connection = info.connection.expect("connected");
    assert_eq!((connection.protocol, connection.keep_alive), (5, 60));
    assert_eq!((info.inflight, info.queued, info.subscriptions), (1, 0, 1));
    h.drop_connection(&sub);
    h.engine
        .publish("k/2", b"two", QoS::AtLeastOnce, false, now);
    let info = h.engine.session("keeper").expect("kept for 600 s");
    assert!(info.connection.is_none() && info.expires_at.is_some());
    assert_eq!((info.inflight, info.queued), (1, 1));
    let subs = h.engine.subscriptions("keeper").unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(
        (subs[0].filter.as_str(), subs[0].options.qos),
        ("k/#", QoS::AtLeastOnce)
    );

    h.engine.delete_session("keeper", now).unwrap();
    assert!(h.engine.session("keeper").is_none());
    assert_eq!(
        h.engine.delete_session("keeper", now),
        Err(AdminError::UnknownClient("keeper".into()))
    );
}

#[test]
fn subscribe_for_delivers_and_unsubscribe_for_stops() {
    let mut h = Harness::new(EngineConfig::default());
    let now = h.now;
    h.engine
        .publish("ops/kept", b"retained", QoS::AtMostOnce, true, now);
    let (mut worker, _) = h.connect(connect("worker", V5, true));
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    assert_eq!(
        h.engine
            .subscribe_for("worker", "ops/#", options, Some(9), now),
        Ok(true)
    );
    h.pump();
    let got = h.recv(&mut worker);
    assert_eq!(
        payloads(&got),
        [b"retained".to_vec()],
        "retained sent as for SUBSCRIBE"
    );
    h.engine
        .publish("ops/go", b"live", QoS::AtLeastOnce, false, now);
    h.pump();
    let got = h.recv(&mut worker);
    let live = publishes(&got)[0];
    assert_eq!(live.payload.as_ref(), b"live");
    assert_eq!(
        live.properties
            .get(ferromq_core::codec::PropertyId::SubscriptionIdentifier),
        Some(&Property::SubscriptionIdentifier(9))
    );
    h.send(&worker, puback(live.packet_id));
    assert_eq!(h.engine.unsubscribe_for("worker", "ops/#"), Ok(true));
    assert_eq!(h.engine.unsubscribe_for("worker", "ops/#"), Ok(false));
    h.engine
        .publish("ops/go", b"late", QoS::AtLeastOnce, false, now);
    h.pump();
    assert!(h.recv(&mut worker).is_empty());
    assert!(matches!(
        h.engine
            .subscribe_for("worker", "a/#/b", options, None, now),
        Err(AdminError::Filter(_))
    ));
}

#[test]
fn subscribe_for_keeps_to_the_subscription_quota() {
    let mut h = Harness::new(EngineConfig {
        max_subscriptions_per_client: 1,
        ..EngineConfig::default()
    });
    h.connect(connect("limited", V5, true));
    let now = h.now;
    let options = SubscriptionOptions::default();
    assert_eq!(
        h.engine.subscribe_for("limited", "a", options, None, now),
        Ok(true)
    );
    assert_eq!(
        h.engine.subscribe_for("limited", "b", options, None, now),
        Err(AdminError::Quota("limited".into()))
    );
    assert_eq!(
        h.engine.subscribe_for("limited", "a", options, None, now),
        Ok(false)
    );
}

#[test]
fn kick_sends_administrative_action_and_publishes_the_will() {
    let mut h = Harness::new(EngineConfig::default());
    let (mut watcher, _) = h.connect(connect("watcher", V311, true));
    h.send(&watcher, subscribe(1, "wills/#", QoS::AtMostOnce));
    h.recv(&mut watcher);
    let (mut victim, _) = h.connect(with_will(
        connect("victim", V5, true),
        "wills/v",
        b"gone",
        None,
    ));
    let now = h.now;
    assert_eq!(h.engine.kick("victim", now), Ok(true));
    h.pump();
    let got = h.recv(&mut victim);
    assert!(
        matches!(&got[..], [Packet::Disconnect(d)] if d.reason == ReasonCode::AdministrativeAction)
    );
    assert!(h.is_closed(&victim));
    assert_eq!(payloads(&h.recv(&mut watcher)), [b"gone".to_vec()]);
    assert_eq!(
        h.engine.kick("victim", now),
        Err(AdminError::UnknownClient("victim".into()))
    );
}

#[test]
fn retained_pages_in_stored_order_and_clear() {
    let mut h = Harness::new(EngineConfig::default());
    let now = h.now;
    for n in 0..7 {
        h.engine
            .publish(&format!("r/{n}"), b"x", QoS::AtMostOnce, true, now);
    }
    h.engine.publish("other", b"y", QoS::AtMostOnce, true, now);
    let properties = Properties(vec![Property::ContentType(s("text/plain"))]);
    h.engine
        .publish_with_properties("r/typed", b"z", QoS::AtLeastOnce, true, &properties, now);
    let mut topics = Vec::new();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        let page = h.engine.retained_messages("r/+", at, 3, now).unwrap();
        assert!(page.items.len() <= 3);
        topics.extend(page.items.iter().map(|m| m.topic.clone()));
        cursor = page.next;
    }
    let expected: Vec<String> = (0..7)
        .map(|n| format!("r/{n}"))
        .chain(["r/typed".into()])
        .collect();
    assert_eq!(topics, expected);
    let typed = h.engine.retained_message("r/typed", now).unwrap();
    assert_eq!(typed.properties.0, properties.0);
    assert!(h.engine.clear_retained("r/3"));
    assert!(!h.engine.clear_retained("r/3"));
    assert!(h.engine.retained_message("r/3", now).is_none());
    assert_eq!(
        h.engine
            .retained_messages("r/+", 0, 100, now)
            .unwrap()
            .items
            .len(),
        7
    );
}
