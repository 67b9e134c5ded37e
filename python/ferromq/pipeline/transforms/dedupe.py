"""Duplicates removed: a record seen twice, and a reading a publisher sent twice.

- The same record twice has the same ``id`` (the broker's node boot id and sequence
  number): a batch the broker resent after a restart, Spark's at-least-once Kafka sink
  upstream of a re-read, a file read again after a job restart within the watermark.
- An MQTT QoS 1 publisher that did not get its PUBACK resends the PUBLISH (DUP set);
  the broker accepts it as a new message with a new record id [MQTT-4.3.2-1 allows the
  duplicate]. With ``key_fields`` (``--dedupe-key ts``, a device-side reading time or
  sequence number in the payload) two records with the same topic and the same values of
  those fields are one reading. A record lacking one of the fields falls back to its id.

One key does both: ``topic`` and the key fields when all are present, else the record id
(else, for a Kafka value that did not decode, its bytes and time).
In a stream it is ``dropDuplicatesWithinWatermark``: a key's state is kept until the
watermark passes its first event time plus the watermark's delay, so duplicates are
removed when they arrive within the watermark of each other, and the state stays bounded
(the job sets the watermark on ``time``). On a batch it is ``dropDuplicates``. Which copy
survives is not defined: they are the same reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ferromq.pipeline.transforms.payload import FIELDS

__all__ = ["drop_duplicates"]

_KEY: Final = "dedupe_key"
_SEPARATOR: Final = "\u0000"  # neither a topic nor a JSON string's text contains it


def drop_duplicates(frame: DataFrame, key_fields: Sequence[str] = ()) -> DataFrame:
    """``frame`` without duplicate records; ``key_fields`` need ``payload_fields``
    (:func:`~ferromq.pipeline.transforms.payload.decode_payload`)."""
    # A Kafka value that did not decode has no id: its bytes and time stand for one.
    undecodable = F.concat_ws(
        _SEPARATOR, F.lit("raw"), F.sha2(F.col("payload"), 256), F.col("time").cast("string")
    )
    by_id = F.coalesce(F.hex(F.col("id")), undecodable)
    if key_fields:
        values = [F.col(FIELDS)[name] for name in key_fields]
        by_payload = F.concat_ws(_SEPARATOR, F.col("topic"), *values)
        complete = F.col("topic").isNotNull()
        for value in values:
            complete = complete & value.isNotNull()
        key = F.when(complete, F.concat(F.lit("p"), by_payload)).otherwise(
            F.concat(F.lit("i"), by_id)
        )
    else:
        key = by_id
    with_key = frame.withColumn(_KEY, key)
    if with_key.isStreaming:
        return with_key.dropDuplicatesWithinWatermark([_KEY]).drop(_KEY)
    return with_key.dropDuplicates([_KEY]).drop(_KEY)  # Spark refuses the former on a batch
