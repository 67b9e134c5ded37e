"""Records per second through the ``telemetry`` job in ``local[2]`` (issue 15, Numbers;
per table format, issue 28).

``--records`` generated readings (``--devices`` devices) are written as the broker's file
sink writes them (Avro object container files of ``--per-file`` records), then the
telemetry job runs over them as a batch (the ``backfill`` path: read, decode, topic
pattern, JSON payload, dedupe, tumbling windows, quarantine, written as ``--format``:
Parquet, Delta Lake or Iceberg), timed wall clock: one warm-up round, then the best of
``--rounds``, each into new tables. Records per second = records ÷ the seconds to write
every output; per core = that ÷ the master's cores (``local[N]``).

    python benches/pipeline/throughput.py --records 1000000 --format delta

Run it alone on the machine: the figure is a timing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
from itertools import islice
from pathlib import Path

from fleet_stream import PATTERN, readings
from tests.pipeline.stream_records import write_container

from ferromq.pipeline.formats import PARQUET, TABLE_FORMATS
from ferromq.pipeline.jobs import JobOptions, telemetry
from ferromq.pipeline.output import write_batch
from ferromq.pipeline.session import spark_session
from ferromq.pipeline.sources import Source, read_records
from ferromq.pipeline.transforms import TopicPattern


def write_stream_files(directory: Path, records: int, devices: int, per_file: int) -> None:
    generated = readings(records, devices)
    for number in range(0, records, per_file):
        write_container(directory, "messages", f"{number:012d}", islice(generated, per_file))


def cores(master: str) -> int:
    """The cores of a local master (``local[2]``: 2; ``local[*]``: the machine's); 0 for
    a cluster's (not known here)."""
    found = re.fullmatch(r"local\[(\d+|\*)\]", master)
    if found is None:
        return 1 if master == "local" else 0
    if found.group(1) == "*":
        return os.cpu_count() or 1
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--per-file", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--format", choices=TABLE_FORMATS, default=PARQUET)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferromq-pipeline-bench-"))
    try:
        write_stream_files(work / "stream", args.records, args.devices, args.per_file)
        spark = spark_session(
            "ferromq-bench-throughput",
            args.master,
            shuffle_partitions=4,
            formats=(args.format,),
            warehouse=str(work),  # Iceberg: tables ferromq.`tables-N`.<output>
        )
        options = JobOptions(pattern=TopicPattern.parse(PATTERN), window="1 minute")
        source = Source("files", directory=str(work / "stream"))
        seconds = []
        for round_number in range(args.rounds + 1):
            started = time.perf_counter()
            records = read_records(spark, source, "messages", streaming=False)
            for name, frame in telemetry(records, options).items():
                write_batch(frame, name, str(work / f"tables-{round_number}"), args.format)
            seconds.append(time.perf_counter() - started)
        best = min(seconds[1:])
        per_core = (
            f", {args.records / best / cores(args.master):,.0f} per core"
            if cores(args.master)
            else ""
        )
        print(
            f"telemetry job, {args.format}, {args.master}, {args.records} records, "
            f"{args.devices} devices: {args.records / best:,.0f} records/s{per_core} "
            f"(best of {args.rounds}: {best:.2f} s; "
            f"rounds {', '.join(f'{s:.2f}' for s in seconds[1:])} s; warm-up {seconds[0]:.2f} s)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
