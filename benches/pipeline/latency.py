"""Publish-to-Parquet latency of the ``telemetry`` job at a one-second trigger (issue 15,
Numbers).

A publisher emits ``--rate`` readings per second for ``--duration`` seconds, each stamped
with the wall clock as its broker time, into the job's source: Kafka (``--source kafka``,
produced as the broker's Kafka sink produces: Avro values, keyed by device, timestamped;
a Kafka of its own from tests/support/services.py unless ``--bootstrap``) or the stream files
(``--source files``, one container file every ``--file-seconds``, as a file sink rolling
at that interval). The job runs as a stream (``--trigger`` one second) with one-second
tumbling windows and no allowed lateness, so a window's row can be written as soon as a
reading past its end has been read.

Latency of a window = the time its row is in Parquet (the modification time of the file
holding it: Spark commits a micro-batch's files, then its log entry) minus the window's
end, which is the broker time of its last possible reading: the publish-to-Parquet
latency of the newest reading the row holds. p50 and p99 over the windows of the run
(the first ``--warmup`` seconds left out).

    python benches/pipeline/latency.py --source kafka --duration 60
    python benches/pipeline/latency.py --source files --file-seconds 0.2

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from aiokafka import AIOKafkaProducer
from fleet_stream import PATTERN
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.pipeline.stream_records import T0, Record, encode, message, write_container
from tests.support import services

from ferromq.pipeline.jobs import JOBS, JobOptions
from ferromq.pipeline.runner import RunSpec, start_queries
from ferromq.pipeline.session import spark_session
from ferromq.pipeline.sources import Source
from ferromq.pipeline.transforms import TopicPattern

TOPIC = "ferromq.messages"


def reading(n: int, devices: int) -> Record:
    at = (datetime.now(timezone.utc) - T0).total_seconds()
    return message(f"fleet/d{n % devices}/temp", f'{{"v": {n % 100}, "seq": {n}}}', at)


def publish_files(directory: Path, args: argparse.Namespace, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        deadline = time.monotonic() + args.file_seconds
        batch = []
        while time.monotonic() < deadline:
            batch.append(reading(n, args.devices))
            n += 1
            time.sleep(1 / args.rate)
        write_container(directory, "messages", f"{n:012d}", batch)


async def publish_kafka(bootstrap: str, args: argparse.Namespace, stop: threading.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        n = 0
        while not stop.is_set():
            record = reading(n, args.devices)
            await producer.send(
                TOPIC, encode(record), key=f"d{n % args.devices}".encode(),
                timestamp_ms=int(record.time.timestamp() * 1000),
            )  # fmt: skip
            n += 1
            await asyncio.sleep(1 / args.rate)
    finally:
        await producer.stop()


def window_latencies(spark: SparkSession, tables: Path, warmup_end: datetime) -> list[float]:
    rows = (
        spark.read.parquet(str(tables / "tumbling"))
        .select(F.input_file_name().alias("file"), "window_end")
        .collect()
    )
    latencies = []
    for row in rows:
        end = row.window_end.replace(tzinfo=timezone.utc)
        if end < warmup_end:
            continue
        written = os.stat(row.file.removeprefix("file:")).st_mtime
        latencies.append(written - end.timestamp())
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("kafka", "files"), default="kafka")
    parser.add_argument("--bootstrap", help="a running Kafka (default: start one)")
    parser.add_argument("--rate", type=float, default=200.0, help="readings per second")
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--file-seconds", type=float, default=0.2)
    parser.add_argument("--trigger", default="1 second")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferromq-pipeline-latency-"))
    kafka = None
    try:
        bootstrap = args.bootstrap or ""
        if args.source == "kafka" and not bootstrap:
            kafka = services.start_kafka(work)
            bootstrap = kafka.address
        spark = spark_session("ferromq-bench-latency", "local[2]", shuffle_partitions=2)
        spec = RunSpec(
            job=JOBS["telemetry"],
            options=JobOptions(
                pattern=TopicPattern.parse(PATTERN), window="1 second", watermark="0 seconds"
            ),
            source=Source(args.source, bootstrap=bootstrap, directory=str(work / "stream")),
            output=str(work / "tables"),
            table_format="parquet",
            checkpoint=str(work / "checkpoints"),
            master=None,
            trigger=args.trigger,
            shuffle_partitions=2,
            time_range=None,
        )
        stop = threading.Event()

        def publish() -> None:
            if args.source == "files":
                publish_files(work / "stream", args, stop)
            else:
                asyncio.run(publish_kafka(bootstrap, args, stop))

        publisher = threading.Thread(target=publish)
        running = start_queries(spark, spec)
        publisher.start()
        warmup_end = datetime.now(timezone.utc).timestamp() + args.warmup
        time.sleep(args.duration)
        stop.set()
        publisher.join()
        time.sleep(5)  # the last windows' rows
        running.stop()
        latencies = window_latencies(
            spark, work / "tables", datetime.fromtimestamp(warmup_end, timezone.utc)
        )
        quantiles = statistics.quantiles(latencies, n=100)
        print(
            f"publish-to-Parquet ({args.source}, trigger {args.trigger}, {args.rate:g} "
            f"readings/s, {len(latencies)} windows): p50 {quantiles[49] * 1000:.0f} ms, "
            f"p99 {quantiles[98] * 1000:.0f} ms"
        )
    finally:
        if kafka is not None:
            kafka.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
