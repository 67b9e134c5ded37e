"""The stream's Kafka sink end to end: a real ``ferromq serve`` with ``[stream] sink =
"kafka"``, paho publishers, a real Kafka, and the records read back with aiokafka's
consumer (its own record-batch reader) and decoded with fastavro against the schema the
broker ships (``ferromq.stream.schema_text``).

What a user would notice: every message and lifecycle event arrives, keyed by device
(``key = "level:1"``), one device in one partition in publish order; with ``after_kafka``
a QoS 1 publisher gets no PUBACK while Kafka is frozen and gets it once Kafka is back,
its record stored; with ``async`` publishers keep getting PUBACKs while Kafka is frozen,
records spill to disk at shutdown and a restart sends them; a spill too small for the
backlog is counted in ``/metrics``. Tests that freeze Kafka (SIGSTOP) share one Kafka
of their own, so the session's stays usable.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2
from aiokafka.record.default_records import DefaultRecordBatch
from fastavro import parse_schema, schemaless_reader

from ferromq.stream import schema_text
from ferromq.stream.spill import Spill
from tests.conftest import (
    RunningBroker,
    Starter,
    shard_directory,
    start_broker,
    suite_shards,
)
from tests.integration.test_kafka_store import frozen
from tests.support import services
from tests.support.admin_client import admin_config, scrape, value
from tests.support.commands import serve_exit
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client
from tests.support.services import free_port
from tests.support.stream_config import kafka_stream_config
from tests.support.waiting import wait_for

SCHEMA = parse_schema(json.loads(schema_text()))
PARTITIONS = 3


def stream_config(bootstrap: str, prefix: str, delivery: str, extra: str = "") -> str:
    return (
        kafka_stream_config(
            bootstrap, prefix, partitions=PARTITIONS, delivery=delivery, kafka_keys=extra
        )
        + """
