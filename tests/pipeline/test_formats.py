"""The telemetry job writing Delta Lake and Apache Iceberg tables with the real connectors
(delta-spark's jar for Spark 4.1, Iceberg's Spark runtime, a Hadoop catalog), in the
shared session, one flow per format over the stream files:

1. a stream (``--trigger available-now``) appends the windows of two days: every window
   of the first, and of the second all but the last (its window is still open);
2. a back-fill over the second day replaces that day's rows (all its windows now, none
   twice) and leaves the first day's as they were;
3. a back-fill over a third day, whose devices publish with one more topic level, named
   by the pattern: the table gains the column, the older rows hold null there (payload
   fields are rows of ``field``, not columns: a new topic level is what adds a column);
4. the table as of the stream's last commit (Delta version, Iceberg snapshot id) is
   the stream's rows in the stream's schema.

With ``FERROMQ_SLOW=1`` also ``ferromq pipeline run --format`` as a user runs it: its
own JVM with that format's jars and settings only (the catalog at its ``--output``), the
table read back here (for Iceberg through this session's catalog: the same directory).
"""

from __future__ import annotations

import json
import os
from datetime import date, timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from ferromq.cli import build_parser
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.formats import DELTA, ICEBERG, WAREHOUSE_SETTING, TableFormat
from ferromq.pipeline.output import table_name
from ferromq.pipeline.runner import run_backfill, start_queries
from ferromq.pipeline.session import spark_session
from tests.pipeline.fleet import (
    JOB_OPTIONS,
    PATTERN,
    READINGS,
    WINDOW_SECONDS,
    expected_windows,
    fleet_records,
    window_row,
)
from tests.pipeline.stream_records import T0, Record, message, write_container
from tests.pipeline.test_files_job import run_job

DAY = 86_400
JOB_TIMEOUT = 240
UNIT_PATTERN = f"{PATTERN}/{{unit}}"


def day(offset: int) -> date:
    return T0.date() + timedelta(days=offset)


def later(rows: list[Row], days: int) -> list[Row]:
    """``rows`` (windows of the first day) as the same windows ``days`` later."""
    shift = timedelta(days=days)
    return [
        Row(**{
            **row.asDict(),
            "window_start": row.window_start + shift,
            "window_end": row.window_end + shift,
            "date": row.date + shift,
        })
        for row in rows
    ]  # fmt: skip


def second_day(seq_from: int) -> list[Record]:
    """The fleet's readings and tick a day later (new sequence numbers: not resends)."""
    values = [*READINGS, ("d9", "temp", 600.0, 0.0)]
    return [
        message(f"fleet/{device}/{metric}", json.dumps({"v": value, "seq": seq_from + n}), DAY + at)
        for n, (device, metric, at, value) in enumerate(values)
    ]


def job(table_format: str, output: Path, stream: Path, name: str, *args: str) -> list[str]:
    """``ferromq pipeline run NAME``'s arguments; ``args`` after the fleet's options."""
    return [
        "pipeline", "run", name, "--source", "files", "--directory", str(stream),
        "--output", str(output), "--format", table_format, "--trigger", "available-now",
        "--shuffle-partitions", "2", *JOB_OPTIONS, *args,
    ]  # fmt: skip


def read(
    spark: SparkSession, table_format: TableFormat, output: Path, version: int | None = None
) -> DataFrame:
    """The ``tumbling`` table, at ``version`` (Delta's version, Iceberg's snapshot id)."""
    reader = spark.read if version is None else spark.read.option("versionAsOf", version)
    if table_format == ICEBERG:
        return reader.table(table_name(spark, str(output), "tumbling"))
    return reader.format(DELTA).load(str(output / "tumbling"))


def current_version(spark: SparkSession, table_format: TableFormat, output: Path) -> int:
    if table_format == DELTA:
        history = DeltaTable.forPath(spark, str(output / "tumbling")).history(1)
        return int(history.first()["version"])  # type: ignore[index]
    table = table_name(spark, str(output), "tumbling")
    main = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()
    return int(main["snapshot_id"])  # type: ignore[index]


