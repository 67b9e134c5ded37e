"""Helpers for the conformance tests: exact packets through `RawClient`, one broker
per test (the `broker` fixture, under the loops of `LOOPS`).

Absence is proven with a fence, not a sleep, wherever the broker's ordering allows:
the engine handles one connection's packets in order and routes each message before
the next, so when a marker published after the message under test reaches the
subscriber first, the message under test was not delivered. `nothing_arrives` (a
short wait) is for the few cases with no such order to lean on.
"""

from __future__ import annotations

import itertools
import socket
from typing import Any

import pytest

from tests.conftest import RunningBroker
from tests.support.mqtt_raw import RawClient
from tests.support.slow import SLOW

LOOPS = ["uvloop", "asyncio"] if SLOW else ["uvloop"]
"""The event loops the conformance brokers run on: the default (uvloop), and with
FERROMQ_SLOW=1 stdlib asyncio as well. The protocol is the engine's, the same under
either loop; what the loops do differently (transports, reads cut anywhere) is the
integration suite's, which runs every test under both."""

V31, V311, V5 = 3, 4, 5
VERSIONS = pytest.mark.parametrize("version", [V311, V5], ids=["v311", "v5"])
# For the rules where MQTT 3.1 (protocol name "MQIsdp") needs checking too.
ALL_VERSIONS = pytest.mark.parametrize("version", [V31, V311, V5], ids=["v31", "v311", "v5"])
# Control characters (5.0 §1.5.4, 3.1.1 §1.5.3): C0, DEL and C1 (two UTF-8 bytes).
CONTROL_CHARACTERS = ["tab\there", "esc\x1b", "del\x7f", "c1\x85", "c1\x9f"]

Packet = dict[str, Any]

_packet_ids = itertools.count(1)


def next_packet_id() -> int:
    return next(_packet_ids) % 65535 + 1


def open_client(broker: RunningBroker, version: int, timeout: float = 5.0) -> RawClient:
    return RawClient(broker.host, broker.port, version=version, timeout=timeout)


def connect(
    broker: RunningBroker, client_id: str, version: int, clean: bool = True, **fields: Any
) -> tuple[RawClient, Packet]:
    """Open a socket and CONNECT; returns the client and its CONNACK, whatever it says."""
    client = open_client(broker, version)
    return client, client.connect(client_id, clean=clean, **fields)


def connected(
    broker: RunningBroker, client_id: str, version: int, clean: bool = True, **fields: Any
) -> RawClient:
    client, connack = connect(broker, client_id, version, clean, **fields)
    assert connack["reason_code"] == 0, connack
    return client


def prop(packet: Packet, name: str) -> Any:
    """The value of a property that occurs at most once, or None."""
    values = props(packet, name)
    assert len(values) <= 1, (name, packet)
    return values[0] if values else None


def props(packet: Packet, name: str) -> list[Any]:
    return [value for key, value in packet.get("properties", []) if key == name]


def subscribe(
    client: RawClient,
    *filters: str | tuple[str, int] | dict[str, Any],
    properties: list[tuple[str, Any]] | None = None,
) -> list[int]:
    """SUBSCRIBE and return the SUBACK's reason codes (checking the packet id)."""
    entries = []
    for item in filters:
        if isinstance(item, str):
            entries.append({"filter": item, "qos": 0})
        elif isinstance(item, tuple):
            entries.append({"filter": item[0], "qos": item[1]})
        else:
            entries.append(item)
    packet_id = next_packet_id()
    client.send(
        {
            "type": "subscribe",
            "packet_id": packet_id,
            "filters": entries,
            "properties": properties or [],
        }
    )
    suback = client.recv()
    assert suback["type"] == "suback", suback
    assert suback["packet_id"] == packet_id  # [MQTT-3.8.4-2]
    return list(suback["reason_codes"])


def unsubscribe(client: RawClient, *filters: str) -> Packet:
    packet_id = next_packet_id()
    client.send({"type": "unsubscribe", "packet_id": packet_id, "filters": list(filters)})
    unsuback = client.recv()
    assert unsuback["type"] == "unsuback", unsuback
    assert unsuback["packet_id"] == packet_id  # [MQTT-3.10.4-4]
    return {**unsuback, "reason_codes": list(unsuback["reason_codes"])}


