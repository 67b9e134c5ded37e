//! Client events (`engine/lifecycle.rs`) and the per-client packet trace
//! (`engine/trace.rs`) through the codec: what an operator's log is made of, one
//! `ClientConnected` and one `ClientDisconnected` with its reason per connected
//! client, the SUBSCRIBE and UNSUBSCRIBE answers, nothing at all with the flag off,
//! and traces of one client only, switched on and off while it is connected.

mod support;

use bytes::Bytes;
use ferromq_core::codec::{
    Packet, ProtocolVersion::*, QoS, ReasonCode, ReasonOnly, Subscribe, SubscriptionOptions,
    Unsubscribe,
};
use ferromq_core::engine::{DisconnectReason, EngineConfig, Event, PREVIEW_BYTES};
use support::*;

fn logging() -> EngineConfig {
    EngineConfig {
        client_events: true,
        ..EngineConfig::default()
    }
}

fn disconnect_reasons(h: &Harness) -> Vec<(String, DisconnectReason)> {
    h.client_events
        .iter()
        .filter_map(|event| match event {
            Event::ClientDisconnected {
                client_id, reason, ..
            } => Some((client_id.clone(), *reason)),
            _ => None,
        })
        .collect()
}

fn traces(h: &Harness) -> Vec<(String, bool, &'static str)> {
    h.client_events
        .iter()
        .filter_map(|event| match event {
            Event::Trace {
                client_id,
                inbound,
                packet,
                ..
            } => Some((client_id.clone(), *inbound, packet.packet_type.name())),
            _ => None,
        })
        .collect()
}

#[test]
fn nothing_is_reported_with_client_events_off() {
    let mut h = Harness::new(EngineConfig::default());
    let (mut c, _) = h.connect(connect("quiet", V5, true));
    h.send(&c, subscribe(1, "a/b", QoS::AtLeastOnce));
    h.recv(&mut c);
    h.send(&c, disconnect());
    assert!(h.client_events.is_empty(), "{:?}", h.client_events);
}

#[test]
fn a_connect_is_reported_with_the_settings_in_force() {
    let mut h = Harness::new(EngineConfig {
        max_keepalive: 30,
        max_session_expiry: 600,
        ..logging()
    });
    let mut connect = with_expiry(connect("dev-1", V5, false), 3600);
    connect.username = Some(s("alice"));
    h.connect(connect);
    assert_eq!(
        h.client_events,
        vec![Event::ClientConnected {
            conn: 0,
            client_id: "dev-1".into(),
            username: Some("alice".into()),
            protocol: 5,
            keep_alive: 30,
            clean_start: false,
            session_expiry: 600,
            session_present: false,
        }]
    );
}

#[test]
fn subscribe_and_unsubscribe_are_reported_with_each_filter_and_its_answer() {
    let mut h = Harness::new(EngineConfig {
        max_subscriptions_per_client: 1,
        ..logging()
    });
    let (mut c, _) = h.connect(connect("dev-2", V5, true));
    let options = |qos| SubscriptionOptions {
        qos,
        ..Default::default()
    };
    h.send(
        &c,
        Packet::Subscribe(Subscribe {
            packet_id: 7,
            properties: Default::default(),
            filters: vec![
                (s("sensors/+/temp"), options(QoS::AtLeastOnce)),
                (s("one/too/many"), options(QoS::AtMostOnce)),
            ],
        }),
    );
    h.send(
        &c,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 8,
            properties: Default::default(),
            filters: vec![s("sensors/+/temp")],
        }),
    );
    h.recv(&mut c);
    assert_eq!(
        h.client_events[1..],
        [
            Event::Subscribed {
                conn: c.conn,
                client_id: "dev-2".into(),
                filters: vec![
                    ("sensors/+/temp".into(), 1, ReasonCode::GrantedQos1),
                    ("one/too/many".into(), 0, ReasonCode::QuotaExceeded),
                ],
            },
            Event::Unsubscribed {
                conn: c.conn,
                client_id: "dev-2".into(),
                filters: vec!["sensors/+/temp".into()],
            },
        ]
    );
}

