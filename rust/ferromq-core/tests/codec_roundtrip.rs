//! Property tests: every packet type in every protocol version survives
//! encode → decode unchanged, including when the stream is cut into random chunks.

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{
    decode_packet, Ack, ConnAck, Connect, FrameDecoder, Packet, Properties, Property,
    PropertyContext, PropertyValue, ProtocolVersion, Publish, QoS, ReasonCode, ReasonOnly,
    RetainHandling, SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe, Utf8Bytes, Will,
    WireType, PROPERTY_SPECS, VARINT_MAX,
};
use proptest::prelude::*;

fn version() -> impl Strategy<Value = ProtocolVersion> {
    prop_oneof![
        Just(ProtocolVersion::V3_1),
        Just(ProtocolVersion::V3_1_1),
        Just(ProtocolVersion::V5)
    ]
}

fn text() -> impl Strategy<Value = Utf8Bytes> {
    "[a-zA-Z0-9 é€😀/_-]{0,12}".prop_map(|s| Utf8Bytes::try_from(s).unwrap())
}

fn level() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9$]{1,6}"]
}

fn topic_name() -> impl Strategy<Value = Utf8Bytes> {
    prop::collection::vec(level(), 1..5)
        .prop_map(|levels| levels.join("/"))
        .prop_filter("non-empty", |t| !t.is_empty())
        .prop_map(|t| Utf8Bytes::try_from(t).unwrap())
}

fn topic_filter() -> impl Strategy<Value = Utf8Bytes> {
    let filter_level = prop_oneof![3 => level(), 1 => Just("+".to_owned())];
    (
        prop::collection::vec(filter_level, 1..5),
        any::<bool>(),
        prop::option::of("[a-z]{1,4}"),
    )
        .prop_map(|(mut levels, hash, share)| {
            if hash {
                levels.push("#".to_owned());
            }
            let filter = levels.join("/");
            let filter = if filter.is_empty() {
                "#".to_owned()
            } else {
                filter
            };
            match share {
                Some(group) => format!("$share/{group}/{filter}"),
                None => filter,
            }
        })
        .prop_map(|t| Utf8Bytes::try_from(t).unwrap())
}

fn blob() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)
}

/// A valid property block for `context`: allowed identifiers only, repeats only where
/// the specification allows them, values in range.
fn properties(context: PropertyContext) -> BoxedStrategy<Properties> {
    let item = (
        0..PROPERTY_SPECS.len(),
        any::<u32>(),
        text(),
        text(),
        blob(),
    );
    prop::collection::vec(item, 0..6)
        .prop_map(move |items| {
            let mut out: Vec<Property> = Vec::new();
            for (index, number, a, b, data) in items {
                let spec = &PROPERTY_SPECS[index];
                if !spec.allowed_in(context) {
                    continue;
                }
                let repeatable =
                    spec.id == 0x26 || (spec.id == 0x0B && context == PropertyContext::Publish);
                if !repeatable && out.iter().any(|p| p.id() == spec.id) {
                    continue;
                }
                let value = match spec.wire_type {
                    WireType::Byte => PropertyValue::Integer(number % 2),
                    WireType::TwoByteInteger => PropertyValue::Integer(number % 65_535 + 1),
                    WireType::FourByteInteger => PropertyValue::Integer(number.max(1)),
                    WireType::VariableByteInteger => {
                        PropertyValue::Integer(number % VARINT_MAX + 1)
                    }
                    WireType::Utf8String => PropertyValue::String(a),
                    WireType::BinaryData => PropertyValue::Binary(data),
                    WireType::Utf8StringPair => PropertyValue::StringPair(a, b),
                };
                out.push(Property::from_value(spec.id, value).expect("generated in range"));
            }
            Properties(out)
        })
        .boxed()
}

fn props_for(version: ProtocolVersion, context: PropertyContext) -> BoxedStrategy<Properties> {
    if version.is_v5() {
        properties(context)
    } else {
        Just(Properties::new()).boxed()
    }
}

fn qos() -> impl Strategy<Value = QoS> {
    prop_oneof![
        Just(QoS::AtMostOnce),
        Just(QoS::AtLeastOnce),
        Just(QoS::ExactlyOnce)
    ]
}

fn packet_id() -> impl Strategy<Value = u16> {
    1..=u16::MAX
}

fn reason_from(codes: &'static [ReasonCode]) -> impl Strategy<Value = ReasonCode> {
    prop::sample::select(codes)
}

