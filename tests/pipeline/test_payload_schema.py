"""``--payload-schema``: telemetry over Avro and Protobuf payloads, end to end.

Devices (paho clients, QoS 1, over real sockets) publish readings to a ``ferromq
serve`` writing its stream files: Avro binary records (fastavro, of ``reading.avsc``)
on ``avro/{device}/env``, Protobuf messages (classes protoc generated from
``reading.proto``, as a device vendor would) on ``proto/{device}/env``, a QoS 1 resend
of one reading under a new record id, and one payload of each that does not decode.
The back-fill with ``--payload-schema`` then gives, per device and field, exactly the
counts, minima and maxima of the readings sent (a proto3 zero counted, an unset
``optional`` field not, the resend once), and quarantines the bad payload with its
reason. Before any JVM: a missing or bad schema, or an unknown message, is one line
with exit status 2.

With ``FERROMQ_SLOW=1`` the Protobuf payloads also go through the job as a stream.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import fastavro
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ferromq.cli import build_parser, main
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.runner import run_backfill, start_queries
from tests.conftest import ferromq_command, start_broker

PUBLISH_TIMEOUT = 10.0
JOB_TIMEOUT = 240
STREAM_CONFIG = """
[stream]
enabled = true
sink = "files"
[stream.files]
directory = "{directory}"
roll_seconds = 1
"""
PROTO = """syntax = "proto3";
package fleet.v1;

message Reading {
  string device = 1;
  uint64 seq = 2;
  double temp = 3;
  int32 hum = 4;
  optional float battery = 5;  // explicit presence: unset is no reading
  Location where = 6;          // a nested message: not a reading
}

message Location {
  double lat = 1;
  double lon = 2;
}
"""
AVSC = {
    "type": "record",
    "name": "Reading",
    "namespace": "fleet.v1",
    "fields": [
        {"name": "device", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "temp", "type": "double"},
        {"name": "hum", "type": "int"},
        {"name": "battery", "type": ["null", "float"], "default": None},
    ],
}
DEVICES = ("d1", "d2", "d3")
PER_DEVICE = 12
BAD = {"avro": b"\xff", "proto": b"\xff\xff\xff"}  # a truncated varint in each format
REASON = {"avro": "payload_not_avro", "proto": "payload_not_protobuf"}
OPTIONS = ["--window", "1 day", "--dedupe-key", "seq", "--shuffle-partitions", "2"]


def readings() -> list[dict[str, Any]]:
    """Each device's readings: d1 reads 0.0 once (proto3 sends no bytes for it), the
    battery only on even sequence numbers (float32-exact values)."""
    sent = []
    for index, device in enumerate(DEVICES):
        for seq in range(PER_DEVICE):
            temp = 0.0 if (device, seq) == ("d1", 0) else 20 + index + (seq % 5) * 0.5
            battery = 3.0 + (seq % 4) * 0.25 if seq % 2 == 0 else None
            reading = {"device": device, "seq": seq, "temp": temp, "hum": 40 + seq % 7}
            sent.append({**reading, "battery": battery})
    return sent


def expected() -> dict[tuple[str, str], tuple[int, float, float]]:
    """(device, field) -> (count, min, max) of the readings sent, each once."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for reading in readings():
        for field in ("temp", "hum", "battery"):
            if reading[field] is not None:
                values[reading["device"], field].append(float(reading[field]))
    return {key: (len(found), min(found), max(found)) for key, found in values.items()}


def schema_files(directory: Path) -> tuple[Path, Path]:
    avsc, proto = directory / "reading.avsc", directory / "reading.proto"
    avsc.write_text(json.dumps(AVSC))
    proto.write_text(PROTO)
    return avsc, proto


