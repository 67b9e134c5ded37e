"""JSON payloads into readings: per record, an array of ``struct<field, value double>``.

Three ways to say which fields are readings:

- a declared schema (``--schema``, a Spark DDL string such as ``temp DOUBLE, hum INT,
  ts BIGINT``): the payload is decoded with it (``from_json``), and its numeric fields
  are the readings (a field of the wrong JSON type is null there, not a reading);
- a list of fields (``--fields temp,hum``): those fields, where their value is a number;
- neither: every top-level field whose value is a number. The payload is decoded as a
  ``map<string, string>`` (a number's text, a string's content) and each value is kept
  where it parses as a finite double (``try_cast``): per record, in the JVM, so it works
  the same for a stream, which needs a fixed schema, and a batch, with no sampling pass
  and no schema drift when devices add fields. A JSON string holding a number (``"21.5"``)
  counts as that number here.

A payload that is a bare JSON number (``21.5``) is one reading named ``value``. The
fields of the dedupe key (``--dedupe-key``, :mod:`.dedupe`) are never readings: a device
timestamp or sequence number names a reading, it is not one.

Bad payloads are never an exception: ``payload_error`` says why a record has no
readings (``payload_not_json``: no payload, not UTF-8 JSON, or JSON that is neither an
object nor a number; ``no_numeric_field``), and the job sends it to the quarantine.
``payload_fields`` (the ``map<string, string>``) stays for :mod:`.dedupe`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, NumericType, StructType

from ferromq.pipeline.errors import PipelineError

__all__ = [
    "FIELDS",
    "NOT_JSON",
    "NO_NUMERIC_FIELD",
    "PAYLOAD_ERROR",
    "READINGS",
    "decode_payload",
    "numeric_fields",
]

READINGS: Final = "readings"
PAYLOAD_ERROR: Final = "payload_error"
FIELDS: Final = "payload_fields"
NOT_JSON: Final = "payload_not_json"
NO_NUMERIC_FIELD: Final = "no_numeric_field"
BARE_NUMBER_FIELD: Final = "value"
READINGS_TYPE: Final = "array<struct<field:string,value:double>>"


def numeric_fields(schema: str) -> list[str]:
    """The top-level numeric fields of a DDL schema (needs an active SparkSession)."""
    try:
        parsed = DataType.fromDDL(schema)
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipelineError(f"--schema {schema!r}: {first}") from None
    if not isinstance(parsed, StructType):
        raise PipelineError(f"--schema {schema!r}: not a list of fields (name TYPE, ...)")
    found = [field.name for field in parsed.fields if isinstance(field.dataType, NumericType)]
    if not found:
        raise PipelineError(f"--schema {schema!r}: no numeric field to aggregate")
    return found


def _finite(value: Column) -> Column:
    return value.isNotNull() & ~F.isnan(value) & (F.abs(value) < F.lit(float("inf")))


def decode_payload(
    frame: DataFrame,
    schema: str | None = None,
    fields: Sequence[str] = (),
    exclude: Sequence[str] = (),
    payload: str = "payload",
) -> DataFrame:
    """``frame`` plus ``readings``, ``payload_error`` (null when there are readings) and
    ``payload_fields`` (null unless the payload is a JSON object). Fields in ``exclude``
    (the dedupe key: they name a reading, they are not one) are never readings."""
    text = F.col(payload).cast("string")
    as_map = F.from_json(text, "map<string,string>")
    bare = F.trim(text).try_cast("double")

    def reading(name: str | Column, value: Column) -> Column:
        name_column = F.lit(name) if isinstance(name, str) else name
        return F.struct(name_column.alias("field"), value.cast("double").alias("value"))

    if schema is not None:
        decoded = F.from_json(text, schema)
        chosen = [
            name
            for name in numeric_fields(schema)
            if (not fields or name in fields) and name not in exclude
        ]
        found = F.array(*(reading(name, decoded[name]) for name in chosen))
    else:
        entries = F.map_entries(F.col(FIELDS))
        if fields:
            wanted = F.array(*(F.lit(name) for name in fields))
            entries = F.filter(entries, lambda entry: F.array_contains(wanted, entry["key"]))
        if exclude:
            unwanted = F.array(*(F.lit(name) for name in exclude))
            entries = F.filter(entries, lambda entry: ~F.array_contains(unwanted, entry["key"]))
        found = F.transform(
            entries, lambda entry: reading(entry["key"], entry["value"].try_cast("double"))
        )
    readings = F.when(F.col(FIELDS).isNotNull(), F.filter(found, lambda r: _finite(r["value"])))
    readings = readings.when(_finite(bare), F.array(reading(BARE_NUMBER_FIELD, bare)))
    with_readings = frame.withColumn(FIELDS, as_map).withColumn(READINGS, readings)
    error = (
        F.when(F.col(READINGS).isNull(), F.lit(NOT_JSON))
        .when(F.size(F.col(READINGS)) == 0, F.lit(NO_NUMERIC_FIELD))
        .otherwise(F.lit(None).cast("string"))
    )
    none = F.array().cast(READINGS_TYPE)
    return with_readings.withColumn(PAYLOAD_ERROR, error).withColumn(
        READINGS, F.coalesce(F.col(READINGS), none)
    )
