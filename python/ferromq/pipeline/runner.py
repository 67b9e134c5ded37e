"""Run one job: a stream until stopped, or a batch (``backfill``) to its end.

A stream starts one query per output (:mod:`.output`), each reading the source with its
own checkpoint, named ``<job>.<output>``. The driver then waits, polling once a second:
SIGTERM or SIGINT stops every query (each finishes or abandons its batch; the checkpoint
makes the next start resume there), and so does the failure of one query, whose error
(first line) becomes the exit status 1. With ``--trigger available-now`` each query
reads what the source holds, writes it, and ends; the job ends with the last.

A back-fill reads the time range as a batch and writes each output, replacing the dates
it covers. The watermark and the checkpoint do not apply to it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from ferromq.config import LogConfig
from ferromq.log import configure_logging, log_event
from ferromq.pipeline.errors import EXIT_FAILED, PipelineError
from ferromq.pipeline.formats import TableFormat
from ferromq.pipeline.jobs import AVAILABLE_NOW, Job, JobOptions
from ferromq.pipeline.output import write_batch, write_stream
from ferromq.pipeline.progress import ProgressLog, observed
from ferromq.pipeline.session import spark_session
from ferromq.pipeline.sources import Source, TimeRange, check_kafka, read_records

__all__ = ["RunSpec", "Running", "run", "run_backfill", "start_queries"]

logger = logging.getLogger("ferromq.pipeline")
POLL_SECONDS: Final = 1.0
CATCH_UP_SECONDS: Final = 10.0


@dataclass(frozen=True)
class RunSpec:
    job: Job
    options: JobOptions
    source: Source
    output: str
    table_format: TableFormat
    checkpoint: str
    master: str | None
    trigger: str
    shuffle_partitions: int
    time_range: TimeRange | None  # set: a back-fill (a batch)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _trigger(text: str) -> dict[str, Any]:
    return {"availableNow": True} if text == AVAILABLE_NOW else {"processingTime": text}


def run(spec: RunSpec) -> int:
    """Run ``spec``; returns the exit status (0, or 1 when a query failed)."""
    time_range = spec.time_range
    if time_range and time_range.start and time_range.end and time_range.start >= time_range.end:
        raise PipelineError(f"--start {time_range.start} is not before --end {time_range.end}")
    if spec.source.kind == "kafka":
        check_kafka(spec.source.bootstrap)
    configure_logging(LogConfig())
    try:
        spark = spark_session(
            f"ferromq-{spec.job.name}",
            spec.master,
            spec.shuffle_partitions,
            formats=(spec.table_format,),
            warehouse=spec.output,
        )
    except (PySparkException, Py4JError) as exc:
        raise PipelineError(f"Spark did not start: {_first_line(exc)}") from None
    try:
        if time_range is not None:
            return run_backfill(spark, spec, time_range)
        return _wait(start_queries(spark, spec))
    except (PySparkException, Py4JError) as exc:
        log_event(logger, logging.ERROR, "job failed", job=spec.job.name, error=_first_line(exc))
        return EXIT_FAILED


@dataclass
class Running:
    """A stream's queries, one per output, and the listener logging their progress."""

    spark: SparkSession
    queries: list[StreamingQuery]
    progress: ProgressLog

    def stop_queries(self) -> None:
        for query in self.queries:
            if query.isActive:
                query.stop()

    def stop(self) -> None:
        """Stop the queries and the listener (a session may run other jobs after)."""
        self.stop_queries()
        self.spark.streams.removeListener(self.progress)

    def log_totals(self) -> None:
        """Once the listener has logged every batch (bounded wait), the rows each wrote."""
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline and not all(
            self.progress.caught_up(query) for query in self.queries
        ):
            time.sleep(0.1)
        for query in self.queries:
            name = query.name or str(query.id)
            rows = self.progress.written.get(name, 0)
            log_event(logger, logging.INFO, "query done", query=name, rows_out_total=rows)


def start_queries(spark: SparkSession, spec: RunSpec) -> Running:
    """Start the job's streaming queries (also the tests' and benches' way in)."""
    records = read_records(spark, spec.source, spec.job.stream, streaming=True)
    outputs = spec.job.build(records, spec.options)
    running = Running(spark, [], ProgressLog(logger))
    spark.streams.addListener(running.progress)
    try:
        for name, frame in outputs.items():
            query_name = f"{spec.job.name}.{name}"
            trigger = _trigger(spec.trigger)
            running.queries.append(
                write_stream(
                    observed(frame),
                    query_name,
                    name,
                    spec.output,
                    spec.checkpoint,
                    trigger,
                    spec.table_format,
                )
            )
    except BaseException:
        running.stop()
        raise
    return running


def _wait(running: Running) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(POLL_SECONDS):
            for query in running.queries:
                error = query.exception()
                if error is not None:
                    log_event(
                        logger, logging.ERROR, "query failed", query=query.name,
                        error=_first_line(error),
                    )  # fmt: skip
                    return EXIT_FAILED
            if not any(query.isActive for query in running.queries):
                break
        running.stop_queries()
        running.log_totals()
        return 0
    finally:
        running.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_backfill(spark: SparkSession, spec: RunSpec, time_range: TimeRange) -> int:
    """Write the back-fill of ``spec`` over ``time_range`` (also the tests' way in)."""
    records = read_records(spark, spec.source, spec.job.stream, False, time_range)
    for name, frame in spec.job.build(records, spec.options).items():
        write_batch(frame, name, spec.output, spec.table_format)
        log_event(logger, logging.INFO, "written", job=f"backfill.{spec.job.name}", table=name)
    return 0