def generated_module(proto: Path) -> ModuleType:
    """``reading_pb2``, as protoc generates it for a device's firmware tools."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}",
         f"--python_out={proto.parent}", proto.name],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    spec = importlib.util.spec_from_file_location("reading_pb2", proto.parent / "reading_pb2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def payloads(avsc: Path, proto: Path) -> list[tuple[str, bytes]]:
    """(topic, payload) of every reading in both formats, a resend, the bad payloads."""
    parsed = fastavro.parse_schema(json.loads(avsc.read_text()))
    reading_pb2 = generated_module(proto)
    sent: list[tuple[str, bytes]] = []
    for reading in readings():
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, reading)
        sent.append((f"avro/{reading['device']}/env", body.getvalue()))
        message = reading_pb2.Reading(
            device=reading["device"], seq=reading["seq"], temp=reading["temp"], hum=reading["hum"]
        )
        if reading["battery"] is not None:
            message.battery = reading["battery"]
        message.where.lat = 52.5
        sent.append((f"proto/{reading['device']}/env", message.SerializeToString()))
    sent.extend(sent[-2:])  # d3's last reading again, each format: a QoS 1 resend
    sent.extend((f"{kind}/d1/env", bad) for kind, bad in BAD.items())
    return sent


def publish(port: int, sent: list[tuple[str, bytes]]) -> None:
    clients: dict[str, paho.Client] = {}
    try:
        for topic, payload in sent:
            device = topic.split("/")[1]
            if device not in clients:
                client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"schema-{device}")
                client.connect("127.0.0.1", port)
                client.loop_start()
                clients[device] = client
            info = clients[device].publish(topic, payload, qos=1)
            info.wait_for_publish(PUBLISH_TIMEOUT)
            assert info.is_published(), topic
    finally:
        for client in clients.values():
            client.disconnect()
            client.loop_stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The broker's stream files (the broker stopped), and the two schema files."""
    work = tmp_path_factory.mktemp("payload-schema")
    avsc, proto = schema_files(work)
    directory = work / "stream"
    broker = start_broker(work, "uvloop", STREAM_CONFIG.format(directory=directory))
    try:
        publish(broker.port, payloads(avsc, proto))
    finally:
        assert broker.stop() == 0
    return directory, avsc, proto


def job_args(kind: str, stream: Path, schema: Path, output: Path, *more: str) -> list[str]:
    return [
        "pipeline", "run", *more, "--source", "files", "--directory", str(stream),
        "--output", str(output), "--pattern", f"{kind}/{{device}}/{{metric}}",
        "--payload-schema", str(schema), *OPTIONS,
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["avro", "proto"])
def test_backfill_of_binary_payloads(
    spark: SparkSession, fleet: tuple[Path, Path, Path], tmp_path: Path, kind: str
) -> None:
    stream, avsc, proto = fleet
    output = tmp_path / "tables"
    args = job_args(kind, stream, avsc if kind == "avro" else proto, output, "backfill")
    spec = run_spec(build_parser().parse_args(args))
    assert spec.time_range is not None
    assert run_backfill(spark, spec, spec.time_range) == 0

    tumbling = spark.read.parquet(str(output / "tumbling"))
    totals = tumbling.groupBy("device", "field").agg(
        F.sum("count").alias("count"), F.min("min").alias("min"), F.max("max").alias("max")
    )
    found = {(r["device"], r["field"]): (r["count"], r["min"], r["max"]) for r in totals.collect()}
    assert found == expected()
    quarantine = spark.read.parquet(str(output / "quarantine"))
    own = quarantine.where(F.col("reason") != "topic_mismatch")
    assert [(r["topic"], r["payload"], r["reason"]) for r in own.collect()] == [
        (f"{kind}/d1/env", bytearray(BAD[kind]), REASON[kind])
    ]
    # The other format's records do not match the pattern: quarantined as such.
    assert quarantine.where(F.col("reason") == "topic_mismatch").count() == (
        len(DEVICES) * PER_DEVICE + 2
    )


