//! The engine's MQTT 5.0 features: broker-to-client topic aliases, the client's
//! Maximum Packet Size, the CONNACK properties announced and the reason code for
//! breaking each, Reason Strings, Response Information, the publish quota and
//! redirection.

mod support;

use bytes::Bytes;
use ferromq_core::codec::{
    ConnAck, Packet, Properties, Property, PropertyId, ProtocolVersion::*, Publish, QoS,
    ReasonCode, Subscribe, SubscriptionOptions,
};
use ferromq_core::engine::{EngineConfig, Features, Redirect};
use support::*;

fn harness_with(features: Features) -> Harness {
    Harness::new(EngineConfig {
        features,
        ..EngineConfig::default()
    })
}

fn connack(packet: &Packet) -> &ConnAck {
    match packet {
        Packet::ConnAck(c) => c,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

fn with_property(
    mut c: ferromq_core::codec::Connect,
    property: Property,
) -> ferromq_core::codec::Connect {
    c.properties.0.push(property);
    c
}

/// The (reason, reason string) of the DISCONNECT among `packets`.
fn disconnect_reason(packets: &[Packet]) -> Option<(ReasonCode, Option<String>)> {
    packets.iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some((
            d.reason,
            match d.properties.get(PropertyId::ReasonString) {
                Some(Property::ReasonString(s)) => Some(s.as_str().to_owned()),
                _ => None,
            },
        )),
        _ => None,
    })
}

fn alias_of(publish: &Publish) -> Option<u16> {
    match publish.properties.get(PropertyId::TopicAlias) {
        Some(Property::TopicAlias(a)) => Some(*a),
        _ => None,
    }
}

#[test]
fn broker_assigns_topic_aliases_and_reuses_the_least_recently_used() {
    let mut h = harness_with(Features::default());
    let (mut sub, _) = h.connect(with_property(
        connect("sub", V5, true),
        Property::TopicAliasMaximum(2),
    ));
    h.send(&sub, subscribe(1, "t/#", QoS::AtMostOnce));
    h.recv(&mut sub);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    for topic in ["t/a", "t/a", "t/b", "t/a", "t/c", "t/c", "t/b"] {
        h.send(&publisher, publish(topic, b"x", QoS::AtMostOnce, 0, false));
    }
    let got = h.recv(&mut sub);
    let seen: Vec<(&str, Option<u16>)> = publishes(&got)
        .iter()
        .map(|p| (p.topic.as_str(), alias_of(p)))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("t/a", Some(1)), // first: topic and alias
            ("", Some(1)),    // then the alias alone
            ("t/b", Some(2)),
            ("", Some(1)),
            ("t/c", Some(2)), // both taken: t/b was used least recently
            ("", Some(2)),
            ("t/b", Some(1)), // t/a is now the oldest
        ]
    );
}

#[test]
fn no_aliases_without_the_clients_topic_alias_maximum_or_when_switched_off() {
    let mut h = harness_with(Features {
        outbound_topic_aliases: 0,
        ..Features::default()
    });
    let (mut sub, _) = h.connect(with_property(
        connect("sub", V5, true),
        Property::TopicAliasMaximum(5),
    ));
    let (mut plain, _) = h.connect(connect("plain", V5, true));
    for client in [&sub, &plain] {
        h.send(client, subscribe(1, "t", QoS::AtMostOnce));
    }
    h.recv(&mut sub);
    h.recv(&mut plain);
    h.engine.publish("t", b"x", QoS::AtMostOnce, false, h.now);
    h.engine.publish("t", b"x", QoS::AtMostOnce, false, h.now);
    for client in [&mut sub, &mut plain] {
        let got = h.recv(client);
        assert!(publishes(&got)
            .iter()
            .all(|p| p.topic.as_str() == "t" && alias_of(p).is_none()));
    }
}

