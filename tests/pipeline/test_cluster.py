"""The same job on a real Spark standalone cluster: a master and a worker (one core, 1 GiB)
started from the pyspark package on loopback (tests/pipeline/spark_cluster.py), and
``spark-submit`` of ``ferromq/pipeline/submit.py`` unchanged (``backfill`` of the stream
files, jars from ``ferromq pipeline jars``). The job runs in an executor the worker
launched, and writes exactly the expected tables. Only the master and worker started here
are stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from tests.pipeline.fleet import JOB_OPTIONS, expected_windows, fleet_records
from tests.pipeline.spark_cluster import SparkCluster, spark_submit, standalone
from tests.pipeline.stream_records import T0, write_container


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SparkCluster]:
    with standalone(tmp_path, workers=1) as running:
        yield running


def test_the_job_runs_unchanged_on_a_standalone_cluster(
    spark: SparkSession, cluster: SparkCluster, tmp_path: Path
) -> None:
    first, second = fleet_records()
    stream = tmp_path / "stream"
    write_container(stream, "messages", "00000001", first)
    write_container(stream, "messages", "00000002", second)
    output = tmp_path / "tables"
    spark_submit(
        cluster,
        ["backfill", "--job", "telemetry", "--source", "files", "--directory", str(stream),
         "--output", str(output), "--start", T0.isoformat(), *JOB_OPTIONS],
    )  # fmt: skip
    # The worker launched an executor for the application: the job ran on the cluster.
    assert list(cluster.work_dirs[0].glob("app-*/*/stderr")), cluster.logs[1].read_text()
    # As a batch, every window is final: the tick's own window is there too.
    tick = spark.read.parquet(str(output / "tumbling")).where("device = 'd9'").count()
    assert tick == 1
    assertDataFrameEqual(
        spark.read.parquet(str(output / "tumbling")).where("device != 'd9'"), expected_windows()
    )
