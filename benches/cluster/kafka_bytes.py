"""What a cluster wrote to Kafka, measured on Kafka itself (docs/cluster.md).

Route topics (``<prefix>node.<node id>``, the records other nodes send a node):
:func:`mark` takes each one's end offsets and on-disk log bytes before and after a run;
:func:`route_traffic` then reads the records between two marks and sums their sizes (key
+ value + headers, as the producer serialised them) beside the growth of the topics'
``.log`` segment files (record batch framing included; one replica here). The
subscriptions topic (``<prefix>subscriptions``, compacted): :func:`subscriptions` reads
it whole and reports the records written, the keys still live (their last record not a
tombstone) and their bytes — what the topic compacts to — beside its log bytes now
(Kafka never compacts the active segment, so that is everything written so far).

Every call opens its own aiokafka consumer (no group, nothing committed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient


@dataclass(frozen=True)
class Mark:
    """End offset of each route-topic partition and log bytes of each route topic."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    log_bytes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Traffic:
    records: int
    #: Key + value + header bytes of the records.
    record_bytes: int
    #: Growth of the topics' .log segment files.
    log_bytes: int


@dataclass(frozen=True)
class Subscriptions:
    records: int
    live_keys: int
    live_bytes: int
    log_bytes: int


def log_bytes(data_dir: Path, topic: str) -> int:
    """Bytes of the .log segment files of every partition of ``topic``."""
    return sum(
        segment.stat().st_size
        for partition in data_dir.glob(f"{topic}-*")
        if partition.name.rsplit("-", 1)[0] == topic
        for segment in partition.glob("*.log")
    )


def _record_bytes(record: Any) -> int:
    headers = sum(len(key) + len(value or b"") for key, value in record.headers or ())
    key: int = max(record.serialized_key_size, 0)
    value: int = max(record.serialized_value_size, 0)
    return key + value + headers


async def _partitions(bootstrap: str, prefix: str) -> list[TopicPartition]:
    """Every partition of every topic whose name starts with ``prefix``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = [topic for topic in await admin.list_topics() if topic.startswith(prefix)]
        described = await admin.describe_topics(topics) if topics else []
    finally:
        await admin.close()
    return sorted(
        (
            TopicPartition(topic["topic"], partition["partition"])
            for topic in described
            for partition in topic["partitions"]
        ),
        key=lambda tp: (tp.topic, tp.partition),
    )


def _consumer(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )


# Each helper starts a consumer only when it has work: aiokafka's stop() right after
# start() raises CancelledError from the consumer's own committed-offsets task.


async def _offsets(
    bootstrap: str, partitions: list[TopicPartition]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Beginning and end offsets of ``partitions``."""
    if not partitions:
        return {}, {}
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        return (
            dict(await consumer.beginning_offsets(partitions)),
            dict(await consumer.end_offsets(partitions)),
        )
    finally:
        await consumer.stop()


async def _read(bootstrap: str, ranges: dict[TopicPartition, tuple[int, int]]) -> list[Any]:
    """The records of each partition from its first offset up to (not including) its
    last, in offset order per partition."""
    ranges = {tp: span for tp, span in ranges.items() if span[1] > span[0]}
    if not ranges:
        return []
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        consumer.assign(list(ranges))
        for tp, (first, _) in ranges.items():
            consumer.seek(tp, first)
        records: list[Any] = []
        pending = set(ranges)
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=2000)
            if not batches:
                raise RuntimeError(f"Kafka returned nothing more for {sorted(map(str, pending))}")
            for tp, batch in batches.items():
                last = ranges[tp][1]
                records.extend(record for record in batch if record.offset < last)
                if batch[-1].offset + 1 >= last:
                    pending.discard(tp)
        return records
    finally:
        await consumer.stop()


async def _mark(bootstrap: str, data_dir: Path, prefix: str) -> Mark:
    partitions = await _partitions(bootstrap, f"{prefix}node.")
    _, offsets = await _offsets(bootstrap, partitions)
    topics = sorted({tp.topic for tp in partitions})
    return Mark(offsets, {topic: log_bytes(data_dir, topic) for topic in topics})


def mark(bootstrap: str, data_dir: Path, prefix: str) -> Mark:
    """The route topics of the cluster with topic prefix ``prefix``, now."""
    return asyncio.run(_mark(bootstrap, data_dir, prefix))


async def _route_traffic(bootstrap: str, start: Mark, end: Mark) -> Traffic:
    ranges = {tp: (start.offsets.get(tp, 0), last) for tp, last in end.offsets.items()}
    records = await _read(bootstrap, ranges)
    grown = sum(size - start.log_bytes.get(topic, 0) for topic, size in end.log_bytes.items())
    return Traffic(len(records), sum(map(_record_bytes, records)), grown)


def route_traffic(bootstrap: str, start: Mark, end: Mark) -> Traffic:
    """What the route topics received between two marks."""
    return asyncio.run(_route_traffic(bootstrap, start, end))


async def _subscriptions(bootstrap: str, data_dir: Path, prefix: str) -> Subscriptions:
    topic = f"{prefix}subscriptions"
    partitions = [tp for tp in await _partitions(bootstrap, topic) if tp.topic == topic]
    if not partitions:
        raise RuntimeError(f"no Kafka topic {topic}")
    starts, ends = await _offsets(bootstrap, partitions)
    records = await _read(bootstrap, {tp: (starts[tp], ends[tp]) for tp in partitions})
    latest: dict[bytes, Any] = {}
    for record in records:
        latest[record.key] = record
    live = [record for record in latest.values() if record.value is not None]
    return Subscriptions(
        records=len(records),
        live_keys=len(live),
        live_bytes=sum(map(_record_bytes, live)),
        log_bytes=log_bytes(data_dir, topic),
    )


def subscriptions(bootstrap: str, data_dir: Path, prefix: str) -> Subscriptions:
    """The cluster's compacted subscriptions topic, now."""
    return asyncio.run(_subscriptions(bootstrap, data_dir, prefix))
