"""Where the outputs go: one table per output under ``--output``, partitioned by ``date``.

Output ``name`` of a job is the directory ``<output>/<name>``; a stream's checkpoint is
``<checkpoint>/<name>`` (one per query: Spark keeps a query's offsets, state and file
log there, and a restart resumes from it with no row written twice). Streams write in
append mode: a window's row is written once, when the watermark passes its end. A
back-fill overwrites only the ``date`` partitions it writes (dynamic partition overwrite,
:mod:`.session`), so running it again over a range replaces that range.

The format is Parquet, or Delta Lake when the ``delta-spark`` package is installed
(:func:`table_format`); Delta adds transactions and lets a streaming table and a
back-fill share a directory, which Parquet's file sink (its ``_spark_metadata`` log)
does not: with Parquet, give a back-fill its own ``--output``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from ferromq.pipeline.session import delta_installed

__all__ = ["table_format", "write_batch", "write_stream"]

PARTITION = "date"


def table_format() -> str:
    return "delta" if delta_installed() else "parquet"


def _path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def write_stream(
    frame: DataFrame,
    query_name: str,
    name: str,
    output: str,
    checkpoint: str,
    trigger: dict[str, Any],
) -> StreamingQuery:
    """Start the streaming query writing ``frame`` to the table ``name``."""
    return (
        frame.writeStream.queryName(query_name)
        .format(table_format())
        .outputMode("append")
        .partitionBy(PARTITION)
        .option("path", _path(output, name))
        .option("checkpointLocation", _path(checkpoint, name))
        .trigger(**trigger)
        .start()
    )


def write_batch(frame: DataFrame, name: str, output: str) -> None:
    """Write ``frame`` to the table ``name``, replacing the dates it holds."""
    writer = frame.write.format(table_format()).mode("overwrite").partitionBy(PARTITION)
    if table_format() == "delta":
        writer = writer.option("partitionOverwriteMode", "dynamic")
    writer.save(_path(output, name))
