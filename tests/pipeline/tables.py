"""Waiting for a streaming job's table: polled once a second (each look is a Spark job)
until ``enough`` says its rows are there; a table with no file yet has no schema to read."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

POLL_SECONDS = 1.0


def wait_for_table(
    spark: SparkSession, path: Path, enough: Callable[[DataFrame], bool], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(path.glob("date=*/*.parquet")) and enough(spark.read.parquet(str(path))):
            return
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"{path}: not the rows expected after {timeout} s")
