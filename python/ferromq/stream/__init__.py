"""The broker's data stream for the Spark pipeline (``[stream]``).

The record schema is ``record-v1.avsc`` beside this module, the one definition the
broker's encoder (``ferromq_core::export``) and the Spark jobs (``ferromq.pipeline``)
both read; :func:`schema_text` returns it. The broker side: :mod:`ferromq.stream.sink`
(the sink protocol and the choice of sink), :mod:`ferromq.stream.files` (the embedded
file sink), :mod:`ferromq.stream.kafka_sink` (the Kafka sink) and its on-disk buffer
:mod:`ferromq.stream.spill`; docs/stream.md for users.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["SCHEMA_VERSION", "schema_text"]

SCHEMA_VERSION = 1


def schema_text() -> str:
    """The Avro schema of stream records, version :data:`SCHEMA_VERSION`, as JSON text."""
    return resources.files(__package__).joinpath(f"record-v{SCHEMA_VERSION}.avsc").read_text()
