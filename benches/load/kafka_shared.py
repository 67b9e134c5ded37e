"""A shared group of APPLICATION clients served through Kafka (issue 7 item 5), side by
side with ferromq's own durable group queue and with Mosquitto's shared subscriptions.

    python benches/load/kafka_shared.py                 # ~1 minute, starts its own Kafka
    python benches/load/kafka_shared.py --members 4 --publishers 10 --duration 10

The ``sharedsub`` scenario of ``ferromq bench``: publishers on their own topics, one
``$share`` group of persistent members, QoS 1 both ways, 64-byte payloads, 16 messages
in flight per publisher (bounded, so every broker runs at the rate it sustains). Rows,
one run each, in this order:

- ``ferromq, kafka-streamed``: the members are APPLICATION clients
  (``application_client_prefixes``), so the group is streamed: every message is
  produced to the group's topic (acks=all, ``kafka.shared_partitions`` partitions)
  before its PUBACK, and the members' consumers in one Kafka consumer group deliver it.
- ``ferromq, engine group``: the same broker config with DEVICE members: the engine's
  group (durable group queue, embedded store, fsync every batch).
- ``mosquitto``: Debian's Mosquitto 2, whose shared groups live in memory only.

Per core = messages in + out over the broker's CPU seconds plus, for the Kafka row, the
Kafka JVM's (from /proc). Kafka is a single KRaft node started from Maven Central
artifacts by tests/support/services.py (and warmed by an unmeasured 5 s streamed run) unless
``--kafka host:port`` names one, whose CPU is then not counted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import brokers

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support.services

from tests.support import services

from ferromq import bench

BROKER_CORE = 1
APP = "app"


@dataclass
class Row:
    broker: str
    in_out_per_s: float
    broker_cpu_s: float
    kafka_cpu_s: float
    per_core: float
    delivery_mean_ms: float
    delivery_p99_ms: float
    ack_mean_ms: float
    ack_p99_ms: float
    lost: int
    duplicates: int


def store_toml(kafka: str, path: Path, partitions: int) -> str:
    return (
        f'[storage]\nbackend = "embedded"\npath = "{path}"\nfsync = "batch"\n'
        f'application_store = "kafka"\napplication_client_prefixes = ["{APP}"]\n'
        f'[kafka]\nbootstrap_servers = "{kafka}"\n'
        f'topic_prefix = "bench.{path.parent.name}."\nshared_partitions = {partitions}\n'
    )


def run(
    name: str,
    spec: brokers.BrokerSpec,
    config: dict[str, Any],
    work: Path,
    kafka_pid: int | None,
) -> Row:
    work.mkdir()
    broker = brokers.start(spec, work, core=BROKER_CORE)
    try:
        kafka_before = brokers.cpu_seconds(kafka_pid) if kafka_pid else 0.0
        broker_before = broker.cpu_seconds()
        report = bench.run({**config, "port": broker.port, "progress": False})
        broker_cpu = broker.cpu_seconds() - broker_before
        kafka_cpu = (brokers.cpu_seconds(kafka_pid) - kafka_before) if kafka_pid else 0.0
    finally:
        broker.stop()
    received = report["delivery"]["received"]
    return Row(
        broker=name,
        in_out_per_s=report["in_out_per_s"],
        broker_cpu_s=broker_cpu,
        kafka_cpu_s=kafka_cpu,
        per_core=2 * received / (broker_cpu + kafka_cpu),
        delivery_mean_ms=report["latency_ms"]["mean"],
        delivery_p99_ms=report["latency_ms"]["p99"],
        ack_mean_ms=report["ack_latency_ms"]["mean"],
        ack_p99_ms=report["ack_latency_ms"]["p99"],
        lost=report["delivery"]["lost"],
        duplicates=report["delivery"]["duplicates"],
    )


def markdown(rows: list[Row], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| broker | in+out msg/s | broker CPU s | Kafka CPU s | in+out per core | "
        "delivery mean / p99 ms | PUBACK mean / p99 ms | lost / dup |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.broker} | {r.in_out_per_s:,.0f} | {r.broker_cpu_s:.2f} | "
            f"{r.kafka_cpu_s:.2f} | {r.per_core:,.0f} | {r.delivery_mean_ms:.2f} / "
            f"{r.delivery_p99_ms:.2f} | {r.ack_mean_ms:.2f} / {r.ack_p99_ms:.2f} | "
            f"{r.lost} / {r.duplicates} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--publishers", type=int, default=10)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0, help="measured window (s)")
    parser.add_argument("--kafka", help="bootstrap servers of a running Kafka")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results-kafka")
    args = parser.parse_args(argv)
    command = "python benches/load/kafka_shared.py " + shlex.join(argv or sys.argv[1:])
    config = {
        "scenario": "sharedsub",
        "publishers": args.publishers,
        "subscribers": args.members,
        "pub_qos": 1,
        "sub_qos": 1,
        "payload": 64,
        "inflight": 16,
        "persistent": True,
        "warmup": 2.0,
        "duration": args.duration,
        "drain_timeout": 10.0,
    }
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ferromq-kafka-shared-") as tmp_name:
        tmp = Path(tmp_name)
        kafka = None if args.kafka else services.start_kafka(tmp)
        bootstrap = args.kafka or kafka.bootstrap  # type: ignore[union-attr]
        kafka_pid = kafka.pid if kafka else None
        try:
            if kafka is not None:
                # A fresh JVM spends its first seconds compiling: warm it, unmeasured.
                store = store_toml(bootstrap, tmp / "warm-up" / "store", args.partitions)
                warm_up = {**config, "client_id_prefix": APP, "duration": 5.0}
                run("warm-up", brokers.Ferromq(store), warm_up, tmp / "warm-up", kafka_pid)
            runs = [
                ("ferromq, kafka-streamed", "streamed", APP, kafka_pid),
                ("ferromq, engine group", "engine", "dev", None),
            ]
            for name, directory, prefix, pid in runs:
                store = store_toml(bootstrap, tmp / directory / "store", args.partitions)
                spec = brokers.Ferromq(store)
                client_ids = {**config, "client_id_prefix": prefix}
                rows.append(run(name, spec, client_ids, tmp / directory, pid))
                print(markdown(rows[-1:], command).splitlines()[-1], flush=True)
            mosquitto = brokers.BROKERS["mosquitto"]
            if mosquitto.missing() is None:
                rows.append(run("mosquitto", mosquitto, config, tmp / "mosquitto", None))
                print(markdown(rows[-1:], command).splitlines()[-1], flush=True)
        finally:
            if kafka is not None:
                kafka.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, command)
    (args.out / "kafka_shared.md").write_text(table)
    (args.out / "kafka_shared.json").write_text(
        json.dumps({"command": command, "rows": [asdict(r) for r in rows]}) + "\n"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
