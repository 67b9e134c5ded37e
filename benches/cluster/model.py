"""The scale-out model (issue 26 item 6): the cores a ferromq cluster needs for a load,
from the per-message costs ``measure.py`` measured here, beside TBMQ's published runs.

    python benches/cluster/model.py benches/cluster/results/results.json

**The model.** P2P, clients placed at random on N nodes of C shards (each shard one
core). A delivered message costs, in CPU:

- nodes: ``local + alone + k * (crossing - local) + s * RING_HOP_US``, where ``local`` and
  ``crossing`` are the nodes' CPU per delivered message measured with no pair and with
  every pair crossing between nodes, ``k = (N - 1) / N`` the share that crosses nodes
  (through Kafka) and ``s = (C - 1) / (N * C)`` the share that crosses between two shards
  of one node (over the node's rings: 0.29 µs, RESULTS "The bus hop"); ``alone`` is what
  a message costs more when it comes alone in its read (2,000 clean pairs at 25 msg/s
  against 100 unpaced pairs, one node), as with TBMQ's publishers sending one message
  every second or more;
- Kafka: ``k * kafka * KAFKA_REPLICAS`` (measured at one replica; a replica is assumed
  to cost what the leader does);
- Redis: ``local_redis + k * (crossing_redis - local_redis)``.

**The check.** The same costs predict the run with two pairs in three crossing
(``tput-3node-mixed-qos1-persistent``: k = 2/3, as random placement on three nodes
gives); the prediction is printed beside what was measured.

**TBMQ's runs** (constants below, with their sources): the cores of a ferromq cluster
for the same load, provisioned at ``UTILISATION``, against TBMQ's broker, Kafka, Redis
and database cores. Assumptions, each a reason the real figure will be higher: this
shared 2-core VM's per-core costs hold on the servers' cores; the load spreads evenly;
Kafka's cost scales with its replicas; the network adds no CPU beyond loopback's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A message crossing between two shards of one node (RESULTS, "The bus hop").
RING_HOP_US = 0.29
#: Copies of each cluster topic in production (docs/cluster.md: three).
KAFKA_REPLICAS = 3
#: The share of a core a sized cluster plans to use.
UTILISATION = 0.8
#: The fewest nodes of a cluster: one lost leaves two to adopt its clients.
MIN_NODES = 3
#: The broker's own memory per connection, and the kernel's per socket end
#: (RESULTS, "Issue 25 item 4: one node holding 1,000,048 idle connections").
BROKER_BYTES_PER_CONNECTION = 1_005
KERNEL_BYTES_PER_CONNECTION = 3_800


@dataclass(frozen=True)
class Costs:
    """CPU µs per delivered message."""

    nodes: float
    kafka: float
    redis: float

    @property
    def total(self) -> float:
        return self.nodes + self.kafka + self.redis


@dataclass(frozen=True)
class Measured:
    local: Costs  # one node, no pair crossing
    crossing: Costs  # three nodes, every pair crossing
    #: what the nodes spend more per message when each comes alone (a read each):
    #: 2,000 clean pairs at 25 msg/s (a long run less a short one) against 100
    #: unpaced ones, on one node
    sparse_extra: float
    mixed: Costs | None  # three nodes, two pairs in three crossing
    mixed_share: float


@dataclass(frozen=True)
class Load:
    name: str
    delivered_per_s: float
    connections: int
    sparse: bool  # each message arrives alone (a publisher sends one every many seconds)
    tbmq_cores: dict[str, int]  # what TBMQ provisioned, by service
    source: str


TBMQ_P2P = Load(
    name="1M msg/s P2P (500k in + 500k out), QoS 1, persistent, 62 B",
    delivered_per_s=500_000,
    connections=1_000_000,
    sparse=True,  # each publisher sends one message a second
    tbmq_cores={"broker": 5 * 16, "Redis": 11 * 2, "Kafka": 5 * 2},
    source="thingsboard.io/docs/mqtt-broker/reference/1m-throughput-p2p-performance-test "
    "(5 x c7a.4xlarge, 11 + 5 x c7a.large; brokers at 91 % CPU)",
)
TBMQ_100M = Load(
    name="100M connections, 3M msg/s in to 500 subscribers, QoS 1, 114 B",
    delivered_per_s=3_000_000,
    connections=100_000_000,
    sparse=True,  # each publisher sends one message every ~33 s
    tbmq_cores={"broker": 25 * 64, "Kafka": 9 * 8, "PostgreSQL": 2},
    source="thingsboard.io/docs/mqtt-broker/reference/100m-connections-performance-test "
    "(25 x m6g.metal, 9 x m6a.2xlarge, db.m6i.large; brokers at 45 %, Kafka at 58 %)",
)


def _run(runs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((run for run in runs if run["name"] == name), None)


def _costs(run: dict[str, Any]) -> Costs:
    delivered = max(run["delivered"], 1)
    nodes = sum(run["node_cpu"].values())
    return Costs(
        1e6 * nodes / delivered,
        1e6 * run["kafka_cpu_s"] / delivered,
        1e6 * run["redis_cpu_s"] / delivered,
    )


def measured(results: dict[str, Any]) -> Measured:
    runs = results["runs"]
    local = _run(runs, "tput-1node-qos1-persistent")
    crossing = _run(runs, "tput-3node-qos1-persistent")
    short = _run(runs, "tput-1node-sparse-short-qos1-clean")
    long = _run(runs, "tput-1node-sparse-long-qos1-clean")
    dense = _run(runs, "tput-1node-qos1-clean")
    if local is None or crossing is None or short is None or long is None or dense is None:
        raise SystemExit("results.json lacks a one-node or a three-node run")
    # The long run less the short one: what connecting 4,000 clients costs cancels out.
    sparse = (sum(long["node_cpu"].values()) - sum(short["node_cpu"].values())) / max(
        long["delivered"] - short["delivered"], 1
    )
    mixed = _run(runs, "tput-3node-mixed-qos1-persistent")
    return Measured(
        local=_costs(local),
        crossing=_costs(crossing),
        sparse_extra=1e6 * sparse - _costs(dense).nodes,
        mixed=_costs(mixed) if mixed else None,
        mixed_share=mixed["crossing"] if mixed else 0.0,
    )


def per_message(m: Measured, nodes: int, cores: int, *, sparse: bool = False) -> Costs:
    """CPU µs per delivered message on ``nodes`` nodes of ``cores`` shards, Kafka at
    ``KAFKA_REPLICAS``; ``sparse``: each message comes alone."""
    k = (nodes - 1) / nodes
    s = (cores - 1) / (nodes * cores)
    alone = m.sparse_extra if sparse else 0.0
    return Costs(
        nodes=m.local.nodes + alone + k * (m.crossing.nodes - m.local.nodes) + s * RING_HOP_US,
        kafka=k * m.crossing.kafka * KAFKA_REPLICAS,
        redis=m.local.redis + k * (m.crossing.redis - m.local.redis),
    )


def mixed_prediction(m: Measured) -> Costs:
    k = m.mixed_share
    return Costs(
        m.local.nodes + k * (m.crossing.nodes - m.local.nodes),
        m.local.kafka + k * (m.crossing.kafka - m.local.kafka),
        m.local.redis + k * (m.crossing.redis - m.local.redis),
    )


@dataclass(frozen=True)
class Sizing:
    nodes: int
    node_cores: int
    kafka_cores: int
    redis_cores: int
    costs: Costs
    memory_gib_per_node: float

    @property
    def cores(self) -> int:
        return self.nodes * self.node_cores + self.kafka_cores + self.redis_cores


def size(m: Measured, load: Load, cores_per_node: int) -> Sizing:
    """The fewest nodes (``MIN_NODES`` at least) of ``cores_per_node`` cores that carry
    ``load`` at ``UTILISATION`` (the share crossing grows with the node count: iterate)."""
    nodes = MIN_NODES
    while True:
        costs = per_message(m, nodes, cores_per_node, sparse=load.sparse)
        busy = load.delivered_per_s * costs.nodes / 1e6
        needed = max(1, math.ceil(busy / (cores_per_node * UTILISATION)))
        if needed <= nodes:
            break
        nodes = needed
    per_connection = BROKER_BYTES_PER_CONNECTION + KERNEL_BYTES_PER_CONNECTION
    return Sizing(
        nodes=nodes,
        node_cores=cores_per_node,
        kafka_cores=math.ceil(load.delivered_per_s * costs.kafka / 1e6 / UTILISATION),
        redis_cores=math.ceil(load.delivered_per_s * costs.redis / 1e6 / UTILISATION),
        costs=costs,
        memory_gib_per_node=load.connections * per_connection / nodes / 2**30,
    )


def _us(costs: Costs) -> str:
    return f"{costs.nodes:.2f} / {costs.kafka:.2f} / {costs.redis:.2f}"


def report(m: Measured, source: str) -> str:
    lines = [
        "# The scale-out model (issue 26 item 6)",
        "",
        f"`python benches/cluster/model.py {source}`",
        "",
        "## Costs measured (CPU µs per delivered message: nodes / Kafka / Redis)",
        "",
        f"- one node, P2P QoS 1 persistent: {_us(m.local)}",
        f"- three nodes, every pair crossing: {_us(m.crossing)}",
        f"- a message that comes alone (2,000 clean pairs at 25 msg/s against 100 unpaced, "
        f"one node) costs the nodes {m.sparse_extra:+.2f} µs more",
        f"- a crossing costs {m.crossing.nodes + m.crossing.kafka:.2f} µs of nodes + Kafka "
        f"against {m.local.nodes + m.local.kafka:.2f} µs for a local delivery "
        f"(**{(m.crossing.nodes + m.crossing.kafka) / (m.local.nodes + m.local.kafka):.1f}x**)",
        "",
        "## The check: two pairs in three crossing",
        "",
    ]
    if m.mixed is None:
        lines.append("Not measured (results.json has no `tput-3node-mixed-qos1-persistent`).")
    else:
        predicted = mixed_prediction(m)
        lines += [
            "| | nodes | Kafka | Redis | total |",
            "|---|---:|---:|---:|---:|",
            f"| predicted (k = {m.mixed_share:.2f}) | {predicted.nodes:.2f} "
            f"| {predicted.kafka:.2f} | {predicted.redis:.2f} | {predicted.total:.2f} |",
            f"| measured | {m.mixed.nodes:.2f} | {m.mixed.kafka:.2f} | {m.mixed.redis:.2f} "
            f"| {m.mixed.total:.2f} |",
            f"| measured / predicted | {m.mixed.nodes / predicted.nodes:.2f} "
            f"| {m.mixed.kafka / max(predicted.kafka, 1e-9):.2f} "
            f"| {m.mixed.redis / max(predicted.redis, 1e-9):.2f} "
            f"| {m.mixed.total / predicted.total:.2f} |",
        ]
    for load in (TBMQ_P2P, TBMQ_100M):
        tbmq = sum(load.tbmq_cores.values())
        lines += [
            "",
            f"## {load.name}",
            "",
            f"TBMQ: {', '.join(f'{n} {c}' for c, n in load.tbmq_cores.items())} cores "
            f"= **{tbmq:,}** ({load.source}).",
            "",
            "| cores per node | nodes | µs per delivered message (nodes / Kafka x3 / Redis) "
            "| node cores | Kafka cores | Redis cores | total cores | TBMQ ÷ ferromq "
            "| memory per node (GiB, connections) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for cores_per_node in (4, 8, 16, 64):
            s = size(m, load, cores_per_node)
            lines.append(
                f"| {cores_per_node} | {s.nodes} | {_us(s.costs)} "
                f"| {s.nodes * cores_per_node} | {s.kafka_cores} | {s.redis_cores} "
                f"| **{s.cores:,}** | {tbmq / s.cores:.1f}x | {s.memory_gib_per_node:,.1f} |"
            )
    lines += [
        "",
        f"At least {MIN_NODES} nodes; provisioned at {UTILISATION:.0%} of each core; "
        f"Kafka at {KAFKA_REPLICAS} replicas "
        f"(its measured cost times {KAFKA_REPLICAS}); each message comes alone (its publisher "
        "sends one every second or more), at the sparse run's extra cost; memory is "
        f"{BROKER_BYTES_PER_CONNECTION:,} B of the broker's and "
        f"{KERNEL_BYTES_PER_CONNECTION:,} B of the kernel's per connection.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="measure.py's results.json")
    parser.add_argument("--out", type=Path, help="write the report here too")
    args = parser.parse_args(argv)
    text = report(measured(json.loads(args.results.read_text())), str(args.results))
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
