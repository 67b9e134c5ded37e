"""Hypothesis strategies for ``ferromq._core`` packet dicts, shared by the codec tests.

Every strategy yields a packet exactly as ``FrameDecoder.decode_buffer`` returns it
(every key present, defaults spelled out), so a round trip is checked with ``==``.
Only valid packets are generated: the malformed ones are hand-written tables.

The reason-code and property tables here are written from the MQTT 5.0 text (the
per-packet lists of §3.x and Table 2-4), not read from the Rust code, so the tests
compare the codec with the specification rather than with itself.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

Packet = dict[str, Any]

# Deterministic and bounded: derandomize makes every run draw the same examples, and no
# example database is written, so the suite behaves the same on every machine.
DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
PACKET_IDS = st.integers(1, 0xFFFF)  # non-zero [MQTT-2.2.1-3]
PAYLOADS = st.binary(max_size=64)
VARINT_MAX = 268_435_455


def mqtt_text(
    *, min_size: int = 0, max_size: int = 12, exclude: str = ""
) -> st.SearchStrategy[str]:
    """UTF-8 strings the spec allows: no surrogates [MQTT-1.5.4-1], no U+0000 [MQTT-1.5.4-2]."""
    return st.text(
        st.characters(exclude_categories=["Cs"], exclude_characters="\x00" + exclude),
        min_size=min_size,
        max_size=max_size,
    )


TEXT = mqtt_text()
TOPIC_NAMES = mqtt_text(min_size=1, max_size=30, exclude="+#")  # [MQTT-3.3.2-2], [MQTT-4.7.3-1]
# '$' is left out of levels so no filter turns into a $share/{group}/ form by chance.
_LEVELS = st.one_of(st.just("+"), mqtt_text(max_size=8, exclude="/+#$"))


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    """Valid filters: '+' as a whole level, '#' only as the whole last level [MQTT-4.7.1]."""
    levels = draw(st.lists(_LEVELS, min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    topic = "/".join(levels)
    return topic or "#"


# ---- Reason codes, per packet (MQTT 5.0 §3.2.2.2, 3.4.2.1 ... 3.15.2.1) ----------

V5_REASON_CODES: dict[str, tuple[int, ...]] = {
    "connack": (
        *(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C),
        *(0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F),
    ),
    "puback": (0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
    "pubrec": (0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
    "pubrel": (0x00, 0x92),
    "pubcomp": (0x00, 0x92),
    "suback": (0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2),
    "unsuback": (0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91),
    "disconnect": (
        *(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90),
        *(0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F),
        *(0xA0, 0xA1, 0xA2),
    ),
    "auth": (0x00, 0x18, 0x19),
}
V3_CONNACK_RETURN_CODES = tuple(range(6))  # MQTT 3.1.1 §3.2.2.3
V3_SUBACK_RETURN_CODES = (0x00, 0x01, 0x02, 0x80)  # MQTT 3.1.1 §3.9.3 [MQTT-3.9.3-2]

# ---- Properties (MQTT 5.0 Table 2-4) ---------------------------------------------

_FLAG = st.integers(0, 1)
# name -> (identifier, value strategy). Maximum Packet Size is drawn up to the variable
# byte integer maximum only because paho refuses larger values on decode; the spec
# (§3.1.2.11.4) only forbids 0.
PROPERTY_VALUES: dict[str, tuple[int, st.SearchStrategy[Any]]] = {
    "payload_format_indicator": (0x01, _FLAG),
    "message_expiry_interval": (0x02, U32),
    "content_type": (0x03, TEXT),
    "response_topic": (0x08, TOPIC_NAMES),
    "correlation_data": (0x09, st.binary(max_size=16)),
    "subscription_identifier": (0x0B, st.integers(1, VARINT_MAX)),
    "session_expiry_interval": (0x11, U32),
    "assigned_client_identifier": (0x12, TEXT),
    "server_keep_alive": (0x13, U16),
    "authentication_method": (0x15, TEXT),
    "authentication_data": (0x16, st.binary(max_size=16)),
    "request_problem_information": (0x17, _FLAG),
    "will_delay_interval": (0x18, U32),
    "request_response_information": (0x19, _FLAG),
    "response_information": (0x1A, TEXT),
    "server_reference": (0x1C, TEXT),
    "reason_string": (0x1F, TEXT),
    "receive_maximum": (0x21, st.integers(1, 0xFFFF)),
    "topic_alias_maximum": (0x22, U16),
    "topic_alias": (0x23, st.integers(1, 0xFFFF)),
    "maximum_qos": (0x24, _FLAG),
    "retain_available": (0x25, _FLAG),
    "user_property": (0x26, st.tuples(TEXT, TEXT)),
    "maximum_packet_size": (0x27, st.integers(1, VARINT_MAX)),
    "wildcard_subscription_available": (0x28, _FLAG),
    "subscription_identifier_available": (0x29, _FLAG),
    "shared_subscription_available": (0x2A, _FLAG),
}

_ACKS = ("connack", "puback", "pubrec", "pubrel", "pubcomp", "suback", "unsuback")
_EVERY = (*_ACKS, "connect", "will", "publish", "subscribe", "unsubscribe", "disconnect", "auth")
# Where each property may appear: Table 2-4 ("will" is the Will Properties of CONNECT).
PROPERTY_CONTEXTS: dict[str, tuple[str, ...]] = {
    "payload_format_indicator": ("publish", "will"),
    "message_expiry_interval": ("publish", "will"),
    "content_type": ("publish", "will"),
    "response_topic": ("publish", "will"),
    "correlation_data": ("publish", "will"),
    "subscription_identifier": ("publish", "subscribe"),
    "session_expiry_interval": ("connect", "connack", "disconnect"),
    "assigned_client_identifier": ("connack",),
    "server_keep_alive": ("connack",),
    "authentication_method": ("connect", "connack", "auth"),
    "authentication_data": ("connect", "connack", "auth"),
    "request_problem_information": ("connect",),
    "will_delay_interval": ("will",),
    "request_response_information": ("connect",),
    "response_information": ("connack",),
    "server_reference": ("connack", "disconnect"),
    "reason_string": (*_ACKS, "disconnect", "auth"),
    "receive_maximum": ("connect", "connack"),
    "topic_alias_maximum": ("connect", "connack"),
    "topic_alias": ("publish",),
    "maximum_qos": ("connack",),
    "retain_available": ("connack",),
    "user_property": _EVERY,
    "maximum_packet_size": ("connect", "connack"),
    "wildcard_subscription_available": ("connack",),
    "subscription_identifier_available": ("connack",),
    "shared_subscription_available": ("connack",),
}
CONTEXTS = _EVERY


def repeatable(name: str, context: str) -> bool:
    """User Property may repeat anywhere; Subscription Identifier only in PUBLISH (§3.3.2.3.8)."""
    return name == "user_property" or (name == "subscription_identifier" and context == "publish")


@st.composite
def properties(
    draw: st.DrawFn, context: str, *, exclude: tuple[str, ...] = (), shuffle: bool = True
) -> list[tuple[str, Any]]:
    """A valid property list for `context`.

    With ``shuffle=False`` the list is in ascending identifier order with repeats kept
    together, which is the order paho's ``Properties.pack`` writes.
    """
    names = [n for n, where in PROPERTY_CONTEXTS.items() if context in where and n not in exclude]
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
    items: list[tuple[str, Any]] = []
    for name in sorted(chosen, key=lambda n: PROPERTY_VALUES[n][0]):
        count = draw(st.integers(1, 3)) if repeatable(name, context) else 1
        strategy = PROPERTY_VALUES[name][1]
        items.extend((name, draw(strategy)) for _ in range(count))
    if shuffle:
        items = draw(st.permutations(items))
    return items


def _props(version: int, context: str, **kwargs: Any) -> st.SearchStrategy[list[Any]]:
    return properties(context, **kwargs) if version == 5 else st.just([])


# ---- Packets ------------------------------------------------------------------------


@st.composite
def connects(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    will = None
    if draw(st.booleans()):
        will = {
            "topic": draw(TOPIC_NAMES),
            "payload": draw(PAYLOADS),
            "qos": draw(st.integers(0, 2)),
            "retain": draw(st.booleans()),
            "properties": draw(_props(version, "will", **kwargs)),
        }
    username = draw(st.none() | TEXT)
    # 3.1.1 forbids a password without a user name [MQTT-3.1.2-22]; 5.0 allows it.
    password = draw(st.none() | st.binary(max_size=16))
    if version == 4 and username is None:
        password = None
    return {
        "type": "connect",
        "protocol_version": version,
        "clean_start": draw(st.booleans()),
        "keep_alive": draw(U16),
        "client_id": draw(mqtt_text(max_size=23)),
        "will": will,
        "username": username,
        "password": password,
        "properties": draw(_props(version, "connect", **kwargs)),
    }


@st.composite
def connacks(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    codes = V5_REASON_CODES["connack"] if version == 5 else V3_CONNACK_RETURN_CODES
    code = draw(st.sampled_from(codes))
    return {
        "type": "connack",
        # Session Present is 0 on a refused connection [MQTT-3.2.2-6] (3.1.1: 3.2.2-4).
        "session_present": code == 0 and draw(st.booleans()),
        "reason_code": code,
        "properties": draw(_props(version, "connack", **kwargs)),
    }


@st.composite
def publishes(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    qos = draw(st.integers(0, 2))
    return {
        "type": "publish",
        "topic": draw(TOPIC_NAMES),
        "payload": draw(PAYLOADS),
        "qos": qos,
        "retain": draw(st.booleans()),
        "dup": qos > 0 and draw(st.booleans()),  # no DUP on QoS 0 [MQTT-3.3.1-2]
        "packet_id": draw(PACKET_IDS) if qos else None,
        "properties": draw(_props(version, "publish", **kwargs)),
    }


@st.composite
def acks(draw: st.DrawFn, /, kind: str, version: int, **kwargs: Any) -> Packet:
    return {
        "type": kind,
        "packet_id": draw(PACKET_IDS),
        "reason_code": draw(st.sampled_from(V5_REASON_CODES[kind])) if version == 5 else 0,
        "properties": draw(_props(version, kind, **kwargs)),
    }


@st.composite
def subscribes(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    filters = []
    for topic in draw(st.lists(topic_filters(), min_size=1, max_size=4)):
        v5 = version == 5
        filters.append(
            {
                "filter": topic,
                "qos": draw(st.integers(0, 2)),
                "no_local": v5 and draw(st.booleans()),
                "retain_as_published": v5 and draw(st.booleans()),
                "retain_handling": draw(st.integers(0, 2)) if v5 else 0,
            }
        )
    return {
        "type": "subscribe",
        "packet_id": draw(PACKET_IDS),
        "filters": filters,
        "properties": draw(_props(version, "subscribe", **kwargs)),
    }


@st.composite
def subacks(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    codes = V5_REASON_CODES["suback"] if version == 5 else V3_SUBACK_RETURN_CODES
    return {
        "type": "suback",
        "packet_id": draw(PACKET_IDS),
        "reason_codes": draw(st.lists(st.sampled_from(codes), min_size=1, max_size=4)),
        "properties": draw(_props(version, "suback", **kwargs)),
    }


@st.composite
def unsubscribes(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    return {
        "type": "unsubscribe",
        "packet_id": draw(PACKET_IDS),
        "filters": draw(st.lists(topic_filters(), min_size=1, max_size=4)),
        "properties": draw(_props(version, "unsubscribe", **kwargs)),
    }


@st.composite
def unsubacks(draw: st.DrawFn, /, version: int, **kwargs: Any) -> Packet:
    # 3.1.1 UNSUBACK has no payload (§3.11.3); 5.0 has one reason code per filter.
    codes = draw(st.lists(st.sampled_from(V5_REASON_CODES["unsuback"]), min_size=1, max_size=4))
    return {
        "type": "unsuback",
        "packet_id": draw(PACKET_IDS),
        "reason_codes": codes if version == 5 else [],
        "properties": draw(_props(version, "unsuback", **kwargs)),
    }


@st.composite
def reason_only(draw: st.DrawFn, /, kind: str, version: int, **kwargs: Any) -> Packet:
    return {
        "type": kind,
        "reason_code": draw(st.sampled_from(V5_REASON_CODES[kind])) if version == 5 else 0,
        "properties": draw(_props(version, kind, **kwargs)),
    }


def packets_of(kind: str, version: int) -> st.SearchStrategy[Packet]:
    """Valid packets of one type for protocol level `version` (4 or 5)."""
    if kind in ("pingreq", "pingresp"):
        return st.just({"type": kind})
    if kind in ("puback", "pubrec", "pubrel", "pubcomp"):
        return acks(kind, version)
    if kind in ("disconnect", "auth"):
        return reason_only(kind, version)
    return {
        "connect": connects,
        "connack": connacks,
        "publish": publishes,
        "subscribe": subscribes,
        "suback": subacks,
        "unsubscribe": unsubscribes,
        "unsuback": unsubacks,
    }[kind](version)


PACKET_TYPES_V4 = (
    "connect",
    "connack",
    "publish",
    "puback",
    "pubrec",
    "pubrel",
    "pubcomp",
    "subscribe",
    "suback",
    "unsubscribe",
    "unsuback",
    "pingreq",
    "pingresp",
    "disconnect",
)
PACKET_TYPES_V5 = (*PACKET_TYPES_V4, "auth")


def any_packet(version: int, *, connect: bool = False) -> st.SearchStrategy[Packet]:
    """Any valid packet of `version` except CONNECT unless asked (it may come only once)."""
    kinds = PACKET_TYPES_V5 if version == 5 else PACKET_TYPES_V4
    return st.one_of(*(packets_of(k, version) for k in kinds if connect or k != "connect"))


def frame(first_byte: int, body: bytes) -> bytes:
    """Fixed header (type and flags, remaining length as a variable byte integer) + body."""
    length, header = len(body), bytearray([first_byte])
    while True:
        byte, length = length % 128, length // 128
        header.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(header) + body


def str16(value: str | bytes) -> bytes:
    """A UTF-8 string or binary data field: two-byte length, then the bytes (§1.5.4, 1.5.6)."""
    data = value.encode() if isinstance(value, str) else value
    return len(data).to_bytes(2, "big") + data
