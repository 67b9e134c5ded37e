"""The Kafka client of the cluster bus, measured (issue 26 item 2): aiokafka, which the bus
uses, against confluent-kafka (librdkafka, compiled), on records shaped like the bus's.

    PYTHONPATH=python python benches/cluster/kafka_clients.py --out DIR

Starts its own one-JVM KRaft Kafka (tests/support/services.py; stopped at the end) and first
warms it (its JIT compiles for about a minute under load; a production Kafka is warm).
Then, for each client in a process of its own (so the process's CPU is the client's,
librdkafka's threads included):

- **produce**: ``--records`` records of ``--record-bytes`` each to a one-partition topic
  with the bus's settings (acks=all, idempotent, one partition, records in order), at
  most ``--in-flight`` unconfirmed at a time (the bus keeps a tick's records in flight
  while the next tick's are built), timed until Kafka has confirmed the last;
- **consume**: the same records read back from the beginning by a consumer group that
  commits after each fetched batch (the bus commits past what its store confirmed),
  timed until the last.

It reports, per client and phase: records/s, the client's CPU per record and per bus
message (``--messages-per-record``: a bus record carries a tick's messages for one
node, about 100-200 at 100k msg/s on this machine, "Issue 17"), and Kafka's CPU per
record over the phase. One run; treat figures as +-15 % on this shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches" / "load"))
sys.path.insert(0, str(ROOT))  # tests.support.services
import brokers  # noqa: E402  (benches/load, put on the path above)
from compare import machine  # noqa: E402
from tests.support.services import start_kafka  # noqa: E402

CLIENTS = ("aiokafka", "confluent-kafka")
WARM_SECONDS = 60.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- one client, one phase, in a child process -------------------------------------------


async def _aiokafka_produce(
    bootstrap: str, topic: str, values: list[bytes], in_flight: int
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=0,
        max_request_size=64 * 1024 * 1024,
    )  # fmt: skip
    await producer.start()
    try:
        window: set[asyncio.Future[Any]] = set()
        for value in values:
            if len(window) >= in_flight:
                _, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
            window.add(await producer.send(topic, value, key=b"node"))
        await asyncio.gather(*window)
    finally:
        await producer.stop()


async def _aiokafka_consume(bootstrap: str, topic: str, count: int) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"bench-{uuid.uuid4().hex}",
        enable_auto_commit=False, auto_offset_reset="earliest",
        fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=64 * 1024 * 1024,
    )  # fmt: skip
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        seen = 0
        while seen < count:
            batches = await consumer.getmany(partition, timeout_ms=200)
            for records in batches.values():
                seen += len(records)
                if records:
                    await consumer.commit({partition: records[-1].offset + 1})
    finally:
        await consumer.stop()


def _confluent_produce(bootstrap: str, topic: str, values: list[bytes], in_flight: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "message.max.bytes": 64 * 1024 * 1024,
        }
    )  # fmt: skip
    confirmed = 0
    failed: list[str] = []

    def done(error: Any, _message: Any) -> None:
        nonlocal confirmed
        confirmed += 1
        if error is not None:
            failed.append(str(error))

    for sent, value in enumerate(values, 1):
        producer.produce(topic, value, key=b"node", on_delivery=done)
        while sent - confirmed >= in_flight:
            producer.poll(0.05)
    producer.flush(60)
    if failed:
        raise RuntimeError(f"confluent-kafka: {len(failed)} records failed: {failed[0]}")


def _confluent_consume(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 64 * 1024 * 1024,
            "receive.message.max.bytes": 65 * 1024 * 1024,
        }
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        while seen < count:
            records = consumer.consume(num_messages=1000, timeout=0.2)
            if records:
                seen += len(records)
                offset = records[-1].offset()
                assert offset is not None
                consumer.commit(offsets=[TopicPartition(topic, 0, offset + 1)], asynchronous=False)
    finally:
        consumer.close()


def child(args: argparse.Namespace) -> None:
    """One phase of one client; prints its JSON result."""
    import aiokafka  # noqa: F401  (imported before the clock starts, as a node has it)
    import confluent_kafka  # noqa: F401

    values = [os.urandom(args.record_bytes) for _ in range(min(args.records, 64))]
    stream = [values[i % len(values)] for i in range(args.records)]
    cpu, began = _cpu_s(), time.monotonic()
    if args.client == "aiokafka":
        if args.phase == "produce":
            asyncio.run(_aiokafka_produce(args.bootstrap, args.topic, stream, args.in_flight))
        else:
            asyncio.run(_aiokafka_consume(args.bootstrap, args.topic, args.records))
    elif args.phase == "produce":
        _confluent_produce(args.bootstrap, args.topic, stream, args.in_flight)
    else:
        _confluent_consume(args.bootstrap, args.topic, args.records)
    print(json.dumps({"wall_s": time.monotonic() - began, "cpu_s": _cpu_s() - cpu}))


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Load:
    """What one client phase sends or reads."""

    bootstrap: str
    records: int = 20_000
    record_bytes: int = 20_000
    in_flight: int = 8


def run_phase(load: Load, client: str, phase: str, topic: str, kafka_pid: int) -> dict[str, Any]:
    """One phase of one client in a child process: its wall and CPU seconds, and
    Kafka's CPU seconds over it."""
    kafka_before = brokers.cpu_seconds(kafka_pid)
    command = [
        sys.executable, __file__, "--child", "--client", client, "--phase", phase,
        "--topic", topic, "--bootstrap", load.bootstrap, "--records", str(load.records),
        "--record-bytes", str(load.record_bytes), "--in-flight", str(load.in_flight),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{client} {phase} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["kafka_cpu_s"] = brokers.cpu_seconds(kafka_pid) - kafka_before
    return result


def warm(bootstrap: str, kafka_pid: int, seconds: float) -> None:
    """Produce and consume with both clients for ``seconds``: a Kafka just started
    spends most of its CPU compiling (its JIT) for about a minute of load, which a
    production Kafka has done long ago."""
    load = Load(bootstrap, records=2_000)
    until, round_ = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        for client in CLIENTS:
            topic = f"warm-{round_}-{client}"
            run_phase(load, client, "produce", topic, kafka_pid)
            run_phase(load, client, "consume", topic, kafka_pid)
        round_ += 1


def table(args: argparse.Namespace, results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    per = args.messages_per_record
    lines = [
        "| client | phase | records/s | MB/s | client CPU µs per record "
        f"| client CPU µs per message (÷{per}) | Kafka CPU µs per record |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for client, phases in results.items():
        for phase, r in phases.items():
            rate = args.records / r["wall_s"]
            client_us = 1e6 * r["cpu_s"] / args.records
            lines.append(
                f"| {client} | {phase} | {rate:,.0f} | {rate * args.record_bytes / 1e6:,.1f} "
                f"| {client_us:,.1f} | {client_us / per:.2f} "
                f"| {1e6 * r['kafka_cpu_s'] / args.records:,.1f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--record-bytes", type=int, default=20_000,
                        help="bytes per record (~150 messages of ~150 B, Issue 17)")  # fmt: skip
    parser.add_argument("--messages-per-record", type=int, default=150)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--warm", type=float, default=WARM_SECONDS, help="s of load first")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("produce", "consume"), help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    command = "python benches/cluster/kafka_clients.py " + " ".join(argv or sys.argv[1:])
    about = ", ".join(f"{key} {value}" for key, value in machine().items())
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="ferromq-kafka-clients-") as tmp:
        kafka = start_kafka(Path(tmp))
        try:
            warm(kafka.bootstrap, kafka.pid, args.warm)
            load = Load(kafka.bootstrap, args.records, args.record_bytes, args.in_flight)
            for client in CLIENTS:
                topic = f"bench-{client}"
                results[client] = {
                    phase: run_phase(load, client, phase, topic, kafka.pid)
                    for phase in ("produce", "consume")
                }
                print(client, json.dumps(results[client]), flush=True)
        finally:
            kafka.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kafka_clients.json").write_text(json.dumps(results, indent=1))
    text = "\n".join(
        [
            "# The cluster bus's Kafka client: aiokafka against confluent-kafka",
            "",
            f"`{command}`",
            "",
            about,
            "",
            f"{args.records:,} records of {args.record_bytes:,} B, at most {args.in_flight} "
            f"in flight, one partition, acks=all, idempotent; Kafka warmed {args.warm:.0f} s.",
            "",
            *table(args, results),
            "",
        ]
    )
    (args.out / "kafka_clients.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
