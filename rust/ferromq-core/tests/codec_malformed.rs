//! A table of malformed and forbidden inputs, each with the reason code the broker
//! must answer with and the spec clause that makes it an error.

use bytes::Bytes;
use ferromq_core::codec::{
    decode_packet, read_fixed_header, FrameDecoder, ProtocolVersion,
    ProtocolVersion::{V3_1_1, V5},
    ReasonCode::{self, *},
};

struct Case {
    why: &'static str,
    version: ProtocolVersion,
    wire: &'static [u8],
    reason: ReasonCode,
}

const fn case(
    why: &'static str,
    version: ProtocolVersion,
    wire: &'static [u8],
    reason: ReasonCode,
) -> Case {
    Case {
        why,
        version,
        wire,
        reason,
    }
}

const CASES: &[Case] = &[
    // Fixed header [MQTT-2.2.2-1, 2.2.2-2], packet types [MQTT-2.1.2].
    case(
        "packet type 0 is reserved",
        V5,
        b"\x00\x00",
        MalformedPacket,
    ),
    case(
        "AUTH does not exist in 3.1.1",
        V3_1_1,
        b"\xf0\x00",
        MalformedPacket,
    ),
    case(
        "PUBREL flags must be 0010",
        V3_1_1,
        b"\x60\x02\x00\x01",
        MalformedPacket,
    ),
    case(
        "SUBSCRIBE flags must be 0010",
        V3_1_1,
        b"\x80\x06\x00\x01\x00\x01a\x00",
        MalformedPacket,
    ),
    case(
        "PUBACK flags must be 0000",
        V5,
        b"\x41\x02\x00\x01",
        MalformedPacket,
    ),
    case(
        "PINGREQ flags must be 0000",
        V5,
        b"\xc1\x00",
        MalformedPacket,
    ),
    case("PINGREQ has no body", V5, b"\xc0\x01\x00", MalformedPacket),
    case(
        "non-minimal remaining length",
        V5,
        b"\xc0\x80\x00",
        MalformedPacket,
    ),
    case(
        "five-byte remaining length",
        V5,
        b"\x30\xff\xff\xff\xff\x01",
        MalformedPacket,
    ),
    // PUBLISH [MQTT-3.3.1-2, 3.3.1-4, 3.3.2-2, 2.3.1-1].
    case(
        "PUBLISH QoS 3",
        V3_1_1,
        b"\x36\x05\x00\x01a\x00\x01",
        MalformedPacket,
    ),
    case(
        "DUP on QoS 0",
        V3_1_1,
        b"\x38\x03\x00\x01a",
        MalformedPacket,
    ),
    case(
        "'+' in a topic name",
        V3_1_1,
        b"\x30\x03\x00\x01+",
        TopicNameInvalid,
    ),
    case(
        "'#' in a topic name",
        V5,
        b"\x30\x06\x00\x03a/#\x00",
        TopicNameInvalid,
    ),
    case(
        "empty topic name in 3.1.1",
        V3_1_1,
        b"\x30\x02\x00\x00",
        TopicNameInvalid,
    ),
    case(
        "empty topic without alias in 5.0",
        V5,
        b"\x30\x03\x00\x00\x00",
        ProtocolError,
    ),
    case(
        "packet id 0 on QoS 1",
        V3_1_1,
        b"\x32\x05\x00\x01a\x00\x00",
        ProtocolError,
    ),
    case(
        "topic length past the end",
        V3_1_1,
        b"\x30\x03\x00\x05a",
        MalformedPacket,
    ),
    // UTF-8 [MQTT-1.5.4-1, 1.5.4-2].
    case(
        "U+0000 in a topic",
        V3_1_1,
        b"\x30\x05\x00\x03a\x00b",
        MalformedPacket,
    ),
    case(
        "ill-formed UTF-8",
        V3_1_1,
        b"\x30\x04\x00\x02\xc3\x28",
        MalformedPacket,
    ),
    case(
        "UTF-16 surrogate",
        V3_1_1,
        b"\x30\x05\x00\x03\xed\xa0\x80",
        MalformedPacket,
    ),
    case(
        "overlong encoding of '/'",
        V3_1_1,
        b"\x30\x04\x00\x02\xc0\xaf",
        MalformedPacket,
    ),
    // Properties [§2.2.2.2].
    case(
        "property not allowed in PUBLISH",
        V5,
        b"\x30\x09\x00\x01a\x05\x11\x00\x00\x00\x01",
        MalformedPacket,
    ),
    case(
        "unknown property id",
        V5,
        b"\x30\x06\x00\x01a\x02\x7f\x00",
        MalformedPacket,
    ),
    case(
        "property repeated",
        V5,
        b"\x30\x0a\x00\x01a\x06\x23\x00\x01\x23\x00\x02",
        ProtocolError,
    ),
    case(
        "topic alias 0",
        V5,
        b"\x30\x07\x00\x01a\x03\x23\x00\x00",
        ProtocolError,
    ),
    case(
        "payload format indicator 2",
        V5,
        b"\x30\x06\x00\x01a\x02\x01\x02",
        ProtocolError,
    ),
    case(
        "property length past the end",
        V5,
        b"\x30\x05\x00\x01a\x09\x01",
        MalformedPacket,
    ),
    // CONNECT [MQTT-3.1.2-3, 3.1.2-11, 3.1.2-14, 3.1.2-22; 3.1.2-2].
    case(
        "unsupported level",
        V5,
        b"\x10\x0c\x00\x04MQTT\x06\x02\x00\x00\x00\x00",
        UnsupportedProtocolVersion,
    ),
    case(
        "unknown protocol name",
        V5,
        b"\x10\x0c\x00\x04MQTX\x04\x02\x00\x00\x00\x00",
        UnsupportedProtocolVersion,
    ),
    case(
        "CONNECT reserved flag",
        V5,
        b"\x10\x0c\x00\x04MQTT\x04\x03\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "3.1.1 CONNECT fixed header flags must be 0000",
        V5,
        b"\x12\x0c\x00\x04MQTT\x04\x02\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "5.0 CONNECT fixed header flags must be 0000",
        V5,
        b"\x18\x0d\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "will QoS without will",
        V5,
        b"\x10\x0c\x00\x04MQTT\x04\x0a\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "will QoS 3",
        V5,
        b"\x10\x0c\x00\x04MQTT\x04\x1e\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "password without username in 3.1.1",
        V3_1_1,
        b"\x10\x0e\x00\x04MQTT\x04\x42\x00\x00\x00\x00\x00\x00",
        MalformedPacket,
    ),
    case(
        "wildcard in will topic",
        V5,
        b"\x10\x11\x00\x04MQTT\x04\x06\x00\x00\x00\x00\x00\x01#\x00\x00",
        TopicNameInvalid,
    ),
    case(
        "trailing bytes after CONNECT",
        V5,
        b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x00\x00",
        MalformedPacket,
    ),
    // CONNACK [MQTT-3.2.2-1, 3.2.2-6].
    case(
        "CONNACK reserved flags",
        V3_1_1,
        b"\x20\x02\x02\x00",
        MalformedPacket,
    ),
    case(
        "unknown 3.1.1 return code",
        V3_1_1,
        b"\x20\x02\x00\x06",
        MalformedPacket,
    ),
    case(
        "session present on refusal",
        V5,
        b"\x20\x03\x01\x87\x00",
        ProtocolError,
    ),
    // SUBSCRIBE / UNSUBSCRIBE [MQTT-3.8.3-3, 3.8.3-4, 3.8.3-5, 4.7.1-1, 4.7.1-2, 3.10.3-2].
    case(
        "SUBSCRIBE without filters",
        V3_1_1,
        b"\x82\x02\x00\x01",
        ProtocolError,
    ),
    case(
        "subscription QoS 3",
        V3_1_1,
        b"\x82\x06\x00\x01\x00\x01a\x03",
        MalformedPacket,
    ),
    case(
        "3.1.1 options reserved bits",
        V3_1_1,
        b"\x82\x06\x00\x01\x00\x01a\x04",
        MalformedPacket,
    ),
    case(
        "5.0 options reserved bits",
        V5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x40",
        MalformedPacket,
    ),
    case(
        "retain handling 3",
        V5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x30",
        ProtocolError,
    ),
    case(
        "'#' not last",
        V3_1_1,
        b"\x82\x08\x00\x01\x00\x03#/a\x00",
        TopicFilterInvalid,
    ),
    case(
        "'+' inside a level",
        V3_1_1,
        b"\x82\x07\x00\x01\x00\x02a+\x00",
        TopicFilterInvalid,
    ),
    case(
        "empty share group",
        V5,
        b"\x82\x0f\x00\x01\x00\x00\x09$share//a\x00",
        TopicFilterInvalid,
    ),
    case(
        "No Local on a shared subscription",
        V5,
        b"\x82\x10\x00\x01\x00\x00\x0a$share/g/a\x04",
        ProtocolError,
    ),
    case(
        "subscription identifier repeated",
        V5,
        b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00",
        ProtocolError,
    ),
    case(
        "subscription identifier 0",
        V5,
        b"\x82\x09\x00\x01\x02\x0b\x00\x00\x01a\x00",
        ProtocolError,
    ),
    case(
        "UNSUBSCRIBE without filters",
        V5,
        b"\xa2\x03\x00\x01\x00",
        ProtocolError,
    ),
    case(
        "packet id 0 on SUBSCRIBE",
        V3_1_1,
        b"\x82\x06\x00\x00\x00\x01a\x00",
        ProtocolError,
    ),
    // Acks and DISCONNECT.
    case(
        "PUBACK reason not allowed",
        V5,
        b"\x40\x03\x00\x01\x8e",
        MalformedPacket,
    ),
    case(
        "3.1.1 PUBACK with a reason",
        V3_1_1,
        b"\x40\x03\x00\x01\x00",
        MalformedPacket,
    ),
    case(
        "SUBACK code 0x03",
        V3_1_1,
        b"\x90\x03\x00\x01\x03",
        MalformedPacket,
    ),
    case(
        "SUBACK without codes",
        V5,
        b"\x90\x03\x00\x01\x00",
        ProtocolError,
    ),
    case(
        "3.1.1 DISCONNECT with a body",
        V3_1_1,
        b"\xe0\x01\x00",
        MalformedPacket,
    ),
    case(
        "DISCONNECT reason not allowed",
        V5,
        b"\xe0\x01\x11",
        MalformedPacket,
    ),
    case(
        "AUTH reason not allowed",
        V5,
        b"\xf0\x01\x87",
        MalformedPacket,
    ),
];

