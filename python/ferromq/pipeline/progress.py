"""Progress while a streaming job runs: one log line per micro-batch of each query, from
Spark's ``StreamingQueryListener`` (called in the driver per batch, never per record).

A line (:func:`ferromq.log.log_event`) names the query (``telemetry.tumbling``) and says
its batch number, rows in, rows out (and out in all since the start), rows per second,
the watermark, rows dropped as later than the watermark (``late``) and, for a Kafka
source, the lag per partition: the latest offset minus the offset the batch read to
(``ferromq.messages/0:12,ferromq.messages/1:0``). A quarantine query's rows out are
quarantined records: a warning with the count. A query that fails logs its error.

Rows out: Spark's file sink does not count what it writes (its ``numOutputRows`` is -1),
so each output is observed (:func:`observed`: ``Dataset.observe``, a count the executors
keep per batch and the progress carries). Listener events arrive asynchronously; the
runner waits for :meth:`ProgressLog.caught_up` before it logs the totals and exits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    SourceProgress,
    StreamingQueryListener,
    StreamingQueryProgress,
)
from pyspark.sql.streaming.query import StreamingQuery

from ferromq.log import log_event

__all__ = ["ProgressLog", "kafka_lag", "observed"]

QUARANTINE_SUFFIX: Final = ".quarantine"
_OBSERVATION: Final = "output"
_ROWS: Final = "rows"


def observed(frame: DataFrame) -> DataFrame:
    """``frame`` counting the rows that pass per batch, for :func:`rows_out`."""
    return frame.observe(_OBSERVATION, F.count(F.lit(1)).alias(_ROWS))


def rows_out(progress: StreamingQueryProgress) -> int:
    """The rows the batch wrote (0 when the output was not :func:`observed`)."""
    metrics = progress.observedMetrics.get(_OBSERVATION)
    return int(metrics[_ROWS]) if metrics is not None else 0


def kafka_lag(sources: Iterable[SourceProgress]) -> str:
    """``topic/partition:lag`` for every Kafka partition the sources read, or ``""``."""
    lags = []
    for source in sources:
        try:
            latest = json.loads(source.latestOffset or "null")
            read_to = json.loads(source.endOffset or "null")
        except json.JSONDecodeError:
            continue  # a file source's offsets are not per partition
        if not isinstance(latest, dict) or not isinstance(read_to, dict):
            continue
        for topic, partitions in sorted(latest.items()):
            if not isinstance(partitions, dict):
                continue
            done = read_to.get(topic, {})
            for partition, offset in sorted(partitions.items(), key=lambda item: int(item[0])):
                lags.append(f"{topic}/{partition}:{offset - done.get(partition, offset)}")
    return ",".join(lags)


class ProgressLog(StreamingQueryListener):
    """Logs each query's progress on ``logger``; keeps rows out per query in ``written``."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.written: dict[str, int] = {}
        self._last_batch: dict[str, int] = {}

    def caught_up(self, query: StreamingQuery) -> bool:
        """Whether the last batch ``query`` ran has been logged."""
        last = query.lastProgress
        return last is None or self._last_batch.get(query.name or "", -1) >= last.batchId

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        log_event(self.logger, logging.INFO, "query started", query=event.name)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        name = progress.name or str(progress.id)
        rows = rows_out(progress)
        total = self.written[name] = self.written.get(name, 0) + rows
        fields: dict[str, object] = {
            "query": name,
            "batch": progress.batchId,
            "rows_in": progress.numInputRows,
            "rows_out": rows,
            "rows_out_total": total,
            "rows_per_second": round(progress.processedRowsPerSecond, 1),
            "late": sum(state.numRowsDroppedByWatermark for state in progress.stateOperators),
        }
        watermark = progress.eventTime.get("watermark")
        if watermark:
            fields["watermark"] = watermark
        lag = kafka_lag(progress.sources)
        if lag:
            fields["lag"] = lag
        log_event(self.logger, logging.INFO, "batch", **fields)
        if name.endswith(QUARANTINE_SUFFIX) and rows:
            log_event(self.logger, logging.WARNING, "records quarantined", count=rows, total=total)
        self._last_batch[name] = progress.batchId

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass  # an idle query has nothing new to say; its last batch line stands

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if event.exception:
            first = event.exception.strip().splitlines()[0]
            log_event(self.logger, logging.ERROR, "query failed", error=first)
