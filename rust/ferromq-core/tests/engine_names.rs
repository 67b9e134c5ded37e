//! Names the engine refuses although they decode (`engine/names.rs`): a Response
//! Topic that is not a topic name [MQTT-3.3.2-14], and control characters in client
//! ids, user names, topic names and filters unless `allow_control_characters`
//! (5.0 §1.5.4, 3.1.1 §1.5.3), each with the reason code of its place.

mod support;

use ferromq_core::codec::{
    Ack, ConnAck, Packet, Properties, Property, PropertyId, ProtocolVersion::*, QoS, ReasonCode,
    Subscribe, SubscriptionOptions, Unsubscribe,
};
use ferromq_core::engine::EngineConfig;
use support::*;

fn connack_code(packet: &Packet) -> u8 {
    match packet {
        Packet::ConnAck(ConnAck { code, .. }) => *code,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

fn disconnect_reason(packets: &[Packet]) -> Option<ReasonCode> {
    packets.iter().find_map(|p| match p {
        Packet::Disconnect(d) => Some(d.reason),
        _ => None,
    })
}

fn publish_with(topic: &str, qos: QoS, properties: Vec<Property>) -> Packet {
    let Packet::Publish(mut p) = publish(topic, b"x", qos, 1, false) else {
        unreachable!()
    };
    p.properties = Properties(properties);
    Packet::Publish(p)
}

fn allowing(allow: bool) -> Harness {
    Harness::new(EngineConfig {
        allow_control_characters: allow,
        ..EngineConfig::default()
    })
}

#[test]
fn response_topic_with_a_wildcard_is_a_protocol_error() {
    for bad in ["reply/+", "reply/#", ""] {
        let mut h = Harness::new(EngineConfig::default());
        let (mut sub, _) = h.connect(connect("sub", V5, true));
        h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
        h.recv(&mut sub);
        let (mut publisher, _) = h.connect(connect("pub", V5, true));
        let property = Property::ResponseTopic(s(bad));
        h.send(
            &publisher,
            publish_with("t", QoS::AtLeastOnce, vec![property]),
        );
        let got = h.recv(&mut publisher);
        assert_eq!(
            disconnect_reason(&got),
            Some(ReasonCode::ProtocolError),
            "{bad:?}"
        );
        assert!(h.is_closed(&publisher));
        assert!(publishes(&h.recv(&mut sub)).is_empty(), "forwarded {bad:?}");
        // The same in a Will: CONNACK 0x82.
        let mut c = with_will(connect("w", V5, true), "will", b"bye", None);
        let will = c.will.as_mut().unwrap();
        will.properties.0.push(Property::ResponseTopic(s(bad)));
        let (_, ack) = h.connect(c);
        assert_eq!(connack_code(&ack), ReasonCode::ProtocolError as u8);
    }
    // A topic name is a valid Response Topic and is forwarded unaltered [MQTT-3.3.2-15].
    let mut h = Harness::new(EngineConfig::default());
    let (mut sub, _) = h.connect(connect("sub", V5, true));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    let property = Property::ResponseTopic(s("reply/a"));
    h.send(
        &publisher,
        publish_with("t", QoS::AtMostOnce, vec![property.clone()]),
    );
    let got = h.recv(&mut sub);
    assert_eq!(
        publishes(&got)[0].properties.get(PropertyId::ResponseTopic),
        Some(&property)
    );
}

#[test]
fn control_characters_in_connect_are_refused_with_the_code_of_their_field() {
    let control = ["a\u{1}b", "a\u{7F}", "\u{85}x", "tab\t"];
    for name in control {
        for (version, id_code, user_code) in [(V5, 0x85, 0x86), (V3_1_1, 2, 4), (V3_1, 2, 4)] {
            let mut h = allowing(false);
            let (_, ack) = h.connect(connect(name, version, true));
            assert_eq!(
                connack_code(&ack),
                id_code,
                "client id {name:?} {version:?}"
            );
            let mut c = connect("ok", version, true);
            c.username = Some(s(name));
            let (_, ack) = h.connect(c);
            assert_eq!(connack_code(&ack), user_code, "user {name:?} {version:?}");
        }
        let mut h = allowing(false);
        let (_, ack) = h.connect(with_will(connect("w", V5, true), name, b"", None));
        assert_eq!(connack_code(&ack), ReasonCode::TopicNameInvalid as u8);
        // 3.1.1 has no return code for it: closed without CONNACK.
        let mut client = h.open(V3_1_1);
        let c = with_will(connect("w", V3_1_1, true), name, b"", None);
        h.send(&client, Packet::Connect(Box::new(c)));
        assert!(h.recv(&mut client).is_empty());
        assert!(h.is_closed(&client));
    }
    // Allowed by the setting, and never refused without one: U+00A0 is no control.
    let mut h = allowing(true);
    let mut c = with_will(connect("a\u{1}b", V5, true), "w\u{9F}", b"", None);
    c.username = Some(s("u\u{7F}"));
    assert_eq!(connack_code(&h.connect(c).1), 0);
    let mut h = allowing(false);
    assert_eq!(
        connack_code(&h.connect(connect("nbsp\u{A0}", V5, true)).1),
        0
    );
}

#[test]
fn control_characters_in_a_topic_name_are_refused() {
    for allow in [false, true] {
        let mut h = allowing(allow);
        let (mut sub, _) = h.connect(connect("sub", V5, true));
        h.send(&sub, subscribe(1, "#", QoS::AtLeastOnce));
        h.recv(&mut sub);
        let (mut v5, _) = h.connect(connect("v5", V5, true));
        // v5 QoS 1: PUBACK 0x90, the connection stays.
        h.send(&v5, publish("a/\u{1b}b", b"x", QoS::AtLeastOnce, 7, false));
        let got = h.recv(&mut v5);
        let expected = if allow {
            ReasonCode::Success
        } else {
            ReasonCode::TopicNameInvalid
        };
        assert!(matches!(&got[..], [Packet::PubAck(Ack { reason, .. })] if *reason == expected));
        assert_eq!(publishes(&h.recv(&mut sub)).len(), usize::from(allow));
        if allow {
            continue;
        }
        // v5 QoS 0: no ack to carry it, DISCONNECT 0x90.
        h.send(&v5, publish("a/\u{1b}b", b"x", QoS::AtMostOnce, 0, false));
        let got = h.recv(&mut v5);
        assert_eq!(disconnect_reason(&got), Some(ReasonCode::TopicNameInvalid));
        // 3.1.1 and 3.1: closed [MQTT-3.3.5-2].
        for version in [V3_1_1, V3_1] {
            let (mut old, _) = h.connect(connect("old", version, true));
            h.send(&old, publish("a\u{90}", b"x", QoS::AtLeastOnce, 1, false));
            assert!(h.recv(&mut old).is_empty());
            assert!(h.is_closed(&old));
        }
        assert!(publishes(&h.recv(&mut sub)).is_empty());
    }
}

fn subscribe_many(filters: &[&str]) -> Packet {
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..Default::default()
    };
    Packet::Subscribe(Subscribe {
        packet_id: 2,
        properties: Properties::new(),
        filters: filters.iter().map(|f| (s(f), options)).collect(),
    })
}

#[test]
fn control_characters_in_a_filter_refuse_that_filter_only() {
    for (version, refused) in [
        (V5, ReasonCode::TopicFilterInvalid),
        (V3_1_1, ReasonCode::UnspecifiedError),
    ] {
        let mut h = allowing(false);
        let (mut c, _) = h.connect(connect("c", version, true));
        h.send(&c, subscribe_many(&["ok/+", "bad\u{7}/#", "x"]));
        let got = h.recv(&mut c);
        let Packet::SubAck(suback) = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(
            suback.reasons,
            vec![ReasonCode::GrantedQos1, refused, ReasonCode::GrantedQos1]
        );
        let unsubscribe = Packet::Unsubscribe(Unsubscribe {
            packet_id: 3,
            properties: Properties::new(),
            filters: vec![s("ok/+"), s("bad\u{7}/#")],
        });
        h.send(&c, unsubscribe);
        let got = h.recv(&mut c);
        let Packet::UnsubAck(unsuback) = &got[0] else {
            panic!("{got:?}")
        };
        if version == V5 {
            assert_eq!(
                unsuback.reasons,
                vec![ReasonCode::Success, ReasonCode::TopicFilterInvalid]
            );
        }
        assert!(!h.is_closed(&c));
    }
    let mut h = allowing(true);
    let (mut c, _) = h.connect(connect("c", V5, true));
    h.send(&c, subscribe_many(&["bad\u{7}/#"]));
    let got = h.recv(&mut c);
    assert!(matches!(&got[0], Packet::SubAck(a) if a.reasons == [ReasonCode::GrantedQos1]));
}

#[test]
fn publisher_hears_success_when_every_copy_was_too_large() {
    // [MQTT-3.1.2-25]: a PUBLISH above the subscriber's Maximum Packet Size is
    // discarded and the broker behaves as if it had sent it: no 0x10 for the publisher.
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        let mut h = Harness::new(EngineConfig::default());
        let mut small = connect("small", V5, true);
        small.properties.0.push(Property::MaximumPacketSize(32));
        let (mut small, _) = h.connect(small);
        h.send(&small, subscribe(1, "t", qos));
        h.recv(&mut small);
        let (mut publisher, _) = h.connect(connect("pub", V5, true));
        h.send(
            &publisher,
            publish("t", &[b'x'; 100], QoS::ExactlyOnce, 5, false),
        );
        let got = h.recv(&mut publisher);
        assert!(
            matches!(
                &got[..],
                [Packet::PubRec(Ack {
                    reason: ReasonCode::Success,
                    ..
                })]
            ),
            "{qos:?}: {got:?}"
        );
        h.send(
            &publisher,
            publish("t", &[b'x'; 100], QoS::AtLeastOnce, 6, false),
        );
        let got = h.recv(&mut publisher);
        assert!(
            matches!(
                &got[..],
                [Packet::PubAck(Ack {
                    reason: ReasonCode::Success,
                    ..
                })]
            ),
            "{qos:?}: {got:?}"
        );
        assert!(publishes(&h.recv(&mut small)).is_empty());
        assert_eq!(h.engine.stats().messages_inflight, 0);
        // Nobody subscribed at all is still 0x10.
        h.send(
            &publisher,
            publish("other", b"x", QoS::AtLeastOnce, 7, false),
        );
        let got = h.recv(&mut publisher);
        assert!(matches!(
            &got[..],
            [Packet::PubAck(Ack {
                reason: ReasonCode::NoMatchingSubscribers,
                ..
            })]
        ));
    }
}