#[test]
fn every_malformed_input_is_classified() {
    let mut failures = Vec::new();
    for case in CASES {
        let mut decoder = FrameDecoder::new(u32::MAX, Some(case.version));
        let (packets, _, error) = decoder.decode_slice(case.wire);
        match error {
            Some(err) if err.reason == case.reason => {}
            other => failures.push(format!(
                "{}: expected {:?}, got {:?} / {:?}",
                case.why, case.reason, other, packets
            )),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// MQTT 3.1 has no reserved flag bits (§2.1, §3.1): a CONNECT with fixed-header flags
/// or connect-flags bit 0 set, and PUBREL / SUBSCRIBE / UNSUBSCRIBE retried with DUP
/// (§3.6, §3.8, §3.10), all decode. The same bytes from 3.1.1 are refused above.
#[test]
fn mqtt_3_1_has_no_reserved_flag_bits() {
    let mut decoder = FrameDecoder::new(u32::MAX, None);
    let connect = b"\x1a\x0f\x00\x06MQIsdp\x03\x03\x00\x3c\x00\x01c";
    let (packets, _, error) = decoder.decode_slice(connect);
    assert_eq!((packets.len(), error), (1, None));
    let retries: &[&[u8]] = &[
        b"\x6a\x02\x00\x01",
        b"\x8a\x06\x00\x01\x00\x01a\x01",
        b"\xaa\x05\x00\x01\x00\x01a",
    ];
    for wire in retries {
        let (packets, _, error) = decoder.decode_slice(wire);
        assert_eq!((packets.len(), error), (1, None), "{wire:?}");
        let (_, _, error) = FrameDecoder::new(u32::MAX, Some(V3_1_1)).decode_slice(wire);
        assert_eq!(error.map(|e| e.reason), Some(MalformedPacket), "{wire:?}");
    }
}

#[test]
fn oversize_is_refused_from_the_length_header_alone() {
    // Five bytes announce a 268 MB PUBLISH: refused before any body arrives.
    let header = b"\x30\xff\xff\xff\x7f";
    let err = read_fixed_header(header, 1024 * 1024).unwrap_err();
    assert_eq!(err.reason, PacketTooLarge);
    // The limit counts the whole packet: 1 + 1 + 126 = 128 bytes.
    assert!(read_fixed_header(b"\x30\x7e", 128).unwrap().is_some());
    assert_eq!(
        read_fixed_header(b"\x30\x7f", 128).unwrap_err().reason,
        PacketTooLarge
    );
}

#[test]
fn only_connect_before_connect() {
    let mut decoder = FrameDecoder::new(u32::MAX, None);
    let (packets, consumed, error) = decoder.decode_slice(b"\xc0\x00");
    assert!(packets.is_empty());
    assert_eq!(consumed, 0);
    assert_eq!(error.unwrap().reason, ProtocolError); // [MQTT-3.1.0-1]
}

#[test]
fn packets_before_an_error_are_kept() {
    let mut decoder = FrameDecoder::new(u32::MAX, Some(V3_1_1));
    let (packets, consumed, error) =
        decoder.decode_slice(b"\xc0\x00\x30\x03\x00\x01a\x30\x03\x00\x01+\xc0\x00");
    assert_eq!(packets.len(), 2);
    assert_eq!(consumed, 7);
    assert_eq!(error.unwrap().reason, TopicNameInvalid);
}

#[test]
fn truncated_frames_decode_to_errors_not_panics() {
    for case in CASES {
        for len in 0..case.wire.len() {
            let _ = decode_packet(Bytes::copy_from_slice(&case.wire[..len]), case.version);
        }
    }
}
