//! Byte-exact vectors for every packet type in MQTT 3.1.1 and 5.0: each vector is
//! decoded and checked field by field, then re-encoded to the identical bytes.

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{
    decode_packet, Ack, ConnAck, Connect, FrameDecoder, Packet, Properties, Property,
    ProtocolVersion::{self, V3_1, V3_1_1, V5},
    Publish, QoS, ReasonCode, ReasonOnly, RetainHandling, SubAck, Subscribe, SubscriptionOptions,
    UnsubAck, Unsubscribe, Utf8Bytes, Will,
};

fn s(text: &'static str) -> Utf8Bytes {
    Utf8Bytes::from_static(text)
}

/// Decode `wire` as one frame, compare with `expected`, and re-encode byte-exact.
fn vector(wire: &[u8], version: ProtocolVersion, expected: Packet) {
    let decoded = decode_packet(Bytes::copy_from_slice(wire), version).expect("decodes");
    assert_eq!(decoded, expected);
    let mut out = BytesMut::new();
    expected.encode(version, &mut out).expect("encodes");
    assert_eq!(&out[..], wire, "re-encoding differs");
}

#[test]
fn connect_v311_minimal() {
    let wire = b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04abcd";
    vector(
        wire,
        V3_1_1,
        Packet::Connect(Box::new(Connect {
            protocol: V3_1_1,
            clean_start: true,
            keep_alive: 60,
            properties: Properties::new(),
            client_id: s("abcd"),
            will: None,
            username: None,
            password: None,
        })),
    );
}

#[test]
fn connect_v31_with_will_and_credentials() {
    let mut wire = vec![0x10, 0x26];
    wire.extend_from_slice(b"\x00\x06MQIsdp\x03");
    wire.push(0b1110_1110); // user, pass, will retain, will qos 1, will, clean
    wire.extend_from_slice(b"\x00\x0a\x00\x02id\x00\x03w/t\x00\x03bye\x00\x04user\x00\x04pass");
    vector(
        &wire,
        V3_1,
        Packet::Connect(Box::new(Connect {
            protocol: V3_1,
            clean_start: true,
            keep_alive: 10,
            properties: Properties::new(),
            client_id: s("id"),
            will: Some(Will {
                topic: s("w/t"),
                payload: Bytes::from_static(b"bye"),
                qos: QoS::AtLeastOnce,
                retain: true,
                properties: Properties::new(),
            }),
            username: Some(s("user")),
            password: Some(Bytes::from_static(b"pass")),
        })),
    );
}

#[test]
fn connect_v5_with_properties_and_will_properties() {
    let mut body = Vec::new();
    body.extend_from_slice(b"\x00\x04MQTT\x05");
    body.push(0b0101_0100); // password (allowed without username in 5.0), will qos 2, will
    body.extend_from_slice(b"\x00\x00");
    body.extend_from_slice(b"\x08\x11\x00\x00\x00\x78\x21\x00\x0a"); // session expiry 120, receive max 10
    body.extend_from_slice(b"\x00\x00"); // empty client id
    body.extend_from_slice(b"\x05\x18\x00\x00\x00\x05"); // will delay 5
    body.extend_from_slice(b"\x00\x01t\x00\x00"); // will topic "t", empty payload
    body.extend_from_slice(b"\x00\x02pw");
    let mut wire = vec![0x10, body.len() as u8];
    wire.extend_from_slice(&body);
    vector(
        &wire,
        V5,
        Packet::Connect(Box::new(Connect {
            protocol: V5,
            clean_start: false,
            keep_alive: 0,
            properties: Properties(vec![
                Property::SessionExpiryInterval(120),
                Property::ReceiveMaximum(10),
            ]),
            client_id: Utf8Bytes::default(),
            will: Some(Will {
                topic: s("t"),
                payload: Bytes::new(),
                qos: QoS::ExactlyOnce,
                retain: false,
                properties: Properties(vec![Property::WillDelayInterval(5)]),
            }),
            username: None,
            password: Some(Bytes::from_static(b"pw")),
        })),
    );
}

#[test]
fn connack_both_versions() {
    vector(
        b"\x20\x02\x01\x00",
        V3_1_1,
        Packet::ConnAck(ConnAck {
            session_present: true,
            code: 0,
            properties: Properties::new(),
        }),
    );
    vector(
        b"\x20\x02\x00\x05",
        V3_1_1,
        Packet::ConnAck(ConnAck {
            session_present: false,
            code: 5,
            properties: Properties::new(),
        }),
    );
    vector(
        b"\x20\x0c\x00\x00\x09\x12\x00\x02ab\x24\x01\x25\x00",
        V5,
        Packet::ConnAck(ConnAck {
            session_present: false,
            code: 0,
            properties: Properties(vec![
                Property::AssignedClientIdentifier(s("ab")),
                Property::MaximumQos(1),
                Property::RetainAvailable(0),
            ]),
        }),
    );
}