def publish(
    client: RawClient,
    topic: str,
    payload: bytes = b"",
    qos: int = 0,
    retain: bool = False,
    properties: list[tuple[str, Any]] | None = None,
    packet_id: int | None = None,
) -> Packet | None:
    """PUBLISH and complete the publisher's side of the flow; returns the PUBACK or
    PUBREC (None for QoS 0)."""
    packet: Packet = {
        "type": "publish",
        "topic": topic,
        "payload": payload,
        "qos": qos,
        "retain": retain,
        "properties": properties or [],
    }
    if qos:
        packet["packet_id"] = packet_id or next_packet_id()
    client.send(packet)
    if qos == 0:
        return None
    ack = client.recv()
    assert ack["type"] == ("puback" if qos == 1 else "pubrec"), ack
    assert ack["packet_id"] == packet["packet_id"]
    if qos == 2:
        client.send({"type": "pubrel", "packet_id": packet["packet_id"]})
        comp = client.recv()
        assert comp == {**comp, "type": "pubcomp", "packet_id": packet["packet_id"]}
        assert comp["reason_code"] == 0, comp
    return ack


def recv_publish(client: RawClient, timeout: float = 5.0) -> Packet:
    packet = client.recv(timeout)
    assert packet["type"] == "publish", packet
    return packet


def receive(client: RawClient, timeout: float = 5.0) -> Packet:
    """The next PUBLISH, acknowledged as a well-behaved receiver does (QoS 2: PUBREC,
    then PUBCOMP for the PUBREL)."""
    packet = recv_publish(client, timeout)
    packet_id = packet["packet_id"]
    if packet["qos"] == 1:
        client.send({"type": "puback", "packet_id": packet_id})
    elif packet["qos"] == 2:
        client.send({"type": "pubrec", "packet_id": packet_id})
        recv_pubrel(client, packet_id, timeout)
        client.send({"type": "pubcomp", "packet_id": packet_id})
    return packet


def recv_pubrel(client: RawClient, packet_id: int, timeout: float = 5.0) -> Packet:
    """The PUBREL for `packet_id`; PUBLISHes that overtake it stay queued in order."""
    skipped = []
    while True:
        packet = client.recv(timeout)
        if packet["type"] == "publish":
            skipped.append(packet)
            continue
        assert packet["type"] == "pubrel" and packet["packet_id"] == packet_id, packet
        client.pending[:0] = skipped
        return packet


def fence(publisher: RawClient, subscriber: RawClient, topic: str) -> None:
    """Publish a QoS 0 marker on `topic` (which `subscriber` must receive) and assert
    it is the next packet `subscriber` gets: nothing routed before it is on the way."""
    marker = b"fence-" + str(next_packet_id()).encode()
    publish(publisher, topic, marker)
    packet = subscriber.recv()
    assert packet["type"] == "publish" and packet["payload"] == marker, packet


def ping(client: RawClient) -> None:
    """A PINGREQ round trip: everything the broker sent this client before answering
    it has arrived."""
    client.send({"type": "pingreq"})
    packet = client.recv()
    assert packet["type"] == "pingresp", packet


def nothing_arrives(client: RawClient, timeout: float = 0.5) -> None:
    with pytest.raises(TimeoutError):
        packet = client.recv(timeout)
        pytest.fail(f"unexpected packet {packet}")


def disconnect_reasons(packets: list[Packet]) -> list[int]:
    return [p["reason_code"] for p in packets if p["type"] == "disconnect"]


def closed_with(client: RawClient, timeout: float = 5.0) -> list[int]:
    """Read until the broker closes the connection; the DISCONNECT reason codes sent
    before the close (always empty for 3.1.1, which has no server DISCONNECT)."""
    got = client.expect_closed(timeout)
    reasons = disconnect_reasons(got)
    if client.version != V5:
        assert got == [], got
    return reasons


def raw_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Every byte the broker sends on a raw socket until it closes it."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def disconnect(client: RawClient, reason: int = 0, **fields: Any) -> None:
    client.send({"type": "disconnect", "reason_code": reason, **fields})
    assert client.expect_closed() == []
