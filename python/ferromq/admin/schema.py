"""JSON Schema for the admin API: builders for the few shapes it uses, and a check of a
request body against its schema.

The route table (:mod:`ferromq.admin.api`) names one schema per request body and per
answer; the OpenAPI document (:mod:`ferromq.admin.openapi`) prints them and
:func:`check` enforces the request ones, so what the document says a request may
hold is what the handler accepts — one definition, not two. :func:`check` covers the
subset these builders write (JSON Schema 2020-12 as OpenAPI 3.1 uses it): ``type``
(one name, or ``[name, "null"]``), ``enum``, ``const``, ``minimum`` / ``maximum``,
``minLength`` / ``maxLength``, ``pattern``, ``if`` / ``then``, ``properties`` with
``required``, ``additionalProperties`` and ``propertyNames``, ``items``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BASE64",
    "BOOLEAN",
    "MQTT_STRING",
    "NUMBER",
    "STRING",
    "TOPIC_FILTER",
    "TOPIC_NAME",
    "Schema",
    "SchemaError",
    "array",
    "check",
    "integer",
    "nullable",
    "obj",
    "string",
]

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
NUMBER: Schema = {"type": "number"}


# MQTT's rules as patterns (ECMA-262, as OpenAPI reads them): a topic name has no
# wildcard and no U+0000 [MQTT-4.7.1-1, 1.5.4-2]; a filter's `+` is a whole level and
# `#` the whole last one [MQTT-4.7.1-2, 4.7.1-3]. Shared filters (`$share/...`) pass
# the engine's own check only.
TOPIC_NAME: Schema = {"type": "string", "minLength": 1, "pattern": "^[^#+\\x00]+$"}
_LEVEL = "(\\+|[^#+/\\x00]*)"
TOPIC_FILTER: Schema = {
    "type": "string",
    "minLength": 1,
    "pattern": f"^(#|{_LEVEL}(/{_LEVEL})*(/#)?)$",
}


MQTT_STRING: Schema = {"type": "string", "pattern": "^[^\\x00]*$"}
"""An MQTT UTF-8 string: no U+0000 [MQTT-1.5.4-2]."""
BASE64: Schema = {
    "type": "string",
    "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
}


class SchemaError(ValueError):
    """A request body that its schema refuses; the message names the field."""


def integer(minimum: int | None = None, maximum: int | None = None) -> Schema:
    schema: Schema = {"type": "integer"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def string(*choices: str, min_length: int = 0, max_length: int | None = None) -> Schema:
    schema: Schema = {"type": "string"}
    if choices:
        schema["enum"] = list(choices)
    if min_length:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def nullable(schema: Schema) -> Schema:
    return {**schema, "type": [schema["type"], "null"]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(
    properties: Mapping[str, Schema],
    required: tuple[str, ...] = (),
    extra: Schema | None = None,
    keys: Schema | None = None,
) -> Schema:
    """An object with ``properties`` (``required`` among them); other keys are refused,
    or, with ``extra``, allowed with that schema (a map, its keys as ``keys`` says)."""
    schema: Schema = {
        "type": "object",
        "properties": dict(properties),
        "additionalProperties": extra if extra is not None else False,
    }
    if keys is not None:
        schema["propertyNames"] = keys
    if required:
        schema["required"] = list(required)
    return schema


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def check(value: object, schema: Schema, where: str = "body") -> None:
    """Raise :class:`SchemaError` naming the first place where ``value`` breaks
    ``schema``."""
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        ok = any(
            isinstance(value, _TYPES[name]) and not (name == "integer" and isinstance(value, bool))
            for name in names
        )
        if not ok:
            raise SchemaError(f"{where}: expected {' or '.join(names)}")
    if value is None:
        return
    if "const" in schema and value != schema["const"]:
        raise SchemaError(f"{where}: must be {schema['const']}")
    if "if" in schema and _holds(value, schema["if"], where):
        check(value, schema.get("then", {}), where)
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{where}: must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, int):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(f"{where}: at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(f"{where}: at most {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise SchemaError(f"{where}: at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaError(f"{where}: at most {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise SchemaError(f"{where}: does not match {schema['pattern']}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            check(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, dict):
        _check_object(value, schema, where)


def _check_object(value: dict[str, object], schema: Schema, where: str) -> None:
    properties: dict[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise SchemaError(f"{where}: {name} is required")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if "propertyNames" in schema:
            check(name, schema["propertyNames"], f"{where} key {name!r}")
        if name in properties:
            check(item, properties[name], f"{where}.{name}")
        elif extra is False:
            raise SchemaError(f"{where}: unknown field {name}")
        elif isinstance(extra, dict):
            check(item, extra, f"{where}.{name}")


def _holds(value: object, schema: Schema, where: str) -> bool:
    try:
        check(value, schema, where)
    except SchemaError:
        return False
    return True