#[test]
fn publish_qos0_qos1_qos2() {
    vector(
        b"\x30\x07\x00\x03a/bhi",
        V3_1_1,
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: s("a/b"),
            packet_id: 0,
            properties: Properties::new(),
            payload: Bytes::from_static(b"hi"),
        }),
    );
    vector(
        b"\x3b\x07\x00\x01t\x12\x34xy",
        V3_1_1,
        Packet::Publish(Publish {
            dup: true,
            qos: QoS::AtLeastOnce,
            retain: true,
            topic: s("t"),
            packet_id: 0x1234,
            properties: Properties::new(),
            payload: Bytes::from_static(b"xy"),
        }),
    );
    vector(
        b"\x34\x0f\x00\x01t\x00\x01\x08\x02\x00\x00\x00\x3c\x23\x00\x07p",
        V5,
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::ExactlyOnce,
            retain: false,
            topic: s("t"),
            packet_id: 1,
            properties: Properties(vec![
                Property::MessageExpiryInterval(60),
                Property::TopicAlias(7),
            ]),
            payload: Bytes::from_static(b"p"),
        }),
    );
}

#[test]
fn publish_v5_empty_topic_with_alias() {
    vector(
        b"\x30\x06\x00\x00\x03\x23\x00\x01",
        V5,
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: Utf8Bytes::default(),
            packet_id: 0,
            properties: Properties(vec![Property::TopicAlias(1)]),
            payload: Bytes::new(),
        }),
    );
}

#[test]
fn publish_acks_all_shapes() {
    type MakeAck = fn(Ack) -> Packet;
    let kinds: [(u8, MakeAck); 4] = [
        (0x40, Packet::PubAck),
        (0x50, Packet::PubRec),
        (0x62, Packet::PubRel),
        (0x70, Packet::PubComp),
    ];
    for (header, make) in kinds {
        vector(&[header, 2, 0, 9], V3_1_1, make(Ack::new(9)));
        vector(&[header, 2, 0, 9], V5, make(Ack::new(9)));
    }
    vector(
        b"\x40\x03\x00\x09\x10",
        V5,
        Packet::PubAck(Ack {
            packet_id: 9,
            reason: ReasonCode::NoMatchingSubscribers,
            properties: Properties::new(),
        }),
    );
    vector(
        b"\x62\x08\x00\x09\x92\x04\x1f\x00\x01x",
        V5,
        Packet::PubRel(Ack {
            packet_id: 9,
            reason: ReasonCode::PacketIdentifierNotFound,
            properties: Properties(vec![Property::ReasonString(s("x"))]),
        }),
    );
    // A v5 ack may spell out Success and an empty property block: accepted as the
    // short form, which is how it is re-encoded.
    assert_eq!(
        decode_packet(Bytes::from_static(b"\x40\x04\x00\x09\x00\x00"), V5).unwrap(),
        Packet::PubAck(Ack::new(9))
    );
}

#[test]
fn subscribe_and_suback() {
    let options = SubscriptionOptions {
        qos: QoS::ExactlyOnce,
        no_local: true,
        retain_as_published: true,
        retain_handling: RetainHandling::DoNotSend,
    };
    vector(
        b"\x82\x0f\x00\x0a\x02\x0b\x07\x00\x03a/#\x2e\x00\x01+\x00",
        V5,
        Packet::Subscribe(Subscribe {
            packet_id: 10,
            properties: Properties(vec![Property::SubscriptionIdentifier(7)]),
            filters: vec![
                (s("a/#"), options),
                (s("+"), SubscriptionOptions::default()),
            ],
        }),
    );
    vector(
        b"\x82\x08\x00\x0a\x00\x03a/b\x01",
        V3_1_1,
        Packet::Subscribe(Subscribe {
            packet_id: 10,
            properties: Properties::new(),
            filters: vec![(
                s("a/b"),
                SubscriptionOptions {
                    qos: QoS::AtLeastOnce,
                    ..Default::default()
                },
            )],
        }),
    );
    vector(
        b"\x90\x05\x00\x0a\x00\x01\x80",
        V3_1_1,
        Packet::SubAck(SubAck {
            packet_id: 10,
            properties: Properties::new(),
            reasons: vec![
                ReasonCode::Success,
                ReasonCode::GrantedQos1,
                ReasonCode::UnspecifiedError,
            ],
        }),
    );
    vector(
        b"\x90\x05\x00\x0a\x00\x02\x87",
        V5,
        Packet::SubAck(SubAck {
            packet_id: 10,
            properties: Properties::new(),
            reasons: vec![ReasonCode::GrantedQos2, ReasonCode::NotAuthorized],
        }),
    );
}

