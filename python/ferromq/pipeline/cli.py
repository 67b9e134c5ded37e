"""``ferromq pipeline``: the Spark jobs from the command line.

- ``run JOB [options]``: run a job (:mod:`.command`) in ``--master`` (default
  ``local[*]``);
- ``list``: the jobs, the stream each reads and the tables each writes;
- ``jars``: the connector jars (:mod:`.jars`) of every table format (Delta's when
  ``delta-spark`` is installed), comma-separated, fetched first if needed, for
  ``spark-submit --jars``.

Nothing here imports pyspark, so ``ferromq --help`` and ``list`` work without it.
"""

from __future__ import annotations

import argparse
from typing import Any

from ferromq.pipeline.command import DEFAULT_MASTER, add_run_arguments, run_command, setup_failed
from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.jobs import BACKFILL, JOBS

__all__ = ["register"]


def list_jobs(args: argparse.Namespace) -> int:
    for job in JOBS.values():
        print(f"{job.name}\t{job.stream}\t{', '.join(job.outputs)}\t{job.description}")
    print(f"{BACKFILL}\t-\t(--job's)\ttelemetry or sessions as a batch over --start..--end")
    return 0


def print_jars(args: argparse.Namespace) -> int:
    from ferromq.pipeline.formats import TABLE_FORMATS
    from ferromq.pipeline.session import pipeline_jars, require_spark

    try:
        require_spark()
        print(",".join(str(jar) for jar in pipeline_jars(TABLE_FORMATS)))
    except PipelineError as exc:
        return setup_failed(exc)
    return 0


def register(commands: Any) -> None:
    """Add ``pipeline`` to the CLI's subcommands."""
    pipeline = commands.add_parser(
        "pipeline",
        help="run the Spark jobs over the broker's stream",
        description="PySpark jobs over the broker's record stream ([stream]): from Kafka "
        "or the stream files to Parquet, Delta Lake or Iceberg tables. Needs pip install "
        "ferromq[pipeline].",
    )
    actions = pipeline.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="run a job",
        description="Run a job: a stream until SIGTERM/SIGINT (or, with --trigger "
        "available-now, until what is there is written); backfill as a batch. Exit "
        "status: 1 the job failed, 2 a problem to fix before it can start.",
    )
    add_run_arguments(run, DEFAULT_MASTER)
    run.set_defaults(handler=run_command, command_parser=run)
    actions.add_parser(
        "list", help="list the jobs", description="The jobs: name, stream, outputs, what."
    ).set_defaults(handler=list_jobs)
    actions.add_parser(
        "jars",
        help="print the connector jars for spark-submit --jars",
        description="Fetch Spark's Kafka and Avro connector jars and the Delta Lake (when "
        "delta-spark is installed) and Iceberg jars if needed (cached in "
        "~/.cache/ferromq/maven) and print them comma-separated, for spark-submit --jars.",
    ).set_defaults(handler=print_jars)
