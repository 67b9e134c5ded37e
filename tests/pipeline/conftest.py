"""One local SparkSession for the whole test run (``spark``: ``local[2]``, two shuffle
partitions, no UI), with the connector jars the jobs use (fetched once into
~/.cache/ferromq/maven)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from ferromq.pipeline.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        "ferromq-tests",
        "local[2]",
        shuffle_partitions=2,
        conf={
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    yield session
    session.stop()
