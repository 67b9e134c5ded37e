//! The authentication state machine (`engine/auth.rs`) driven through the codec, with
//! the test standing in for Python: CONNECT decisions, the AUTH exchange, its protocol
//! errors, re-authentication, the exchange timeout, and answers that arrive for a
//! socket that is gone.

mod support;

use bytes::Bytes;
use ferromq_core::codec::{
    ConnAck, Connect, Packet, Property, ProtocolVersion::*, QoS, ReasonCode, ReasonOnly,
};
use ferromq_core::engine::{EngineConfig, Event};
use support::*;

const METHOD: &str = "SCRAM-SHA-256";

fn harness() -> Harness {
    Harness::new(EngineConfig {
        authenticate: true,
        connect_timeout_ms: 5_000,
        ..EngineConfig::default()
    })
}

fn connack(packet: &Packet) -> &ConnAck {
    match packet {
        Packet::ConnAck(c) => c,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

fn with_method(mut c: Connect, method: &str, data: Option<&[u8]>) -> Connect {
    c.properties
        .0
        .push(Property::AuthenticationMethod(s(method)));
    if let Some(data) = data {
        c.properties
            .0
            .push(Property::AuthenticationData(Bytes::copy_from_slice(data)));
    }
    c
}

fn auth(reason: ReasonCode, method: &str, data: &[u8]) -> Packet {
    let mut packet = ReasonOnly::new(reason);
    packet.properties = ferromq_core::codec::Properties(vec![
        Property::AuthenticationMethod(s(method)),
        Property::AuthenticationData(Bytes::copy_from_slice(data)),
    ]);
    Packet::Auth(packet)
}

/// The one pending authentication event, removed from the harness.
fn take_event(h: &mut Harness) -> Event {
    assert_eq!(h.auth_events.len(), 1, "{:?}", h.auth_events);
    h.auth_events.remove(0)
}

fn token_of(event: &Event) -> u64 {
    match event {
        Event::Authenticate { token, .. } | Event::Auth { token, .. } => *token,
        other => panic!("not an authentication event: {other:?}"),
    }
}

/// Open and send CONNECT; returns the client and the event's token (no CONNACK yet).
fn start(h: &mut Harness, connect: Connect) -> (Client, u64) {
    let client = h.open(connect.protocol);
    h.send(&client, Packet::Connect(Box::new(connect)));
    let event = take_event(h);
    (client, token_of(&event))
}

fn property(properties: &[Property], id: u8) -> Option<&Property> {
    properties.iter().find(|p| p.id() == id)
}

fn reason_only(packet: &Packet) -> (&str, &ReasonOnly) {
    match packet {
        Packet::Auth(p) => ("auth", p),
        Packet::Disconnect(p) => ("disconnect", p),
        other => panic!("expected AUTH or DISCONNECT, got {other:?}"),
    }
}

#[test]
fn plain_connect_waits_for_the_decision_and_maps_refusals_per_version() {
    let mut h = harness();
    let mut c = connect("dev1", V5, true);
    c.username = Some(s("alice"));
    c.password = Some(Bytes::from_static(b"secret"));
    let mut client = h.open(V5);
    h.send(&client, Packet::Connect(Box::new(c)));
    // A packet right behind CONNECT waits for the decision, then is handled.
    h.send(&client, subscribe(1, "a/b", QoS::AtMostOnce));
    assert!(
        h.recv(&mut client).is_empty(),
        "nothing before the decision"
    );
    let event = take_event(&mut h);
    match &event {
        Event::Authenticate {
            username,
            password,
            method,
            data,
            ..
        } => {
            assert_eq!(username.as_deref(), Some("alice"));
            assert_eq!(password.as_deref(), Some(&b"secret"[..]));
            assert_eq!((method, data), (&None, &None));
        }
        other => panic!("{other:?}"),
    }
    h.engine.complete_auth(
        client.conn,
        token_of(&event),
        ReasonCode::Success,
        None,
        h.now,
    );
    let got = h.recv(&mut client);
    assert_eq!(connack(&got[0]).code, 0);
    assert!(
        property(&connack(&got[0]).properties.0, 0x15).is_none(),
        "no method without one in CONNECT [MQTT-4.12.0-6]"
    );
    assert!(matches!(got[1], Packet::SubAck(_)), "{got:?}");

    for (version, refusal, code) in [
        (V5, ReasonCode::BadUserNameOrPassword, 0x86),
        (V5, ReasonCode::NotAuthorized, 0x87),
        (V3_1_1, ReasonCode::BadUserNameOrPassword, 4),
        (V3_1_1, ReasonCode::NotAuthorized, 5),
        // Admission's refusals (ferromq.admission): a ban, a user's connection limit.
        (V5, ReasonCode::Banned, 0x8A),
        (V5, ReasonCode::QuotaExceeded, 0x97),
        (V3_1_1, ReasonCode::Banned, 5),
        (V3_1_1, ReasonCode::QuotaExceeded, 3),
    ] {
        let (mut client, token) = start(&mut h, connect("dev2", version, true));
        h.engine
            .complete_auth(client.conn, token, refusal, None, h.now);
        let got = h.recv(&mut client);
        assert_eq!(connack(&got[0]).code, code, "{version:?} {refusal:?}");
        assert!(h.is_closed(&client));
    }
}

#[test]
fn an_answer_for_a_dead_socket_does_not_reach_the_socket_reusing_its_id() {
    let mut h = harness();
    let (old, old_token) = start(&mut h, connect("old", V5, true));
    h.drop_connection(&old);
    let (mut new, new_token) = start(&mut h, connect("new", V5, true));
    assert_eq!(new.conn, old.conn, "the id is reused");
    assert_ne!(new_token, old_token);
    // The late answers for the old socket (accept, continue, refuse) do nothing.
    h.engine
        .complete_auth(new.conn, old_token, ReasonCode::Success, None, h.now);
    h.engine.continue_auth(new.conn, old_token, b"x", h.now);
    h.engine
        .complete_auth(new.conn, old_token, ReasonCode::NotAuthorized, None, h.now);
    assert!(h.recv(&mut new).is_empty());
    assert!(!h.is_closed(&new));
    h.engine
        .complete_auth(new.conn, new_token, ReasonCode::Success, None, h.now);
    assert_eq!(connack(&h.recv(&mut new)[0]).code, 0);
    // A second answer once decided is ignored too.
    h.engine
        .complete_auth(new.conn, new_token, ReasonCode::NotAuthorized, None, h.now);
    assert!(h.recv(&mut new).is_empty() && !h.is_closed(&new));
}

#[test]
fn enhanced_exchange_round_trips_and_ends_in_a_connack_with_method_and_data() {
    let mut h = harness();
    let mut client = h.open(V5);
    let c = with_method(connect("dev1", V5, true), METHOD, Some(b"client-first"));
    h.send(&client, Packet::Connect(Box::new(c)));
    let event = take_event(&mut h);
    match &event {
        Event::Authenticate { method, data, .. } => {
            assert_eq!(method.as_deref(), Some(METHOD));
            assert_eq!(data.as_deref(), Some(&b"client-first"[..]));
        }
        other => panic!("{other:?}"),
    }
    let token = token_of(&event);
    h.engine
        .continue_auth(client.conn, token, b"server-first", h.now);
    let got = h.recv(&mut client);
    let (kind, packet) = reason_only(&got[0]);
    assert_eq!(
        (kind, packet.reason),
        ("auth", ReasonCode::ContinueAuthentication)
    );
    assert_eq!(
        packet.properties.0,
        vec![
            Property::AuthenticationMethod(s(METHOD)),
            Property::AuthenticationData(Bytes::from_static(b"server-first")),
        ]
    );
    h.send(
        &client,
        auth(ReasonCode::ContinueAuthentication, METHOD, b"client-final"),
    );
    match take_event(&mut h) {
        Event::Auth {
            token: t,
            reauthenticate,
            data,
            ..
        } => {
            assert_eq!((t, reauthenticate), (token, false));
            assert_eq!(data.as_deref(), Some(&b"client-final"[..]));
        }
        other => panic!("{other:?}"),
    }
    h.engine.complete_auth(
        client.conn,
        token,
        ReasonCode::Success,
        Some(b"server-final"),
        h.now,
    );
    let got = h.recv(&mut client);
    let ack = connack(&got[0]);
    assert_eq!(ack.code, 0);
    assert_eq!(
        property(&ack.properties.0, 0x15),
        Some(&Property::AuthenticationMethod(s(METHOD)))
    );
    assert_eq!(
        property(&ack.properties.0, 0x16),
        Some(&Property::AuthenticationData(Bytes::from_static(
            b"server-final"
        )))
    );
}

#[test]
fn auth_protocol_errors_refuse_with_0x82() {
    let mut h = harness();
    let method_connect = || with_method(connect("dev", V5, true), METHOD, None);
    let cases: Vec<(&str, Connect, bool, Packet)> = vec![
        // AUTH without a method in CONNECT [MQTT-4.12.0-7].
        (
            "no method",
            connect("dev", V5, true),
            false,
            auth(ReasonCode::ContinueAuthentication, METHOD, b""),
        ),
        // The client speaks before the broker's AUTH.
        (
            "out of turn",
            method_connect(),
            false,
            auth(ReasonCode::ContinueAuthentication, METHOD, b""),
        ),
        // Another method than CONNECT's [MQTT-4.12.0-5].
        (
            "method mismatch",
            method_connect(),
            true,
            auth(ReasonCode::ContinueAuthentication, "PLAIN", b""),
        ),
        // 0x19 belongs to re-authentication, after CONNACK.
        (
            "re-authenticate before connack",
            method_connect(),
            true,
            auth(ReasonCode::ReAuthenticate, METHOD, b""),
        ),
        // Only AUTH and DISCONNECT before CONNACK with a method [MQTT-3.1.2-30].
        (
            "publish during the exchange",
            method_connect(),
            true,
            publish("a", b"x", QoS::AtMostOnce, 0, false),
        ),
    ];
    for (name, c, after_continue, packet) in cases {
        let (mut client, token) = start(&mut h, c);
        if after_continue {
            h.engine
                .continue_auth(client.conn, token, b"challenge", h.now);
            h.recv(&mut client);
        }
        h.send(&client, packet);
        let got = h.recv(&mut client);
        assert_eq!(connack(&got[0]).code, 0x82, "{name}");
        assert!(h.is_closed(&client), "{name}");
        h.auth_events.clear();
    }
    // Authentication Data without a method (§3.1.2.11.10).
    let mut c = connect("dev", V5, true);
    c.properties
        .0
        .push(Property::AuthenticationData(Bytes::from_static(b"x")));
    let (client, ack) = h.connect(c);
    assert_eq!(connack(&ack).code, 0x82);
    assert!(h.is_closed(&client) && h.auth_events.is_empty());
}

#[test]
fn without_authentication_a_method_is_refused_with_0x8c() {
    let mut h = Harness::new(EngineConfig::default());
    let (client, ack) = h.connect(with_method(connect("dev", V5, true), METHOD, None));
    assert_eq!(connack(&ack).code, 0x8C);
    assert!(h.is_closed(&client) && h.auth_events.is_empty());
}

/// A v5 client connected with METHOD through one round trip.
#[test]
fn disconnect_closes_a_connected_client_with_the_reason_and_publishes_its_will() {
    let mut h = harness();
    let (mut watcher, token) = start(&mut h, connect("watcher", V5, true));
    h.engine
        .complete_auth(watcher.conn, token, ReasonCode::Success, None, h.now);
    h.send(&watcher, subscribe(1, "wills/#", QoS::AtMostOnce));
    h.recv(&mut watcher);
    let c = with_will(connect("dev1", V5, true), "wills/dev1", b"gone", None);
    let (mut client, token) = start(&mut h, c);
    // Not connected yet: nothing to close.
    h.engine
        .disconnect(client.conn, token, ReasonCode::MaximumConnectTime, h.now);
    assert!(!h.is_closed(&client));
    h.engine
        .complete_auth(client.conn, token, ReasonCode::Success, None, h.now);
    h.recv(&mut client);
    // Another token is another socket's: ignored.
    h.engine.disconnect(
        client.conn,
        token + 1,
        ReasonCode::MaximumConnectTime,
        h.now,
    );
    assert!(!h.is_closed(&client));
    h.engine
        .disconnect(client.conn, token, ReasonCode::MaximumConnectTime, h.now);
    let got = h.recv(&mut client);
    let (kind, packet) = reason_only(&got[0]);
    assert_eq!(
        (kind, packet.reason),
        ("disconnect", ReasonCode::MaximumConnectTime)
    );
    assert!(h.is_closed(&client));
    let will = h.recv(&mut watcher);
    assert!(
        matches!(&will[..], [Packet::Publish(p)] if &p.payload[..] == b"gone"),
        "{will:?}"
    );
}

fn connected_with_method(h: &mut Harness, id: &str) -> (Client, u64) {
    let (mut client, token) = start(h, with_method(connect(id, V5, true), METHOD, None));
    h.engine
        .complete_auth(client.conn, token, ReasonCode::Success, None, h.now);
    assert_eq!(connack(&h.recv(&mut client)[0]).code, 0);
    (client, token)
}

#[test]
fn reauthentication_succeeds_with_auth_0x00_while_deliveries_go_on() {
    let mut h = harness();
    let (mut client, token) = connected_with_method(&mut h, "dev1");
    h.send(&client, subscribe(1, "t", QoS::AtMostOnce));
    h.recv(&mut client);
    h.send(&client, auth(ReasonCode::ReAuthenticate, METHOD, b"again"));
    match take_event(&mut h) {
        Event::Auth {
            reauthenticate,
            data,
            ..
        } => assert!(reauthenticate && data.as_deref() == Some(&b"again"[..])),
        other => panic!("{other:?}"),
    }
    h.engine
        .continue_auth(client.conn, token, b"challenge", h.now);
    // Deliveries and the client's own packets go on during the exchange.
    h.send(&client, publish("t", b"during", QoS::AtMostOnce, 0, false));
    let got = h.recv(&mut client);
    assert_eq!(
        reason_only(&got[0]).1.reason,
        ReasonCode::ContinueAuthentication
    );
    assert_eq!(publishes(&got)[0].payload.as_ref(), b"during");
    h.send(
        &client,
        auth(ReasonCode::ContinueAuthentication, METHOD, b"answer"),
    );
    assert!(matches!(
        take_event(&mut h),
        Event::Auth {
            reauthenticate: false,
            ..
        }
    ));
    h.engine.complete_auth(
        client.conn,
        token,
        ReasonCode::Success,
        Some(b"done"),
        h.now,
    );
    let got = h.recv(&mut client);
    let (kind, packet) = reason_only(&got[0]);
    assert_eq!((kind, packet.reason), ("auth", ReasonCode::Success));
    assert_eq!(
        property(&packet.properties.0, 0x16),
        Some(&Property::AuthenticationData(Bytes::from_static(b"done")))
    );
    // Done: a 0x18 now is out of turn; another re-authentication may start.
    h.send(&client, auth(ReasonCode::ReAuthenticate, METHOD, b"third"));
    assert!(matches!(
        take_event(&mut h),
        Event::Auth {
            reauthenticate: true,
            ..
        }
    ));
    assert!(!h.is_closed(&client));
}

#[test]
fn failed_reauthentication_disconnects_with_0x87() {
    let mut h = harness();
    let (mut client, token) = connected_with_method(&mut h, "dev1");
    h.send(&client, auth(ReasonCode::ReAuthenticate, METHOD, b"again"));
    take_event(&mut h);
    h.engine.complete_auth(
        client.conn,
        token,
        ReasonCode::BadUserNameOrPassword,
        None,
        h.now,
    );
    let got = h.recv(&mut client);
    let (kind, packet) = reason_only(&got[0]);
    assert_eq!(
        (kind, packet.reason),
        ("disconnect", ReasonCode::NotAuthorized)
    );
    assert!(h.is_closed(&client));
}

#[test]
fn reauthentication_errors_are_protocol_errors() {
    let mut h = harness();
    // No method in CONNECT: no AUTH ever [MQTT-4.12.0-7].
    let (mut plain, token) = start(&mut h, connect("plain", V5, true));
    h.engine
        .complete_auth(plain.conn, token, ReasonCode::Success, None, h.now);
    h.recv(&mut plain);
    h.send(&plain, auth(ReasonCode::ReAuthenticate, METHOD, b""));
    let got = h.recv(&mut plain);
    assert_eq!(reason_only(&got[0]).1.reason, ReasonCode::ProtocolError);
    assert!(h.is_closed(&plain));
    // Another method [MQTT-4.12.1-1], and 0x18 with no exchange open.
    for packet in [
        auth(ReasonCode::ReAuthenticate, "PLAIN", b""),
        auth(ReasonCode::ContinueAuthentication, METHOD, b""),
    ] {
        let (mut client, _) = connected_with_method(&mut h, "dev");
        h.send(&client, packet);
        let got = h.recv(&mut client);
        assert_eq!(reason_only(&got[0]).1.reason, ReasonCode::ProtocolError);
        assert!(h.is_closed(&client) && h.auth_events.is_empty());
    }
}

#[test]
fn a_stalled_exchange_is_refused_at_the_connect_timeout() {
    let mut h = harness();
    // Python never answers.
    let (mut silent_python, _) = start(&mut h, connect("a", V5, true));
    // The client never answers the broker's AUTH.
    let (mut silent_client, token) =
        start(&mut h, with_method(connect("b", V5, true), METHOD, None));
    h.engine
        .continue_auth(silent_client.conn, token, b"challenge", h.now);
    h.recv(&mut silent_client);
    // A re-authentication the client leaves hanging.
    let (mut reauth, _) = connected_with_method(&mut h, "c");
    h.send(&reauth, auth(ReasonCode::ReAuthenticate, METHOD, b""));
    h.auth_events.clear();

    h.advance(4_999);
    assert!(!h.is_closed(&silent_python) && !h.is_closed(&silent_client));
    h.advance(1);
    for client in [&mut silent_python, &mut silent_client] {
        let got = h.recv(client);
        assert_eq!(connack(&got[0]).code, 0x87);
        assert!(h.is_closed(client));
    }
    let got = h.recv(&mut reauth);
    let (kind, disconnect) = reason_only(&got[0]);
    // The DISCONNECT also carries a Reason String (the client allows problem info).
    assert_eq!(
        (kind, disconnect.reason),
        ("disconnect", ReasonCode::NotAuthorized)
    );
    assert!(h.is_closed(&reauth));
}

#[test]
fn refusals_are_counted_by_reason_and_admission_codes_are_not() {
    let mut h = harness();
    for (id, reason) in [
        ("a", ReasonCode::BadUserNameOrPassword),
        ("b", ReasonCode::NotAuthorized),
        ("c", ReasonCode::ServerUnavailable),
        ("d", ReasonCode::Banned),
    ] {
        let (client, token) = start(&mut h, connect(id, V5, true));
        h.engine
            .complete_auth(client.conn, token, reason, None, h.now);
    }
    let failed = h.engine.stats().auth_failed;
    assert_eq!(
        (
            failed.bad_credentials,
            failed.not_authorized,
            failed.unavailable
        ),
        (1, 1, 1)
    );
    let mut unauthenticated = Harness::new(EngineConfig::default());
    let (_, ack) = unauthenticated.connect(with_method(connect("e", V5, true), METHOD, None));
    assert_eq!(
        connack(&ack).code,
        ReasonCode::BadAuthenticationMethod as u8
    );
    assert_eq!(unauthenticated.engine.stats().auth_failed.bad_method, 1);
}

#[test]
fn an_accepted_client_of_any_version_outlives_the_connect_timeout() {
    for version in [
        ferromq_core::codec::ProtocolVersion::V3_1_1,
        ferromq_core::codec::ProtocolVersion::V5,
    ] {
        let mut h = harness();
        let (mut client, token) = start(&mut h, connect("late", version, true));
        h.engine
            .complete_auth(client.conn, token, ReasonCode::Success, None, h.now);
        h.pump();
        assert!(matches!(
            h.recv(&mut client).as_slice(),
            [Packet::ConnAck(_)]
        ));
        // Past the connect timeout, with keep alive satisfied.
        for _ in 0..3 {
            h.send(&client, Packet::PingReq);
            h.advance(4_000);
        }
        assert!(
            !h.is_closed(&client),
            "{version:?} refused after its CONNACK"
        );
    }
}