const PUBACK_CODES: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::NoMatchingSubscribers,
    ReasonCode::UnspecifiedError,
    ReasonCode::NotAuthorized,
    ReasonCode::TopicNameInvalid,
    ReasonCode::QuotaExceeded,
    ReasonCode::PayloadFormatInvalid,
];
const PUBREL_CODES: &[ReasonCode] = &[ReasonCode::Success, ReasonCode::PacketIdentifierNotFound];
const SUBACK_V3: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::GrantedQos1,
    ReasonCode::GrantedQos2,
    ReasonCode::UnspecifiedError,
];
const SUBACK_V5: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::GrantedQos1,
    ReasonCode::GrantedQos2,
    ReasonCode::NotAuthorized,
    ReasonCode::TopicFilterInvalid,
    ReasonCode::QuotaExceeded,
    ReasonCode::WildcardSubscriptionsNotSupported,
];
const UNSUBACK_V5: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::NoSubscriptionExisted,
    ReasonCode::NotAuthorized,
];
const DISCONNECT_CODES: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::DisconnectWithWillMessage,
    ReasonCode::ProtocolError,
    ReasonCode::KeepAliveTimeout,
    ReasonCode::SessionTakenOver,
    ReasonCode::ServerShuttingDown,
    ReasonCode::PacketTooLarge,
];
const AUTH_CODES: &[ReasonCode] = &[
    ReasonCode::Success,
    ReasonCode::ContinueAuthentication,
    ReasonCode::ReAuthenticate,
];

fn connect(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    let will = (
        topic_name(),
        blob(),
        qos(),
        any::<bool>(),
        props_for(version, PropertyContext::Will),
    )
        .prop_map(|(topic, payload, qos, retain, properties)| Will {
            topic,
            payload,
            qos,
            retain,
            properties,
        });
    (
        any::<bool>(),
        any::<u16>(),
        props_for(version, PropertyContext::Connect),
        text(),
        prop::option::of(will),
        prop::option::of(text()),
        prop::option::of(blob()),
    )
        .prop_map(
            move |(clean_start, keep_alive, properties, client_id, will, username, password)| {
                // Before 5.0 a password needs a username [MQTT-3.1.2-22].
                let password = if version.is_v5() || username.is_some() {
                    password
                } else {
                    None
                };
                Packet::Connect(Box::new(Connect {
                    protocol: version,
                    clean_start,
                    keep_alive,
                    properties,
                    client_id,
                    will,
                    username,
                    password,
                }))
            },
        )
        .boxed()
}

fn publish(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    (
        qos(),
        any::<bool>(),
        any::<bool>(),
        topic_name(),
        packet_id(),
        props_for(version, PropertyContext::Publish),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(qos, dup, retain, topic, id, properties, payload)| {
            let qos0 = qos == QoS::AtMostOnce;
            Packet::Publish(Publish {
                dup: dup && !qos0,
                qos,
                retain,
                topic,
                packet_id: if qos0 { 0 } else { id },
                properties,
                payload: Bytes::from(payload),
            })
        })
        .boxed()
}

fn ack(
    version: ProtocolVersion,
    codes: &'static [ReasonCode],
    ctx: PropertyContext,
) -> BoxedStrategy<Ack> {
    let reason = if version.is_v5() {
        reason_from(codes).boxed()
    } else {
        Just(ReasonCode::Success).boxed()
    };
    (packet_id(), reason, props_for(version, ctx))
        .prop_map(|(packet_id, reason, properties)| Ack {
            packet_id,
            reason,
            properties,
        })
        .boxed()
}

fn subscribe(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    let options =
        (qos(), any::<bool>(), any::<bool>(), 0u8..3).prop_map(move |(qos, nl, rap, rh)| {
            if !version.is_v5() {
                return SubscriptionOptions {
                    qos,
                    ..Default::default()
                };
            }
            SubscriptionOptions {
                qos,
                no_local: nl,
                retain_as_published: rap,
                retain_handling: [
                    RetainHandling::SendAtSubscribe,
                    RetainHandling::SendAtSubscribeIfNew,
                    RetainHandling::DoNotSend,
                ][rh as usize],
            }
        });
    let ctx = PropertyContext::Subscribe;
    (
        packet_id(),
        props_for(version, ctx),
        prop::collection::vec((topic_filter(), options), 1..4),
    )
        .prop_map(|(packet_id, properties, mut filters)| {
            for (filter, options) in &mut filters {
                // No Local is a protocol error on a shared subscription [MQTT-3.8.3-4].
                options.no_local &= !filter.starts_with("$share/");
            }
            Packet::Subscribe(Subscribe {
                packet_id,
                properties,
                filters,
            })
        })
        .boxed()
}

