"""Protobuf payloads into a struct column: one message of a compiled descriptor set
(:mod:`ferromq.pipeline.payload_schema`) per payload.

Spark's own decoder (``from_protobuf``) lives in the ``spark-protobuf`` Maven artifact,
which the Maven repository reachable here does not serve, so this decodes in the Python
workers: a Python UDF that parses each payload with protobuf's message class, built once
per worker from the descriptor set's bytes (shipped in the UDF's closure) in a pool of
its own, as :mod:`ferromq.pipeline.sparkplug` does. The workers need ferromq and the
``protobuf`` package (the ``pipeline`` extra brings it with grpcio-tools). Where pandas
and pyarrow are installed (the ``sparkplug`` extra) it is an Arrow-optimized UDF, rows
crossing to Python in Arrow batches: about three times the rate of a pickled one
(``benches/pipeline/decode.py --payload protobuf``).

The struct has the message's top-level singular scalar fields, typed as
``from_protobuf`` types them: ``int32``-like as int, ``int64``-like and ``uint32`` as
long, ``uint64`` as decimal(20,0), ``float``, ``double``, ``bool``, ``string``,
``bytes`` as binary, an enum as its value's name. Nested messages and repeated fields
are left out (a reading is a top-level number, as in a JSON object). A field with
presence (proto2, proto3 ``optional``, a oneof member) that is not set is null; a proto3
field without presence holds its value, 0 when the device sent 0 (proto3 does not send
zeros: unlike ``from_protobuf``'s default, a zero is kept as a reading, not dropped).
A payload that does not parse is a null struct.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from decimal import Decimal
from functools import cache
from typing import Any, Final

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferromq.pipeline.errors import PipelineError

__all__ = ["decode_protobuf", "protobuf_type"]

_UINT64: Final = DecimalType(20, 0)
ARROW_MODULES: Final = ("pyarrow", "pandas")  # an Arrow-optimized UDF's (3x the rate)


@cache
def _message_class(descriptor_set: bytes, message: str) -> Any:
    """The class of ``message``, built once per process from the descriptor set."""
    from google.protobuf import descriptor_pool, message_factory
    from google.protobuf.descriptor_pb2 import FileDescriptorSet

    pool = descriptor_pool.DescriptorPool()
    for file in FileDescriptorSet.FromString(descriptor_set).file:  # imports come first
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


def _spark_type(field: Any) -> DataType | None:
    from google.protobuf.descriptor import FieldDescriptor as D

    # protobuf 7 drops ``label`` for ``is_repeated`` (from 5.29); 4.x has only ``label``
    repeated = getattr(field, "is_repeated", None)
    if repeated if repeated is not None else field.label == D.LABEL_REPEATED:
        return None
    by_type: dict[int, DataType] = {
        D.TYPE_DOUBLE: DoubleType(), D.TYPE_FLOAT: FloatType(),
        D.TYPE_INT32: IntegerType(), D.TYPE_SINT32: IntegerType(), D.TYPE_SFIXED32: IntegerType(),
        D.TYPE_INT64: LongType(), D.TYPE_SINT64: LongType(), D.TYPE_SFIXED64: LongType(),
        D.TYPE_UINT32: LongType(), D.TYPE_FIXED32: LongType(),
        D.TYPE_UINT64: _UINT64, D.TYPE_FIXED64: _UINT64,
        D.TYPE_BOOL: BooleanType(), D.TYPE_STRING: StringType(), D.TYPE_BYTES: BinaryType(),
        D.TYPE_ENUM: StringType(),
    }  # fmt: skip
    return by_type.get(field.type)


@cache
def _fields(descriptor_set: bytes, message: str) -> list[tuple[Any, DataType]]:
    descriptor = _message_class(descriptor_set, message).DESCRIPTOR
    typed = ((field, _spark_type(field)) for field in descriptor.fields)
    return [(field, spark_type) for field, spark_type in typed if spark_type is not None]


def protobuf_type(descriptor_set: bytes, message: str) -> StructType:
    """The Spark type of ``message`` decoded (its top-level singular scalar fields)."""
    try:
        fields = _fields(descriptor_set, message)
    except (KeyError, TypeError) as exc:  # a descriptor set load_payload_schema did not check
        raise PipelineError(f"protobuf message {message}: {exc}") from None
    return StructType([StructField(field.name, spark_type) for field, spark_type in fields])


def _decoder(descriptor_set: bytes, message: str) -> Callable[[Any], tuple[Any, ...] | None]:
    def decode(payload: Any) -> tuple[Any, ...] | None:
        from google.protobuf.descriptor import FieldDescriptor
        from google.protobuf.message import DecodeError

        if payload is None:
            return None
        fields = _fields(descriptor_set, message)
        try:
            parsed = _message_class(descriptor_set, message).FromString(bytes(payload))
        except (DecodeError, RuntimeWarning, ValueError):
            return None
        values: list[Any] = []
        for field, spark_type in fields:
            if field.has_presence and not parsed.HasField(field.name):
                values.append(None)
                continue
            value = getattr(parsed, field.name)
            if field.type == FieldDescriptor.TYPE_ENUM:
                known = field.enum_type.values_by_number.get(value)
                value = known.name if known is not None else str(value)
            elif spark_type == _UINT64:
                value = Decimal(value)
            values.append(value)
        return tuple(values)

    return decode


def decode_protobuf(payload: Column, descriptor_set: bytes, message: str) -> Column:
    """``payload`` (binary) decoded as ``message``: a struct, null where it does not parse."""
    decoded_type = protobuf_type(descriptor_set, message)
    arrow = all(importlib.util.find_spec(module) is not None for module in ARROW_MODULES)
    return F.udf(_decoder(descriptor_set, message), decoded_type, useArrow=arrow)(payload)
