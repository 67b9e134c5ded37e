"""Waiting for a streaming job's table: polled once a second (each look is a Spark job)
until ``enough`` says its rows are there. Until the file sink's log commits a first batch
(its files are written before), the table has no file to read a schema from."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

POLL_SECONDS = 1.0


def wait_for_table(
    spark: SparkSession, path: Path, enough: Callable[[DataFrame], bool], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if enough(spark.read.parquet(str(path))):
                return
        except AnalysisException:
            pass  # no batch committed yet
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"{path}: not the rows expected after {timeout} s")
