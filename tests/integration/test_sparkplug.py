"""Sparkplug B "Aware" (``[sparkplug] aware``, docs/sparkplug.md) on a running
``ferromq serve`` with MQTT clients over real sockets: an edge node's NBIRTH and DBIRTH
kept as retained certificates that a host application connecting later reads, still
there after ``kill -9`` of the broker, and the edge node's NDEATH will stamped with the
time the broker sends it. In the suite's second pass the node has two shards, so the
edge node and the host are served by different shard processes."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient

CERTIFICATES = "$sparkplug/certificates/"
NBIRTH, DBIRTH = "spBv1.0/plant/NBIRTH/edge-1", "spBv1.0/plant/DBIRTH/edge-1/pump"
NDEATH = "spBv1.0/plant/NDEATH/edge-1"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def sparkplug_payload(timestamp: int, seq: int) -> bytes:
    """A Sparkplug B Payload: timestamp (field 1) and seq (field 3), both varints."""
    return b"\x08" + _varint(timestamp) + b"\x18" + _varint(seq)


def timestamp_of(payload: bytes) -> int:
    assert payload[0] == 0x08, payload
    value, shift = 0, 0
    for byte in payload[1:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value
    raise AssertionError(payload)


def _aware(tmp_path: Path, loop: str) -> RunningBroker:
    store = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    return start_broker(tmp_path, loop, "[sparkplug]\naware = true\n", env=store)


def _certificates(broker: RunningBroker) -> dict[str, bytes]:
    host = RawClient(broker.host, broker.port, version=5)
    assert host.connect("host")["reason_code"] == 0
    host.send(
        {"type": "subscribe", "packet_id": 1, "filters": [{"filter": CERTIFICATES + "#", "qos": 1}]}
    )
    assert host.recv()["type"] == "suback"
    got: dict[str, bytes] = {}
    while len(got) < 2:
        packet = host.recv()
        assert packet["retain"], packet
        got[packet["topic"]] = bytes(packet["payload"])
    host.close()
    return got


def test_a_late_host_reads_every_birth_even_after_kill_9(tmp_path: Path, loop: str) -> None:
    broker = _aware(tmp_path, loop)
    try:
        edge = RawClient(broker.host, broker.port, version=4)
        assert edge.connect("edge-1")["reason_code"] == 0
        for packet_id, (topic, payload) in enumerate([(NBIRTH, b"node"), (DBIRTH, b"pump")], 1):
            edge.send(
                {
                    "type": "publish",
                    "topic": topic,
                    "payload": payload,
                    "qos": 1,
                    "packet_id": packet_id,
                }
            )
            assert edge.recv()["type"] == "puback"  # acknowledged: stored
        expected = {CERTIFICATES + NBIRTH: b"node", CERTIFICATES + DBIRTH: b"pump"}
        assert _certificates(broker) == expected
        broker.kill()
        broker = _aware(tmp_path, loop)
        assert _certificates(broker) == expected
    finally:
        broker.stop()


def test_an_ndeath_will_carries_the_time_it_is_sent(tmp_path: Path, loop: str) -> None:
    broker = _aware(tmp_path, loop)
    try:
        host = RawClient(broker.host, broker.port, version=5)
        assert host.connect("host")["reason_code"] == 0
        host.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": NDEATH, "qos": 1}]})
        assert host.recv()["type"] == "suback"
        edge = RawClient(broker.host, broker.port, version=4)
        composed = sparkplug_payload(1_000, 3)
        will = {"topic": NDEATH, "payload": composed, "qos": 1, "retain": False}
        assert edge.connect("edge-1", will=will)["reason_code"] == 0
        time.sleep(1.0)
        before = time.time_ns() // 1_000_000
        edge.close()  # no DISCONNECT: the will is sent
        death = bytes(host.recv()["payload"])
        after = time.time_ns() // 1_000_000
        # The engine's wall clock is its loop tick's monotonic milliseconds plus an
        # offset set from time.time(): within a second of this process's, never the
        # composed 1,000 the will carried.
        assert before - 1_000 <= timestamp_of(death) <= after + 1_000
        assert death.endswith(b"\x18\x03"), death  # seq kept
    finally:
        broker.stop()
