"""``ferromq pipeline run telemetry --source files`` end to end, as a user runs it: the
broker's Avro container files (written here with fastavro, in the file sink's layout and
naming) become Parquet tables whose window aggregates are exactly the readings', each
reading once, with the bad records in the quarantine and progress on stderr."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from tests.conftest import ferromq_command
from tests.pipeline.fleet import JOB_OPTIONS, QUARANTINED, expected_windows, fleet_records
from tests.pipeline.stream_records import T0, write_container

JOB_TIMEOUT = 240


def run_job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), "pipeline", "run", *args],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        env={**os.environ, "TZ": "UTC"},
    )


def test_telemetry_from_the_stream_files(spark: SparkSession, tmp_path: Path) -> None:
    first, second = fleet_records()
    stream = tmp_path / "stream"
    write_container(stream, "messages", "00000001", first)
    write_container(stream, "messages", "00000002", second)
    # A file the sink is still writing: its name starts with '.', so it is not read yet.
    (stream / "messages" / ".00000003.avro.partial").write_bytes(b"Obj\x01 half a header")
    output = tmp_path / "tables"

    done = run_job(
        "telemetry", "--source", "files", "--directory", str(stream), "--output", str(output),
        "--trigger", "available-now", "--master", "local[2]", "--shuffle-partitions", "2",
        *JOB_OPTIONS,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "batch query=telemetry.tumbling" in done.stderr
    assert "records quarantined count=2" in done.stderr
    assert "query done query=telemetry.quarantine rows_out_total=2" in done.stderr
    assert f"query done query=telemetry.tumbling rows_out_total={len(expected_windows())}" in (
        done.stderr
    )
    tumbling = spark.read.parquet(str(output / "tumbling"))
    assertDataFrameEqual(tumbling, expected_windows())
    assert [p.name for p in (output / "tumbling").glob("date=*")] == [f"date={T0.date()}"]
    quarantine = spark.read.parquet(str(output / "quarantine"))
    assertDataFrameEqual(
        quarantine.select("topic", "reason"),
        [Row(topic, reason) for topic, reason in QUARANTINED.items()],
    )
