"""Bad records apart: a telemetry row is good, or it goes to the quarantine with a reason.

Reasons, first that applies: ``undecodable_record`` (a Kafka value that is not a record
of the schema), ``topic_mismatch`` (the topic does not match ``--pattern``),
``payload_not_json`` (``payload_not_avro``, ``payload_not_protobuf`` with
``--payload-schema``) and ``no_numeric_field`` (:mod:`.payload`). The quarantine keeps
what is needed to find and replay the record: its id, time, node, client, topic, raw
payload and the reason, partitioned by the UTC ``date`` of its time. Nothing raises: a
bad record is a row like any other, counted by the progress log, never a failed job.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ferromq.pipeline.transforms.payload import PAYLOAD_ERROR
from ferromq.pipeline.transforms.topic import MATCHES

__all__ = ["QUARANTINE_COLUMNS", "REASON", "UNDECODABLE", "quarantined", "with_reason"]

REASON: Final = "reason"
UNDECODABLE: Final = "undecodable_record"
TOPIC_MISMATCH: Final = "topic_mismatch"
QUARANTINE_COLUMNS: Final = ("id", "time", "node", "client_id", "topic", "payload", REASON)


def with_reason(frame: DataFrame) -> DataFrame:
    """``frame`` (with ``topic_matches`` and ``payload_error``) plus ``reason``: null for
    a good row."""
    reason = (
        F.when(F.col("kind").isNull(), F.lit(UNDECODABLE))
        .when(~F.col(MATCHES), F.lit(TOPIC_MISMATCH))
        .otherwise(F.col(PAYLOAD_ERROR))
    )
    return frame.withColumn(REASON, reason)


def quarantined(frame: DataFrame) -> DataFrame:
    """The rows of ``frame`` (from :func:`with_reason`) that have a reason, as the
    quarantine output's columns."""
    bad = frame.where(F.col(REASON).isNotNull())
    return bad.select(*QUARANTINE_COLUMNS, F.to_date(F.col("time")).alias("date"))
