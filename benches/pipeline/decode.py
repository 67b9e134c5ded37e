"""Spark's decode rate for stream records as Avro binary against JSON (issue 15: the
encoding choice, docs/stream.md).

``--records`` records (readings as :mod:`fleet_stream` makes them) are encoded both ways
— Avro binary, as the broker writes a Kafka value (``record-v1.avsc``), and a JSON object
with the same fields (bytes base64, time ISO 8601) — and stored as a Parquet column of
values. Spark then decodes each column (``from_avro`` with the schema file, ``from_json``
with the same Spark type) into a no-op sink; one warm-up round, then the best of
``--rounds`` per encoding: records per second, and bytes per record of each encoding.

    python benches/pipeline/decode.py --records 200000

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet_stream import readings
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from tests.pipeline.stream_records import Record, encode

from ferromq.pipeline.records import record_type
from ferromq.pipeline.session import spark_session
from ferromq.stream import schema_text


def as_json(record: Record) -> bytes:
    def plain(value: Any) -> Any:
        return base64.b64encode(value).decode() if isinstance(value, bytes) else value

    datum = {key: plain(value) for key, value in record.datum().items()}
    datum["time"] = record.time.isoformat()
    return json.dumps(datum, separators=(",", ":")).encode()


def best_rate(frame: DataFrame, records: int, rounds: int) -> float:
    seconds = []
    for _ in range(rounds + 1):
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - started)
    return records / min(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferromq-pipeline-decode-"))
    try:
        spark = spark_session("ferromq-bench-decode", args.master, shuffle_partitions=4)
        rows = [(encode(record), as_json(record)) for record in readings(args.records, 1000)]
        avro_bytes = sum(len(avro) for avro, _ in rows) / len(rows)
        json_bytes = sum(len(text) for _, text in rows) / len(rows)
        spark.createDataFrame(rows, "avro binary, json binary").write.parquet(str(work / "v"))
        del rows
        values = spark.read.parquet(str(work / "v"))
        schema = record_type(spark)
        decoders = {
            "avro": values.select(from_avro("avro", schema_text()).alias("r")).select("r.*"),
            "json": values.select(
                F.from_json(F.col("json").cast("string"), schema).alias("r")
            ).select("r.*"),
        }
        for name, frame in decoders.items():
            rate = best_rate(frame, args.records, args.rounds)
            size = avro_bytes if name == "avro" else json_bytes
            print(f"{name}: {rate:,.0f} records/s decoded, {size:.1f} bytes/record ({args.master})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
