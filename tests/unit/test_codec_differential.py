"""Differential tests of ``ferromq._core`` against independent pure-Python codecs.

* amqtt (MQTT 3.1.1): generated packets built and encoded by amqtt's packet classes
  must decode in ferromq to the same fields, ferromq must encode the same fields to the
  same bytes, and amqtt's ``from_stream`` must read ferromq's bytes back to them.
* paho-mqtt (MQTT 5.0): property sets packed by ``paho.property_of(mqtt, "Properties")``
  must decode in ferromq inside every packet that may carry them, ferromq must encode
  them to the same bytes, and paho's own packet decoders must read ferromq's bytes back.
  Paho's property table and reason-code names are compared with the spec's too.

Where a peer departs from the specification the test asserts the specification and
says so next to the case. Deviations found:

* amqtt encodes and decodes the CONNECT password as a UTF-8 string; the spec makes it
  Binary Data (§3.1.3.5). Generated passwords are UTF-8 so both codecs can carry them.
* amqtt replaces an empty client identifier with a random one while decoding; a
  server may assign one [MQTT-3.1.3-6] but that is session logic, not the codec's.
* amqtt decodes an ill-formed UTF-8 string as ``str(bytes)`` instead of failing;
  the spec makes it a Malformed Packet [MQTT-1.5.4-1] (see test_codec's table).
* paho refuses U+FEFF in strings; the spec says it must not be skipped or stripped
  [MQTT-1.5.4-3], so it is valid. Paho examples draw no U+FEFF; ferromq's acceptance
  is asserted in test_u_feff_in_properties.
* paho refuses a Maximum Packet Size above 268,435,455; the spec only forbids 0
  (§3.1.2.11.4). Generated values stay in paho's range.
* paho's reason-code names differ from the spec's in case and in five wordings
  (KNOWN_NAME_DIFFERENCES), and its per-packet reason codes follow Table 2-6, which
  lists 0x8C for DISCONNECT and leaves 0x99 out of CONNACK, while the per-packet lists
  (§3.14.2.1, §3.2.2.2) that ferromq follows say the opposite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeAlias

import pytest
from amqtt.adapters import StreamReaderAdapter
from amqtt.mqtt import packet_class
from amqtt.mqtt.connack import ConnackPacket
from amqtt.mqtt.connect import ConnectPacket, ConnectPayload, ConnectVariableHeader
from amqtt.mqtt.disconnect import DisconnectPacket
from amqtt.mqtt.packet import MQTTFixedHeader
from amqtt.mqtt.pingreq import PingReqPacket
from amqtt.mqtt.pingresp import PingRespPacket
from amqtt.mqtt.puback import PubackPacket
from amqtt.mqtt.pubcomp import PubcompPacket
from amqtt.mqtt.publish import PublishPacket
from amqtt.mqtt.pubrec import PubrecPacket
from amqtt.mqtt.pubrel import PubrelPacket
from amqtt.mqtt.suback import SubackPacket
from amqtt.mqtt.subscribe import SubscribePacket
from amqtt.mqtt.unsuback import UnsubackPacket
from amqtt.mqtt.unsubscribe import UnsubscribePacket
from hypothesis import assume, given
from hypothesis import strategies as st
from paho.mqtt import _packet as paho_packet
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from tests.support.paho_clients import new_properties
from tests.unit.codec_strategies import (
    CONTEXTS,
    DETERMINISTIC,
    PACKET_TYPES_V4,
    PROPERTY_CONTEXTS,
    PROPERTY_VALUES,
    TEXT,
    V5_REASON_CODES,
    Packet,
    any_packet,
    frame,
    packets_of,
    properties,
    str16,
)

from ferromq import codec

# amqtt ships no types (pyproject.toml): its packets are Any to mypy.
AmqttPacket: TypeAlias = Any

# ---- amqtt (MQTT 3.1.1) ------------------------------------------------------------


def to_amqtt(p: Packet) -> AmqttPacket:
    """Build the amqtt packet object with the same fields as the ferromq dict `p`."""
    kind = p["type"]
    if kind == "connect":
        header = ConnectVariableHeader(keep_alive=p["keep_alive"], proto_level=4)
        header.clean_session_flag = p["clean_start"]
        will = p["will"]
        if will is not None:
            header.will_flag = True
            header.will_qos = will["qos"]
            header.will_retain_flag = will["retain"]
        header.username_flag = p["username"] is not None
        header.password_flag = p["password"] is not None
        payload = ConnectPayload(
            client_id=p["client_id"],
            will_topic=will and will["topic"],
            will_message=will and will["payload"],
            username=p["username"],
            # amqtt types the password as str (the spec: Binary Data, §3.1.3.5).
            password=None if p["password"] is None else p["password"].decode(),
        )
        return ConnectPacket(variable_header=header, payload=payload)
    if kind == "connack":
        return ConnackPacket.build(int(p["session_present"]), p["reason_code"])
    if kind == "publish":
        return PublishPacket.build(
            p["topic"], p["payload"], p["packet_id"], p["dup"], p["qos"], p["retain"]
        )
    if kind in ACK_CLASSES:
        return ACK_CLASSES[kind].build(p["packet_id"])
    if kind == "subscribe":
        topics = [(f["filter"], f["qos"]) for f in p["filters"]]
        return SubscribePacket.build(topics, p["packet_id"])
    if kind == "suback":
        return SubackPacket.build(p["packet_id"], p["reason_codes"])
    if kind == "unsubscribe":
        return UnsubscribePacket.build(p["filters"], p["packet_id"])
    if kind == "unsuback":
        return UnsubackPacket.build(p["packet_id"])
    return {"pingreq": PingReqPacket, "pingresp": PingRespPacket, "disconnect": DisconnectPacket}[
        kind
    ]()


ACK_CLASSES: dict[str, Any] = {
    "puback": PubackPacket,
    "pubrec": PubrecPacket,
    "pubrel": PubrelPacket,
    "pubcomp": PubcompPacket,
}
AMQTT_TYPES = {
    ConnectPacket: "connect",
    ConnackPacket: "connack",
    PublishPacket: "publish",
    **{cls: kind for kind, cls in ACK_CLASSES.items()},
    SubscribePacket: "subscribe",
    SubackPacket: "suback",
    UnsubscribePacket: "unsubscribe",
    UnsubackPacket: "unsuback",
    PingReqPacket: "pingreq",
    PingRespPacket: "pingresp",
    DisconnectPacket: "disconnect",
}


def from_amqtt(pkt: AmqttPacket) -> Packet:
    """The ferromq dict for the fields amqtt decoded (3.1.1: no properties)."""
    kind = AMQTT_TYPES[type(pkt)]
    no_reason = {"reason_code": 0, "properties": []}
    if kind == "connect":
        h, body = pkt.variable_header, pkt.payload
        will = None
        if h.will_flag:
            will = {
                "topic": body.will_topic,
                "payload": bytes(body.will_message),
                "qos": h.will_qos,
                "retain": h.will_retain_flag,
                "properties": [],
            }
        return {
            "type": "connect",
            "protocol_version": h.proto_level,
            "clean_start": h.clean_session_flag,
            "keep_alive": h.keep_alive,
            # amqtt swaps an empty client id for a random one while decoding.
            "client_id": "" if body.client_id_is_random else body.client_id,
            "will": will,
            "username": body.username,
            "password": None if body.password is None else body.password.encode(),
            "properties": [],
        }
    if kind == "connack":
        return {
            "type": kind,
            "session_present": bool(pkt.session_parent),
            "reason_code": pkt.return_code,
            "properties": [],
        }
    if kind == "publish":
        return {
            "type": kind,
            "topic": pkt.topic_name,
            "payload": pkt.data,
            "qos": pkt.qos,
            "retain": pkt.retain_flag,
            "dup": pkt.dup_flag,
            "packet_id": pkt.packet_id,
            "properties": [],
        }
    if kind in ACK_CLASSES:
        return {"type": kind, "packet_id": pkt.variable_header.packet_id, **no_reason}
    if kind == "subscribe":
        filters = [
            {
                "filter": topic,
                "qos": qos,
                "no_local": False,
                "retain_as_published": False,
                "retain_handling": 0,
            }
            for topic, qos in pkt.payload.topics
        ]
        pid = pkt.variable_header.packet_id
        return {"type": kind, "packet_id": pid, "filters": filters, "properties": []}
    if kind == "suback":
        codes = list(pkt.payload.return_codes)
        pid = pkt.variable_header.packet_id
        return {"type": kind, "packet_id": pid, "reason_codes": codes, "properties": []}
    if kind == "unsubscribe":
        pid = pkt.variable_header.packet_id
        return {"type": kind, "packet_id": pid, "filters": pkt.payload.topics, "properties": []}
    if kind == "unsuback":
        pid = pkt.variable_header.packet_id
        return {"type": kind, "packet_id": pid, "reason_codes": [], "properties": []}
    if kind == "disconnect":
        return {"type": kind, **no_reason}
    return {"type": kind}


async def _amqtt_read_all(data: bytes) -> list[AmqttPacket]:
    # The way amqtt's protocol handler reads: fixed header, then the packet class's
    # from_stream, over an asyncio StreamReader.
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    adapter = StreamReaderAdapter(reader)
    packets = []
    while (fixed := await MQTTFixedHeader.from_stream(adapter)) is not None:
        packets.append(await packet_class(fixed).from_stream(adapter, fixed_header=fixed))
    return packets


def amqtt_decode(data: bytes) -> list[Packet]:
    return [from_amqtt(p) for p in asyncio.run(_amqtt_read_all(data))]


def ferromq_decode(data: bytes, version: int | None = 4) -> list[Packet]:
    packets, consumed, error = codec.FrameDecoder(protocol_version=version).decode_buffer(data)
    assert (consumed, error) == (len(data), None)
    return packets


def amqtt_compatible(packet: Packet, data: st.DataObject) -> Packet:
    """amqtt carries the password as UTF-8 text: draw one that is."""
    if packet.get("password") is not None:
        packet["password"] = data.draw(TEXT).encode()
    return packet


@pytest.mark.parametrize("kind", PACKET_TYPES_V4)
@DETERMINISTIC
@given(data=st.data())
def test_amqtt_encoded_packets_decode_identically(kind: str, data: st.DataObject) -> None:
    packet = amqtt_compatible(data.draw(packets_of(kind, 4)), data)
    wire = to_amqtt(packet).to_bytes()
    assert ferromq_decode(wire) == [packet]


@pytest.mark.parametrize("kind", PACKET_TYPES_V4)
@DETERMINISTIC
@given(data=st.data())
def test_ferromq_encodes_the_bytes_amqtt_encodes(kind: str, data: st.DataObject) -> None:
    packet = amqtt_compatible(data.draw(packets_of(kind, 4)), data)
    wire = codec.encode(packet, 4)
    assert wire == to_amqtt(packet).to_bytes()
    assert amqtt_decode(wire) == [packet]


@DETERMINISTIC
@given(data=st.data())
def test_streams_agree_in_both_directions(data: st.DataObject) -> None:
    first = amqtt_compatible(data.draw(packets_of("connect", 4)), data)
    rest = [amqtt_compatible(p, data) for p in data.draw(st.lists(any_packet(4), max_size=12))]
    stream = [first, *rest]
    amqtt_wire = b"".join(to_amqtt(p).to_bytes() for p in stream)
    assert ferromq_decode(amqtt_wire, version=None) == stream
    assert codec.encode_many(stream, 4) == amqtt_wire
    assert amqtt_decode(amqtt_wire) == stream


def test_binary_password_follows_the_spec() -> None:
    # §3.1.3.5: the password is Binary Data, so any bytes are valid. amqtt cannot
    # carry this (it reads the field as a string and yields "b'\\xff\\x00'").
    packet = {"type": "connect", "username": "u", "password": b"\xff\x00\xfe"}
    assert ferromq_decode(codec.encode(packet, 4), None)[0]["password"] == b"\xff\x00\xfe"


# ---- paho-mqtt (MQTT 5.0 properties) ---------------------------------------------

PAHO_NAMES = {
    name.lower().replace(" ", "_"): name for name in new_properties(PacketTypes.PUBLISH).names
}
PAHO_PACKET_TYPES = {
    "connect": PacketTypes.CONNECT,
    "will": PacketTypes.WILLMESSAGE,
    "connack": PacketTypes.CONNACK,
    "publish": PacketTypes.PUBLISH,
    "puback": PacketTypes.PUBACK,
    "pubrec": PacketTypes.PUBREC,
    "pubrel": PacketTypes.PUBREL,
    "pubcomp": PacketTypes.PUBCOMP,
    "subscribe": PacketTypes.SUBSCRIBE,
    "suback": PacketTypes.SUBACK,
    "unsubscribe": PacketTypes.UNSUBSCRIBE,
    "unsuback": PacketTypes.UNSUBACK,
    "disconnect": PacketTypes.DISCONNECT,
    "auth": PacketTypes.AUTH,
}


def carrier(context: str, props: list[tuple[str, Any]], block: bytes) -> tuple[Packet, bytes]:
    """A 5.0 packet that carries `props` in `context`, as a dict and as bytes whose
    property block is `block` (the property length and the properties)."""
    # Acks, DISCONNECT and AUTH get a non-Success reason code so it is always on the
    # wire; with no properties the property length is left out, as the spec allows
    # (§3.4.2.2.1: "If the Remaining Length is less than 4 ... the value of 0 is used").
    tail = block if props else b""
    base: Packet = {"type": context, "properties": props}
    if context in ("connect", "will"):
        connect = {
            "type": "connect",
            "protocol_version": 5,
            "clean_start": True,
            "keep_alive": 60,
            "client_id": "c",
            "will": None,
            "username": None,
            "password": None,
            "properties": props,
        }
        head = str16("MQTT") + b"\x05"
        if context == "connect":
            return connect, frame(0x10, head + b"\x02\x00\x3c" + block + str16("c"))
        will = {"topic": "w", "payload": b"bye", "qos": 0, "retain": False, "properties": props}
        connect |= {"will": will, "properties": []}
        body = head + b"\x06\x00\x3c\x00" + str16("c") + block + str16("w") + str16(b"bye")
        return connect, frame(0x10, body)
    if context == "connack":
        return base | {"session_present": False, "reason_code": 0}, frame(0x20, b"\0\0" + block)
    if context == "publish":
        fields = {"topic": "t", "payload": b"data", "qos": 1, "retain": False, "dup": False}
        packet = base | fields | {"packet_id": 1}
        return packet, frame(0x32, str16("t") + b"\x00\x01" + block + b"data")
    if context in ("puback", "pubrec", "pubrel", "pubcomp"):
        code = 0x10 if context in ("puback", "pubrec") else 0x92
        first = {"puback": 0x40, "pubrec": 0x50, "pubrel": 0x62, "pubcomp": 0x70}[context]
        packet = base | {"packet_id": 1, "reason_code": code}
        return packet, frame(first, b"\x00\x01" + bytes([code]) + tail)
    if context == "subscribe":
        options = {"qos": 1, "no_local": False, "retain_as_published": False}
        packet = base | {"packet_id": 1, "filters": [{"filter": "a/+", **options}]}
        packet["filters"][0]["retain_handling"] = 0
        return packet, frame(0x82, b"\x00\x01" + block + str16("a/+") + b"\x01")
    if context == "suback":
        packet = base | {"packet_id": 1, "reason_codes": [1]}
        return packet, frame(0x90, b"\x00\x01" + block + b"\x01")
    if context == "unsubscribe":
        packet = base | {"packet_id": 1, "filters": ["a/#"]}
        return packet, frame(0xA2, b"\x00\x01" + block + str16("a/#"))
    if context == "unsuback":
        packet = base | {"packet_id": 1, "reason_codes": [0x11]}
        return packet, frame(0xB0, b"\x00\x01" + block + b"\x11")
    if context == "disconnect":
        return base | {"reason_code": 0x04}, frame(0xE0, b"\x04" + tail)
    assert context == "auth"
    return base | {"reason_code": 0x18}, frame(0xF0, b"\x18" + tail)


def carried_properties(packet: Packet, context: str) -> list[tuple[str, Any]]:
    props: list[tuple[str, Any]] = (
        packet["will"]["properties"] if context == "will" else packet["properties"]
    )
    return props


def paho_pack(context: str, props: list[tuple[str, Any]]) -> bytes:
    paho = Properties(PAHO_PACKET_TYPES[context])
    for name, value in props:
        # Setting a repeatable property again appends to its list.
        setattr(paho, PAHO_NAMES[name], value)
    return bytes(paho.pack())


def paho_items(paho: Properties) -> list[tuple[str, Any]]:
    """paho's decoded properties as ferromq's (name, value) list, in identifier order."""
    items: list[tuple[str, Any]] = []
    for name, paho_name in PAHO_NAMES.items():
        value = getattr(paho, paho_name.replace(" ", ""), None)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        items.extend((name, bytes(v) if isinstance(v, bytearray) else v) for v in values)
    return items


def has_feff(value: object) -> bool:
    """Whether U+FEFF is anywhere in `value` (a property list or a whole packet)."""
    return "\ufeff" in repr(value)


@pytest.mark.parametrize("context", CONTEXTS)
@DETERMINISTIC
@given(data=st.data())
def test_paho_packed_properties_decode_identically(context: str, data: st.DataObject) -> None:
    props = data.draw(properties(context, shuffle=False))
    assume(not has_feff(props))  # paho refuses U+FEFF, see the module docstring
    block = paho_pack(context, props)
    packet, wire = carrier(context, props, block)
    decoded = ferromq_decode(wire, version=5)
    assert decoded == [packet]
    assert carried_properties(decoded[0], context) == props


@pytest.mark.parametrize("context", CONTEXTS)
@DETERMINISTIC
@given(data=st.data())
def test_ferromq_encodes_the_property_bytes_paho_packs(context: str, data: st.DataObject) -> None:
    props = data.draw(properties(context, shuffle=False))
    assume(not has_feff(props))
    packet, wire = carrier(context, props, paho_pack(context, props))
    assert codec.encode(packet, 5) == wire


def split_frame(wire: bytes) -> tuple[int, bytes]:
    """(first byte, body) of one frame: skip the remaining-length bytes."""
    end = 1
    while wire[end] & 0x80:
        end += 1
    return wire[0], wire[end + 1 :]


# What paho's client-side decoders return (NamedTuples of paho.mqtt._packet).
PahoPacket: TypeAlias = (
    paho_packet.ConnackPacket
    | paho_packet.PublishPacket
    | paho_packet.PubackPacket
    | paho_packet.PubrecPacket
    | paho_packet.PubrelPacket
    | paho_packet.PubcompPacket
    | paho_packet.SubackPacket
    | paho_packet.UnsubackPacket
    | paho_packet.DisconnectPacket
)

PAHO_DECODERS: dict[str, Callable[[int, bytes, MQTTProtocolVersion], PahoPacket]] = {
    "connack": paho_packet.decode_connack,
    "publish": paho_packet.decode_publish,
    "puback": paho_packet.decode_puback,
    "pubrec": paho_packet.decode_pubrec,
    "pubrel": paho_packet.decode_pubrel,
    "pubcomp": paho_packet.decode_pubcomp,
    "suback": paho_packet.decode_suback,
    "unsuback": paho_packet.decode_unsuback,
    "disconnect": paho_packet.decode_disconnect,
}


@pytest.mark.parametrize("kind", sorted(PAHO_DECODERS))
@DETERMINISTIC
@given(data=st.data())
def test_paho_decodes_what_ferromq_encodes(kind: str, data: st.DataObject) -> None:
    # paho-mqtt has decoders for the packets a client receives; run ferromq's
    # generated 5.0 packets of those types through them.
    packet = data.draw(packets_of(kind, 5))
    assume(not has_feff(packet))
    # paho names CONNACK codes from Table 2-6, which lacks 0x99 (see the module doc).
    assume(not (kind == "connack" and packet["reason_code"] == 0x99))
    header, body = split_frame(codec.encode(packet, 5))
    decoded = PAHO_DECODERS[kind](header, body, MQTTProtocolVersion.MQTTv5)
    got = paho_items(decoded.properties) if decoded.properties is not None else []
    assert got == sorted(packet["properties"], key=lambda item: PROPERTY_VALUES[item[0]][0])
    if isinstance(decoded, paho_packet.PublishPacket):  # kind == "publish"
        fields = (decoded.topic.decode(), bytes(decoded.payload), decoded.qos, decoded.retain)
        assert fields == (packet["topic"], packet["payload"], packet["qos"], packet["retain"])
        assert decoded.dup == packet["dup"]
        assert decoded.mid == (packet["packet_id"] or 0)
    elif isinstance(decoded, (paho_packet.SubackPacket, paho_packet.UnsubackPacket)):
        assert decoded.mid == packet["packet_id"]
        assert [c.value for c in decoded.reason_codes] == packet["reason_codes"]
    elif decoded.reason is not None:  # an empty DISCONNECT has none: 0 is implied
        assert decoded.reason.value == packet["reason_code"]


def test_property_table_matches_paho_and_the_decoder() -> None:
    """Table 2-4 three ways: the spec's (codec_strategies), paho's, and what decodes."""
    paho = new_properties(PacketTypes.PUBLISH)
    by_type = {v: k for k, v in PAHO_PACKET_TYPES.items()}
    for name, (ident, _) in PROPERTY_VALUES.items():
        assert paho.names[PAHO_NAMES[name]] == ident
        paho_contexts = {by_type[t] for t in paho.properties[ident][1]}
        assert paho_contexts == set(PROPERTY_CONTEXTS[name]), name
        # One property, packed by paho for a packet where it is allowed, then placed
        # in every packet type: ferromq must accept it exactly where the table says.
        value = SAMPLE_VALUES.get(name, 1)
        block = paho_pack(PROPERTY_CONTEXTS[name][0], [(name, value)])
        for context in CONTEXTS:
            _, wire = carrier(context, [(name, value)], block)
            _, _, error = codec.FrameDecoder(protocol_version=5).decode_buffer(wire)
            if context in PROPERTY_CONTEXTS[name]:
                assert error is None, (name, context, error)
            else:
                assert isinstance(error, codec.MalformedPacket), (name, context)  # §2.2.2.2


SAMPLE_VALUES: dict[str, Any] = {
    "content_type": "x",
    "response_topic": "x",
    "correlation_data": b"x",
    "assigned_client_identifier": "x",
    "authentication_method": "x",
    "authentication_data": b"x",
    "response_information": "x",
    "server_reference": "x",
    "reason_string": "x",
    "user_property": ("k", "v"),
}


def test_u_feff_in_properties() -> None:
    # [MQTT-1.5.4-3]: U+FEFF is a valid character that must be kept (paho refuses it).
    props = [("content_type", "\ufefftext/plain"), ("user_property", ("\ufeff", "v"))]
    packet, _ = carrier("publish", props, b"")
    assert ferromq_decode(codec.encode(packet, 5), 5) == [packet]


# ---- Reason codes -------------------------------------------------------------------

# Spec name (ferromq) vs paho's name, where they differ. MQTT 5.0 Table 2-6 capitalises
# the protocol's own nouns ("Malformed Packet", "Topic Name invalid"); paho lowercases
# them and words five differently (0x04, 0x11, 0x9E, 0xA1, 0xA2).
KNOWN_NAME_DIFFERENCES = {
    0x04: "Disconnect with will message",
    0x11: "No subscription found",  # spec: "No subscription existed"
    0x81: "Malformed packet",
    0x82: "Protocol error",
    0x84: "Unsupported protocol version",
    0x85: "Client identifier not valid",
    0x86: "Bad user name or password",
    0x8D: "Keep alive timeout",
    0x8F: "Topic filter invalid",
    0x90: "Topic name invalid",
    0x91: "Packet identifier in use",
    0x92: "Packet identifier not found",
    0x93: "Receive maximum exceeded",
    0x94: "Topic alias invalid",
    0x9E: "Shared subscription not supported",  # spec: "Shared Subscriptions not supported"
    0xA1: "Subscription identifiers not supported",
    0xA2: "Wildcard subscription not supported",  # spec: "Wildcard Subscriptions ..."
}


def test_reason_code_names_match_paho_where_paho_uses_the_spec_name() -> None:
    differing = {}
    for code, names in ReasonCode.names.items():
        paho_name = "Success" if code == 0 else next(iter(names))
        ours = codec.reason_code_name(code)
        if ours == paho_name:
            continue
        differing[code] = paho_name
    assert differing == KNOWN_NAME_DIFFERENCES
    # Same set of codes: neither side knows a code the other does not.
    for code in range(256):
        try:
            codec.reason_code_name(code)
        except ValueError:
            assert code not in ReasonCode.names
        else:
            assert code in ReasonCode.names


def test_reason_codes_per_packet_against_paho() -> None:
    """Paho's per-packet codes come from Table 2-6; ferromq's from §3.x (in
    codec_strategies). The two spec tables disagree on exactly these cases."""
    table_2_6_only = {("disconnect", 0x8C)}  # §3.14.2.1 does not list Bad authentication method
    sections_only = {("connack", 0x99)}  # §3.2.2.2 lists Payload format invalid for the will
    paho_pairs = {
        (kind, code)
        for code, names in ReasonCode.names.items()
        for packet_types in names.values()
        for kind, t in PAHO_PACKET_TYPES.items()
        if t in packet_types and kind in V5_REASON_CODES
    }
    ours = {(kind, code) for kind, codes in V5_REASON_CODES.items() for code in codes}
    assert paho_pairs - ours == table_2_6_only
    assert ours - paho_pairs == sections_only
