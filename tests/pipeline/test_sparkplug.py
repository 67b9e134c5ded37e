"""The ``sparkplug`` job end to end: the plant's Sparkplug B payloads (built by Eclipse
Tahu's Python client, :mod:`tests.pipeline.sparkplug_plant`) published by paho clients,
one per edge node as Sparkplug has it, over real sockets to a ``ferromq serve`` writing
its stream files; then ``ferromq pipeline run backfill --job sparkplug`` as a user runs
it, and its four tables read back: every metric named through its BIRTH's aliases (and
not through an alias the rebirth dropped), the lost NDATA as a seq gap, the stale DATA
(undefined alias, device never born, device not born again after the NBIRTH, DATA after
the NDEATH; an older session's NDEATH ends nothing), the malformed payload and topic in
the quarantine, the host's STATE, a command and a JSON reading left alone.

With ``FERROMQ_SLOW=1`` the same stream also goes through the job as a stream (the
state between micro-batches kept by ``applyInPandasWithState``), one file per batch,
into the same tables.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from pyspark.sql import DataFrame, SparkSession

from ferromq.cli import build_parser
from ferromq.pipeline.command import run_spec
from ferromq.pipeline.runner import start_queries
from tests.conftest import ferromq_command, start_broker
from tests.pipeline.sparkplug_plant import (
    EXPECTED_GAPS,
    EXPECTED_METRICS,
    EXPECTED_QUARANTINE,
    EXPECTED_STALE,
    plant,
)

JOB_TIMEOUT = 240
PUBLISH_TIMEOUT = 10.0
STREAM_CONFIG = """
[stream]
enabled = true
sink = "files"
[stream.files]
directory = "{directory}"
roll_seconds = 1
"""
VALUE_COLUMNS = (
    "int_value", "float_value", "boolean_value", "string_value", "bytes_value", "datetime_value",
)  # fmt: skip


def publish_plant(port: int) -> None:
    """Each edge node's messages from its own connection, in the plant's order, each
    acknowledged (QoS 1) before the next is sent, so the broker records them in order."""
    clients: dict[str, paho.Client] = {}
    try:
        for sent in plant():
            if sent.lost:
                continue
            owner = sent.edge_node or "other"
            if owner not in clients:
                client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"sparkplug-{owner}")
                client.connect("127.0.0.1", port)
                client.loop_start()
                clients[owner] = client
            info = clients[owner].publish(sent.topic, sent.payload, qos=1)
            info.wait_for_publish(PUBLISH_TIMEOUT)
            assert info.is_published(), sent.topic
    finally:
        for client in clients.values():
            client.disconnect()
            client.loop_stop()


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The broker's stream files of the plant, the broker stopped (its files closed)."""
    work = tmp_path_factory.mktemp("sparkplug")
    directory = work / "stream"
    broker = start_broker(work, "uvloop", STREAM_CONFIG.format(directory=directory))
    try:
        publish_plant(broker.port)
    finally:
        assert broker.stop() == 0
    return directory


def value_of(row: Any) -> Any:
    values = [row[name] for name in VALUE_COLUMNS if row[name] is not None]
    assert len(values) <= 1, row
    return values[0] if values else None


def ordered(frame: DataFrame) -> list[Any]:
    """The rows in stream order: by broker time, then by their order within a message."""
    return frame.orderBy("time", "id").collect()


def check_tables(spark: SparkSession, output: Path) -> None:
    def table(name: str) -> DataFrame:
        return spark.read.parquet(str(output / name))

    metrics = table("metrics")
    assert metrics.where("message_type != 'NDEATH' AND payload_time IS NULL").count() == 0
    assert sorted(
        ((
            r["edge_node_id"], r["device_id"], r["message_type"], r["seq"], r["name"],
            r["alias"], r["datatype"], value_of(r),
        )
        for r in metrics.where("group_id = 'plant1'").collect()),
        key=repr,
    ) == sorted(EXPECTED_METRICS, key=repr)  # fmt: skip
    gaps = table("seq_gaps").collect()
    assert [
        (r["edge_node_id"], r["message_type"], r["previous_seq"], r["seq"], r["missing"])
        for r in gaps
    ] == EXPECTED_GAPS
    stale = ordered(table("stale"))
    assert [
        (r["edge_node_id"], r["device_id"], r["message_type"], r["seq"], r["reason"], r["alias"])
        for r in stale
    ] == EXPECTED_STALE
    quarantine = ordered(table("quarantine"))
    assert [(r["topic"], r["reason"]) for r in quarantine] == EXPECTED_QUARANTINE


def test_backfill_of_a_plant_published_to_the_broker(
    spark: SparkSession, stream: Path, tmp_path: Path
) -> None:
    output = tmp_path / "tables"
    done = subprocess.run(
        [*ferromq_command(), "pipeline", "run", "backfill", "--job", "sparkplug",
         "--source", "files", "--directory", str(stream), "--output", str(output),
         "--master", "local[1]", "--shuffle-partitions", "2"],
        capture_output=True, text=True, timeout=JOB_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in ("metrics", "seq_gaps", "stale", "quarantine"):
        assert f"written job=backfill.sparkplug table={name}" in done.stderr
    check_tables(spark, output)


@pytest.mark.skipif(not os.environ.get("FERROMQ_SLOW"), reason="FERROMQ_SLOW=1: the stream")
def test_stream_of_a_plant_published_to_the_broker(
    spark: SparkSession, stream: Path, tmp_path: Path
) -> None:
    output = tmp_path / "tables"
    args = build_parser().parse_args(
        ["pipeline", "run", "sparkplug", "--source", "files", "--directory", str(stream),
         "--output", str(output), "--trigger", "available-now"],
    )  # fmt: skip
    running = start_queries(spark, run_spec(args))
    try:
        for query in running.queries:
            query.awaitTermination(JOB_TIMEOUT)
    finally:
        running.stop()
    check_tables(spark, output)
