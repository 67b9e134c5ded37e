"""Where the records come from: the broker's Kafka topics or its Avro files.

Both give the same rows, the columns of ``record-v1.avsc`` (:mod:`ferromq.pipeline.records`):

- ``kafka``: topics ``ferromq.messages`` and ``ferromq.events`` by default, each value one
  record in Avro binary encoding. A value that does not decode keeps its bytes in
  ``payload``, its Kafka timestamp (the broker time) in ``time``, and a null ``kind``, so
  the job quarantines it instead of failing. Streaming starts at ``--starting-offsets``
  (default ``earliest``, then the checkpoint); a batch reads a time range with Spark's
  ``startingTimestamp`` / ``endingTimestamp`` (every partition from the first offset at
  or after the time), then keeps the records whose broker time is in the range.
- ``files``: the broker's object container files under ``<directory>/messages/`` and
  ``<directory>/events/`` (``[stream.files] directory``), read with ``format("avro")`` and
  the schema given (a streaming file source must be). Spark's file sources skip names
  that start with ``_`` or ``.``, so a file the broker is still writing (under such a
  name until renamed into place) is never read half-written; a corrupt file is skipped
  (``ignoreCorruptFiles``) rather than stopping the job.

Before a job starts, :func:`check_kafka` connects to each bootstrap server once: Spark's
Kafka client would otherwise retry forever with nothing said.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.records import RECORD, decode_values, record_type

__all__ = ["Source", "Stream", "TimeRange", "check_kafka", "read_records"]

Stream = Literal["messages", "events"]
CONNECT_TIMEOUT: Final = 5.0


@dataclass(frozen=True)
class Source:
    """``--source`` and what it needs: Kafka's servers and topics, or the directory."""

    kind: Literal["kafka", "files"]
    bootstrap: str = ""
    messages_topic: str = "ferromq.messages"
    events_topic: str = "ferromq.events"
    directory: str = ""
    starting_offsets: str = "earliest"

    def topic(self, stream: Stream) -> str:
        return self.messages_topic if stream == "messages" else self.events_topic


@dataclass(frozen=True)
class TimeRange:
    """A back-fill's range of broker times, ``start`` included, ``end`` excluded."""

    start: datetime | None = None
    end: datetime | None = None


def check_kafka(bootstrap: str) -> None:
    """Raise :class:`PipelineError` naming the servers unless one accepts a connection."""
    servers = [server.strip() for server in bootstrap.split(",") if server.strip()]
    if not servers:
        raise PipelineError("--source kafka needs --bootstrap HOST:PORT[,HOST:PORT...]")
    reasons = []
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT):
                return
        except (OSError, ValueError) as exc:
            reasons.append(f"{server}: {getattr(exc, 'strerror', None) or exc}")
    raise PipelineError(f"Kafka unreachable at {bootstrap} ({'; '.join(reasons)})")


def read_records(
    spark: SparkSession,
    source: Source,
    stream: Stream,
    streaming: bool,
    time_range: TimeRange | None = None,
) -> DataFrame:
    """The records of ``stream`` as rows with the record's columns."""
    if source.kind == "kafka":
        frame = _kafka(spark, source, stream, streaming, time_range)
    else:
        frame = _files(spark, source, stream, streaming)
    if time_range is not None:
        if time_range.start is not None:
            frame = frame.where(F.col("time") >= F.lit(time_range.start))
        if time_range.end is not None:
            frame = frame.where(F.col("time") < F.lit(time_range.end))
    return frame


def _kafka(
    spark: SparkSession,
    source: Source,
    stream: Stream,
    streaming: bool,
    time_range: TimeRange | None,
) -> DataFrame:
    options = {"kafka.bootstrap.servers": source.bootstrap, "subscribe": source.topic(stream)}
    if streaming:
        options["startingOffsets"] = source.starting_offsets
        raw = spark.readStream.format("kafka").options(**options).load()
    else:
        options.update(startingOffsets="earliest", endingOffsets="latest")
        if time_range is not None and time_range.start is not None:
            options["startingTimestamp"] = str(int(time_range.start.timestamp() * 1000))
            # A partition with no record at or after the start (empty, or older records
            # only) has nothing to read: its latest offset, not an error (Spark's default).
            options["startingOffsetsByTimestampStrategy"] = "latest"
        if time_range is not None and time_range.end is not None:
            options["endingTimestamp"] = str(int(time_range.end.timestamp() * 1000))
        raw = spark.read.format("kafka").options(**options).load()
    decoded = decode_values(raw)
    columns = {name: F.col(f"{RECORD}.{name}") for name in record_type(spark).fieldNames()}
    columns["time"] = F.coalesce(columns["time"], F.col("timestamp"))
    columns["payload"] = F.when(F.col(RECORD).isNull(), F.col("value")).otherwise(
        columns["payload"]
    )
    return decoded.select(*(column.alias(name) for name, column in columns.items()))


def _files(spark: SparkSession, source: Source, stream: Stream, streaming: bool) -> DataFrame:
    if not source.directory:
        raise PipelineError("--source files needs --directory (the broker's [stream.files])")
    path = f"{source.directory.rstrip('/')}/{stream}"
    if "://" not in path:  # a local directory: the job may start before the broker
        Path(path).mkdir(parents=True, exist_ok=True)
    options = {"ignoreCorruptFiles": "true"}
    schema = record_type(spark)
    if streaming:
        return spark.readStream.format("avro").schema(schema).options(**options).load(path)
    return spark.read.format("avro").schema(schema).options(**options).load(path)
