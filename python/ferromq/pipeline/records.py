"""Stream records as Spark rows: the columns of ``record-v1.avsc`` (:mod:`ferromq.stream`).

The schema file is the one definition the broker's encoder and these jobs read. A Kafka
value is one record in Avro binary encoding, decoded by :func:`decode_values` with
``from_avro`` in PERMISSIVE mode: a value that does not decode becomes a row whose
``record`` is null (``undecodable_record`` in the quarantine, its bytes kept) instead of
failing the job.
A value in the Confluent wire format (``[stream.kafka] registry``: magic byte 0, a 4-byte
schema id, then the same Avro body) is decoded from its sixth byte; a plain value never
starts with 0 (its first field, ``schema_version`` 1, encodes as 2), so both formats
read alike, even mixed in one topic.
Files are Avro object container files whose rows already have the record's columns;
:func:`record_type` is their Spark type, which a streaming file source must be given.

Avro → Spark: ``id`` (fixed 16) binary, ``kind`` (enum) string, ``time``
(timestamp-micros) timestamp, unions with null nullable columns, ``user_properties`` an
array of ``struct<key, value>``.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import StructType

from ferromq.stream import schema_text

__all__ = ["MESSAGE", "decode_values", "record_type"]

MESSAGE: Final = "message"  # the kind of a PUBLISH's record; the others are events
RECORD: Final = "record"  # the struct column decode_values adds
CONFLUENT_MAGIC: Final = b"\x00"  # the Confluent wire format's first byte
CONFLUENT_HEADER_BYTES: Final = 5  # the magic byte and the schema id


def record_type(spark: SparkSession) -> StructType:
    """The Spark type of one record, derived from the schema file (no job runs)."""
    probe = spark.range(0).select(from_avro(F.lit(b""), schema_text()).alias(RECORD))
    decoded = probe.schema[RECORD].dataType
    assert isinstance(decoded, StructType)
    return decoded


def decode_values(frame: DataFrame, value: str = "value") -> DataFrame:
    """``frame`` with its Avro ``value`` column decoded into a ``record`` struct column
    (null for a value that does not decode); the other columns are kept."""
    raw = F.col(value)
    framed = F.substring(raw, 1, 1) == F.lit(CONFLUENT_MAGIC)
    body = F.when(framed, F.substring(raw, CONFLUENT_HEADER_BYTES + 1, 2**31 - 1)).otherwise(raw)
    decoded = from_avro(body, schema_text(), {"mode": "PERMISSIVE"})
    # PERMISSIVE gives a struct of nulls, not a null, for bytes that do not decode;
    # schema_version is never null in a record that did.
    return frame.withColumn(RECORD, F.when(decoded["schema_version"].isNotNull(), decoded))
