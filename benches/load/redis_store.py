"""TBMQ's P2P scenario on ferromq's durable stores (issue 7, item 8).

    python benches/load/redis_store.py                       # sweep + embedded, ~3 minutes
    python benches/load/redis_store.py --batch 500 --flush 3 --no-embedded
    python benches/load/redis_store.py --cluster --batch 500 --flush 3 --no-embedded

N publisher/subscriber pairs on their own topics, QoS 1 both ways, 62-byte payload,
persistent subscriber sessions (TBMQ's P2P test, seed 000). Every delivery is stored
before its publisher gets the PUBACK, and removed when the subscriber acknowledges it.

Each run gets a fresh broker (pinned to core 1) and, for the Redis store, a fresh
redis-server (pinned to core 0, beside the generator, which uses ~20% of it). The
figure of merit is TBMQ's: messages in + out per CPU core used by the broker and
Redis, measured as twice the messages delivered over the whole run divided by the
broker's and redis-server's CPU seconds (from /proc). The sweep varies the Redis batch
size (records that make a batch go out at once) and the flush interval (ms after the
first record), like seed 000's Lettuce table. ``--cluster`` runs the Redis rows on a
3-node Redis Cluster (tests/support/services.py, every node pinned to core 0) with
``redis.cluster = true``; the figure counts the CPU of all three redis-servers. Writes
``redis_store.md`` and ``redis_store.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import brokers

from ferromq import bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.services import (  # from the repo root
    RedisServer,
    ServiceUnavailable,
    start_redis,
    start_redis_cluster,
)

GENERATOR_CORE = 0
BROKER_CORE = 1
REDIS_CORE = 0


@dataclass
class Row:
    store: str
    batch: int = 0
    flush_ms: int = 0
    in_out_per_s: float = 0.0
    broker_cpu_s: float = 0.0
    redis_cpu_s: float = 0.0
    per_core: float = 0.0
    broker_us_per_msg: float = 0.0
    redis_us_per_msg: float = 0.0
    #: Messages written to Redis (SET calls): the rest completed inside their batch.
    stored_in_redis: int = 0
    delivery_mean_ms: float = 0.0
    delivery_p99_ms: float = 0.0
    ack_mean_ms: float = 0.0
    ack_p99_ms: float = 0.0
    lost: int = 0
    duplicates: int = 0
    report: dict[str, Any] = field(default_factory=dict)


def run(config: dict[str, Any], store_toml: str, work: Path, redis: list[RedisServer]) -> Row:
    """One measured run; ``redis``: the servers whose CPU counts with the broker's."""
    spec = brokers.Ferromq(store_toml)
    broker = brokers.start(spec, work, core=BROKER_CORE)

    def redis_cpu_seconds() -> float:
        return sum(brokers.cpu_seconds(server.pid) for server in redis)

    try:
        broker_before = broker.cpu_seconds()
        redis_before = redis_cpu_seconds()
        report = bench.run({**config, "port": broker.port, "progress": False})
        broker_cpu = broker.cpu_seconds() - broker_before
        redis_cpu = redis_cpu_seconds() - redis_before
        stored = sum(server.command_calls("set") for server in redis)
    finally:
        broker.stop()
    received = report["delivery"]["received"]
    row = Row(store="", report=report)
    row.in_out_per_s = report["in_out_per_s"]
    row.broker_cpu_s, row.redis_cpu_s = broker_cpu, redis_cpu
    row.per_core = 2 * received / (broker_cpu + redis_cpu)
    row.broker_us_per_msg = broker_cpu / received * 1e6
    row.redis_us_per_msg = redis_cpu / received * 1e6
    row.stored_in_redis = stored
    row.delivery_mean_ms = report["latency_ms"]["mean"]
    row.delivery_p99_ms = report["latency_ms"]["p99"]
    row.ack_mean_ms = report["ack_latency_ms"]["mean"]
    row.ack_p99_ms = report["ack_latency_ms"]["p99"]
    row.lost = report["delivery"]["lost"]
    row.duplicates = report["delivery"]["duplicates"]
    return row