[kafka]
request_timeout = 2
"""
    )


def unique_prefix() -> str:
    return f"stream.{uuid.uuid4().hex[:8]}."


Record = dict[str, Any]


def read_records(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Record]:
    """Records of ``topic`` from the start of every partition until ``count`` distinct
    ids came, decoded, each with its ``_partition``, ``_offset``, ``_key`` and
    ``_timestamp``; fails after ``timeout``."""

    async def read() -> list[Record]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            # The sink made the topic with the configured count.
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            records: list[Record] = []
            deadline = asyncio.get_running_loop().time() + timeout
            while len({r["id"] for r in records}) < count:
                if asyncio.get_running_loop().time() > deadline:
                    pytest.fail(f"{topic}: {len(records)} of {count} records in {timeout}s")
                fetched = await consumer.getmany(timeout_ms=1000)
                for tp_records in fetched.values():
                    for message in tp_records:
                        assert message.value is not None
                        record = schemaless_reader(io.BytesIO(message.value), SCHEMA, None)
                        assert isinstance(record, dict)
                        record.update(
                            _partition=message.partition,
                            _offset=message.offset,
                            _key=message.key,
                            _timestamp=message.timestamp,
                        )
                        records.append(record)
            return records
        finally:
            await consumer.stop()

    return asyncio.run(read())


def publish(broker: RunningBroker, client_id: str, topic: str, payloads: list[bytes]) -> None:
    """QoS 1 PUBLISHes from a paho client, each PUBACKed before the next."""
    client, _ = paho_client(broker, client_id, 4)
    for payload in payloads:
        client.publish(topic, payload, qos=1).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def expected_partition(key: bytes) -> int:
    """The Java client's default partitioner, through aiokafka's murmur2."""
    return int(murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def test_messages_and_events_are_keyed_by_device_in_order(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    broker = start_broker(tmp_path, loop, stream_config(kafka_bootstrap, prefix, "async"))
    devices = [f"dev-{n}" for n in range(4)]
    try:
        for device in devices:
            payloads = [b"%s %d" % (device.encode(), n) for n in range(25)]
            publish(broker, f"client-{device}", f"site/{device}/temp", payloads)
    finally:
        broker.stop()
    messages = read_records(kafka_bootstrap, f"{prefix}messages", 100)
    assert len(messages) == 100
    assert {m["kind"] for m in messages} == {"message"}
    assert len({m["id"] for m in messages}) == 100
    for device in devices:
        mine = sorted(
            (m for m in messages if m["topic"] == f"site/{device}/temp"),
            key=lambda m: m["_offset"],
        )
        assert [m["payload"] for m in mine] == [b"%s %d" % (device.encode(), n) for n in range(25)]
        assert {m["_key"] for m in mine} == {device.encode()}
        assert {m["_partition"] for m in mine} == {expected_partition(device.encode())}
        assert {(m["client_id"], m["qos"], m["retain"]) for m in mine} == {
            (f"client-{device}", 1, False)
        }
        # Kafka's record time is the broker's receive time (ms), the record's in µs.
        assert all(m["_timestamp"] == round(m["time"].timestamp() * 1000) for m in mine)
    events = read_records(kafka_bootstrap, f"{prefix}events", 8)
    connected = {e["client_id"] for e in events if e["kind"] == "connected"}
    assert connected >= {f"client-{device}" for device in devices}
    assert all(e["_key"] == e["client_id"].encode() for e in events)


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.KafkaServer]:
    """A Kafka for this module's tests that freeze it (SIGSTOP), as a hung cluster
    looks to the broker; one start for all of them."""
    try:
        kafka = services.start_kafka(tmp_path_factory.mktemp("stream-kafka"))
    except services.ServiceUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield kafka
    kafka.stop()


def publish_packet(packet_id: int) -> dict[str, Any]:
    """A QoS 1 PUBLISH to site/a/t whose payload is its packet id less one."""
    payload = b"%d" % (packet_id - 1)
    return {
        "type": "publish",
        "topic": "site/a/t",
        "qos": 1,
        "packet_id": packet_id,
        "payload": payload,
    }


def test_after_kafka_holds_the_puback_until_kafka_has_the_record(
    own_kafka: services.KafkaServer, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    config = stream_config(own_kafka.bootstrap, prefix, "after_kafka")
    broker = start_broker(tmp_path, loop, config)
    try:
        pub = RawClient(broker.host, broker.port, version=4)
        pub.connect("patient")
        pub.send(publish_packet(1))
        assert pub.recv(timeout=30)["type"] == "puback"

        with frozen(own_kafka.pid):
            pub.send(publish_packet(2))
            broker.wait_for_log("stream to kafka failing", own_kafka.bootstrap)
            with pytest.raises(TimeoutError):
                pub.recv(timeout=0.2)  # no PUBACK while Kafka cannot take the record
        puback = pub.recv(timeout=60)
        assert (puback["type"], puback["packet_id"]) == ("puback", 2)
        broker.wait_for_log("stream to kafka recovered")
    finally:
        broker.stop()
    messages = read_records(own_kafka.bootstrap, f"{prefix}messages", 2)
    assert {m["payload"] for m in messages} == {b"0", b"1"}


def spilled_payloads(directory: Path, key: bytes) -> list[bytes]:
    """The payloads of the message records in the spill, read as the sink reads it, each
    batch decoded by aiokafka's own record-batch reader (CRC checked)."""
    spill = Spill(directory, max_bytes=1 << 30)
    spill.open()
    frames = spill.read(1 << 30)
    spill.close()
    payloads = []
    for frame in frames:
        batch = DefaultRecordBatch(frame.batch)
        assert batch.validate_crc()
        for kafka_record in batch:
            assert kafka_record.value is not None
            record = schemaless_reader(io.BytesIO(kafka_record.value), SCHEMA, None)
            assert isinstance(record, dict)
            if record["kind"] == "message":
                assert kafka_record.key == key
                payloads.append(record["payload"])
    return payloads


def spill_bytes(spill: Path) -> int:
    """The bytes of every segment under ``spill`` (every shard's)."""
    return sum(path.stat().st_size for path in spill.rglob("spill-*.seg"))