#[test]
fn each_end_of_a_connected_client_is_reported_once_with_its_reason() {
    let mut h = Harness::new(logging());
    let (polite, _) = h.connect(connect("polite", V5, true));
    let with_will = ReasonOnly::new(ReasonCode::DisconnectWithWillMessage);
    h.send(&polite, Packet::Disconnect(with_will));

    let (gone, _) = h.connect(connect("gone", V3_1_1, true));
    h.drop_connection(&gone);

    let (_old, _) = h.connect(connect("twin", V5, false));
    let (_new, _) = h.connect(connect("twin", V5, false));

    let (rude, _) = h.connect(connect("rude", V5, true));
    h.send(&rude, Packet::Connect(Box::new(connect("rude", V5, true))));

    let (_silent, _) = h.connect(connect("silent", V3_1_1, true));
    h.advance(91_000); // past 1.5 x 60 s: "twin" (the new one) and "silent"

    h.engine.shutdown(h.now);
    h.pump();
    assert_eq!(
        disconnect_reasons(&h),
        vec![
            (
                "polite".into(),
                DisconnectReason::Client(ReasonCode::DisconnectWithWillMessage)
            ),
            ("gone".into(), DisconnectReason::SocketClosed),
            ("twin".into(), DisconnectReason::TakenOver),
            (
                "rude".into(),
                DisconnectReason::ProtocolError(ReasonCode::ProtocolError)
            ),
            ("twin".into(), DisconnectReason::KeepAliveTimeout),
            ("silent".into(), DisconnectReason::KeepAliveTimeout),
        ]
    );
    let connected = h
        .client_events
        .iter()
        .filter(|e| matches!(e, Event::ClientConnected { .. }))
        .count();
    assert_eq!(connected, disconnect_reasons(&h).len());
}

/// A client whose CONNECT Python accepted, and its connection's token.
fn accepted(h: &mut Harness, id: &str) -> (support::Client, u64) {
    let mut client = h.open(V5);
    h.send(&client, Packet::Connect(Box::new(connect(id, V5, true))));
    let token = match h.auth_events.remove(0) {
        Event::Authenticate { token, .. } => token,
        other => panic!("expected Authenticate, got {other:?}"),
    };
    h.engine
        .complete_auth(client.conn, token, ReasonCode::Success, None, h.now);
    h.recv(&mut client);
    (client, token)
}

#[test]
fn shutdown_and_a_kick_are_reported_as_such() {
    let mut h = Harness::new(EngineConfig {
        authenticate: true,
        ..logging()
    });
    let (kicked, token) = accepted(&mut h, "kicked");
    let reason = ReasonCode::AdministrativeAction;
    h.engine.disconnect(kicked.conn, token, reason, h.now);
    h.pump();
    accepted(&mut h, "last");
    h.engine.shutdown(h.now);
    h.pump();
    assert_eq!(
        disconnect_reasons(&h),
        vec![
            ("kicked".into(), DisconnectReason::Kicked(reason)),
            ("last".into(), DisconnectReason::ServerShutdown),
        ]
    );
}

#[test]
fn a_traced_client_has_every_packet_copied_and_no_other_client_does() {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.trace("watched", true);
    let (mut watched, _) = h.connect(connect("watched", V5, true));
    let (mut other, _) = h.connect(connect("other", V5, true));
    h.send(&watched, subscribe(1, "t/#", QoS::AtLeastOnce));
    h.recv(&mut watched);
    h.send(&other, subscribe(1, "t/#", QoS::AtLeastOnce));
    h.recv(&mut other);
    let payload = vec![b'x'; 100];
    h.send(&other, publish("t/1", &payload, QoS::AtMostOnce, 0, false));
    h.recv(&mut watched);
    h.recv(&mut other);

    assert_eq!(
        traces(&h),
        vec![
            ("watched".into(), true, "connect"),
            ("watched".into(), false, "connack"),
            ("watched".into(), true, "subscribe"),
            ("watched".into(), false, "suback"),
            ("watched".into(), false, "publish"),
        ]
    );
    let Some(Event::Trace { packet, .. }) = h.client_events.last() else {
        panic!("no trace");
    };
    assert_eq!(packet.topic.as_deref(), Some("t/1"));
    assert_eq!(packet.qos, Some(0));
    assert_eq!(packet.payload_size, Some(100));
    assert_eq!(
        packet.payload_preview,
        Some(Bytes::from(vec![b'x'; PREVIEW_BYTES]))
    );
    assert_eq!(h.engine.traced(), vec!["watched".to_string()]);
}

#[test]
fn a_trace_switched_at_run_time_applies_to_the_live_connection() {
    let mut h = Harness::new(EngineConfig::default());
    let (mut c, _) = h.connect(connect("live", V3_1_1, true));
    h.send(&c, Packet::PingReq);
    h.recv(&mut c);
    assert!(traces(&h).is_empty());

    h.engine.trace("live", true);
    h.send(&c, publish("x", b"hi", QoS::AtLeastOnce, 5, false));
    h.recv(&mut c);
    let publish_in = h.client_events.iter().find_map(|event| match event {
        Event::Trace { packet, .. } if packet.topic.is_some() => Some(packet.clone()),
        _ => None,
    });
    let publish_in = publish_in.expect("the PUBLISH was traced");
    assert_eq!(publish_in.packet_id, Some(5));
    assert_eq!(publish_in.payload_preview, Some(Bytes::from_static(b"hi")));
    assert_eq!(
        traces(&h),
        vec![
            ("live".into(), true, "publish"),
            ("live".into(), false, "puback")
        ]
    );

    h.engine.trace("live", false);
    h.send(&c, Packet::PingReq);
    h.recv(&mut c);
    assert_eq!(traces(&h).len(), 2);
    assert!(h.engine.traced().is_empty());
}