def redis_run(config: dict[str, Any], batch: int, flush_ms: int, tmp: Path, cluster: bool) -> Row:
    work = tmp / f"redis-{batch}-{flush_ms}"
    work.mkdir()
    if cluster:
        servers = start_redis_cluster(work, core=REDIS_CORE).nodes
    else:
        servers = [start_redis(work, core=REDIS_CORE)]
    try:
        store = (
            f'[storage]\nbackend = "redis"\n[redis]\nurl = "{servers[0].url}"\n'
            f"batch_size = {batch}\nflush_interval_ms = {flush_ms}\n"
            f"cluster = {str(cluster).lower()}\n"
            "max_messages_per_client = 65535\n"  # room for brokers.py's queue_limit
        )
        row = run(config, store, work, servers)
    finally:
        for server in servers:
            server.stop()
    row.store = "redis cluster (3 nodes)" if cluster else "redis"
    row.batch, row.flush_ms = batch, flush_ms
    return row


def embedded_run(config: dict[str, Any], tmp: Path) -> Row:
    work = tmp / "embedded"
    work.mkdir()
    store = f'[storage]\nbackend = "embedded"\npath = "{work / "store"}"\nfsync = "batch"\n'
    row = run(config, store, work, [])
    row.store = "embedded (fsync batch)"
    return row


def markdown(rows: list[Row], command: str, pairs: int) -> str:
    lines = [
        f"`{command}` — {pairs} pairs, QoS 1, 62-byte payload, persistent subscribers; "
        "broker on core 1, redis-server(s) and generator on core 0 (2-core machine shared "
        "with other work: one run each).",
        "",
        "| store | batch | flush ms | in+out msg/s | broker CPU s | redis CPU s "
        "| in+out per core | broker / redis µs per msg | stored in Redis "
        "| deliver mean / p99 ms | PUBACK mean / p99 ms | lost / dup |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        batch = str(r.batch) if r.batch else "-"
        flush = str(r.flush_ms) if r.store.startswith("redis") else "-"
        lines.append(
            f"| {r.store} | {batch} | {flush} | {r.in_out_per_s:,.0f} | {r.broker_cpu_s:.1f} "
            f"| {r.redis_cpu_s:.1f} | {r.per_core:,.0f} "
            f"| {r.broker_us_per_msg:.1f} / {r.redis_us_per_msg:.1f} "
            f"| {r.stored_in_redis / max(r.report['delivery']['received'], 1):.0%} "
            f"| {r.delivery_mean_ms:.2f} / {r.delivery_p99_ms:.2f} "
            f"| {r.ack_mean_ms:.2f} / {r.ack_p99_ms:.2f} | {r.lost} / {r.duplicates} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--duration", type=float, default=5.0, help="measured window (s)")
    parser.add_argument("--batch", type=int, nargs="*", default=[150, 300, 500])
    parser.add_argument("--flush", type=int, nargs="*", default=[1, 3, 5], help="ms")
    parser.add_argument("--no-embedded", action="store_true")
    parser.add_argument(
        "--cluster", action="store_true", help="Redis rows on a 3-node Redis Cluster"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results-redis")
    args = parser.parse_args(argv)
    command = "python benches/load/redis_store.py " + shlex.join(argv or sys.argv[1:])
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {GENERATOR_CORE})
    config = {
        "scenario": "p2p",
        "pairs": args.pairs,
        "pub_qos": 1,
        "sub_qos": 1,
        "payload": 62,
        "persistent": True,
        "warmup": 1.0,
        "duration": args.duration,
        "drain_timeout": 5.0,
    }
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ferromq-redis-") as tmp:
        for batch, flush_ms in itertools.product(args.batch, args.flush):
            try:
                rows.append(redis_run(config, batch, flush_ms, Path(tmp), args.cluster))
            except ServiceUnavailable as error:  # redis-server or redis-cli missing
                parser.error(str(error))
            print(markdown(rows[-1:], command, args.pairs).splitlines()[-1], flush=True)
        if not args.no_embedded:
            rows.append(embedded_run(config, Path(tmp)))
            print(markdown(rows[-1:], command, args.pairs).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, command, args.pairs)
    (args.out / "redis_store.md").write_text(table)
    (args.out / "redis_store.json").write_text(
        json.dumps({"command": command, "rows": [asdict(r) for r in rows]}) + "\n"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
