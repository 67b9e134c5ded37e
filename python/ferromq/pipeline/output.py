"""Where the outputs go: one table per output under ``--output``, partitioned by ``date``,
in the ``--format`` chosen (:mod:`.formats`: Parquet, Delta Lake or Apache Iceberg).

Output ``name`` of a job is the table in ``<output>/<name>`` (with Iceberg, the catalog
table ``ferromq.<name>`` there); a stream's checkpoint is ``<checkpoint>/<name>`` (one
per query: Spark keeps a query's offsets, state and sink log there, and a restart resumes
from it with no row written twice). Streams write in append mode: a window's row is
written once, when the watermark passes its end. A back-fill overwrites only the ``date``
partitions it writes (dynamic partition overwrite), so running it again over a range
replaces that range, and a date it has no row for is left as it was.

Per format, a stream's append, a back-fill's overwrite, and how a column is added:

- parquet: the file sink at ``path``; ``partitionOverwriteMode=dynamic``; no table
  schema to change: files of either schema, merged only by a reader's ``mergeSchema``;
- delta: ``format("delta")`` at ``path``; ``partitionOverwriteMode=dynamic`` (one
  commit); ``mergeSchema``;
- iceberg: ``toTable("ferromq.<name>")``; ``writeTo(...).overwritePartitions()`` (one
  snapshot); ``mergeSchema`` on a table with ``write.spark.accept-any-schema``.

Delta and Iceberg keep a transaction log, so a streaming table and a back-fill share it
and every commit is a version to read back (time travel: ``versionAsOf``). Parquet's
file sink keeps its own log (``_spark_metadata``) that hides files written beside it:
with Parquet, give a back-fill its own ``--output``. An Iceberg table is created on first
write, partitioned by ``date``, with every column nullable (a stream's and a batch's
frames differ in nullability) and ``write.spark.accept-any-schema``, so that a write
with ``mergeSchema`` may add columns. A stream writes with Iceberg's fan-out writer: a
micro-batch is not sorted by partition, and sorting it would cost a shuffle per batch.
"""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StructField, StructType

from ferromq.pipeline.formats import (
    DELTA,
    ICEBERG,
    PARQUET,
    WAREHOUSE_SETTING,
    TableFormat,
    iceberg_table,
)

__all__ = ["PARTITION", "table_name", "write_batch", "write_stream"]

PARTITION: Final = "date"
_ICEBERG_PROPERTIES: Final = {"write.spark.accept-any-schema": "true"}


def _path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def table_name(spark: SparkSession, output: str, name: str) -> str:
    """Output ``name``'s Iceberg table in ``spark``'s catalog (``ferromq.<name>``)."""
    return iceberg_table(spark.conf.get(WAREHOUSE_SETTING, None), output, name)


def _iceberg_frame(frame: DataFrame, table: str) -> DataFrame:
    """``frame`` with its columns in ``table``'s order, new ones last (Iceberg adds a
    column at the end and refuses a write whose columns come in another order), the
    table created first, partitioned by ``date``, when it does not exist yet."""
    spark = frame.sparkSession
    if spark.catalog.tableExists(table):
        known = [name for name in spark.table(table).columns if name in frame.columns]
        return frame.select(*known, *[name for name in frame.columns if name not in known])
    fields = [
        StructField(field.name, field.dataType, True, field.metadata) for field in frame.schema
    ]
    nullable = StructType(fields)
    writer = spark.createDataFrame([], nullable).writeTo(table).using("iceberg")
    writer = writer.partitionedBy(F.col(PARTITION))
    for key, value in _ICEBERG_PROPERTIES.items():
        writer = writer.tableProperty(key, value)
    writer.create()
    return frame


def write_stream(
    frame: DataFrame,
    query_name: str,
    name: str,
    output: str,
    checkpoint: str,
    trigger: dict[str, Any],
    table_format: TableFormat = PARQUET,
) -> StreamingQuery:
    """Start the streaming query appending ``frame`` to the table ``name``."""

    def appending(rows: DataFrame) -> DataStreamWriter:
        return (
            rows.writeStream.queryName(query_name)
            .outputMode("append")
            .option("checkpointLocation", _path(checkpoint, name))
            .trigger(**trigger)
        )

    if table_format == ICEBERG:
        table = table_name(frame.sparkSession, output, name)
        writer = appending(_iceberg_frame(frame, table)).format(ICEBERG)
        writer = writer.option("fanout-enabled", "true").option("mergeSchema", "true")
        return writer.toTable(table)
    writer = appending(frame).format(table_format).partitionBy(PARTITION)
    writer = writer.option("path", _path(output, name))
    if table_format == DELTA:
        writer = writer.option("mergeSchema", "true")
    return writer.start()


def write_batch(
    frame: DataFrame, name: str, output: str, table_format: TableFormat = PARQUET
) -> None:
    """Write ``frame`` to the table ``name``, replacing the dates it holds."""
    if table_format == ICEBERG:
        table = table_name(frame.sparkSession, output, name)
        ordered = _iceberg_frame(frame, table)
        ordered.writeTo(table).option("mergeSchema", "true").overwritePartitions()
        return
    writer = frame.write.format(table_format).mode("overwrite").partitionBy(PARTITION)
    writer = writer.option("partitionOverwriteMode", "dynamic")
    if table_format == DELTA:
        writer = writer.option("mergeSchema", "true")
    writer.save(_path(output, name))
