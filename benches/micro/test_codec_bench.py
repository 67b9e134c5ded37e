"""Codec throughput: ferromq._core side by side with amqtt and paho-mqtt in one run.

Workloads (MQTT 3.1.1, so every peer can take part):

* 10,000 QoS 1 PUBLISH, 64-byte payloads, topics like ``site/42/device/1234/telemetry``;
* 10,000 packets of a mixed stream (PUBLISH QoS 0/1/2, the four acks, SUBSCRIBE,
  SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP).

Each peer decodes the same buffer and encodes the same packets:

* ferromq: ``FrameDecoder.decode_buffer`` once over the whole buffer (what the receive
  buffer does per read), a dict per packet; ``decode_batch`` once, then every PUBLISH
  field read as a column (``ferromq-batch``); ``encode_many`` once, and ``encode`` per
  packet.
* amqtt: the way its protocol handler reads, ``MQTTFixedHeader.from_stream`` then the
  packet class's ``from_stream`` over an ``asyncio.StreamReader`` fed the buffer;
  ``to_bytes`` on packet objects built beforehand.
* paho-mqtt: decode with its internal ``_packet.decode_publish`` behind a Python
  framing loop (paho's client frames byte by byte from the socket, so this flatters
  it); encode as ``Client._send_publish`` builds the bytes, with the client's own
  ``_pack_remaining_length``/``_pack_str16`` and no socket. Paho has no decoder for
  packets a client never receives (SUBSCRIBE, PINGREQ ...) and no encoder for those it
  never sends, so it sits out the mixed stream.

Every implementation's output is checked against ferromq's before anything is timed.
Run with ``pytest benches/micro --benchmark-enable --benchmark-only``; ``report.py``
prints the ratios.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from amqtt.adapters import StreamReaderAdapter
from amqtt.mqtt import packet_class
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
from paho.mqtt import _packet as paho_packet
from paho.mqtt.client import PUBLISH, CallbackAPIVersion, Client
from paho.mqtt.enums import MQTTProtocolVersion

from ferromq import codec

N = 10_000
Packet = dict[str, Any]


def publish(i: int, qos: int = 1) -> Packet:
    return {
        "type": "publish",
        "topic": f"site/{i % 97}/device/{i}/telemetry",
        "payload": bytes((i + j) % 256 for j in range(64)),
        "qos": qos,
        "retain": False,
        "dup": False,
        "packet_id": i % 65_535 + 1 if qos else None,
        "properties": [],
    }


def mixed(i: int) -> Packet:
    pid = i % 65_535 + 1
    kind = i % 13
    if kind < 3:
        return publish(i, qos=kind)
    if kind < 7:
        ack = ("puback", "pubrec", "pubrel", "pubcomp")[kind - 3]
        return {"type": ack, "packet_id": pid, "reason_code": 0, "properties": []}
    if kind == 7:
        f = {"qos": 1, "no_local": False, "retain_as_published": False, "retain_handling": 0}
        filters = [f | {"filter": "site/+/device/#"}, f | {"filter": f"site/{i % 97}/#"}]
        return {"type": "subscribe", "packet_id": pid, "filters": filters, "properties": []}
    if kind == 8:
        return {"type": "suback", "packet_id": pid, "reason_codes": [1, 0x80], "properties": []}
    if kind == 9:
        filters = ["site/+/device/#", f"site/{i % 97}/#"]
        return {"type": "unsubscribe", "packet_id": pid, "filters": filters, "properties": []}
    if kind == 10:
        return {"type": "unsuback", "packet_id": pid, "reason_codes": [], "properties": []}
    return {"type": ("pingreq", "pingresp")[kind - 11]}


PUBLISHES = [publish(i) for i in range(N)]
MIXED = [mixed(i) for i in range(N)]
PUBLISH_WIRE = codec.encode_many(PUBLISHES, 4)
MIXED_WIRE = codec.encode_many(MIXED, 4)

# ---- ferromq -----------------------------------------------------------------------


def ferromq_decode(wire: bytes) -> list[Packet]:
    packets, consumed, error = codec.FrameDecoder(protocol_version=4).decode_buffer(wire)
    assert error is None and consumed == len(wire)
    return packets


Columns = tuple[bytes, bytes, list[int], list[str | None], list[bytes | None]]


def ferromq_decode_batch(wire: bytes) -> Columns:
    """Decode, then materialise every field a PUBLISH consumer reads (type, QoS, packet
    id, topic, payload) as Python columns: a columnar result, no object per packet."""
    batch = codec.FrameDecoder(protocol_version=4).decode_batch(wire)
    assert batch.error is None and batch.consumed == len(wire)
    return (
        batch.packet_types(),
        batch.qos(),
        batch.packet_ids(),
        batch.topics(),
        batch.payloads(),
    )


def ferromq_encode_each(packets: list[Packet]) -> bytes:
    encode = codec.encode
    return b"".join([encode(p, 4) for p in packets])


# ---- amqtt -------------------------------------------------------------------------


def to_amqtt(p: Packet) -> Any:
    kind, pid = p["type"], p.get("packet_id")
    if kind == "publish":
        return PublishPacket.build(p["topic"], p["payload"], pid, False, p["qos"], False)
    simple = {
        "puback": PubackPacket,
        "pubrec": PubrecPacket,
        "pubrel": PubrelPacket,
        "pubcomp": PubcompPacket,
        "unsuback": UnsubackPacket,
    }
    if kind in simple:
        return simple[kind].build(pid)
    if kind == "subscribe":
        return SubscribePacket.build([(f["filter"], f["qos"]) for f in p["filters"]], pid)
    if kind == "suback":
        return SubackPacket.build(pid, p["reason_codes"])
    if kind == "unsubscribe":
        return UnsubscribePacket.build(p["filters"], pid)
    return {"pingreq": PingReqPacket, "pingresp": PingRespPacket}[kind]()


AMQTT_PUBLISHES = [to_amqtt(p) for p in PUBLISHES]
AMQTT_MIXED = [to_amqtt(p) for p in MIXED]


async def _amqtt_read_all(wire: bytes) -> list[Any]:
    reader = asyncio.StreamReader()
    reader.feed_data(wire)
    reader.feed_eof()
    adapter = StreamReaderAdapter(reader)
    packets = []
    while (fixed := await MQTTFixedHeader.from_stream(adapter)) is not None:
        packets.append(await packet_class(fixed).from_stream(adapter, fixed_header=fixed))
    return packets


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def amqtt_decoder(loop: asyncio.AbstractEventLoop) -> Callable[[bytes], list[Any]]:
    return lambda wire: loop.run_until_complete(_amqtt_read_all(wire))


def amqtt_encode(packets: list[Any]) -> bytes:
    return b"".join([p.to_bytes() for p in packets])


# ---- paho-mqtt ---------------------------------------------------------------------

PAHO = Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv311)
PAHO_PUBLISHES = [
    (p["topic"].encode(), p["payload"], p["qos"], p["packet_id"] or 0) for p in PUBLISHES
]


def paho_encode_publishes(items: list[tuple[bytes, bytes, int, int]]) -> bytes:
    # Client._send_publish's packet building for MQTT 3.1.1, without logging or the
    # socket queue it ends in.
    pack_remaining_length, pack_str16 = PAHO._pack_remaining_length, PAHO._pack_str16
    out = []
    for topic, payload, qos, mid in items:
        packet = bytearray([PUBLISH | (qos << 1)])
        remaining_length = 2 + len(topic) + len(payload) + (2 if qos > 0 else 0)
        pack_remaining_length(packet, remaining_length)
        pack_str16(packet, topic)
        if qos > 0:
            packet.extend(struct.pack("!H", mid))
        packet.extend(payload)
        out.append(packet)
    return b"".join(out)


def paho_decode_publishes(wire: bytes) -> list[Any]:
    decode, v311 = paho_packet.decode_publish, MQTTProtocolVersion.MQTTv311
    packets, pos, end = [], 0, len(wire)
    while pos < end:
        header, pos = wire[pos], pos + 1
        length, shift = 0, 0
        while True:
            byte, pos = wire[pos], pos + 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        packets.append(decode(header, wire[pos : pos + length], v311))
        pos += length
    return packets


# ---- The same answers before any timing --------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def every_implementation_agrees(loop: asyncio.AbstractEventLoop) -> None:
    # A fixture, not a test: --benchmark-only skips tests that do not time anything.
    assert ferromq_decode(PUBLISH_WIRE) == PUBLISHES
    assert ferromq_decode(MIXED_WIRE) == MIXED
    assert list(zip(*ferromq_decode_batch(PUBLISH_WIRE), strict=True)) == [
        (3, p["qos"], p["packet_id"], p["topic"], p["payload"]) for p in PUBLISHES
    ]
    assert ferromq_encode_each(MIXED) == MIXED_WIRE
    assert amqtt_encode(AMQTT_PUBLISHES) == PUBLISH_WIRE
    assert amqtt_encode(AMQTT_MIXED) == MIXED_WIRE
    assert paho_encode_publishes(PAHO_PUBLISHES) == PUBLISH_WIRE
    decoded = amqtt_decoder(loop)(PUBLISH_WIRE)
    assert [(p.topic_name, p.data, p.packet_id) for p in decoded] == [
        (p["topic"], p["payload"], p["packet_id"]) for p in PUBLISHES
    ]
    assert [type(p) for p in amqtt_decoder(loop)(MIXED_WIRE)] == [type(p) for p in AMQTT_MIXED]
    decoded = paho_decode_publishes(PUBLISH_WIRE)
    assert [(p.topic.decode(), bytes(p.payload), p.mid) for p in decoded] == [
        (p["topic"], p["payload"], p["packet_id"]) for p in PUBLISHES
    ]


# ---- Benchmarks --------------------------------------------------------------------
# Slow peers run a fixed 5 rounds so the whole file stays near a minute.


def run(benchmark: Any, impl: str, fn: Callable[[Any], Any], arg: Any, *, slow: bool) -> None:
    benchmark.extra_info.update(impl=impl, packets=N)
    if slow:
        benchmark.pedantic(fn, args=(arg,), rounds=5, iterations=1, warmup_rounds=1)
    else:
        benchmark(fn, arg)


@pytest.mark.benchmark(group="decode 10k PUBLISH")
def test_decode_publish_ferromq(benchmark: Any) -> None:
    run(benchmark, "ferromq", ferromq_decode, PUBLISH_WIRE, slow=False)


@pytest.mark.benchmark(group="decode 10k PUBLISH")
def test_decode_publish_ferromq_batch(benchmark: Any) -> None:
    run(benchmark, "ferromq-batch", ferromq_decode_batch, PUBLISH_WIRE, slow=False)


@pytest.mark.benchmark(group="decode 10k PUBLISH")
def test_decode_publish_amqtt(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    run(benchmark, "amqtt", amqtt_decoder(loop), PUBLISH_WIRE, slow=True)


@pytest.mark.benchmark(group="decode 10k PUBLISH")
def test_decode_publish_paho(benchmark: Any) -> None:
    run(benchmark, "paho", paho_decode_publishes, PUBLISH_WIRE, slow=True)


@pytest.mark.benchmark(group="decode 10k mixed")
def test_decode_mixed_ferromq(benchmark: Any) -> None:
    run(benchmark, "ferromq", ferromq_decode, MIXED_WIRE, slow=False)


@pytest.mark.benchmark(group="decode 10k mixed")
def test_decode_mixed_amqtt(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    run(benchmark, "amqtt", amqtt_decoder(loop), MIXED_WIRE, slow=True)


@pytest.mark.benchmark(group="encode 10k PUBLISH")
def test_encode_publish_ferromq(benchmark: Any) -> None:
    run(benchmark, "ferromq", lambda ps: codec.encode_many(ps, 4), PUBLISHES, slow=False)


@pytest.mark.benchmark(group="encode 10k PUBLISH")
def test_encode_publish_ferromq_each(benchmark: Any) -> None:
    run(benchmark, "ferromq (encode per packet)", ferromq_encode_each, PUBLISHES, slow=False)


@pytest.mark.benchmark(group="encode 10k PUBLISH")
def test_encode_publish_amqtt(benchmark: Any) -> None:
    run(benchmark, "amqtt", amqtt_encode, AMQTT_PUBLISHES, slow=True)


@pytest.mark.benchmark(group="encode 10k PUBLISH")
def test_encode_publish_paho(benchmark: Any) -> None:
    run(benchmark, "paho", paho_encode_publishes, PAHO_PUBLISHES, slow=True)


@pytest.mark.benchmark(group="encode 10k mixed")
def test_encode_mixed_ferromq(benchmark: Any) -> None:
    run(benchmark, "ferromq", lambda ps: codec.encode_many(ps, 4), MIXED, slow=False)


@pytest.mark.benchmark(group="encode 10k mixed")
def test_encode_mixed_amqtt(benchmark: Any) -> None:
    run(benchmark, "amqtt", amqtt_encode, AMQTT_MIXED, slow=True)