#[test]
fn oversize_delivery_is_dropped_for_that_client_only_and_not_left_in_flight() {
    let mut h = harness_with(Features::default());
    let (mut small, _) = h.connect(with_property(
        connect("small", V5, true),
        Property::MaximumPacketSize(64),
    ));
    let (mut big, _) = h.connect(connect("big", V5, true));
    for client in [&small, &big] {
        h.send(client, subscribe(1, "t", QoS::AtLeastOnce));
    }
    h.recv(&mut small);
    h.recv(&mut big);
    let dropped_before = h.engine.stats().publish_dropped;
    h.engine
        .publish("t", &[b'x'; 200], QoS::AtLeastOnce, false, h.now);
    h.engine
        .publish("t", b"fits", QoS::AtLeastOnce, false, h.now);
    let small_got = h.recv(&mut small);
    let big_got = h.recv(&mut big);
    assert_eq!(publishes(&big_got).len(), 2);
    let small_publishes = publishes(&small_got);
    assert_eq!(small_publishes.len(), 1);
    assert_eq!(&small_publishes[0].payload[..], b"fits");
    let stats = h.engine.stats();
    assert_eq!(stats.publish_dropped, dropped_before + 1);
    // big has two unacknowledged, small one: the oversize one is completed.
    assert_eq!(stats.messages_inflight, 3);
}

#[test]
fn reason_string_is_left_out_when_it_would_exceed_the_clients_maximum() {
    let features = Features {
        maximum_qos: QoS::AtLeastOnce,
        ..Features::default()
    };
    // The CONNACK (18 bytes) fits in 20, the DISCONNECT with its Reason String does not.
    for (max, expect_string) in [(1000, true), (20, false)] {
        let mut h = harness_with(features.clone());
        let (mut client, _) = h.connect(with_property(
            connect("c", V5, true),
            Property::MaximumPacketSize(max),
        ));
        h.send(&client, publish("t", b"x", QoS::ExactlyOnce, 1, false));
        let got = h.recv(&mut client);
        let (reason, string) = disconnect_reason(&got).expect("DISCONNECT");
        assert_eq!(reason, ReasonCode::QosNotSupported);
        assert_eq!(string.is_some(), expect_string);
        assert!(h.is_closed(&client));
    }
}

#[test]
fn connack_announces_what_differs_from_the_defaults() {
    let mut h = Harness::new(EngineConfig::default());
    let (_, ack) = h.connect(connect("d", V5, true));
    let props = &connack(&ack).properties;
    for absent in [
        PropertyId::MaximumQos,
        PropertyId::RetainAvailable,
        PropertyId::WildcardSubscriptionAvailable,
        PropertyId::SubscriptionIdentifierAvailable,
        PropertyId::SharedSubscriptionAvailable,
        PropertyId::ResponseInformation,
    ] {
        assert!(props.get(absent).is_none(), "{absent:?} at its default");
    }
    assert_eq!(
        props.get(PropertyId::ReceiveMaximum),
        Some(&Property::ReceiveMaximum(1024))
    );
    assert_eq!(
        props.get(PropertyId::MaximumPacketSize),
        Some(&Property::MaximumPacketSize(1024 * 1024))
    );
    assert_eq!(
        props.get(PropertyId::TopicAliasMaximum),
        Some(&Property::TopicAliasMaximum(64))
    );

    let mut h = harness_with(Features {
        maximum_qos: QoS::AtLeastOnce,
        retain_available: false,
        wildcard_subscription_available: false,
        subscription_identifiers_available: false,
        shared_subscription_available: false,
        response_information_prefix: "reply/".into(),
        ..Features::default()
    });
    let (_, ack) = h.connect(with_property(
        connect("dev7", V5, true),
        Property::RequestResponseInformation(1),
    ));
    let props = &connack(&ack).properties;
    assert_eq!(
        props.get(PropertyId::MaximumQos),
        Some(&Property::MaximumQos(1))
    );
    assert_eq!(
        props.get(PropertyId::RetainAvailable),
        Some(&Property::RetainAvailable(0))
    );
    assert_eq!(
        props.get(PropertyId::WildcardSubscriptionAvailable),
        Some(&Property::WildcardSubscriptionAvailable(0))
    );
    assert_eq!(
        props.get(PropertyId::SubscriptionIdentifierAvailable),
        Some(&Property::SubscriptionIdentifierAvailable(0))
    );
    assert_eq!(
        props.get(PropertyId::SharedSubscriptionAvailable),
        Some(&Property::SharedSubscriptionAvailable(0))
    );
    assert_eq!(
        props.get(PropertyId::ResponseInformation),
        Some(&Property::ResponseInformation(s("reply/dev7")))
    );
    // Only when requested.
    let (_, ack) = h.connect(connect("dev8", V5, true));
    assert!(connack(&ack)
        .properties
        .get(PropertyId::ResponseInformation)
        .is_none());
}

