"""10 Malformed and hostile input (§1.5.4, §2, §4.13) for 3.1.1 and 5.0: bad frames,
oversize packets, invalid UTF-8, wildcards in topic names. The offending connection
is closed (v5: DISCONNECT with the reason first; 3.1.1 has no server DISCONNECT),
every other client keeps being served, and sockets that never finish a CONNECT do
not stop the broker."""

from __future__ import annotations

import socket

import pytest

from ferromq._core import encode_many
from tests.conftest import RunningBroker
from tests.support.mqtt_raw import RawClient

from .support import (
    V5,
    V311,
    VERSIONS,
    closed_with,
    connected,
    fence,
    ping,
    publish,
    recv_publish,
    subscribe,
)

MALFORMED, PROTOCOL_ERROR, TOPIC_NAME_INVALID, PACKET_TOO_LARGE = 0x81, 0x82, 0x90, 0x95


def v311(frame: bytes) -> bytes:
    """A v5 PUBLISH frame minus its empty property length: the same packet in 3.1.1."""
    assert frame[0] & 0xF0 == 0x30 and frame[-1] == 0
    return bytes([frame[0], frame[1] - 1]) + frame[2:-1]


# Frames sent after a successful CONNECT, with the v5 DISCONNECT reason expected.
BAD_FRAMES = {
    "publish QoS 3 [MQTT-3.3.1-4]": (b"\x36\x05\x00\x01t\x00\x01", MALFORMED),
    "DUP on QoS 0 [MQTT-3.3.1-2]": (b"\x38\x04\x00\x01t\x00", MALFORMED),
    "PUBREL flags 0000 [MQTT-3.6.1-1]": (b"\x60\x02\x00\x01", MALFORMED),
    "SUBSCRIBE flags 0000 [MQTT-3.8.1-1]": (b"\x80\x07\x00\x01\x00\x00\x01t\x00", MALFORMED),
    "remaining length of 5 bytes [§1.5.5]": (b"\x30\xff\xff\xff\xff\x7f", MALFORMED),
    "string longer than the packet": (b"\x30\x03\x00\x0at", MALFORMED),
    "reserved packet type 0": (b"\x00\x00", MALFORMED),
    "PINGREQ with a body": (b"\xc0\x01\x00", MALFORMED),
    "PUBACK too short": (b"\x40\x01\x00", MALFORMED),
    "CONNACK from a client": (b"\x20\x03\x00\x00\x00", PROTOCOL_ERROR),
}

BAD_TOPICS = {
    "invalid UTF-8 [MQTT-1.5.4-1]": (b"\x30\x05\x00\x02\xff\xfe\x00", MALFORMED),
    "UTF-16 surrogate [MQTT-1.5.4-1]": (b"\x30\x06\x00\x03\xed\xa0\x80\x00", MALFORMED),
    "U+0000 [MQTT-1.5.4-2]": (b"\x30\x06\x00\x03a\x00b\x00", MALFORMED),
    "+ in a topic name [MQTT-3.3.2-2]": (b"\x30\x06\x00\x03a/+\x00", TOPIC_NAME_INVALID),
    "# as a topic name [MQTT-3.3.2-2]": (b"\x30\x04\x00\x01#\x00", TOPIC_NAME_INVALID),
}


def frame_for(version: int, frame: bytes) -> bytes:
    is_publish_with_props = frame[0] & 0xF0 == 0x30 and frame[-1] == 0 and len(frame) > 4
    return v311(frame) if version == V311 and is_publish_with_props else frame


def bystander(broker: RunningBroker, version: int) -> tuple[RawClient, RawClient]:
    watch = connected(broker, "bystander", version)
    subscribe(watch, ("alive/#", 1))
    publisher = connected(broker, "bystander-pub", version)
    return watch, publisher


def still_served(watch: RawClient, publisher: RawClient, tag: str) -> None:
    publish(publisher, "alive/t", tag.encode(), qos=1)
    assert recv_publish(watch)["payload"] == tag.encode()


@VERSIONS
@pytest.mark.parametrize("cases", [BAD_FRAMES, BAD_TOPICS], ids=["frames", "topics"])
def test_bad_input_closes_only_that_connection(
    broker: RunningBroker, version: int, cases: dict[str, tuple[bytes, int]]
) -> None:
    # [MQTT-4.8.0-1 (3.1.1) / 4.13.1-1 (5.0)]: close, with DISCONNECT and the
    # reason code in 5.0 (Malformed Packet, Protocol Error, Topic Name invalid).
    watch, publisher = bystander(broker, version)
    for name, (frame, reason) in cases.items():
        client = connected(broker, "offender", version)
        client.send_raw(frame_for(version, frame))
        assert closed_with(client) == ([reason] if version == V5 else []), name
        still_served(watch, publisher, name)


def test_v5_auth_without_authentication_method_is_a_protocol_error(
    broker: RunningBroker,
) -> None:
    # §4.12: AUTH only after a CONNECT with an Authentication Method.
    client = connected(broker, "auth", V5)
    client.send_raw(b"\xf0\x00")
    assert closed_with(client) == [PROTOCOL_ERROR]


