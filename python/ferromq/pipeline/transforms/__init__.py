"""The pipeline's transforms: plain functions from DataFrame to DataFrame, importable to
compose jobs of one's own (the jobs in :mod:`ferromq.pipeline.jobs` are such
compositions). Each works on a stream and on a batch alike, and runs in the JVM only
(column expressions, no Python UDF): no Python per record.

Typical order for messages (:func:`ferromq.pipeline.jobs.telemetry`): set the watermark
on ``time``; :func:`parse_topic`; :func:`decode_payload`; :func:`with_reason` to route
bad records to :func:`quarantined`; :func:`drop_duplicates`; :func:`explode_readings`;
:func:`window_aggregates`. For events: :func:`drop_duplicates`, then
:func:`connection_counts`, :func:`disconnect_reasons`, :func:`flapping_clients`,
:func:`session_durations`.
"""

from ferromq.pipeline.transforms.connections import (
    connection_counts,
    disconnect_reasons,
    flapping_clients,
    session_durations,
)
from ferromq.pipeline.transforms.dedupe import drop_duplicates
from ferromq.pipeline.transforms.payload import decode_payload, numeric_fields
from ferromq.pipeline.transforms.quarantine import quarantined, with_reason
from ferromq.pipeline.transforms.topic import TopicPattern, parse_topic
from ferromq.pipeline.transforms.window import explode_readings, window_aggregates

__all__ = [
    "TopicPattern",
    "connection_counts",
    "decode_payload",
    "disconnect_reasons",
    "drop_duplicates",
    "explode_readings",
    "flapping_clients",
    "numeric_fields",
    "parse_topic",
    "quarantined",
    "session_durations",
    "window_aggregates",
    "with_reason",
]