fn restricted() -> Harness {
    harness_with(Features {
        maximum_qos: QoS::AtLeastOnce,
        retain_available: false,
        wildcard_subscription_available: false,
        subscription_identifiers_available: false,
        shared_subscription_available: false,
        ..Features::default()
    })
}

#[test]
fn publish_breaking_an_announced_limit_ends_the_connection() {
    let cases = [
        (
            publish("t", b"x", QoS::ExactlyOnce, 1, false),
            ReasonCode::QosNotSupported,
        ),
        (
            publish("t", b"x", QoS::AtMostOnce, 0, true),
            ReasonCode::RetainNotSupported,
        ),
    ];
    for (packet, expected) in cases {
        let mut h = restricted();
        let (mut client, _) = h.connect(connect("c", V5, true));
        h.send(&client, packet.clone());
        let got = h.recv(&mut client);
        assert_eq!(disconnect_reason(&got).map(|d| d.0), Some(expected));
        assert!(h.is_closed(&client));
        // 3.1.1 has no DISCONNECT from the server: the connection is closed.
        let (mut old, _) = h.connect(connect("old", V3_1_1, true));
        h.send(&old, packet);
        assert!(h.recv(&mut old).is_empty());
        assert!(h.is_closed(&old));
    }
}

#[test]
fn subscribe_breaking_an_announced_limit_gets_its_reason_code() {
    let mut h = restricted();
    let (mut client, _) = h.connect(connect("c", V5, true));
    let filters = ["a/+", "$share/g/a", "a/b"];
    let subscribe_packet = Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties: Properties::new(),
        filters: filters
            .iter()
            .map(|f| {
                let options = SubscriptionOptions {
                    qos: QoS::ExactlyOnce,
                    ..Default::default()
                };
                (s(f), options)
            })
            .collect(),
    });
    h.send(&client, subscribe_packet.clone());
    let got = h.recv(&mut client);
    let Packet::SubAck(suback) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(
        suback.reasons,
        vec![
            ReasonCode::WildcardSubscriptionsNotSupported,
            ReasonCode::SharedSubscriptionsNotSupported,
            ReasonCode::GrantedQos1, // downgraded to Maximum QoS
        ]
    );
    let (mut old, _) = h.connect(connect("old", V3_1_1, true));
    h.send(&old, subscribe_packet.clone());
    let got = h.recv(&mut old);
    let Packet::SubAck(suback) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(
        suback.reasons,
        vec![
            ReasonCode::UnspecifiedError,
            ReasonCode::UnspecifiedError,
            ReasonCode::GrantedQos1
        ]
    );
    // A Subscription Identifier when they are not available: DISCONNECT 0xA1.
    let Packet::Subscribe(mut with_id) = subscribe_packet else {
        unreachable!()
    };
    with_id
        .properties
        .0
        .push(Property::SubscriptionIdentifier(9));
    h.send(&client, Packet::Subscribe(with_id));
    let got = h.recv(&mut client);
    assert_eq!(
        disconnect_reason(&got).map(|d| d.0),
        Some(ReasonCode::SubscriptionIdentifiersNotSupported)
    );
}

#[test]
fn will_breaking_an_announced_limit_is_refused_at_connect() {
    let mut h = restricted();
    let mut c = with_will(connect("w", V5, true), "will", b"bye", None);
    c.will.as_mut().unwrap().qos = QoS::ExactlyOnce;
    let (_, ack) = h.connect(c);
    assert_eq!(connack(&ack).code, ReasonCode::QosNotSupported as u8);
    let mut c = with_will(connect("w", V5, true), "will", b"bye", None);
    c.will.as_mut().unwrap().retain = true;
    let (_, ack) = h.connect(c);
    assert_eq!(connack(&ack).code, ReasonCode::RetainNotSupported as u8);
}