@pytest.mark.parametrize("table_format", [DELTA, ICEBERG])
def test_stream_backfill_new_column_and_time_travel(
    spark: SparkSession, warehouse: Path, tmp_path: Path, table_format: TableFormat
) -> None:
    output = warehouse / table_format  # Iceberg: the catalog's tables ferromq.<format>.*
    stream = tmp_path / "stream"
    first, second = fleet_records()
    write_container(stream, "messages", "00000001", first)
    write_container(stream, "messages", "00000002", second)
    write_container(stream, "messages", "00000003", second_day(seq_from=100))
    first_day = [*expected_windows(), window_row(
        {"device": "d9", "metric": "temp", "field": "v"}, 600, WINDOW_SECONDS, [0.0], 0.0
    )]  # fmt: skip

    running = start_queries(spark, run_spec(build_parser().parse_args(
        job(table_format, output, stream, "telemetry")
    )))  # fmt: skip
    try:
        for query in running.queries:
            assert query.awaitTermination(JOB_TIMEOUT)
    finally:
        running.stop()
    streamed = [*first_day, *later(first_day[:-1], 1)]  # the second day's tick: still open
    assertDataFrameEqual(read(spark, table_format, output), streamed)
    after_stream = current_version(spark, table_format, output)

    def backfill(start: date, *args: str) -> None:  # over the day ``start``
        end = start + timedelta(days=1)
        argv = job(table_format, output, stream, "backfill", *args)
        argv += ["--start", start.isoformat(), "--end", end.isoformat()]
        spec = run_spec(build_parser().parse_args(argv))
        assert spec.time_range is not None
        assert run_backfill(spark, spec, spec.time_range) == 0

    backfill(day(1))
    assertDataFrameEqual(read(spark, table_format, output), [*first_day, *later(first_day, 1)])

    write_container(stream, "messages", "00000004", [
        message("fleet/d1/temp/celsius", json.dumps({"v": 30.0, "seq": 200}), 2 * DAY + 1),
        message("fleet/d1/temp/celsius", json.dumps({"v": 32.0, "seq": 201}), 2 * DAY + 2),
    ])  # fmt: skip
    backfill(day(2), "--pattern", UNIT_PATTERN)
    table = read(spark, table_format, output)
    assert "unit" in table.columns
    assertDataFrameEqual(
        table.groupBy("date", "unit").agg(F.count("*").alias("rows"), F.sum("count")),
        [Row(day(0), None, 5, 8), Row(day(1), None, 5, 8), Row(day(2), "celsius", 1, 2)],
    )

    earlier = read(spark, table_format, output, version=after_stream)
    assert "unit" not in earlier.columns
    assertDataFrameEqual(earlier, streamed)


def test_a_running_session_keeps_its_iceberg_warehouse(
    spark: SparkSession, warehouse: Path, tmp_path: Path
) -> None:
    """Spark keeps a catalog once loaded, so a second ``spark_session`` (getOrCreate)
    asking for another warehouse gets the running one, and an ``--output`` outside it is
    one line, not tables written where their names do not say."""
    again = spark_session("again", "local[2]", formats=(ICEBERG,), warehouse=str(tmp_path))
    assert again is spark
    assert spark.conf.get(WAREHOUSE_SETTING) == str(warehouse)
    assert table_name(spark, str(warehouse / "a" / "b"), "tumbling") == (
        "`ferromq`.`a`.`b`.`tumbling`"
    )
    with pytest.raises(PipelineError, match="is not in the session's Iceberg warehouse"):
        table_name(spark, str(tmp_path), "tumbling")


@pytest.mark.skipif(not os.environ.get("FERROMQ_SLOW"), reason="FERROMQ_SLOW=1: a JVM each")
@pytest.mark.parametrize("table_format", [DELTA, ICEBERG])
def test_the_command_writes_the_format(
    spark: SparkSession, warehouse: Path, tmp_path: Path, table_format: TableFormat
) -> None:
    stream = tmp_path / "stream"
    first, second = fleet_records()
    write_container(stream, "messages", "00000001", first)
    write_container(stream, "messages", "00000002", second)
    output = warehouse / f"command-{table_format}"

    done = run_job(*job(table_format, output, stream, "telemetry")[2:], "--master", "local[2]")

    assert done.returncode == 0, done.stderr
    assert "query done query=telemetry.tumbling rows_out_total=4" in done.stderr
    assertDataFrameEqual(read(spark, table_format, output), expected_windows())