def test_v311_reserved_packet_type_15_closes(broker: RunningBroker) -> None:
    client = connected(broker, "type15", V311)
    client.send_raw(b"\xf0\x00")
    assert closed_with(client) == []


@VERSIONS
def test_oversize_packet_closes(limited_broker: RunningBroker, version: int) -> None:
    # `[limits] max_packet_size = 256`: v5 DISCONNECT 0x95 [MQTT-3.2.2-15 is the
    # client's side; §3.1.2.11.4 / 4.13]; 3.1.1 closes.
    watch, publisher = bystander(limited_broker, version)
    client = connected(limited_broker, "big", version)
    publish(client, "alive/t", b"x" * 200)  # under the limit: fine
    assert recv_publish(watch)["payload"] == b"x" * 200
    body = b"\x00\x01t" + (b"\x00" if version == V5 else b"") + b"x" * 260
    client.send_raw(b"\x30" + bytes([len(body) & 0x7F | 0x80, len(body) >> 7]) + body)
    assert closed_with(client) == ([PACKET_TOO_LARGE] if version == V5 else [])
    still_served(watch, publisher, "after oversize")


@VERSIONS
def test_oversize_is_refused_from_the_length_header(
    limited_broker: RunningBroker, version: int
) -> None:
    # A length header announcing 1 MiB is enough; the broker does not wait for (or
    # buffer) the body.
    client = connected(limited_broker, "announced", version)
    client.send_raw(b"\x30\x80\x80\x40")
    assert closed_with(client) == ([PACKET_TOO_LARGE] if version == V5 else [])


@VERSIONS
def test_invalid_utf8_client_id_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-1.5.4-1]: no CONNACK 0 for a CONNECT with an ill-formed string.
    sock = socket.create_connection((broker.host, broker.port), timeout=5)
    body = b"\x00\x04MQTT" + bytes([version, 0x02]) + b"\x00\x3c"
    body += (b"\x00" if version == V5 else b"") + b"\x00\x02\xc3\x28"
    sock.sendall(bytes([0x10, len(body)]) + body)
    data = b""
    while chunk := sock.recv(64):
        data += chunk
    assert data in (b"", b"\x20\x03\x00\x81\x00"), data


@VERSIONS
def test_bom_in_a_topic_is_kept(broker: RunningBroker, version: int) -> None:
    # [MQTT-1.5.4-3]: U+FEFF is a character of the topic, never stripped.
    sub = connected(broker, "bom", version)
    subscribe(sub, "\ufeffbom", "bom")
    publisher = connected(broker, "bom-pub", version)
    publish(publisher, "\ufeffbom", b"with bom")
    got = recv_publish(sub)
    assert (got["topic"], got["payload"]) == ("\ufeffbom", b"with bom")
    fence(publisher, sub, "bom")


@VERSIONS
def test_many_packets_in_one_write(broker: RunningBroker, version: int) -> None:
    # Frames are decoded back to back from one buffer; every one is answered, in order.
    client = connected(broker, "burst", version)
    packets = [
        {"type": "publish", "topic": "burst", "payload": b"x", "qos": 1, "packet_id": i}
        for i in range(1, 101)
    ]
    client.send_raw(encode_many(packets, version))
    assert [client.recv()["packet_id"] for _ in range(100)] == list(range(1, 101))


def test_half_open_and_slow_sockets_do_not_stop_the_broker(broker: RunningBroker) -> None:
    # 200 sockets that never send CONNECT and 10 that dribble theirs a byte at a time,
    # while normal clients connect, subscribe, publish and receive.
    idle = [socket.create_connection((broker.host, broker.port), timeout=5) for _ in range(200)]
    slow = [socket.create_connection((broker.host, broker.port), timeout=5) for _ in range(10)]
    connects = []
    for i, version in enumerate([V311, V5] * 5):
        body = b"\x00\x04MQTT" + bytes([version, 0x02]) + b"\x00\x3c"
        client_id = f"slow-{i}".encode()
        body += (b"\x00" if version == V5 else b"") + len(client_id).to_bytes(2, "big") + client_id
        connects.append(bytes([0x10, len(body)]) + body)
    try:
        sub = connected(broker, "normal-sub", V5)
        subscribe(sub, ("normal/t", 1))
        publisher = connected(broker, "normal-pub", V311)
        longest = max(len(c) for c in connects)
        for offset in range(longest):
            for sock, data in zip(slow, connects, strict=True):
                if offset < len(data):
                    sock.sendall(data[offset : offset + 1])
            publish(publisher, "normal/t", str(offset).encode(), qos=1)
            got = recv_publish(sub)
            assert got["payload"] == str(offset).encode()
            sub.send({"type": "puback", "packet_id": got["packet_id"]})
        for sock in slow:  # each dribbled CONNECT was reassembled and accepted
            assert sock.recv(64).startswith(b"\x20"), "no CONNACK"
        ping(sub)
        fresh = connected(broker, "after-flood", V5)
        ping(fresh)
    finally:
        for sock in idle + slow:
            sock.close()
