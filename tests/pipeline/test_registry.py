"""The stream's Kafka sink in the Confluent wire format (``[stream.kafka] registry``,
issue 28 item 4), against a real Apicurio Registry (its Confluent-compatible API, one
start for the module), the session's real Kafka, real ``ferromq serve`` and paho.

What a Flink, ksqlDB or Kafka Connect user would notice: every record value starts with
magic byte 0 and the id the registry gives the topic's subject (``<topic>-value``), the
schema under that id is record-v1, and the body decodes with it (fastavro, knowing
nothing of ferromq) into what was published. The broker runs two shards, each
registering on its own and getting the same id. The jobs' Kafka source reads the framed
topic into the same rows as a plain one with the same traffic. A registry that cannot
be reached stops the broker at start with one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ferromq.pipeline.sources import Source, read_records
from ferromq.stream import schema_text
from tests.conftest import start_broker
from tests.support import services
from tests.support.commands import serve_exit
from tests.support.paho_clients import paho_client
from tests.support.services import free_port
from tests.support.stream_config import kafka_stream_config

DEVICES = ("dev-1", "dev-2")
READINGS = 20  # per device
PARTITIONS = 2


def stream_config(bootstrap: str, prefix: str, registry: str | None) -> str:
    registry_line = f'registry = "{registry}"' if registry else ""
    stream = kafka_stream_config(bootstrap, prefix, partitions=PARTITIONS, kafka_keys=registry_line)
    return f"""
