"""The telemetry job as a stream from a real Kafka (the session's single KRaft node) at a
one-second trigger: records produced as the broker produces them (Avro values, keyed by
device, timestamped with the broker time) in two rounds while the job runs, and a value
that is no record; the Parquet tables end with exactly the expected aggregates, each
reading once, the bad records in the quarantine (the undecodable value among them, not a
failed job), and the progress log reports the lag of each Kafka partition."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from ferromq.cli import build_parser
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.runner import start_queries
from tests.pipeline.fleet import JOB_OPTIONS, QUARANTINED, expected_windows, fleet_records
from tests.pipeline.stream_records import T0, Record, encode
from tests.pipeline.tables import wait_for_table

PARTITIONS = 2
DEADLINE = 150.0
GARBAGE = b"\x02\xffnot a record"  # a Kafka value that is not a record-v1 record


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: list[Record], garbage: bytes = b"") -> None:
    """The records as the broker's Kafka sink produces them; ``garbage``, if any, first: a
    value that is no record of the schema."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        if garbage:
            await producer.send_and_wait(topic, garbage, timestamp_ms=int(T0.timestamp() * 1000))
        for record in records:
            assert record.topic is not None
            await producer.send_and_wait(
                topic,
                encode(record),
                key=record.topic.split("/")[1].encode(),  # the device: [stream] key = "level:1"
                timestamp_ms=int(record.time.timestamp() * 1000),
            )
    finally:
        await producer.stop()


def test_telemetry_from_kafka_at_one_second(
    spark: SparkSession,
    kafka_bootstrap: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"ferromq.messages.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topic(kafka_bootstrap, topic))
    first, second = fleet_records()
    asyncio.run(produce(kafka_bootstrap, topic, first))
    output = tmp_path / "tables"
    args = build_parser().parse_args(
        ["pipeline", "run", "telemetry", "--source", "kafka", "--bootstrap", kafka_bootstrap,
         "--messages-topic", topic, "--output", str(output), "--trigger", "1 second",
         *JOB_OPTIONS],
    )  # fmt: skip
    caplog.set_level("INFO", logger="ferromq.pipeline")
    running = start_queries(spark, run_spec(args))
    try:
        asyncio.run(produce(kafka_bootstrap, topic, second, garbage=GARBAGE))
        expected = expected_windows()
        quarantined = [*QUARANTINED.items(), (None, "undecodable_record")]
        wait_for_table(
            spark, output / "tumbling", lambda table: table.count() >= len(expected), DEADLINE
        )
        wait_for_table(
            spark, output / "quarantine", lambda table: table.count() >= len(quarantined), DEADLINE
        )
    finally:
        running.stop()
    assertDataFrameEqual(spark.read.parquet(str(output / "tumbling")), expected)
    quarantine = spark.read.parquet(str(output / "quarantine"))
    assertDataFrameEqual(
        quarantine.select("topic", "reason"),
        [Row(topic=topic, reason=reason) for topic, reason in quarantined],
    )
    # The value that is not a record is kept as it came, for whoever looks into it.
    undecodable = quarantine.where(quarantine.reason == "undecodable_record").first()
    assert undecodable is not None and bytes(undecodable.payload) == GARBAGE
    lags = [
        str(getattr(record, "ferromq_fields", {}).get("lag", ""))
        for record in caplog.records
        if record.getMessage() == "batch"
    ]
    assert any(f"{topic}/0:" in lag and f"{topic}/1:" in lag for lag in lags), lags
