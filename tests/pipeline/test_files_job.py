"""The jobs over the stream files end to end. ``ferromq pipeline run telemetry --source
files`` as a user runs it: the broker's Avro container files (written here with fastavro,
in the file sink's layout and naming) become Parquet tables whose window aggregates are
exactly the readings', each reading once, with the bad records in the quarantine and
progress on stderr. The sessions job as a stream over event files: every table exact."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from ferromq.cli import build_parser
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.runner import start_queries
from tests.conftest import ferromq_command
from tests.pipeline.fleet import (
    EVENTS,
    JOB_OPTIONS,
    QUARANTINED,
    expected_windows,
    fleet_records,
)
from tests.pipeline.stream_records import T0, Record, event, write_container

JOB_TIMEOUT = 240


def run_job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), "pipeline", "run", *args],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
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


def test_sessions_from_the_stream_files(spark: SparkSession, tmp_path: Path) -> None:
    """The sessions job as a stream (in the shared session): every table, including the
    durations of an interval join followed by an aggregation, once the watermark passes."""
    stream = tmp_path / "stream"
    resent = Record(**{**EVENTS[0].__dict__})  # a batch the broker sent again
    late = event("connected", "z", 3600)  # moves the watermark past every session
    write_container(stream, "events", "00000001", EVENTS[:6])
    write_container(stream, "events", "00000002", [resent, *EVENTS[6:], late])
    output = tmp_path / "tables"
    args = build_parser().parse_args(
        ["pipeline", "run", "sessions", "--source", "files", "--directory", str(stream),
         "--output", str(output), "--trigger", "available-now", "--window", "1 minute",
         "--watermark", "10 seconds", "--flap-count", "3", "--flap-window", "1 minute",
         "--max-session", "5 minutes"],
    )  # fmt: skip
    running = start_queries(spark, run_spec(args))
    try:
        for query in running.queries:
            query.awaitTermination(JOB_TIMEOUT)
    finally:
        running.stop()

    def table(name: str) -> DataFrame:
        return spark.read.parquet(str(output / name))

    assertDataFrameEqual(
        table("connections").select("client_id", "connects", "disconnects"),
        [Row("a", 2, 2), Row("b", 3, 3), Row("c", 1, 0)],
    )
    assertDataFrameEqual(
        table("reasons").select("reason", "disconnects"),
        [Row("client_disconnect", 1), Row("keep_alive_timeout", 1), Row("socket_closed", 3)],
    )
    assertDataFrameEqual(table("flapping").select("client_id", "disconnects"), [Row("b", 3)])
    assertDataFrameEqual(
        table("durations").select("client_id", "duration_seconds", "reason"),
        [
            Row("a", 30.0, "client_disconnect"),
            Row("a", 5.0, "keep_alive_timeout"),
            Row("b", 1.0, "socket_closed"),
            Row("b", 1.0, "socket_closed"),
            Row("b", 1.0, "socket_closed"),
        ],
    )
