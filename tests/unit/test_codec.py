"""The codec's Python face: round trips, malformed input and encode errors.

Round trips run every packet type through ``encode`` then ``FrameDecoder`` for MQTT
3.1.1 and 5.0. The malformed table feeds hand-built frames and names, for each, the
exception class and reason code the broker must answer with, citing the spec clause.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.codec_strategies import (
    DETERMINISTIC,
    PACKET_TYPES_V4,
    PACKET_TYPES_V5,
    V3_CONNACK_RETURN_CODES,
    V3_SUBACK_RETURN_CODES,
    V5_REASON_CODES,
    Packet,
    any_packet,
    frame,
    packets_of,
    str16,
)

from ferromq import codec
from ferromq.codec import (
    CodecError,
    EncodeError,
    FrameDecoder,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    TopicFilterInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)


def decode_all(data: bytes, version: int | None, **kwargs: Any) -> list[dict[str, Any]]:
    """Decode `data` that must hold only whole, valid frames."""
    packets, consumed, error = FrameDecoder(protocol_version=version, **kwargs).decode_buffer(data)
    assert error is None
    assert consumed == len(data)
    return packets


# ---- Round trips -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "kind"),
    [(4, kind) for kind in PACKET_TYPES_V4] + [(5, kind) for kind in PACKET_TYPES_V5],
)
@DETERMINISTIC
@given(data=st.data())
def test_round_trip_every_packet_type(version: int, kind: str, data: st.DataObject) -> None:
    packet = data.draw(packets_of(kind, version))
    wire = codec.encode(packet, version)
    assert decode_all(wire, version) == [packet]
    # Encoding is canonical: decoding and encoding again gives the same bytes.
    assert codec.encode(packet, version) == wire


@pytest.mark.parametrize("version", [4, 5])
@DETERMINISTIC
@given(data=st.data())
def test_stream_starting_with_connect_fixes_the_version(version: int, data: st.DataObject) -> None:
    connect = data.draw(packets_of("connect", version))
    rest = data.draw(st.lists(any_packet(version), max_size=8))
    wire = codec.encode_many([connect, *rest], version)
    decoder = FrameDecoder()
    assert decoder.protocol_version is None
    packets, consumed, error = decoder.decode_buffer(wire)
    assert (packets, consumed, error) == ([connect, *rest], len(wire), None)
    assert decoder.protocol_version == version


def test_encode_many_is_the_concatenation_of_encode() -> None:
    packets: list[Packet] = [
        {"type": "publish", "topic": "a/b", "payload": b"x", "qos": 1, "packet_id": 7},
        {"type": "puback", "packet_id": 7},
        {"type": "pingreq"},
    ]
    assert codec.encode_many(packets, 4) == b"".join(codec.encode(p, 4) for p in packets)
    assert codec.encode_many([], 4) == b""


def test_encode_fills_in_defaults() -> None:
    assert codec.encode({"type": "publish", "topic": "t"}) == b"\x30\x03\x00\x01t"
    assert codec.encode({"type": "puback", "packet_id": 1}, 5) == b"\x40\x02\x00\x01"
    assert codec.encode({"type": "disconnect"}, 5) == b"\xe0\x00"
    connect = decode_all(codec.encode({"type": "connect"}), None)[0]
    assert connect["protocol_version"] == 4
    assert connect["clean_start"] is True
    assert connect["keep_alive"] == 60
    assert connect["client_id"] == ""


def test_known_wire_bytes() -> None:
    # Worked examples, checked by hand against §3.1 and §3.3 of MQTT 3.1.1.
    connect = {"type": "connect", "client_id": "c1", "keep_alive": 10, "clean_start": True}
    assert codec.encode(connect) == b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x0a\x00\x02c1"
    publish = {"type": "publish", "topic": "a/b", "payload": b"hi", "qos": 2, "packet_id": 258}
    publish |= {"retain": True, "dup": True}
    assert codec.encode(publish) == b"\x3d\x09\x00\x03a/b\x01\x02hi"
    subscribe = {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "a/#", "qos": 1}]}
    assert codec.encode(subscribe) == b"\x82\x08\x00\x01\x00\x03a/#\x01"


def test_large_remaining_length_round_trips() -> None:
    # 200,000 bytes of payload needs a three-byte remaining length (§1.5.5).
    packet: Packet = {"type": "publish", "topic": "big", "payload": bytes(range(256)) * 782}
    packet |= {"qos": 0, "retain": False, "dup": False, "packet_id": None, "properties": []}
    wire = codec.encode(packet, 5)
    assert wire[1] & 0x80 and wire[2] & 0x80 and not wire[3] & 0x80
    assert decode_all(wire, 5) == [packet]


def test_v5_empty_topic_with_topic_alias_is_allowed() -> None:
    # [MQTT-3.3.2-8]: a zero-length topic name stands for the topic alias.
    packet = {"type": "publish", "topic": "", "payload": b"", "qos": 0, "retain": False}
    packet |= {"dup": False, "packet_id": None, "properties": [("topic_alias", 3)]}
    assert decode_all(codec.encode(packet, 5), 5) == [packet]


def test_u_feff_in_a_string_is_kept() -> None:
    # [MQTT-1.5.4-3]: 0xEF 0xBB 0xBF is U+FEFF and must not be skipped or stripped.
    packet = decode_all(frame(0x30, str16("\ufeffa/\ufeff")), 4)[0]
    assert packet["topic"] == "\ufeffa/\ufeff"


@pytest.mark.parametrize(
    ("kind", "codes"),
    [(kind, codes) for kind, codes in V5_REASON_CODES.items()],
)
def test_v5_reason_codes_accepted_exactly_as_the_spec_lists(
    kind: str, codes: tuple[int, ...]
) -> None:
    """Each code 0-255 decodes in a packet iff §3.x of MQTT 5.0 lists it for that packet."""
    first_byte = {"pubrel": 0x62}.get(kind, PACKET_TYPE_BYTE[kind] << 4)
    for code in range(256):
        if kind == "connack":
            body = b"\x00" + bytes([code]) + b"\x00"
        elif kind in ("suback", "unsuback"):
            body = b"\x00\x01\x00" + bytes([code])
        elif kind in ("disconnect", "auth"):
            body = bytes([code])
        else:
            body = b"\x00\x01" + bytes([code])
        packets, _, error = FrameDecoder(protocol_version=5).decode_buffer(frame(first_byte, body))
        if code in codes:
            assert error is None, (kind, hex(code))
            got = packets[0].get("reason_code", packets[0].get("reason_codes", [None])[0])
            assert got == code
        else:
            assert isinstance(error, MalformedPacket), (kind, hex(code))


def test_v3_return_codes() -> None:
    for code in range(256):
        ok = code in V3_CONNACK_RETURN_CODES
        _, _, error = FrameDecoder(protocol_version=4).decode_buffer(
            frame(0x20, b"\x00" + bytes([code]))
        )
        assert (error is None) == ok, hex(code)
        _, _, error = FrameDecoder(protocol_version=4).decode_buffer(
            frame(0x90, b"\x00\x01" + bytes([code]))
        )
        assert (error is None) == (code in V3_SUBACK_RETURN_CODES), hex(code)


PACKET_TYPE_BYTE = {
    "connect": 1,
    "connack": 2,
    "publish": 3,
    "puback": 4,
    "pubrec": 5,
    "pubrel": 6,
    "pubcomp": 7,
    "subscribe": 8,
    "suback": 9,
    "unsubscribe": 10,
    "unsuback": 11,
    "pingreq": 12,
    "pingresp": 13,
    "disconnect": 14,
    "auth": 15,
}


def test_reason_code_name() -> None:
    assert codec.reason_code_name(0x00) == "Success"
    assert codec.reason_code_name(0x95) == "Packet too large"
    assert codec.reason_code_name(0x8F) == "Topic Filter invalid"
    with pytest.raises(ValueError, match="not a reason code"):
        codec.reason_code_name(0x03)


# ---- Malformed input --------------------------------------------------------------

CONNECT_V4 = str16("MQTT") + b"\x04"
SUB = 0x82  # SUBSCRIBE with its required flags 0010 [MQTT-3.8.1-1]


def publish_v5(props: bytes) -> bytes:
    """A QoS 1 PUBLISH whose property block is `props`."""
    return frame(0x32, str16("t") + b"\x00\x01" + bytes([len(props)]) + props)


def subscribe_v4(topic: str, *, options: int = 0) -> bytes:
    return frame(SUB, b"\x00\x01" + str16(topic) + bytes([options]))


def subscribe_v5(topic: str, options: int, *, props: bytes = b"") -> bytes:
    return frame(SUB, b"\x00\x01" + bytes([len(props)]) + props + str16(topic) + bytes([options]))


def connect(
    name: bytes, level: int, *, flags: int = 0x02, props: bytes = b"", tail: bytes = b""
) -> bytes:
    """A CONNECT with client id "c" then `tail`; level 5 gets the property block `props`."""
    block = bytes([len(props)]) + props if level == 5 else b""
    body = str16(name) + bytes([level, flags]) + b"\x00\x00" + block + str16("c") + tail
    return frame(0x10, body)


M, P = MalformedPacket, ProtocolError


def bad(name: str, version: int | None, data: bytes, exc: type[CodecError], code: int) -> Any:
    return pytest.param(version, data, exc, code, id=name)


# Each case: decoder protocol_version, the bytes fed, the exception and its reason code.
MALFORMED = [
    # Fixed header (§2.1)
    bad("packet type 0 is reserved", 4, b"\x00\x00", M, 0x81),
    bad("PUBACK flags not 0000", 4, b"\x41\x02\x00\x01", M, 0x81),  # [MQTT-2.2.2-2]
    bad("PUBREL flags not 0010", 4, b"\x60\x02\x00\x01", M, 0x81),  # [MQTT-3.6.1-1]
    bad("SUBSCRIBE flags 0000", 4, frame(0x80, b"\x00\x01" + str16("a") + b"\x00"), M, 0x81),
    bad("UNSUBSCRIBE flags 0000", 4, frame(0xA0, b"\x00\x01" + str16("a")), M, 0x81),
    bad("PINGREQ flags not 0000", 4, b"\xc1\x00", M, 0x81),
    bad("remaining length of 5 bytes", 4, b"\x30\xff\xff\xff\xff\x01", M, 0x81),  # §1.5.5
    bad("remaining length not minimal", 4, b"\xc0\x80\x00", M, 0x81),  # [MQTT-1.5.5-1]
    bad("bytes left after PINGREQ", 4, b"\xc0\x01\x00", M, 0x81),
    bad("bytes left after PUBACK", 4, b"\x40\x03\x00\x01\x00", M, 0x81),
    bad("PUBACK cut short", 4, b"\x40\x01\x00", M, 0x81),
    # PUBLISH (§3.3)
    bad("PUBLISH QoS 3", 4, frame(0x36, str16("t") + b"\x00\x01"), M, 0x81),  # [MQTT-3.3.1-4]
    bad("DUP on QoS 0", 4, frame(0x38, str16("t")), M, 0x81),  # [MQTT-3.3.1-2]
    bad("'+' in topic name", 4, frame(0x30, str16("a/+")), TopicNameInvalid, 0x90),
    bad("'#' in topic name", 4, frame(0x30, str16("#")), TopicNameInvalid, 0x90),  # 3.3.2-2
    bad("empty topic name 3.1.1", 4, frame(0x30, str16("")), TopicNameInvalid, 0x90),
    bad("empty topic without alias", 5, frame(0x30, str16("") + b"\x00"), P, 0x82),  # 3.3.2-8
    bad("PUBLISH packet id 0", 4, frame(0x32, str16("t") + b"\x00\x00"), P, 0x82),
    bad("topic length past the end", 4, frame(0x30, b"\x00\x09abc"), M, 0x81),
    # UTF-8 strings (§1.5.4)
    bad("invalid UTF-8", 4, frame(0x30, b"\x00\x02\xc3\x28"), M, 0x81),  # [MQTT-1.5.4-1]
    bad("overlong UTF-8 NUL", 4, frame(0x30, b"\x00\x02\xc0\x80"), M, 0x81),
    bad("U+0000 in a string", 4, frame(0x30, b"\x00\x03a\x00b"), M, 0x81),  # [MQTT-1.5.4-2]
    bad("UTF-16 surrogate", 4, frame(0x30, b"\x00\x03\xed\xa0\x80"), M, 0x81),  # 1.5.4-1
    bad(
        "bad UTF-8 in user name",
        None,
        connect(b"MQTT", 4, flags=0x82, tail=b"\x00\x01\xff"),
        M,
        0x81,
    ),
    # Packet identifiers [MQTT-2.2.1-3]
    bad("PUBACK packet id 0", 4, b"\x40\x02\x00\x00", P, 0x82),
    bad("SUBSCRIBE packet id 0", 4, frame(SUB, b"\x00\x00" + str16("a") + b"\x00"), P, 0x82),
    bad("UNSUBACK packet id 0", 4, b"\xb0\x02\x00\x00", P, 0x82),
    # SUBSCRIBE / UNSUBSCRIBE (§3.8, §3.10, §4.7)
    bad("filter '#/a'", 4, subscribe_v4("#/a"), TopicFilterInvalid, 0x8F),  # [MQTT-4.7.1-1]
    bad("filter 'a+'", 4, subscribe_v4("a+"), TopicFilterInvalid, 0x8F),  # [MQTT-4.7.1-2]
    bad("empty filter", 4, subscribe_v4(""), TopicFilterInvalid, 0x8F),  # [MQTT-4.7.3-1]
    bad("$share without group", 4, subscribe_v4("$share//a"), TopicFilterInvalid, 0x8F),
    bad(
        "unsubscribe 'a/b#'", 4, frame(0xA2, b"\x00\x01" + str16("a/b#")), TopicFilterInvalid, 0x8F
    ),
    bad("SUBSCRIBE without filters", 4, frame(SUB, b"\x00\x01"), P, 0x82),  # [MQTT-3.8.3-3]
    bad("UNSUBSCRIBE without filters", 4, frame(0xA2, b"\x00\x01"), P, 0x82),  # 3.10.3-2
    bad("subscription QoS 3", 4, subscribe_v4("a", options=3), M, 0x81),
    bad("3.1.1 option bits set", 4, subscribe_v4("a", options=4), M, 0x81),  # [MQTT-3-8.3-4]
    bad("5.0 reserved option bits", 5, subscribe_v5("a", 0x40), M, 0x81),  # [MQTT-3.8.3-5]
    bad("retain handling 3", 5, subscribe_v5("a", 0x30), P, 0x82),  # §3.8.3.1
    bad("No Local on $share", 5, subscribe_v5("$share/g/a", 0x04), P, 0x82),  # [MQTT-3.8.3-4]
    # CONNACK / SUBACK (§3.2, §3.9)
    bad("CONNACK reserved flags", 4, b"\x20\x02\x02\x00", M, 0x81),  # [MQTT-3.2.2-1]
    bad("session present but refused", 4, b"\x20\x02\x01\x05", P, 0x82),  # [MQTT-3.2.2-4]
    bad("CONNACK return code 6", 4, b"\x20\x02\x00\x06", M, 0x81),
    bad("SUBACK return code 3", 4, b"\x90\x03\x00\x01\x03", M, 0x81),  # [MQTT-3.9.3-2]
    bad("SUBACK without codes", 4, b"\x90\x02\x00\x01", P, 0x82),
    # 5.0 properties (§2.2.2)
    bad("property repeated", 5, publish_v5(b"\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02"), P, 0x82),
    bad("property not allowed here", 5, publish_v5(b"\x11\x00\x00\x00\x01"), M, 0x81),
    bad("unknown property id", 5, publish_v5(b"\x7f\x00"), M, 0x81),
    bad("property past its block", 5, publish_v5(b"\x02\x00\x00"), M, 0x81),
    bad("boolean property of 2", 5, publish_v5(b"\x01\x02"), P, 0x82),  # §3.3.2.3.2
    bad("topic alias 0", 5, publish_v5(b"\x23\x00\x00"), P, 0x82),  # §3.3.2.3.4
    bad("subscription id 0", 5, subscribe_v5("a", 0, props=b"\x0b\x00"), P, 0x82),  # 3.8.2.1.2
    bad("subscription id twice", 5, subscribe_v5("a", 0, props=b"\x0b\x01\x0b\x02"), P, 0x82),
    bad("PUBACK reason 0x81", 5, b"\x40\x03\x00\x01\x81", M, 0x81),  # not in §3.4.2.1
    bad("DISCONNECT reason 0x8C", 5, b"\xe0\x01\x8c", M, 0x81),  # not in §3.14.2.1
    # AUTH (§3.15) exists only in 5.0
    bad("AUTH in 3.1.1", 4, b"\xf0\x00", M, 0x81),  # 3.1.1 §2.2.1: type 15 is reserved
    bad("AUTH reason 0x80", 5, b"\xf0\x01\x80", M, 0x81),  # not in §3.15.2.1
    # CONNECT (§3.1)
    bad("first packet not CONNECT", None, b"\xc0\x00", P, 0x82),  # [MQTT-3.1.0-1]
    bad("protocol level 6", None, connect(b"MQTT", 6), UnsupportedProtocolVersion, 0x84),
    bad("protocol name MQTX", None, connect(b"MQTX", 4), UnsupportedProtocolVersion, 0x84),
    bad("MQIsdp with level 4", None, connect(b"MQIsdp", 4), UnsupportedProtocolVersion, 0x84),
    bad("CONNECT reserved flag", None, connect(b"MQTT", 4, flags=0x03), M, 0x81),  # 3.1.2-3
    bad("will QoS 3", None, connect(b"MQTT", 4, flags=0x1E), M, 0x81),  # [MQTT-3.1.2-14]
    bad("will retain, no will", None, connect(b"MQTT", 4, flags=0x22), M, 0x81),  # 3.1.2-15
    bad("password, no user name", None, connect(b"MQTT", 4, flags=0x42), M, 0x81),  # 3.1.2-22
    bad(
        "will topic with wildcard",
        None,
        connect(b"MQTT", 4, flags=0x06, tail=str16("a/#") + str16(b"")),
        TopicNameInvalid,
        0x90,
    ),  # [MQTT-3.1.3-11]
    bad("CONNECT ends early", None, frame(0x10, CONNECT_V4 + b"\x02\x00"), M, 0x81),
    bad("receive maximum 0", None, connect(b"MQTT", 5, props=b"\x21\x00\x00"), P, 0x82),
    bad("will property in CONNECT", None, connect(b"MQTT", 5, props=b"\x18\0\0\0\0"), M, 0x81),
]


@pytest.mark.parametrize(("version", "data", "exc", "reason_code"), MALFORMED)
def test_malformed_input(
    version: int | None, data: bytes, exc: type[CodecError], reason_code: int
) -> None:
    decoder = FrameDecoder(protocol_version=version)
    packets, consumed, error = decoder.decode_buffer(data)
    assert (packets, consumed) == ([], 0)
    assert type(error) is exc
    assert isinstance(error, CodecError) and isinstance(error, ValueError)
    assert error.reason_code == reason_code
    assert isinstance(error.detail, str) and error.detail
    assert f"0x{reason_code:02X}" in str(error)


def test_malformed_table_covers_every_error_class() -> None:
    assert {case.values[2] for case in MALFORMED} == {
        MalformedPacket,
        ProtocolError,
        UnsupportedProtocolVersion,
        TopicFilterInvalid,
        TopicNameInvalid,
    }  # PacketTooLarge has its own tests below


@pytest.mark.parametrize(
    "header",
    [
        b"\x30\xff\xff\xff\x7f",  # 268,435,455: the largest remaining length
        b"\x30\x80\x80\x80\x01",  # 2,097,152
        b"\x30\xfc\x07",  # 1,020 + 3 header bytes = 1,023: one over
    ],
)
def test_packet_too_large_is_raised_from_the_length_header_alone(header: bytes) -> None:
    # The decoder must refuse before buffering a body it will never accept.
    packets, consumed, error = FrameDecoder(max_packet_size=1022).decode_buffer(header)
    assert (packets, consumed) == ([], 0)
    assert isinstance(error, PacketTooLarge)
    assert error.reason_code == 0x95


def test_packet_at_the_maximum_size_is_accepted() -> None:
    wire = codec.encode({"type": "publish", "topic": "t", "payload": b"x" * 1017}, 4)
    assert len(wire) == 1023
    assert len(decode_all(wire, 4, max_packet_size=1023)) == 1
    _, _, error = FrameDecoder(max_packet_size=1022, protocol_version=4).decode_buffer(wire)
    assert isinstance(error, PacketTooLarge)


def test_incomplete_frames_wait_for_more_bytes() -> None:
    wire = codec.encode({"type": "publish", "topic": "a/b", "payload": b"123", "qos": 1,
                         "packet_id": 9}, 4)  # fmt: skip
    decoder = FrameDecoder(protocol_version=4)
    for cut in range(len(wire)):
        assert decoder.decode_buffer(wire[:cut]) == ([], 0, None)
    assert decoder.decode_buffer(wire)[1] == len(wire)


def test_frames_before_an_error_are_returned() -> None:
    good: list[Packet] = [
        {"type": "publish", "topic": "a", "payload": b"1"},
        {"type": "pingreq"},
    ]
    head = codec.encode_many(good, 4)
    bad = frame(0x30, str16("a/#"))
    after = codec.encode({"type": "pingreq"}, 4)
    packets, consumed, error = FrameDecoder(protocol_version=4).decode_buffer(head + bad + after)
    assert [p["type"] for p in packets] == ["publish", "pingreq"]
    assert consumed == len(head)
    assert isinstance(error, TopicNameInvalid)


def test_frames_before_an_oversized_header_are_returned() -> None:
    head = codec.encode({"type": "publish", "topic": "a", "payload": b"1"}, 4)
    decoder = FrameDecoder(max_packet_size=64, protocol_version=4)
    packets, consumed, error = decoder.decode_buffer(head + b"\x30\xff\xff\xff\x7f")
    assert (len(packets), consumed) == (1, len(head))
    assert isinstance(error, PacketTooLarge)


def test_connect_then_error_keeps_the_connect() -> None:
    wire = codec.encode({"type": "connect", "client_id": "c", "protocol_version": 5}, 5)
    packets, consumed, error = FrameDecoder().decode_buffer(wire + b"\xf0\x01\x80")
    assert [p["type"] for p in packets] == ["connect"]
    assert consumed == len(wire)
    assert isinstance(error, MalformedPacket)


def test_decode_buffer_accepts_any_contiguous_buffer() -> None:
    wire = codec.encode({"type": "pingresp"}, 4)
    for buffer in (wire, bytearray(wire), memoryview(wire), memoryview(bytearray(wire))):
        assert FrameDecoder(protocol_version=4).decode_buffer(buffer)[0] == [{"type": "pingresp"}]


def test_decoder_settings() -> None:
    decoder = FrameDecoder(max_packet_size=4096, protocol_version=5)
    assert (decoder.max_packet_size, decoder.protocol_version) == (4096, 5)
    assert FrameDecoder().max_packet_size == codec.MAX_PACKET_SIZE == 268_435_460
    with pytest.raises(ValueError, match="protocol version"):
        FrameDecoder(protocol_version=6)


# ---- Encode errors ----------------------------------------------------------------


def unencodable(name: str, packet: dict[str, Any], version: int = 4) -> Any:
    return pytest.param(packet, version, id=name)


PUB = {"type": "publish", "topic": "a"}
ENCODE_ERRORS = [
    unencodable("unknown type", {"type": "publishh", "topic": "a"}),
    unencodable("no type", {"topic": "a"}),
    unencodable("PUBLISH without topic", {"type": "publish", "payload": b""}),
    unencodable("QoS 1 PUBLISH without packet id", PUB | {"qos": 1}),
    unencodable("QoS 3", PUB | {"qos": 3, "packet_id": 1}),
    unencodable("PUBACK without packet id", {"type": "puback"}),
    unencodable("SUBSCRIBE without filters", {"type": "subscribe", "packet_id": 1}),
    unencodable("filter without 'filter'", {"type": "subscribe", "packet_id": 1, "filters": [{}]}),
    unencodable(
        "retain handling 3",
        {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "a", "retain_handling": 3}]},
        5,
    ),
    unencodable("SUBACK unknown reason", {"type": "suback", "packet_id": 1, "reason_codes": [3]}),
    unencodable("UNSUBSCRIBE without packet id", {"type": "unsubscribe", "filters": ["a"]}),
    unencodable("will without topic", {"type": "connect", "will": {"payload": b""}}),
    unencodable("unknown protocol level", {"type": "connect", "protocol_version": 6}),
    unencodable("U+0000 in topic", {"type": "publish", "topic": "a\x00b"}),
    unencodable("topic over 65535 bytes", {"type": "publish", "topic": "a" * 65536}),
    unencodable("unknown property", PUB | {"properties": [("colour", 1)]}, 5),
    unencodable("property of the wrong type", PUB | {"properties": [("content_type", 5)]}, 5),
    unencodable("property out of range", PUB | {"properties": [("topic_alias", 0)]}, 5),
    unencodable("AUTH in 3.1.1", {"type": "auth"}),
]


@pytest.mark.parametrize(("packet", "version"), ENCODE_ERRORS)
def test_encode_errors(packet: dict[str, Any], version: int) -> None:
    with pytest.raises(EncodeError):
        codec.encode(packet, version)
    with pytest.raises(EncodeError):
        codec.encode_many([{"type": "pingreq"}, packet], version)


def test_encode_error_is_not_a_codec_error() -> None:
    # CodecError means "the peer sent something wrong"; EncodeError is our own mistake.
    assert issubclass(EncodeError, ValueError)
    assert not issubclass(EncodeError, CodecError)


def test_encode_rejects_an_unknown_protocol_version_argument() -> None:
    with pytest.raises(ValueError, match="protocol version"):
        codec.encode({"type": "pingreq"}, 6)
