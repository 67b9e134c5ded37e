"""The telemetry back-fill on a Spark standalone cluster (a master and two workers, one core
and 1 GiB each: tests/pipeline/spark_cluster.py) over a ferromq cluster's stream (three
nodes on the session's Kafka and Redis: tests/cluster/conftest.py) with ``[stream] sink =
"kafka"`` and ``delivery = "after_kafka"``: paho devices spread over the three nodes
publish readings at QoS 1, every one acknowledged, so every one is in Kafka; then
``spark-submit`` of ``ferromq/pipeline/submit.py`` reads the topic. Per device, the
windows' counts add up to the readings published, their smallest and largest are the
published ones: each reading once. The event log shows executors of both workers ran the
job's tasks. Only what the test started is stopped. Behind FERROMQ_SLOW=1: CI has no room
for three nodes and a Spark cluster."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tests.cluster.conftest import ClusterFactory, cluster_factory  # noqa: F401 (a fixture)
from tests.pipeline.devices import Device
from tests.pipeline.fleet import JOB_OPTIONS
from tests.pipeline.spark_cluster import (
    executors_of,
    spark_submit,
    standalone,
    tasks_per_executor,
)
from tests.support.slow import SLOW
from tests.support.stream_config import kafka_stream_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not SLOW, reason="FERROMQ_SLOW=1 runs it")

DEVICES = 6  # two per node
READINGS = 150  # per device
PARTITIONS = 4  # Kafka partitions of the messages topic: tasks for both executors
# d0..d5 hash to partitions 0-2: partition 3 stays empty, which a back-fill's
# startingTimestamp must read as nothing (Spark's default strategy fails the job).
ACK_TIMEOUT = 120.0


def stream_config(bootstrap: str, prefix: str) -> str:
    """Each node's ``[stream]``: records keyed by device (``fleet/<device>/...``)."""
    return kafka_stream_config(
        bootstrap, prefix, partitions=PARTITIONS, stream_keys="events = false"
    )


def test_backfill_on_two_spark_workers_reads_a_ferromq_cluster_stream(
    cluster_factory: ClusterFactory,  # noqa: F811 (the fixture)
    kafka_bootstrap: str,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    prefix = f"pipeline.{uuid.uuid4().hex[:8]}."
    nodes = cluster_factory(extra=stream_config(kafka_bootstrap, prefix)).nodes
    start = datetime.now(UTC) - timedelta(minutes=1)
    values = random.Random(28)
    published: dict[str, list[float]] = {}
    devices = [Device(nodes[n % 3].port, n, host=nodes[n % 3].host) for n in range(DEVICES)]
    try:
        for seq in range(READINGS):
            for device in devices:
                value = round(values.uniform(-50.0, 50.0), 2)
                published.setdefault(f"d{device.number}", []).append(value)
                device.publish(seq, value=value)
            time.sleep(0.005)
        # after_kafka: a PUBACK means the reading's record is in Kafka.
        wait_for(lambda: all(d.all_acknowledged() for d in devices), "all acked", ACK_TIMEOUT)
    finally:
        for device in devices:
            device.close()
    end = datetime.now(UTC) + timedelta(minutes=1)

    output = tmp_path / "tables"
    events = tmp_path / "events"
    events.mkdir()
    with standalone(tmp_path / "spark", workers=2) as spark_cluster:
        spark_submit(
            spark_cluster,
            ["backfill", "--job", "telemetry", "--source", "kafka",
             "--bootstrap", kafka_bootstrap, "--messages-topic", f"{prefix}messages",
             "--output", str(output), "--start", start.isoformat(), "--end", end.isoformat(),
             *JOB_OPTIONS],
            conf={
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events.as_uri(),
                "spark.eventLog.compress": "false",
                # Schedule nothing before both workers' executors registered.
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
            },
        )  # fmt: skip

    # Every worker launched an executor of the application, and each ran tasks.
    tasks = tasks_per_executor(events)
    for work_dir in spark_cluster.work_dirs:
        launched = executors_of(work_dir)
        assert launched, f"{work_dir} launched no executor"
        assert sum(tasks[executor] for executor in launched) > 0, (work_dir, launched, tasks)

    tumbling = spark.read.parquet(str(output / "tumbling"))
    assert {row.field for row in tumbling.select("field").distinct().collect()} == {"v"}
    assertDataFrameEqual(
        tumbling.groupBy("device").agg(
            F.sum("count").alias("readings"), F.min("min").alias("min"), F.max("max").alias("max")
        ),
        [Row(device, len(readings), min(readings), max(readings))
         for device, readings in published.items()],
    )  # fmt: skip
