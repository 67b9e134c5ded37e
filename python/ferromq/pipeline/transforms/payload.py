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

With a payload schema (``--payload-schema``, :mod:`ferromq.pipeline.payload_schema`)
the payloads are not JSON but Avro binary records (Spark's ``from_avro``, PERMISSIVE) or
Protobuf messages (:mod:`.protobuf`), decoded into a struct whose fields then go the way
of a declared schema's: its numeric fields are the readings (``--fields`` picks among
them), its top-level scalar fields, as text, the ``payload_fields`` map.

A payload that is a bare JSON number (``21.5``) is one reading named ``value``. The
fields of the dedupe key (``--dedupe-key``, :mod:`.dedupe`) are never readings: a device
timestamp or sequence number names a reading, it is not one.

Bad payloads are never an exception: ``payload_error`` says why a record has no
readings (``payload_not_json``: no payload, not UTF-8 JSON, or JSON that is neither an
object nor a number; ``payload_not_avro``, ``payload_not_protobuf``: no payload, or
bytes that do not decode with the payload schema; ``no_numeric_field``), and the job
sends it to the quarantine.
``payload_fields`` (the ``map<string, string>``) stays for :mod:`.dedupe`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce
from typing import Final

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import AtomicType, DataType, NumericType, StructType

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.payload_schema import AVRO, PayloadSchema
from ferromq.pipeline.transforms.protobuf import decode_protobuf

__all__ = [
    "FIELDS",
    "NOT_AVRO",
    "NOT_JSON",
    "NOT_PROTOBUF",
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
NOT_AVRO: Final = "payload_not_avro"
NOT_PROTOBUF: Final = "payload_not_protobuf"
_DECODED: Final = "payload_decoded"  # the payload schema's struct, dropped at the end
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
    return _numeric(parsed, f"--schema {schema!r}")


def _numeric(decoded: StructType, what: str) -> list[str]:
    found = [field.name for field in decoded.fields if isinstance(field.dataType, NumericType)]
    if not found:
        raise PipelineError(f"{what}: no numeric field to aggregate")
    return found


def _decode_binary(frame: DataFrame, payload: Column, schema: PayloadSchema) -> DataFrame:
    """``frame`` plus the payload decoded with ``schema`` (null where it does not)."""
    what = f"--payload-schema {schema.path}"
    try:
        if schema.kind == AVRO:
            decoded = from_avro(payload, schema.avro_schema, {"mode": "PERMISSIVE"})
        else:
            decoded = decode_protobuf(payload, schema.descriptor_set, schema.message)
        with_decoded = frame.withColumn(_DECODED, decoded)
        _ = with_decoded.schema  # analysed here: a schema Spark refuses is a PipelineError
    except (PySparkException, Py4JError) as exc:
        # py4j's own text is "An error occurred while calling ...": the JVM's says why
        java = getattr(exc, "java_exception", None)
        text = (str(java.toString()) if java is not None else str(exc)).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise PipelineError(f"{what}: {first}") from None
    return with_decoded


def _finite(value: Column) -> Column:
    return value.isNotNull() & ~F.isnan(value) & (F.abs(value) < F.lit(float("inf")))


def decode_payload(
    frame: DataFrame,
    schema: str | None = None,
    fields: Sequence[str] = (),
    exclude: Sequence[str] = (),
    payload: str = "payload",
    payload_schema: PayloadSchema | None = None,
) -> DataFrame:
    """``frame`` plus ``readings``, ``payload_error`` (null when there are readings) and
    ``payload_fields`` (null unless the payload is a JSON object, or a record or message
    of ``payload_schema``). Fields in ``exclude`` (the dedupe key: they name a reading,
    they are not one) are never readings."""
    text = F.col(payload).cast("string")
    as_map = F.from_json(text, "map<string,string>")
    bare = F.trim(text).try_cast("double")
    not_decoded = NOT_JSON

    def reading(name: str | Column, value: Column) -> Column:
        name_column = F.lit(name) if isinstance(name, str) else name
        return F.struct(name_column.alias("field"), value.cast("double").alias("value"))

    def typed(decoded: Column, numeric: list[str]) -> Column:
        chosen = [
            name for name in numeric if (not fields or name in fields) and name not in exclude
        ]
        return F.array(*(reading(name, decoded[name]) for name in chosen))

    if payload_schema is not None:
        frame = _decode_binary(frame, F.col(payload), payload_schema)
        decoded_type = frame.schema[_DECODED].dataType
        if not isinstance(decoded_type, StructType):
            raise PipelineError(f"--payload-schema {payload_schema.path}: not a record")
        numeric = _numeric(decoded_type, f"--payload-schema {payload_schema.path}")
        decoded = F.col(_DECODED)
        if payload_schema.kind == AVRO:
            # from_avro's PERMISSIVE mode gives bytes that do not decode a struct of nulls,
            # not a null: a record with no field set stands for them (of a schema whose
            # fields are all nullable, a record of nulls too, which has no reading anyway).
            present = [decoded[field.name].isNotNull() for field in decoded_type.fields]
            decoded = F.when(reduce(operator.or_, present), decoded)
        found = typed(decoded, numeric)
        scalars = [f.name for f in decoded_type.fields if isinstance(f.dataType, AtomicType)]
        pairs = [(F.lit(name), decoded[name].cast("string")) for name in scalars]
        as_map = F.when(decoded.isNotNull(), F.create_map(*(c for pair in pairs for c in pair)))
        bare = F.lit(None).cast("double")
        not_decoded = NOT_AVRO if payload_schema.kind == AVRO else NOT_PROTOBUF
    elif schema is not None:
        found = typed(F.from_json(text, schema), numeric_fields(schema))
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
        F.when(F.col(READINGS).isNull(), F.lit(not_decoded))
        .when(F.size(F.col(READINGS)) == 0, F.lit(NO_NUMERIC_FIELD))
        .otherwise(F.lit(None).cast("string"))
    )
    none = F.array().cast(READINGS_TYPE)
    return (
        with_readings.withColumn(PAYLOAD_ERROR, error)
        .withColumn(READINGS, F.coalesce(F.col(READINGS), none))
        .drop(_DECODED)
    )