@pytest.mark.skipif(not os.environ.get("FERROMQ_SLOW"), reason="FERROMQ_SLOW=1: the stream")
def test_stream_of_protobuf_payloads(
    spark: SparkSession, fleet: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """As a stream (available-now): the bad payload reaches the quarantine; the windows
    stay open (the watermark never passes them), so the tumbling table is empty."""
    stream, _, proto = fleet
    output = tmp_path / "tables"
    args = job_args("proto", stream, proto, output, "telemetry", "--trigger", "available-now")
    running = start_queries(spark, run_spec(build_parser().parse_args(args)))
    try:
        for query in running.queries:
            query.awaitTermination(JOB_TIMEOUT)
            assert query.exception() is None
    finally:
        running.stop()
    quarantine = spark.read.parquet(str(output / "quarantine"))
    assert quarantine.where(F.col("reason") == REASON["proto"]).count() == 1


# Before any JVM: one line, exit status 2.
RUN = ["pipeline", "run", "telemetry", "--output", "/nonexistent/out", "--payload-schema"]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_missing_schema_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "none.proto"
    assert _error(capsys, [*RUN, str(missing)]) == (
        f"ferromq: error: --payload-schema {missing}: no such file"
    )


def test_neither_avsc_nor_proto(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "reading.json"
    other.write_text("{}")
    assert _error(capsys, [*RUN, str(other)]) == (
        f"ferromq: error: --payload-schema {other}: expected a .avsc or a .proto file"
    )


def test_a_proto_that_does_not_compile_names_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.proto"
    bad.write_text('syntax = "proto3";\nmessage Reading {\n  doubel temp = 1;\n}\n')
    assert _error(capsys, [*RUN, str(bad)]) == (
        f'ferromq: error: --payload-schema {bad}: bad.proto:3:3: "doubel" is not defined.'
    )


def test_an_avsc_that_is_not_a_record(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.avsc"
    bad.write_text('"double"')
    assert _error(capsys, [*RUN, str(bad)]) == (
        f'ferromq: error: --payload-schema {bad}: not an Avro record schema ("type": "record")'
    )
    bad.write_text("{not json")
    assert _error(capsys, [*RUN, str(bad)]).startswith(
        f"ferromq: error: --payload-schema {bad}: not JSON ("
    )


def test_an_unknown_message_lists_the_known(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, proto = schema_files(tmp_path)
    assert _error(capsys, [*RUN, str(proto), "--payload-message", "Readings"]) == (
        f"ferromq: error: --payload-message Readings: no such message in {proto} "
        "(Reading, Location)"
    )


def test_the_message_first_declared_or_named(tmp_path: Path) -> None:
    _, proto = schema_files(tmp_path)
    argv = [*RUN, str(proto)]
    first = run_spec(build_parser().parse_args(argv)).options.payload_schema
    assert first is not None and first.message == "fleet.v1.Reading"
    named = run_spec(build_parser().parse_args([*argv, "--payload-message", "Location"]))
    assert named.options.payload_schema is not None
    assert named.options.payload_schema.message == "fleet.v1.Location"


def test_options_that_do_not_go_together(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    avsc, _ = schema_files(tmp_path)
    assert _error(capsys, [*RUN, str(avsc), "--schema", "temp DOUBLE"]) == (
        "ferromq: error: --schema types JSON payloads; with --payload-schema the schema "
        "file types them"
    )
    assert _error(capsys, [*RUN, str(avsc), "--payload-message", "Reading"]) == (
        "ferromq: error: --payload-message names a message of a .proto schema"
    )
    assert _error(capsys, [*RUN[:-1], "--payload-message", "Reading"]) == (
        "ferromq: error: --payload-message needs --payload-schema FILE.proto"
    )


def test_a_bad_schema_is_one_line_from_the_command(tmp_path: Path) -> None:
    """As a user meets it: the installed command, its own process."""
    bad = tmp_path / "bad.proto"
    bad.write_text("message {")
    done = subprocess.run(
        [*ferromq_command(), *RUN, str(bad)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"ferromq: error: --payload-schema {bad}: bad.proto:1:")


def test_a_schema_spark_refuses_is_one_line(spark: SparkSession, tmp_path: Path) -> None:
    """Spark reads the Avro schema when the job is built: still a PipelineError (exit 2),
    as is a schema with no number to aggregate."""
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "R", "fields": [{"name": "t", "type": "nope"}]}')
    spec = run_spec(
        build_parser().parse_args(job_args("avro", tmp_path, bad, tmp_path, "backfill"))
    )
    assert spec.time_range is not None
    with pytest.raises(PipelineError, match=rf"^--payload-schema {bad}: .*nope"):
        run_backfill(spark, spec, spec.time_range)
    bad.write_text('{"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}')
    spec = run_spec(
        build_parser().parse_args(job_args("avro", tmp_path, bad, tmp_path, "backfill"))
    )
    assert spec.time_range is not None
    with pytest.raises(PipelineError, match=r"no numeric field to aggregate$"):
        run_backfill(spark, spec, spec.time_range)
