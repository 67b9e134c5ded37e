"""``ferromq serve`` with ``[stream]`` on and the telemetry job, for both sinks (the
embedded files, and Kafka with ``delivery = "after_kafka"`` on the session's real Kafka),
under uvloop and asyncio: real paho publishers (QoS 1, persistent sessions) publish known
readings; the broker is killed with ``kill -9`` mid-run and started again on the same
port, store and stream configuration; paho sends again what was not acknowledged (the
broker records it under a new record id, with the same ``seq``). The job, a stream over
the broker's files or topic at a one-second trigger, then holds every reading exactly
once: per device, the windows' counts add up to the readings published and their values
to those readings' sum, the smallest and largest as published."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from ferromq.cli import build_parser
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.runner import start_queries
from tests.conftest import RunningBroker, start_broker
from tests.pipeline.devices import Device
from tests.pipeline.tables import wait_for_table
from tests.support.services import free_port
from tests.support.stream_config import kafka_stream_config
from tests.support.waiting import wait_for

DEVICES = 3
READINGS = 300  # per device
WINDOW_SECONDS = 2
JOB_TIMEOUT = 240


def stream_config(sink: str, stream: Path, bootstrap: str, prefix: str) -> str:
    return (
        kafka_stream_config(bootstrap, prefix, partitions=2, sink=sink)
        + f"""
[stream.files]
directory = "{stream}"
roll_seconds = 1
"""
    )


def source_options(sink: str, stream: Path, bootstrap: str, prefix: str) -> list[str]:
    if sink == "files":
        return ["--source", "files", "--directory", str(stream)]
    return ["--source", "kafka", "--bootstrap", bootstrap, "--messages-topic", f"{prefix}messages"]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("sink", ["files", "kafka"])
def test_kill_9_mid_stream_loses_no_reading_and_counts_none_twice(
    spark: SparkSession, tmp_path: Path, loop: str, sink: str, request: pytest.FixtureRequest
) -> None:
    stream = tmp_path / "stream"
    bootstrap = str(request.getfixturevalue("kafka_bootstrap")) if sink == "kafka" else ""
    prefix = f"pipeline.{uuid.uuid4().hex[:8]}."
    config = stream_config(sink, stream, bootstrap, prefix)
    port = free_port()
    env = {"FERROMQ_LISTEN": f"127.0.0.1:{port}", "FERROMQ_STORAGE__PATH": str(tmp_path / "db")}
    broker: RunningBroker = start_broker(tmp_path, loop, config, env=env)
    devices = [Device(port, number) for number in range(DEVICES)]
    halfway = threading.Event()

    def publish_all() -> None:
        for seq in range(READINGS):
            for device in devices:
                device.publish(seq)
            if seq == READINGS // 2:
                halfway.set()
            time.sleep(0.002)

    publishing = threading.Thread(target=publish_all)
    publishing.start()
    try:
        assert halfway.wait(30)
        broker.kill()  # mid-stream, readings in flight
        broker = start_broker(tmp_path, loop, config, env=env)
        publishing.join(60)
        wait_for(lambda: all(device.all_acknowledged() for device in devices), "all acked", 60)
        time.sleep(WINDOW_SECONDS * 2)  # then a reading past the last readings' windows
        devices[0].publish(0, topic="fleet/tick/count")
        wait_for(devices[0].all_acknowledged, "the tick acknowledged", 10)
    finally:
        for device in devices:
            device.close()
        assert broker.stop() == 0  # the file being written is closed and renamed

    output = tmp_path / "tables"
    args = build_parser().parse_args(
        ["pipeline", "run", "telemetry", *source_options(sink, stream, bootstrap, prefix),
         "--output", str(output), "--trigger", "1 second", "--pattern",
         "fleet/{device}/{metric}", "--window", f"{WINDOW_SECONDS} seconds",
         "--watermark", "1 second", "--dedupe-key", "seq"],
    )  # fmt: skip
    running = start_queries(spark, run_spec(args))
    tumbling = output / "tumbling"

    def all_counted(table: DataFrame) -> bool:
        readings = table.where(F.col("device") != "tick").agg(F.sum("count")).first()
        return readings is not None and (readings[0] or 0) >= DEVICES * READINGS

    try:
        wait_for_table(spark, tumbling, all_counted, JOB_TIMEOUT)
    finally:
        running.stop()
    per_device = (
        spark.read.parquet(str(tumbling))
        .where(F.col("device") != "tick")
        .groupBy("device")
        .agg(
            F.sum("count").alias("readings"),
            F.round(F.sum(F.col("mean") * F.col("count"))).cast("long").alias("total"),
            F.min("min").alias("first"),
            F.max("max").alias("last"),
        )
    )
    expected_total = READINGS * (READINGS - 1) // 2
    assertDataFrameEqual(
        per_device,
        [Row(f"d{device}", READINGS, expected_total, 0.0, float(READINGS - 1))
         for device in range(DEVICES)],
    )  # fmt: skip
