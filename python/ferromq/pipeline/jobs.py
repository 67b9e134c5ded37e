"""The jobs: each a composition of :mod:`ferromq.pipeline.transforms` from the records of
one stream to named outputs, the same for a stream and for a batch (``backfill``).

- ``telemetry`` (messages): ``tumbling`` (and ``sliding`` with ``--sliding``) window
  aggregates per series, ``quarantine``;
- ``sessions`` (events): ``connections``, ``reasons``, ``flapping``, ``durations``;
- ``sparkplug`` (messages): Sparkplug B metrics, ``seq_gaps``, ``stale``, ``quarantine``
  (:mod:`ferromq.pipeline.sparkplug`; Python per record, unlike the others);
- ``backfill``: one of those as a batch over a time range (:mod:`.runner`).

Every job but ``sparkplug`` first sets the watermark on the broker ``time``
(``--watermark``): it bounds the streaming state (dedupe keys, open windows, the join of
connects with disconnects) and says how late a record may be and still count. On a batch
it is ignored. ``sparkplug`` keeps its state per edge node, with no window to close.

This module imports pyspark only when a job is built, so ``ferromq pipeline list`` works
without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ferromq.pipeline.payload_schema import PayloadSchema
    from ferromq.pipeline.sources import Stream
    from ferromq.pipeline.transforms import TopicPattern

__all__ = [
    "AVAILABLE_NOW",
    "BACKFILL",
    "JOBS",
    "Job",
    "JobOptions",
    "Outputs",
    "sessions",
    "sparkplug",
    "telemetry",
]

Outputs: TypeAlias = "dict[str, DataFrame]"
BACKFILL: Final = "backfill"
AVAILABLE_NOW: Final = "available-now"
"""``--trigger available-now``: read what the source holds, write it, then stop."""


@dataclass(frozen=True)
class JobOptions:
    """The jobs' options (``ferromq pipeline run --help`` documents each)."""

    pattern: TopicPattern | None = None
    schema: str | None = None
    payload_schema: PayloadSchema | None = None  # --payload-schema: Avro or Protobuf payloads
    fields: tuple[str, ...] = ()
    dedupe_key: tuple[str, ...] = ()
    window: str = "1 minute"
    sliding: tuple[str, str] | None = None  # (duration, slide)
    watermark: str = "1 minute"
    flap_window: str = "5 minutes"
    flap_count: int = 5
    max_session: str = "1 hour"


@dataclass(frozen=True)
class Job:
    name: str
    stream: Stream
    description: str
    outputs: tuple[str, ...]
    build: Callable[[DataFrame, JobOptions], Outputs]


def telemetry(records: DataFrame, options: JobOptions) -> Outputs:
    """Messages into per-series window aggregates, and the quarantine."""
    from pyspark.sql import functions as F

    from ferromq.pipeline.records import MESSAGE
    from ferromq.pipeline.transforms import (
        decode_payload,
        drop_duplicates,
        explode_readings,
        parse_topic,
        quarantined,
        window_aggregates,
        with_reason,
    )
    from ferromq.pipeline.transforms.quarantine import REASON
    from ferromq.pipeline.transforms.topic import MATCHES

    timed = records.withWatermark("time", options.watermark)
    messages = timed.where(F.col("kind").isNull() | (F.col("kind") == MESSAGE))
    keys: tuple[str, ...]
    if options.pattern is None:
        parsed, keys = messages.withColumn(MATCHES, F.lit(True)), ("topic",)
    else:
        parsed, keys = parse_topic(messages, options.pattern), options.pattern.names
    decoded = decode_payload(
        parsed,
        options.schema,
        options.fields,
        options.dedupe_key,
        payload_schema=options.payload_schema,
    )
    unique = drop_duplicates(with_reason(decoded), options.dedupe_key)
    readings = explode_readings(unique.where(F.col(REASON).isNull()))
    outputs = {"tumbling": window_aggregates(readings, keys, options.window)}
    if options.sliding is not None:
        outputs["sliding"] = window_aggregates(readings, keys, *options.sliding)
    outputs["quarantine"] = quarantined(unique)
    return outputs


def sessions(records: DataFrame, options: JobOptions) -> Outputs:
    """Lifecycle events into connection analytics."""
    from ferromq.pipeline.transforms import (
        connection_counts,
        disconnect_reasons,
        drop_duplicates,
        flapping_clients,
        session_durations,
    )

    unique = drop_duplicates(records.withWatermark("time", options.watermark))
    return {
        "connections": connection_counts(unique, options.window),
        "reasons": disconnect_reasons(unique, options.window),
        "flapping": flapping_clients(unique, options.flap_window, options.flap_count),
        "durations": session_durations(unique, options.max_session),
    }


def sparkplug(records: DataFrame, options: JobOptions) -> Outputs:
    """Sparkplug B messages into metric rows, sequence gaps and stale DATA."""
    from ferromq.pipeline.sparkplug.frames import sparkplug_outputs

    return sparkplug_outputs(records)


JOBS: Final = {
    job.name: job
    for job in (
        Job(
            "telemetry",
            "messages",
            "per device and metric: window count, rate, min, max, mean, stddev, last; "
            "bad records to a quarantine",
            ("tumbling", "sliding", "quarantine"),
            telemetry,
        ),
        Job(
            "sessions",
            "events",
            "connects and disconnects per client, disconnect reasons, flapping clients, "
            "session durations",
            ("connections", "reasons", "flapping", "durations"),
            sessions,
        ),
        Job(
            "sparkplug",
            "messages",
            "Sparkplug B metrics (names resolved through the BIRTH), seq gaps, stale DATA; "
            "bad payloads to a quarantine",
            ("metrics", "seq_gaps", "stale", "quarantine"),
            sparkplug,
        ),
    )
}
