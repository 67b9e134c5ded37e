"""01 CONNECT / CONNACK (§3.1, §3.2) for 3.1.1 and 5.0: protocol name and level, the
reserved flag, client identifiers, one CONNECT per connection, the CONNECT timeout,
Session Present, takeover, credentials and the v5 CONNACK properties; MQTT 3.1's
unreserved flags, and control characters in names for all three versions."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest

from tests.conftest import RunningBroker

from .support import (
    ALL_VERSIONS,
    CONTROL_CHARACTERS,
    V5,
    V31,
    V311,
    VERSIONS,
    closed_with,
    connect,
    connected,
    disconnect,
    fence,
    open_client,
    ping,
    prop,
    publish,
    raw_closed,
    recv_publish,
    subscribe,
)


def utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack("!H", len(data)) + data


def raw_connect(
    name: str = "MQTT", level: int = 4, flags: int = 0x02, client_id: str = "raw"
) -> bytes:
    """A CONNECT built byte by byte, so name, level and flags can be wrong."""
    body = utf8(name) + bytes([level, flags]) + struct.pack("!H", 60)
    if level == 5:
        body += b"\x00"  # no properties
    body += utf8(client_id)
    return bytes([0x10, len(body)]) + body


def raw_socket(broker: RunningBroker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=5)


@VERSIONS
def test_connect_is_accepted(broker: RunningBroker, version: int) -> None:
    client, connack = connect(broker, "plain", version)
    assert connack["reason_code"] == 0
    assert connack["session_present"] is False  # clean start [MQTT-3.2.2-2]
    ping(client)


def test_v311_connack_is_exactly_four_bytes(broker: RunningBroker) -> None:
    sock = raw_socket(broker)
    sock.sendall(raw_connect(level=4))
    assert sock.recv(16) == b"\x20\x02\x00\x00"  # §3.2: no properties in 3.1.1
    sock.close()


def test_unsupported_protocol_level_is_refused_then_closed(broker: RunningBroker) -> None:
    # [MQTT-3.1.2-2]: refused, then closed. A level above 5 is a newer protocol than
    # this server's: it gets 5.0's CONNACK 0x84 (with its reason string). An older or
    # unknown one gets 3.1.1's return code 0x01, the form every earlier client decodes.
    newer = b"\x20\x1c\x00\x84\x19\x1f\x00\x16protocol level above 5"
    older = b"\x20\x02\x00\x01"
    for level, reply in [(0, older), (3, older), (6, newer), (0x84, newer)]:
        sock = raw_socket(broker)
        sock.sendall(raw_connect(level=level))
        assert raw_closed(sock) == reply, level


def test_wrong_protocol_name_closes(broker: RunningBroker) -> None:
    # [MQTT-3.1.2-1]: a wrong name may be disconnected; MQIsdp is valid only with
    # level 3, so with level 4 it is refused like any other mismatch.
    for name in ["MQIsdp", "MQTX", "mqtt"]:
        sock = raw_socket(broker)
        sock.sendall(raw_connect(name=name, level=4))
        assert raw_closed(sock) in (b"", b"\x20\x02\x00\x01"), name


@pytest.mark.parametrize("level", [V311, V5], ids=["v311", "v5"])
def test_reserved_connect_flag_closes_without_connack(broker: RunningBroker, level: int) -> None:
    # [MQTT-3.1.2-3]: the reserved flag set is a malformed packet; the connection is
    # closed and no session is created, so CONNACK 0 must never be sent.
    sock = raw_socket(broker)
    sock.sendall(raw_connect(level=level, flags=0x03))
    reply = raw_closed(sock)
    assert reply in (b"", b"\x20\x03\x00\x81\x00"), reply


@pytest.mark.parametrize("level", [V311, V5], ids=["v311", "v5"])
def test_connect_fixed_header_flags_close_without_connack(
    broker: RunningBroker, level: int
) -> None:
    # [MQTT-2.2.2-1, 2.2.2-2]: CONNECT's fixed-header flags are reserved, 0000.
    sock = raw_socket(broker)
    sock.sendall(b"\x12" + raw_connect(level=level)[1:])
    assert raw_closed(sock) in (b"", b"\x20\x03\x00\x81\x00")


def test_mqtt31_connect_flags_are_not_reserved(broker: RunningBroker) -> None:
    # MQTT 3.1 §3.1: DUP, QoS and RETAIN are "not used" in CONNECT and bit 0 of the
    # connect flags is unused; 3.1.1 reserved both [MQTT-2.2.2-1, 3.1.2-3], 3.1 did not.
    for header_flags, connect_flags in [(0x0, 0x03), (0xF, 0x02), (0xA, 0x03)]:
        sock = raw_socket(broker)
        connect_packet = raw_connect(name="MQIsdp", level=3, flags=connect_flags)
        sock.sendall(bytes([0x10 | header_flags]) + connect_packet[1:])
        assert sock.recv(16) == b"\x20\x02\x00\x00", (header_flags, connect_flags)
        sock.close()


@ALL_VERSIONS
def test_control_characters_in_client_id_and_user_name_are_refused(
    broker: RunningBroker, version: int
) -> None:
    # 5.0 §1.5.4 / 3.1.1 §1.5.3: a receiver may refuse them; refused by default
    # (limits.allow_control_characters) with "Client Identifier not valid" (0x85, 3.x
    # return code 2) and "Bad User Name or Password" (0x86, 3.x return code 4).
    id_code, user_code = (0x85, 0x86) if version == V5 else (2, 4)
    for text in CONTROL_CHARACTERS:
        client, connack = connect(broker, text, version)
        assert connack["reason_code"] == id_code, text
        assert closed_with(client) == []
        client, connack = connect(broker, "cc-user", version, username=text, password=b"pw")
        assert connack["reason_code"] == user_code, text
        assert closed_with(client) == []
    ping(connected(broker, "no-break\u00a0space", version, username="\u00a0"))


@ALL_VERSIONS
def test_control_characters_in_a_will_topic_are_refused(
    broker: RunningBroker, version: int
) -> None:
    # v5: CONNACK 0x90 "The Will Topic Name is not malformed, but is not accepted";
    # 3.x has no return code for it: closed without CONNACK.
    client = open_client(broker, version)
    will = {"topic": "wills/\x07", "payload": b"x", "qos": 0, "retain": False, "properties": []}
    client.send(
        {"type": "connect", "protocol_version": version, "client_id": "cc-will", "will": will}
    )
    got = client.expect_closed()
    if version == V5:
        assert [(p["type"], p["reason_code"]) for p in got] == [("connack", 0x90)]
    else:
        assert got == []


def test_control_characters_are_accepted_when_allowed(permissive_broker: RunningBroker) -> None:
    # FERROMQ_LIMITS__ALLOW_CONTROL_CHARACTERS=true reaches the engine.
    for version in (V31, V311, V5):
        client = connected(permissive_broker, "tab\tid", version, username="u\x85")
        assert subscribe(client, ("a\x07/#", 1)) == [1]
        publish(client, "a\x07/b", b"x")
        assert recv_publish(client)["topic"] == "a\x07/b"
        disconnect(client)


@pytest.mark.parametrize("level", [V311, V5], ids=["v311", "v5"])
def test_will_qos_without_will_flag_closes(broker: RunningBroker, level: int) -> None:
    # [MQTT-3.1.2-11, 3.1.2-13]: Will QoS and Will Retain must be 0 without a will.
    sock = raw_socket(broker)
    sock.sendall(raw_connect(level=level, flags=0x02 | 0x08))
    assert raw_closed(sock) in (b"", b"\x20\x03\x00\x81\x00")


def test_v5_empty_client_id_is_assigned_and_returned(broker: RunningBroker) -> None:
    # [MQTT-3.1.3-6, 3.2.2-16]: the server assigns a unique id and returns it.
    first, connack = connect(broker, "", V5)
    assert connack["reason_code"] == 0
    assigned = prop(connack, "assigned_client_identifier")
    assert assigned
    _second, connack2 = connect(broker, "", V5)
    assert prop(connack2, "assigned_client_identifier") not in (None, assigned)
    ping(first)  # two assigned ids, no takeover between them


def test_v5_empty_client_id_with_clean_start_0_is_accepted(broker: RunningBroker) -> None:
    _client, connack = connect(broker, "", V5, clean=False)
    assert connack["reason_code"] == 0
    assert prop(connack, "assigned_client_identifier")


def test_v311_empty_client_id_with_clean_session_is_accepted(broker: RunningBroker) -> None:
    # [MQTT-3.1.3-6, 3.1.3-7]
    client, connack = connect(broker, "", V311, clean=True)
    assert connack["reason_code"] == 0
    ping(client)


def test_v311_empty_client_id_without_clean_session_is_refused(broker: RunningBroker) -> None:
    # [MQTT-3.1.3-8]: CONNACK 0x02 (identifier rejected), then close [MQTT-3.2.2-5].
    client, connack = connect(broker, "", V311, clean=False)
    assert connack["reason_code"] == 0x02
    assert connack["session_present"] is False  # [MQTT-3.2.2-4]
    assert closed_with(client) == []


@VERSIONS
def test_second_connect_is_a_protocol_error(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.0-2]: v5 DISCONNECT 0x82 (Protocol Error), 3.1.1 just the close.
    client = connected(broker, "twice", version)
    client.send({"type": "connect", "protocol_version": version, "client_id": "twice"})
    assert closed_with(client) == ([0x82] if version == V5 else [])


@VERSIONS
def test_packet_before_connect_closes(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.0-1]: the first packet must be CONNECT; nothing is answered.
    packets: list[dict[str, Any]] = [
        {"type": "pingreq"},
        {"type": "publish", "topic": "early", "payload": b"x"},
        {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "early", "qos": 0}]},
    ]
    for packet in packets:
        client = open_client(broker, version)
        client.send(packet)
        assert client.expect_closed() == [], packet


def test_silent_socket_is_closed_after_the_connect_timeout(limited_broker: RunningBroker) -> None:
    # `[limits] connect_timeout = 1`: a socket that never sends CONNECT is closed.
    sock = raw_socket(limited_broker)
    started = time.monotonic()
    assert raw_closed(sock, timeout=5) == b""
    assert time.monotonic() - started >= 0.9


def test_partial_connect_is_closed_after_the_connect_timeout(
    limited_broker: RunningBroker,
) -> None:
    sock = raw_socket(limited_broker)
    sock.sendall(raw_connect()[:5])
    assert raw_closed(sock, timeout=5) == b""


@VERSIONS
def test_session_present(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.2.2-2, 3.2.2-3]: 1 when a stored session is resumed, else 0.
    expiry = [("session_expiry_interval", 60)] if version == V5 else []
    client, connack = connect(broker, "keeper", version, clean=False, properties=expiry)
    assert connack["session_present"] is False
    disconnect(client)
    client, connack = connect(broker, "keeper", version, clean=False, properties=expiry)
    assert connack["session_present"] is True
    disconnect(client)
    client, connack = connect(broker, "keeper", version, clean=True, properties=expiry)
    assert connack["session_present"] is False  # clean start discards it


def test_v5_session_expiry_0_leaves_no_session(broker: RunningBroker) -> None:
    client, _ = connect(broker, "brief", V5, clean=False)
    disconnect(client)
    _client, connack = connect(broker, "brief", V5, clean=False)
    assert connack["session_present"] is False  # [MQTT-3.1.2-23] expiry absent = 0


@VERSIONS
def test_takeover_closes_the_old_connection(broker: RunningBroker, version: int) -> None:
    # [MQTT-3.1.4-3]: the existing connection is closed; v5 says why (0x8E).
    expiry = [("session_expiry_interval", 60)] if version == V5 else []
    old = connected(broker, "twin", version, clean=False, properties=expiry)
    assert subscribe(old, ("takeover/t", 1)) == [1]
    new, connack = connect(broker, "twin", version, clean=False, properties=expiry)
    assert connack["reason_code"] == 0
    assert connack["session_present"] is True
    assert closed_with(old) == ([0x8E] if version == V5 else [])
    # The subscription went with the session to the new connection.
    publisher = connected(broker, "takeover-pub", version)
    publish(publisher, "takeover/t", b"after", qos=1)
    got = new.recv()
    assert got["type"] == "publish" and got["payload"] == b"after"


@VERSIONS
def test_takeover_with_clean_start_discards_the_session(
    broker: RunningBroker, version: int
) -> None:
    old = connected(broker, "twin2", version, clean=False)
    subscribe(old, "takeover2/t")
    new, connack = connect(broker, "twin2", version, clean=True)
    assert connack["session_present"] is False
    closed_with(old)
    assert subscribe(new, "takeover2/fence") == [0]
    publisher = connected(broker, "takeover2-pub", version)
    publish(publisher, "takeover2/t", b"old subscription")
    fence(publisher, new, "takeover2/fence")


@VERSIONS
def test_username_and_password_are_accepted(broker: RunningBroker, version: int) -> None:
    client, connack = connect(broker, "creds", version, username="user", password=b"\x00pw\xff")
    assert connack["reason_code"] == 0
    ping(client)


def test_v5_password_without_username_is_accepted(broker: RunningBroker) -> None:
    # 5.0 dropped 3.1.1's rule that a password needs a user name.
    client, connack = connect(broker, "pw-only", V5, password=b"secret")
    assert connack["reason_code"] == 0
    ping(client)


def test_v311_password_without_username_closes(broker: RunningBroker) -> None:
    # [MQTT-3.1.2-22]
    sock = raw_socket(broker)
    body = utf8("MQTT") + bytes([4, 0x02 | 0x40]) + struct.pack("!H", 60)
    body += utf8("pw-only") + utf8("secret")
    sock.sendall(bytes([0x10, len(body)]) + body)
    assert raw_closed(sock) == b""


def test_v5_connack_announces_the_limits(broker: RunningBroker) -> None:
    # §3.2.2.3: the defaults of [limits].
    _client, connack = connect(broker, "limits", V5)
    assert prop(connack, "receive_maximum") == 1024
    assert prop(connack, "maximum_packet_size") == 1024 * 1024
    assert prop(connack, "topic_alias_maximum") == 64
    assert prop(connack, "session_expiry_interval") is None  # granted as asked


def test_v5_connack_follows_the_config(limited_broker: RunningBroker) -> None:
    _client, connack = connect(limited_broker, "limits", V5)
    assert prop(connack, "receive_maximum") == 2
    assert prop(connack, "maximum_packet_size") == 256
    assert prop(connack, "topic_alias_maximum") == 4


@VERSIONS
def test_client_id_longer_than_the_limit_is_refused(
    limited_broker: RunningBroker, version: int
) -> None:
    # `[limits] max_client_id_length = 23`, the minimum a server must accept
    # [MQTT-3.1.3-5]: longer ids may be refused, with 0x02 (3.1.1) or 0x85 (5.0)
    # [MQTT-3.1.3-9 (3.1.1) / 3.1.3-8 (5.0)], then the connection is closed.
    accepted, connack = connect(limited_broker, "x" * 23, version)
    assert connack["reason_code"] == 0
    refused, connack = connect(limited_broker, "y" * 24, version)
    assert connack["reason_code"] == (0x85 if version == V5 else 0x02)
    assert connack["session_present"] is False
    assert closed_with(refused) == []
    ping(accepted)