#[test]
fn unsubscribe_and_unsuback() {
    vector(
        b"\xa2\x0a\x00\x05\x00\x01a\x00\x03b/+",
        V3_1_1,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 5,
            properties: Properties::new(),
            filters: vec![s("a"), s("b/+")],
        }),
    );
    vector(
        b"\xb0\x02\x00\x05",
        V3_1_1,
        Packet::UnsubAck(UnsubAck {
            packet_id: 5,
            properties: Properties::new(),
            reasons: vec![],
        }),
    );
    vector(
        b"\xb0\x05\x00\x05\x00\x00\x11",
        V5,
        Packet::UnsubAck(UnsubAck {
            packet_id: 5,
            properties: Properties::new(),
            reasons: vec![ReasonCode::Success, ReasonCode::NoSubscriptionExisted],
        }),
    );
}

#[test]
fn ping_disconnect_auth() {
    vector(b"\xc0\x00", V3_1_1, Packet::PingReq);
    vector(b"\xd0\x00", V5, Packet::PingResp);
    vector(
        b"\xe0\x00",
        V3_1_1,
        Packet::Disconnect(ReasonOnly::new(ReasonCode::Success)),
    );
    vector(
        b"\xe0\x00",
        V5,
        Packet::Disconnect(ReasonOnly::new(ReasonCode::Success)),
    );
    vector(
        b"\xe0\x01\x8e",
        V5,
        Packet::Disconnect(ReasonOnly::new(ReasonCode::SessionTakenOver)),
    );
    vector(
        b"\xe0\x07\x04\x05\x11\x00\x00\x00\x00",
        V5,
        Packet::Disconnect(ReasonOnly {
            reason: ReasonCode::DisconnectWithWillMessage,
            properties: Properties(vec![Property::SessionExpiryInterval(0)]),
        }),
    );
    vector(
        b"\xf0\x0a\x18\x08\x15\x00\x05SCRAM",
        V5,
        Packet::Auth(ReasonOnly {
            reason: ReasonCode::ContinueAuthentication,
            properties: Properties(vec![Property::AuthenticationMethod(s("SCRAM"))]),
        }),
    );
    vector(
        b"\xf0\x00",
        V5,
        Packet::Auth(ReasonOnly::new(ReasonCode::Success)),
    );
}

#[test]
fn streaming_one_byte_at_a_time_and_many_frames_per_chunk() {
    let mut stream = BytesMut::new();
    let connect = Packet::Connect(Box::new(Connect {
        protocol: V5,
        clean_start: true,
        keep_alive: 30,
        properties: Properties::new(),
        client_id: s("c"),
        will: None,
        username: None,
        password: None,
    }));
    connect.encode(V5, &mut stream).unwrap();
    let publishes: Vec<Packet> = (1..=50u16)
        .map(|id| {
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::AtLeastOnce,
                retain: false,
                topic: s("site/42/device/1234/telemetry"),
                packet_id: id,
                properties: Properties::new(),
                payload: Bytes::from(vec![id as u8; 300]),
            })
        })
        .collect();
    for packet in &publishes {
        packet.encode(V5, &mut stream).unwrap();
    }
    let wire = stream.freeze();

    for chunk in [1usize, 2, 7, 1000, wire.len()] {
        let mut decoder = FrameDecoder::new(1 << 20, None);
        let mut buffer = BytesMut::new();
        let mut out = Vec::new();
        for piece in wire.chunks(chunk) {
            buffer.extend_from_slice(piece);
            while let Some(packet) = decoder.decode(&mut buffer).unwrap() {
                out.push(packet);
            }
        }
        assert!(buffer.is_empty());
        assert_eq!(out[0], connect);
        assert_eq!(&out[1..], &publishes[..], "chunk size {chunk}");
        assert_eq!(decoder.version(), Some(V5));
    }
}

#[test]
fn payload_is_a_zero_copy_slice_of_the_frame() {
    let wire = Bytes::from_static(b"\x30\x07\x00\x03a/bhi");
    let Packet::Publish(publish) = decode_packet(wire.clone(), V3_1_1).unwrap() else {
        panic!("not a publish");
    };
    let frame_range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
    assert!(frame_range.contains(&(publish.payload.as_ptr() as usize)));
    assert!(frame_range.contains(&(publish.topic.as_bytes().as_ptr() as usize)));
}