#[test]
fn invalid_utf8_payload_is_refused_when_validation_is_on() {
    let mut h = harness_with(Features {
        validate_utf8_payload: true,
        ..Features::default()
    });
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    h.send(&sub, subscribe(1, "t", QoS::ExactlyOnce));
    h.recv(&mut sub);
    let (mut publisher, _) = h.connect(connect("pub", V5, true));
    let bad = |qos: QoS, id: u16| {
        let Packet::Publish(mut p) = publish("t", &[0xFF, 0xFE], qos, id, false) else {
            unreachable!()
        };
        p.properties.0.push(Property::PayloadFormatIndicator(1));
        Packet::Publish(p)
    };
    h.send(&publisher, bad(QoS::AtLeastOnce, 1));
    h.send(&publisher, bad(QoS::ExactlyOnce, 2));
    let got = h.recv(&mut publisher);
    match (&got[0], &got[1]) {
        (Packet::PubAck(a), Packet::PubRec(b)) => {
            assert_eq!(
                (a.reason, b.reason),
                (
                    ReasonCode::PayloadFormatInvalid,
                    ReasonCode::PayloadFormatInvalid
                )
            );
            // Request Problem Information defaults to 1: the ack explains itself.
            assert!(a.properties.get(PropertyId::ReasonString).is_some());
        }
        other => panic!("{other:?}"),
    }
    // Valid UTF-8 passes; the invalid ones were never routed.
    let Packet::Publish(mut good) = publish("t", "ok ✓".as_bytes(), QoS::AtMostOnce, 0, false)
    else {
        unreachable!()
    };
    good.properties.0.push(Property::PayloadFormatIndicator(1));
    h.send(&publisher, Packet::Publish(good));
    let got = h.recv(&mut sub);
    assert_eq!(publishes(&got).len(), 1);
    assert_eq!(publishes(&got)[0].payload, Bytes::from("ok ✓"));
    // QoS 0 has no ack: DISCONNECT 0x99.
    h.send(&publisher, bad(QoS::AtMostOnce, 0));
    let got = h.recv(&mut publisher);
    assert_eq!(
        disconnect_reason(&got).map(|d| d.0),
        Some(ReasonCode::PayloadFormatInvalid)
    );
}

#[test]
fn request_problem_information_0_keeps_reason_strings_off_acks_only() {
    let mut h = harness_with(Features {
        validate_utf8_payload: true,
        maximum_qos: QoS::AtLeastOnce,
        ..Features::default()
    });
    let (mut client, _) = h.connect(with_property(
        connect("quiet", V5, true),
        Property::RequestProblemInformation(0),
    ));
    let Packet::Publish(mut p) = publish("t", &[0xFF], QoS::AtLeastOnce, 1, false) else {
        unreachable!()
    };
    p.properties.0.push(Property::PayloadFormatIndicator(1));
    h.send(&client, Packet::Publish(p));
    let got = h.recv(&mut client);
    let Packet::PubAck(ack) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(ack.reason, ReasonCode::PayloadFormatInvalid);
    assert!(
        ack.properties.is_empty(),
        "no Reason String [MQTT-3.1.2-29]"
    );
    // DISCONNECT may still carry one.
    h.send(&client, publish("t", b"x", QoS::ExactlyOnce, 2, false));
    let got = h.recv(&mut client);
    let (reason, string) = disconnect_reason(&got).unwrap();
    assert_eq!(reason, ReasonCode::QosNotSupported);
    assert!(string.is_some());
}

#[test]
fn redirect_answers_every_connect_with_the_server_reference() {
    for (permanent, code) in [
        (false, ReasonCode::UseAnotherServer),
        (true, ReasonCode::ServerMoved),
    ] {
        let mut h = harness_with(Features {
            redirect: Some(Redirect {
                server_reference: "other:1883".into(),
                permanent,
            }),
            ..Features::default()
        });
        let (client, ack) = h.connect(connect("c", V5, true));
        assert_eq!(connack(&ack).code, code as u8);
        assert_eq!(
            connack(&ack).properties.get(PropertyId::ServerReference),
            Some(&Property::ServerReference(s("other:1883")))
        );
        assert!(h.is_closed(&client));
        let (_, ack) = h.connect(connect("c", V3_1_1, true));
        assert_eq!(connack(&ack).code, 0x03, "3.1.1: server unavailable");
    }
}

