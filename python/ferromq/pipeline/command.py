"""``ferromq pipeline run JOB`` and its spark-submit twin (:mod:`.submit`): the command
line of a job, checked into a :class:`~ferromq.pipeline.runner.RunSpec` before any JVM
starts, then run; every error a user can cause is one line on stderr.

:func:`add_run_arguments` defines the options once for both entry points; they differ
only in ``--master``'s default: ``local[*]`` from ``ferromq``, spark-submit's own
``--master`` under spark-submit. Durations are Spark's (``30 seconds``, ``5 minutes``,
``1 day``); times ISO 8601 (UTC unless they say otherwise).

Exit status: 0 done (stopped by SIGTERM/SIGINT, or a batch or ``--trigger
available-now`` run finished), 2 a problem to fix before the job can start (options,
pyspark, Java, ``--format delta`` without delta-spark, Kafka unreachable, a connector
jar not fetched, a ``--payload-schema`` missing, bad, or without the message named), 1
the job failed while running (the query's error, first line).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final

from ferromq.pipeline.errors import EXIT_SETUP, PipelineError
from ferromq.pipeline.formats import PARQUET, TABLE_FORMATS, require_format
from ferromq.pipeline.jobs import AVAILABLE_NOW, BACKFILL, JOBS, JobOptions
from ferromq.pipeline.payload_schema import PayloadSchema, load_payload_schema

if TYPE_CHECKING:
    from ferromq.pipeline.runner import RunSpec

__all__ = ["add_run_arguments", "run_command", "run_spec", "setup_failed"]

DEFAULT_MASTER: Final = "local[*]"
_DURATION: Final = re.compile(
    r"\d+\s*(microsecond|millisecond|second|minute|hour|day|week)s?", re.IGNORECASE
)


def _duration(text: str) -> str:
    if not _DURATION.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (a number and a unit: '30 seconds', '5 minutes')"
        )
    return text.strip()


def _sliding(text: str) -> tuple[str, str]:
    length, sep, slide = text.partition("/")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LENGTH/SLIDE ('5 minutes/1 minute')")
    return _duration(length), _duration(slide)


def _names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected one or more names separated by commas")
    return names


def _time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time ('2026-11-24T08:00:00')"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _trigger(text: str) -> str:
    return text if text == AVAILABLE_NOW else _duration(text)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def add_run_arguments(parser: argparse.ArgumentParser, master: str | None) -> None:
    """The job and its options; ``master`` is ``--master``'s default."""
    parser.add_argument("job", choices=[*JOBS, BACKFILL], help="the job to run (see list)")
    where = parser.add_argument_group("source")
    where.add_argument(
        "--source", choices=("kafka", "files"), default="files", help="(default: files)"
    )
    where.add_argument("--bootstrap", default="", metavar="HOST:PORT[,...]", help="Kafka servers")
    where.add_argument(
        "--messages-topic", default="ferromq.messages", metavar="TOPIC", help="(ferromq.messages)"
    )
    where.add_argument(
        "--events-topic", default="ferromq.events", metavar="TOPIC", help="(ferromq.events)"
    )
    where.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a stream's first run starts in Kafka (default: earliest)",
    )
    where.add_argument(
        "--directory",
        default="",
        metavar="DIR",
        help="the broker's stream files ([stream.files] directory: messages/, events/)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--output", required=True, metavar="DIR", help="tables go to DIR/<name>")
    out.add_argument(
        "--format",
        dest="table_format",
        choices=TABLE_FORMATS,
        default=PARQUET,
        help="table format: Parquet files, Delta Lake (needs delta-spark), or Iceberg "
        "(a Hadoop catalog at OUTPUT, tables ferromq.<name>) (default: parquet)",
    )
    out.add_argument(
        "--checkpoint", metavar="DIR", help="stream checkpoints (default: OUTPUT/_checkpoints)"
    )
    spark = parser.add_argument_group("spark")
    spark.add_argument(
        "--master",
        default=master,
        help=f"Spark master URL (default: {master or 'spark-submit --master'})",
    )
    spark.add_argument(
        "--trigger",
        type=_trigger,
        default="10 seconds",
        help=f"micro-batch interval, or {AVAILABLE_NOW}: read what is there, then stop "
        "(default: 10 seconds)",
    )
    spark.add_argument(
        "--shuffle-partitions",
        type=_positive,
        default=8,
        metavar="N",
        help="spark.sql.shuffle.partitions; fixed by a stream's first run (default: 8)",
    )
    job = parser.add_argument_group("job")
    job.add_argument(
        "--pattern",
        metavar="PATTERN",
        help="topic levels into columns, e.g. tenant/{tenant}/device/{device}/{metric} "
        "(default: one series per topic)",
    )
    job.add_argument("--schema", metavar="DDL", help="payload JSON schema, e.g. 'temp DOUBLE'")
    job.add_argument(
        "--payload-schema",
        metavar="FILE",
        help="telemetry: payloads are Avro binary records of FILE.avsc, or Protobuf "
        "messages of FILE.proto (compiled with grpcio-tools' protoc) instead of JSON",
    )
    job.add_argument(
        "--payload-message",
        metavar="NAME",
        help="the message of --payload-schema's .proto (default: its first top-level one)",
    )
    job.add_argument(
        "--fields", type=_names, default=(), metavar="A,B", help="the payload fields to aggregate"
    )
    job.add_argument(
        "--dedupe-key",
        type=_names,
        default=(),
        metavar="A,B",
        help="payload fields that identify a reading (e.g. a device timestamp): "
        "QoS 1 resends are dropped",
    )
    job.add_argument(
        "--window",
        type=_duration,
        default="1 minute",
        metavar="DURATION",
        help="tumbling window length (default: 1 minute)",
    )
    job.add_argument(
        "--sliding",
        type=_sliding,
        metavar="LENGTH/SLIDE",
        help="also sliding windows, e.g. '5 minutes/1 minute'",
    )
    job.add_argument(
        "--watermark",
        type=_duration,
        default="1 minute",
        metavar="DURATION",
        help="how late a record may be and still count (default: 1 minute)",
    )
    job.add_argument(
        "--flap-window",
        type=_duration,
        default="5 minutes",
        metavar="DURATION",
        help="sessions: the window --flap-count disconnects flag a client in (5 minutes)",
    )
    job.add_argument(
        "--flap-count",
        type=_positive,
        default=5,
        metavar="N",
        help="sessions: disconnects that make a client flapping (default: 5)",
    )
    job.add_argument(
        "--max-session",
        type=_duration,
        default="1 hour",
        metavar="DURATION",
        help="sessions: the longest session a stream reports, that long after its "
        "start (default: 1 hour)",
    )
    backfill = parser.add_argument_group("backfill")
    backfill.add_argument(
        "--job",
        dest="backfill_of",
        choices=list(JOBS),
        default="telemetry",
        help="the job to run as a batch (default: telemetry)",
    )
    backfill.add_argument(
        "--start", type=_time, metavar="TIME", help="broker times from (ISO 8601, UTC if no zone)"
    )
    backfill.add_argument("--end", type=_time, metavar="TIME", help="broker times to (excluded)")


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The job ``args`` describe, checked. Raises :class:`PipelineError`; imports pyspark."""
    from ferromq.pipeline.session import require_spark

    require_spark()  # before the transforms are imported: they import pyspark
    require_format(args.table_format)
    from ferromq.pipeline.runner import RunSpec
    from ferromq.pipeline.sources import Source, TimeRange
    from ferromq.pipeline.transforms import TopicPattern

    options = JobOptions(
        pattern=TopicPattern.parse(args.pattern) if args.pattern is not None else None,
        schema=args.schema,
        payload_schema=_payload_schema(args),
        fields=args.fields,
        dedupe_key=args.dedupe_key,
        window=args.window,
        sliding=args.sliding,
        watermark=args.watermark,
        flap_window=args.flap_window,
        flap_count=args.flap_count,
        max_session=args.max_session,
    )
    source = Source(
        args.source,
        bootstrap=args.bootstrap,
        messages_topic=args.messages_topic,
        events_topic=args.events_topic,
        directory=args.directory,
        starting_offsets=args.starting_offsets,
    )
    backfill = args.job == BACKFILL
    return RunSpec(
        job=JOBS[args.backfill_of if backfill else args.job],
        options=options,
        source=source,
        output=args.output,
        table_format=args.table_format,
        checkpoint=args.checkpoint or f"{args.output.rstrip('/')}/_checkpoints",
        master=args.master,
        trigger=args.trigger,
        shuffle_partitions=args.shuffle_partitions,
        time_range=TimeRange(args.start, args.end) if backfill else None,
    )


def _payload_schema(args: argparse.Namespace) -> PayloadSchema | None:
    """``--payload-schema`` loaded (a .proto compiled), before any JVM starts."""
    if args.payload_schema is None:
        if args.payload_message is not None:
            raise PipelineError("--payload-message needs --payload-schema FILE.proto")
        return None
    if args.schema is not None:
        raise PipelineError(
            "--schema types JSON payloads; with --payload-schema the schema file types them"
        )
    return load_payload_schema(args.payload_schema, args.payload_message)


def run_command(args: argparse.Namespace) -> int:
    """Run the job ``args`` describe; returns the exit status."""
    try:
        spec = run_spec(args)
        from ferromq.pipeline.runner import run

        return run(spec)
    except PipelineError as exc:
        return setup_failed(exc)


def setup_failed(error: PipelineError) -> int:
    """Say ``error`` on stderr in one line; returns the exit status for it."""
    print(f"ferromq: error: {error}", file=sys.stderr)
    return EXIT_SETUP


def submit_main(argv: Sequence[str]) -> int:
    """The spark-submit entry point's command line (no ``--master`` default)."""
    parser = argparse.ArgumentParser(
        prog="ferromq.pipeline.submit", description="Run a ferromq pipeline job."
    )
    add_run_arguments(parser, master=None)
    return run_command(parser.parse_args(argv))