[server]
workers = 2
{stream}
[kafka]
request_timeout = 5
"""


def payload(device: str, n: int) -> bytes:
    return json.dumps({"device": device, "seq": n, "temp": 20 + n / 10}).encode()


@dataclass(frozen=True)
class Streams:
    registry: services.RegistryServer
    framed: str  # topic prefix of the broker with the registry
    plain: str  # ... and of the one without


def run_fleet(tmp_path: Path, bootstrap: str, prefix: str, registry: str | None) -> None:
    """A broker of two shards; each device's QoS 1 readings, every one PUBACKed (so in
    Kafka: after_kafka) before the broker stops."""
    broker = start_broker(tmp_path, "uvloop", stream_config(bootstrap, prefix, registry))
    try:
        for device in DEVICES:
            client, _ = paho_client(broker, f"client-{device}", 4)
            for n in range(READINGS):
                client.publish(f"site/{device}/temp", payload(device, n), qos=1).wait_for_publish(
                    10
                )
            client.loop_stop()
            client.disconnect()
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def streams(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streams]:
    """The same traffic through a broker without the registry, then one with it; the
    registry (one for the module) starts while the first broker runs."""
    run = uuid.uuid4().hex[:8]
    framed, plain = f"registry.{run}.framed.", f"registry.{run}.plain."
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(services.start_registry, tmp_path_factory.mktemp("registry"))
        try:
            run_fleet(tmp_path_factory.mktemp("plain"), kafka_bootstrap, plain, None)
        except BaseException:
            with contextlib.suppress(services.ServiceUnavailable):
                starting.result().stop()
            raise
        try:
            registry = starting.result()
        except services.ServiceUnavailable as error:
            pytest.fail(str(error), pytrace=False)
    try:
        run_fleet(tmp_path_factory.mktemp("framed"), kafka_bootstrap, framed, registry.ccompat)
        yield Streams(registry, framed, plain)
    finally:
        registry.stop()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def put_json(url: str, body: object, method: str = "POST") -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def raw_values(bootstrap: str, topic: str, count: int, timeout: float = 30) -> list[bytes]:
    """The first ``count`` record values of ``topic``, partition by partition."""

    async def read() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            values: list[bytes] = []
            deadline = asyncio.get_running_loop().time() + timeout
            while len(values) < count:
                if asyncio.get_running_loop().time() > deadline:
                    pytest.fail(f"{topic}: {len(values)} of {count} records in {timeout}s")
                fetched = await consumer.getmany(timeout_ms=1000)
                for records in fetched.values():
                    values += [r.value for r in records if r.value is not None]
            return values
        finally:
            await consumer.stop()

    return asyncio.run(read())


def test_values_carry_magic_zero_and_the_registry_id_of_record_v1(
    streams: Streams, kafka_bootstrap: str
) -> None:
    registry = streams.registry
    for kind, count in (("messages", len(DEVICES) * READINGS), ("events", len(DEVICES))):
        topic = f"{streams.framed}{kind}"
        latest = get_json(f"{registry.ccompat}/subjects/{topic}-value/versions/latest")
        schema_id = latest["id"]
        # The registry's schema for the id is record-v1 (as JSON: a registry may
        # re-serialise the text).
        registered = get_json(f"{registry.ccompat}/schemas/ids/{schema_id}")["schema"]
        assert json.loads(registered) == json.loads(schema_text())
        header = b"\x00" + schema_id.to_bytes(4, "big")
        values = raw_values(kafka_bootstrap, topic, count)
        assert {value[:5] for value in values} == {header}, f"{kind}: every value framed"
        # Decoded as a foreign consumer would: the registry's schema, the bytes after 5.
        reader = parse_schema(json.loads(registered))
        records = [schemaless_reader(io.BytesIO(value[5:]), reader, None) for value in values]
        assert all(isinstance(record, dict) for record in records)
        if kind == "messages":
            for device in DEVICES:
                mine = [
                    r["payload"]
                    for r in records
                    if isinstance(r, dict) and r["topic"] == f"site/{device}/temp"
                ]
                assert mine == [payload(device, n) for n in range(READINGS)], "in order"
        else:
            connected = {
                r["client_id"] for r in records if isinstance(r, dict) and r["kind"] == "connected"
            }
            assert connected == {f"client-{device}" for device in DEVICES}


def test_the_jobs_read_framed_and_plain_records_alike(
    streams: Streams, kafka_bootstrap: str, spark: SparkSession
) -> None:
    def rows(prefix: str) -> Any:
        source = Source(
            "kafka",
            kafka_bootstrap,
            messages_topic=f"{prefix}messages",
            events_topic=f"{prefix}events",
        )
        frame = read_records(spark, source, "messages", streaming=False)
        # What differs between two runs: the record id (the node's boot) and the time.
        return frame.drop("id", "time")

    # Both sources in one Spark job; the rows compared in the driver.
    both = rows(streams.framed).withColumn("run", F.lit("framed"))
    both = both.unionByName(rows(streams.plain).withColumn("run", F.lit("plain")))
    collected = both.collect()
    framed = [row.asDict(recursive=True) for row in collected if row["run"] == "framed"]
    plain = [row.asDict(recursive=True) for row in collected if row["run"] == "plain"]
    assert len(framed) == len(DEVICES) * READINGS
    assert all(row["kind"] == "message" for row in framed), "no framed record quarantined"

    def key(row: dict[str, Any]) -> tuple[str, bytes]:
        return row["topic"], row["payload"]

    for row in framed + plain:
        del row["run"]
    assert sorted(framed, key=key) == sorted(plain, key=key)


def test_an_unreachable_registry_at_start_up_is_one_line_naming_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    store = f'[storage]\npath = "{tmp_path / "store"}"\n'
    config = stream_config(kafka_bootstrap, "unreachable.", url).replace(
        "workers = 2", "workers = 1"
    )
    result = serve_exit(tmp_path, config + store)
    assert result.returncode == 3, result.stderr
    subject = "'unreachable.messages-value'"
    line = f"schema registry at {url}: registering record-v1 under {subject}: unreachable"
    assert result.stderr.count(line) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_a_registry_that_refuses_record_v1_stops_the_start_with_its_answer(
    streams: Streams, kafka_bootstrap: str, tmp_path: Path
) -> None:
    # The subject holds another schema and requires backward compatibility with it.
    registry = streams.registry.ccompat
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    put_json(f"{registry}/subjects/refused.messages-value/versions", {"schema": json.dumps(other)})
    put_json(f"{registry}/config/refused.messages-value", {"compatibility": "BACKWARD"}, "PUT")
    store = f'[storage]\npath = "{tmp_path / "store"}"\n'
    config = stream_config(kafka_bootstrap, "refused.", registry).replace(
        "workers = 2", "workers = 1"
    )
    result = serve_exit(tmp_path, config + store)
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if "schema registry at" in line]
    assert len(lines) == 1, result.stderr
    assert "under 'refused.messages-value': HTTP 409" in lines[0]
    assert "Traceback" not in result.stderr