#[test]
fn inbound_topic_alias_rules() {
    let cases = [
        (0, "t", ReasonCode::ProtocolError), // 0 is never an alias (the codec refuses it)
        (65, "t", ReasonCode::TopicAliasInvalid), // above the 64 announced
        (3, "", ReasonCode::ProtocolError),  // no mapping yet
    ];
    for (alias, topic, expected) in cases {
        let mut h = Harness::new(EngineConfig::default());
        let (mut client, _) = h.connect(connect("c", V5, true));
        let Packet::Publish(mut p) = publish("t", b"x", QoS::AtMostOnce, 0, false) else {
            unreachable!()
        };
        p.topic = s(topic);
        p.properties.0.push(Property::TopicAlias(alias));
        h.send(&client, Packet::Publish(p));
        let got = h.recv(&mut client);
        assert_eq!(
            disconnect_reason(&got).map(|d| d.0),
            Some(expected),
            "alias {alias}"
        );
    }
}

#[test]
fn a_client_publish_with_a_subscription_identifier_is_a_protocol_error() {
    // [MQTT-3.3.4-6]: the property is the server's, naming the subscriptions matched.
    let mut h = Harness::new(EngineConfig::default());
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    h.send(&sub, subscribe(1, "t", QoS::AtMostOnce));
    h.recv(&mut sub);
    let (mut client, _) = h.connect(connect("c", V5, true));
    let Packet::Publish(mut p) = publish("t", b"x", QoS::AtMostOnce, 0, false) else {
        unreachable!()
    };
    p.properties.0.push(Property::SubscriptionIdentifier(7));
    h.send(&client, Packet::Publish(p));
    let got = h.recv(&mut client);
    assert_eq!(
        disconnect_reason(&got).map(|d| d.0),
        Some(ReasonCode::ProtocolError)
    );
    assert!(h.is_closed(&client));
    assert!(h.recv(&mut sub).is_empty(), "nothing was routed");
}

#[test]
fn empty_client_id_refused_when_assignment_is_off() {
    let mut h = harness_with(Features {
        assign_client_id: false,
        ..Features::default()
    });
    let (_, ack) = h.connect(connect("", V5, true));
    assert_eq!(
        connack(&ack).code,
        ReasonCode::ClientIdentifierNotValid as u8
    );
    let (_, ack) = h.connect(connect("", V3_1_1, true));
    assert_eq!(connack(&ack).code, 0x02);
}

#[test]
fn connack_too_large_for_the_client_closes_without_a_packet() {
    let mut h = Harness::new(EngineConfig::default());
    let mut client = h.open(V5);
    let c = with_property(connect("tiny", V5, true), Property::MaximumPacketSize(8));
    h.send(&client, Packet::Connect(Box::new(c)));
    assert!(h.recv(&mut client).is_empty());
    assert!(h.is_closed(&client));
    assert!(h.rejected.iter().any(|r| r.1 == ReasonCode::PacketTooLarge));
}

#[test]
fn refused_filter_is_explained_in_suback_unless_problem_information_is_off() {
    for (rpi, explained) in [(None, true), (Some(0), false)] {
        let mut h = restricted();
        let mut c = connect("c", V5, true);
        if let Some(value) = rpi {
            c = with_property(c, Property::RequestProblemInformation(value));
        }
        let (mut client, _) = h.connect(c);
        h.send(&client, subscribe(1, "a/#", QoS::AtMostOnce));
        let got = h.recv(&mut client);
        let Packet::SubAck(suback) = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(
            suback.reasons,
            vec![ReasonCode::WildcardSubscriptionsNotSupported]
        );
        assert_eq!(
            suback.properties.get(PropertyId::ReasonString).is_some(),
            explained
        );
    }
}
