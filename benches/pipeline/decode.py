"""Spark's decode rate for stream records as Avro binary against JSON (issue 15: the
encoding choice, docs/stream.md).

``--records`` records (readings as :mod:`fleet_stream` makes them) are encoded both ways
— Avro binary, as the broker writes a Kafka value (``record-v1.avsc``), and a JSON object
with the same fields (bytes base64, time ISO 8601) — and stored as a Parquet column of
values. Spark then decodes each column (``from_avro`` with the schema file, ``from_json``
with the same Spark type) into a no-op sink; one warm-up round, then the best of
``--rounds`` per encoding: records per second, and bytes per record of each encoding.

    python benches/pipeline/decode.py --records 200000

With ``--payload json|avro|protobuf|all`` it measures the payload codecs of the
``telemetry`` job instead (``--payload-schema``, issue 28): the same readings
(``device``, ``seq``, ``temp``, ``hum``) as a JSON object, an Avro binary record
(fastavro) and a Protobuf message, each through the job's own ``decode_payload``
(JSON: fields found per record; Avro: ``from_avro``; Protobuf: the Python workers'
decoder) into a no-op sink: records per second, per core (÷ the master's cores), and
bytes per payload.

    python benches/pipeline/decode.py --payload all --records 200000

Run it alone on the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import fastavro
from fleet_stream import readings
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from tests.pipeline.stream_records import Record, encode

from ferromq.pipeline.payload_schema import AVRO, PROTOBUF, load_payload_schema
from ferromq.pipeline.records import record_type
from ferromq.pipeline.session import spark_session
from ferromq.pipeline.transforms.payload import PAYLOAD_ERROR, READINGS, decode_payload
from ferromq.pipeline.transforms.protobuf import _message_class
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


PAYLOAD_PROTO = """syntax = "proto3";
message Reading { string device = 1; uint64 seq = 2; double temp = 3; int32 hum = 4; }
"""
PAYLOAD_AVSC = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "temp", "type": "double"},
        {"name": "hum", "type": "int"},
    ],
}


def payload_rates(spark: SparkSession, args: argparse.Namespace, work: Path) -> None:
    """The telemetry job's payload decode, per codec of ``args.payload``."""
    avsc, proto = work / "reading.avsc", work / "reading.proto"
    avsc.write_text(json.dumps(PAYLOAD_AVSC))
    proto.write_text(PAYLOAD_PROTO)
    schemas = {AVRO: load_payload_schema(str(avsc)), PROTOBUF: load_payload_schema(str(proto))}
    message = _message_class(schemas[PROTOBUF].descriptor_set, schemas[PROTOBUF].message)
    avro_schema = fastavro.parse_schema(PAYLOAD_AVSC)

    def encoded(codec: str, reading: dict[str, Any]) -> bytes:
        if codec == "json":
            return json.dumps(reading, separators=(",", ":")).encode()
        if codec == AVRO:
            body = io.BytesIO()
            fastavro.schemaless_writer(body, avro_schema, reading)
            return body.getvalue()
        return bytes(message(**reading).SerializeToString())

    cores = spark.sparkContext.defaultParallelism
    codecs = ["json", AVRO, PROTOBUF] if args.payload == "all" else [args.payload]
    for codec in codecs:
        rows = [
            (encoded(codec, {"device": f"d{n % 1000}", "seq": n, "temp": 20 + n % 97 * 0.1,
                             "hum": 40 + n % 13}),)
            for n in range(args.records)
        ]  # fmt: skip
        size = sum(len(payload) for (payload,) in rows) / len(rows)
        path = str(work / f"payload-{codec}")
        spark.createDataFrame(rows, "payload binary").write.parquet(path)
        del rows
        schema = schemas.get(codec)
        decoded = decode_payload(
            spark.read.parquet(path), exclude=("seq",), payload_schema=schema
        ).select(READINGS, PAYLOAD_ERROR)
        rate = best_rate(decoded, args.records, args.rounds)
        print(
            f"payload {codec}: {rate:,.0f} records/s decoded, {rate / cores:,.0f} per core, "
            f"{size:.1f} bytes/payload ({args.master})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--payload",
        choices=("json", AVRO, PROTOBUF, "all"),
        help="measure the telemetry job's payload codecs instead of the record encodings",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferromq-pipeline-decode-"))
    try:
        spark = spark_session("ferromq-bench-decode", args.master, shuffle_partitions=4)
        if args.payload is not None:
            payload_rates(spark, args, work)
            return
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
