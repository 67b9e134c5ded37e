"""Stream records as the broker writes them, built in tests from ``record-v1.avsc``:
Avro binary values for Kafka (``encode``) and object container files in the file sink's
layout (``write_container``: ``<dir>/messages/`` or ``<dir>/events/``, written under a
name starting with ``.`` and renamed into place, as the sink does), with fastavro, a
second implementation of the format beside Spark's."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from ferromq.stream import SCHEMA_VERSION, schema_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA = fastavro.parse_schema(json.loads(schema_text()))
BOOT = int(datetime(2026, 11, 24, tzinfo=timezone.utc).timestamp() * 1_000_000)
T0 = datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc)
_sequence = count()


def as_collected(seconds: float) -> datetime:
    """``seconds`` after T0 as pyspark's ``collect`` gives a timestamp: naive, in the
    process's local time zone (the session's is UTC; Python's conversion is local)."""
    return datetime.fromtimestamp((T0 + timedelta(seconds=seconds)).timestamp())


def record_id(sequence: int, boot: int = BOOT) -> bytes:
    return boot.to_bytes(8, "big") + sequence.to_bytes(8, "big")


@dataclass
class Record:
    """One record; ``at`` seconds after ``T0``. Builds the Avro datum."""

    kind: str
    at: float
    topic: str | None = None
    payload: bytes | None = None
    client_id: str | None = "dev-1"
    reason: str | None = None
    id: bytes = field(default_factory=lambda: record_id(next(_sequence)))

    @property
    def time(self) -> datetime:
        return T0 + timedelta(seconds=self.at)

    def datum(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "kind": self.kind,
            "time": self.time,
            "node": "node-a",
            "listener": "default",
            "client_id": self.client_id,
            "username": None,
            "topic": self.topic,
            "payload": self.payload,
            "qos": 1 if self.kind == "message" else None,
            "retain": False if self.kind == "message" else None,
            "user_properties": [],
            "reason": self.reason,
        }


def message(topic: str, payload: str | bytes, at: float, **kw: Any) -> Record:
    data = payload.encode() if isinstance(payload, str) else payload
    return Record("message", at, topic=topic, payload=data, **kw)


def event(kind: str, client_id: str, at: float, reason: str | None = None) -> Record:
    return Record(kind, at, client_id=client_id, reason=reason)


def encode(record: Record) -> bytes:
    """The Kafka value: the record's plain Avro binary encoding."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMA, record.datum())
    return out.getvalue()


def write_container(directory: Path, stream: str, name: str, records: Iterable[Record]) -> Path:
    """An object container file ``<directory>/<stream>/<name>.avro``, renamed into place."""
    folder = directory / stream
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.avro.partial"
    with partial.open("wb") as out:
        fastavro.writer(out, SCHEMA, [record.datum() for record in records], codec="null")
    target = folder / f"{name}.avro"
    os.replace(partial, target)
    return target


def frame(spark: SparkSession, records: Iterable[Record]) -> DataFrame:
    """A DataFrame of ``records`` with the columns a source gives (``record_type``)."""
    from ferromq.pipeline.records import record_type

    schema = record_type(spark)
    rows = [tuple(record.datum().get(name) for name in schema.fieldNames()) for record in records]
    return spark.createDataFrame(rows, schema)
