"""One local SparkSession for the whole test run (``spark``: ``local[2]``, two shuffle
partitions, no UI), with the connector jars the jobs use (fetched once into
~/.cache/ferromq/maven) and every table format: Delta's extension and catalog, and an
Iceberg catalog whose warehouse is ``warehouse`` (fixed when the session starts: an
Iceberg test writes under it, ``--output WAREHOUSE/<name>``, tables
``ferromq.<name>.<output>``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ferromq.pipeline.formats import TABLE_FORMATS
from ferromq.pipeline.session import spark_session


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(warehouse: Path) -> Iterator[SparkSession]:
    session = spark_session(
        "ferromq-tests",
        "local[2]",
        shuffle_partitions=2,
        conf={
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
        formats=TABLE_FORMATS,
        warehouse=str(warehouse),
    )
    yield session
    session.stop()