def test_async_acks_while_kafka_is_frozen_and_a_restart_sends_the_spill(
    own_kafka: services.KafkaServer, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    config = stream_config(own_kafka.bootstrap, prefix, "async")
    env = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    spill = tmp_path / "store" / "stream-spill"
    broker = start_broker(tmp_path, loop, config, env)
    payloads = [b"%d" % n for n in range(300)]
    try:
        publish(broker, "before", "site/before/t", payloads[:10])
        read_records(own_kafka.bootstrap, f"{prefix}messages", 10)
        with frozen(own_kafka.pid):
            # Every PUBACK arrives while Kafka is frozen: publish() waits for each.
            publish(broker, "during", "site/during/t", payloads[10:])
            broker.stop(timeout=30)  # the unsent records go to the spill
            assert broker.process.returncode == 0
        spilled = spilled_payloads(shard_directory(spill, "during"), b"during")
        assert spilled == payloads[10:], "one partition, in order"
        broker = start_broker(tmp_path, loop, config, env)
        messages = read_records(own_kafka.bootstrap, f"{prefix}messages", 300)
        wait_for(lambda: spill_bytes(spill) <= 5 * suite_shards(), "spill sent")
    finally:
        broker.stop()
    by_id = {m["id"]: m["payload"] for m in messages}
    # A batch Kafka took just as it froze may come twice: the id removes it.
    assert sorted(by_id.values(), key=int) == payloads


def test_async_serves_without_kafka_and_a_restart_sends_what_it_spilled(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    absent = f"127.0.0.1:{free_port()}"
    env = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    broker = start_broker(tmp_path, loop, stream_config(absent, prefix, "async"), env)
    payloads = [b"%d" % n for n in range(20)]
    try:
        broker.wait_for_log("stream to kafka failing", absent)
        publish(broker, "alone", "site/alone/t", payloads)  # every PUBACK arrives
    finally:
        assert broker.stop(timeout=30) == 0
    # Not the broker's own "listening" line: its free port may be the absent one too.
    naming = [line for line in broker.log().splitlines() if absent in line]
    naming = [line for line in naming if " listening " not in line]
    assert len(naming) == suite_shards(), "one line (a shard) names the servers"
    spill = shard_directory(tmp_path / "store" / "stream-spill", "alone")
    assert spilled_payloads(spill, b"alone") == payloads

    broker = start_broker(tmp_path, loop, stream_config(kafka_bootstrap, prefix, "async"), env)
    try:
        messages = read_records(kafka_bootstrap, f"{prefix}messages", 20)
    finally:
        broker.stop()
    assert sorted({m["id"]: m["payload"] for m in messages}.values(), key=int) == payloads


def test_a_spill_too_small_for_the_backlog_is_counted(
    own_kafka: services.KafkaServer, started: Starter, loop: str
) -> None:
    admin = free_port()
    config = stream_config(
        own_kafka.bootstrap, unique_prefix(), "async", "spill_max_bytes = 4096"
    ) + admin_config(admin)
    broker = started(loop, config)
    big = os.urandom(100 * 1024)
    with frozen(own_kafka.pid):
        # More than the sink's memory queue (MEMORY_BYTES, 32 MiB): the rest must go
        # to the spill, which holds 4 KiB.
        publish(broker, "flood", "site/flood/t", [big] * 400)
        broker.wait_for_log("stream records dropped", "spill_full")
        broker.wait_for_log("stream to kafka failing")
        samples = scrape(admin)
    assert value(samples, "ferromq_stream_dropped_spill_full_total") >= 50
    assert value(samples, "ferromq_stream_spill_bytes") <= 4096
    assert value(samples, "ferromq_stream_queue_records") > 0, "the rest waits in memory"
    assert value(samples, "ferromq_stream_up") == 0


def test_an_unreachable_kafka_at_start_up_is_one_line_naming_it(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    store = f'[storage]\npath = "{tmp_path / "store"}"\n'
    result = serve_exit(tmp_path, stream_config(address, "x.", "after_kafka") + store)
    assert result.returncode == 3, result.stderr
    assert result.stderr.count(f"stream to kafka at {address}: unreachable") == 1, result.stderr