fn any_packet(version: ProtocolVersion) -> BoxedStrategy<Packet> {
    let v5 = version.is_v5();
    let reason_only = |codes: &'static [ReasonCode], ctx| {
        let reason = if v5 {
            reason_from(codes).boxed()
        } else {
            Just(ReasonCode::Success).boxed()
        };
        (reason, props_for(version, ctx))
            .prop_map(|(reason, properties)| ReasonOnly { reason, properties })
    };
    let connack = (
        any::<bool>(),
        props_for(version, PropertyContext::ConnAck),
        0u8..6,
    )
        .prop_map(move |(session_present, properties, code)| {
            let code = if v5 {
                [0x00, 0x80, 0x84, 0x86, 0x87, 0x9F][code as usize]
            } else {
                code
            };
            Packet::ConnAck(ConnAck {
                session_present: session_present && code == 0,
                code,
                properties,
            })
        });
    let suback_codes = if v5 { SUBACK_V5 } else { SUBACK_V3 };
    let suback = (
        packet_id(),
        props_for(version, PropertyContext::SubAck),
        prop::collection::vec(reason_from(suback_codes), 1..5),
    )
        .prop_map(|(packet_id, properties, reasons)| {
            Packet::SubAck(SubAck {
                packet_id,
                properties,
                reasons,
            })
        });
    let unsubscribe = (
        packet_id(),
        props_for(version, PropertyContext::Unsubscribe),
        prop::collection::vec(topic_filter(), 1..4),
    )
        .prop_map(|(packet_id, properties, filters)| {
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                properties,
                filters,
            })
        });
    let unsuback_reasons = if v5 {
        prop::collection::vec(reason_from(UNSUBACK_V5), 1..4).boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    let unsuback = (
        packet_id(),
        props_for(version, PropertyContext::UnsubAck),
        unsuback_reasons,
    )
        .prop_map(|(packet_id, properties, reasons)| {
            Packet::UnsubAck(UnsubAck {
                packet_id,
                properties,
                reasons,
            })
        });
    let mut choices: Vec<BoxedStrategy<Packet>> = vec![
        connect(version),
        connack.boxed(),
        publish(version),
        ack(version, PUBACK_CODES, PropertyContext::PubAck)
            .prop_map(Packet::PubAck)
            .boxed(),
        ack(version, PUBACK_CODES, PropertyContext::PubRec)
            .prop_map(Packet::PubRec)
            .boxed(),
        ack(version, PUBREL_CODES, PropertyContext::PubRel)
            .prop_map(Packet::PubRel)
            .boxed(),
        ack(version, PUBREL_CODES, PropertyContext::PubComp)
            .prop_map(Packet::PubComp)
            .boxed(),
        subscribe(version),
        suback.boxed(),
        unsubscribe.boxed(),
        unsuback.boxed(),
        Just(Packet::PingReq).boxed(),
        Just(Packet::PingResp).boxed(),
        reason_only(DISCONNECT_CODES, PropertyContext::Disconnect)
            .prop_map(Packet::Disconnect)
            .boxed(),
    ];
    if v5 {
        choices.push(
            reason_only(AUTH_CODES, PropertyContext::Auth)
                .prop_map(Packet::Auth)
                .boxed(),
        );
    }
    prop::strategy::Union::new(choices).boxed()
}

fn versioned_packets() -> impl Strategy<Value = (ProtocolVersion, Vec<Packet>)> {
    version().prop_flat_map(|v| (Just(v), prop::collection::vec(any_packet(v), 1..8)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_then_decode_is_identity((version, packets) in versioned_packets()) {
        for packet in &packets {
            let wire = packet.to_bytes(version).unwrap();
            prop_assert_eq!(&decode_packet(wire.clone(), version).unwrap(), packet);
            // A second encode of the decoded packet is byte-identical.
            prop_assert_eq!(packet.to_bytes(version).unwrap(), wire);
        }
    }

    #[test]
    fn any_chunking_yields_the_same_packets(
        (version, packets) in versioned_packets(),
        cuts in prop::collection::vec(1usize..64, 1..50),
    ) {
        let mut wire = BytesMut::new();
        for packet in &packets {
            packet.encode(version, &mut wire).unwrap();
        }
        let mut decoder = FrameDecoder::new(u32::MAX, Some(version));
        let mut buffer = BytesMut::new();
        let mut decoded = Vec::new();
        let mut rest = &wire[..];
        let mut cut = cuts.iter().cycle();
        while !rest.is_empty() {
            let take = (*cut.next().unwrap()).min(rest.len());
            buffer.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            while let Some(packet) = decoder.decode(&mut buffer).unwrap() {
                decoded.push(packet);
            }
        }
        prop_assert_eq!(decoded, packets);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        version in version(),
        data in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut decoder = FrameDecoder::new(1 << 16, Some(version));
        let _ = decoder.decode_slice(&data);
    }
}
