"""Issue 17's numbers: ferromq nodes clustered on Kafka and Redis, on this machine.

    PYTHONPATH=python python benches/cluster/measure.py --out benches/cluster/results

Starts its own Redis and Kafka (tests/support/services.py; stopped at the end) and real
``ferromq serve`` nodes with ``[cluster]`` configs (benches/load/brokers.py writes the
rest of each config), then, with the load generator (``ferromq bench``, one thread):

1. **throughput, one node**: node A alone, P2P QoS 1 (TBMQ's scenario: persistent
   subscriber sessions, 62-byte payload; and the same with clean sessions), unpaced;
   then 2,000 clean pairs at 25 msg/s each, so that each message comes alone (sparse),
   over a window and over three times as long;
2. nodes B and C join;
3. **latency**: P2P at a fixed offered load (``--latency-pairs`` x ``--latency-rate``,
   1,000 msg/s by default, so latency is not queueing) at QoS 0 and QoS 1, first with
   every client on A (*same node*), then with the clients spread over A, B and C so that
   every pair's publisher and subscriber are on different nodes (*cross node*, steer.py);
   the generator stamps each payload with its send time and reads it at the subscriber,
   one clock;
4. **throughput, three nodes**: the scenarios of 1. with the clients spread over the
   three nodes, every pair crossing; then persistent with two pairs in three crossing
   (``MIXED``), as clients placed at random on three nodes would, to check
   ``model.py``'s prediction;
5. **Kafka bytes**: for each run, the route topics' records (kafka_bytes.py) over the
   messages that crossed, and the compacted subscriptions topic at the end.

A run with persistent sessions is preceded by short priming runs of the same clients
(same ids and topics) until one loses nothing: the subscriptions then exist on every
node's index before the measured run, which resumes those sessions (a SUBACK means the
subscription is in Kafka, not that every node has read it). Clean-session runs are not
primed, so their *lost* counts include messages published before the other nodes had
read the subscription.

Kafka is first warmed (``--warm``, 60 s of produce and consume by
``kafka_clients.warm``): a Kafka just started spends most of its CPU on its JIT for
about a minute of load, which the runs of issue 17 counted as the cluster's.

CPU: utime + stime from /proc of every running node's process tree, the Kafka JVM and
redis-server over the measured run; the generator's from its resource usage. Nothing is
pinned: the nodes, Kafka, Redis and the generator share the machine's cores. Writes
``results.md`` and ``results.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import kafka_bytes
import kafka_clients
import steer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches" / "load"))
sys.path.insert(0, str(ROOT))  # tests.support.services
import brokers  # noqa: E402  (benches/load, put on the path above)
from compare import machine  # noqa: E402
from tests.support.services import KafkaServer, RedisServer, start_kafka, start_redis  # noqa: E402

TOPIC_PREFIX = "fmqbench."
KEY_PREFIX = "fmqbench:"
NODE_IDS = ("a", "b", "c")
#: Client n goes to MIXED[n % 9]: with pairs = 2 mod 9, two pairs in three cross, as
#: with clients placed at random on three nodes (steer.crossing_share).
MIXED = ("a", "a", "a", "b", "b", "b", "c", "c", "c")
PAYLOAD = 62  # TBMQ's P2P payload (seed 000)
PRIME_ATTEMPTS = 5
#: The sparse run: many pairs, each publisher sending every 40 ms (a message per read).
SPARSE_PAIRS = 2_000
SPARSE_RATE = 25.0
NODE_START_TIMEOUT = 60.0


@dataclass
class Run:
    name: str
    kind: str  # "latency" | "throughput"
    nodes: int  # nodes the clients were spread over
    running: int  # nodes running (their CPU counts)
    crossing: float  # the share of pairs whose publisher and subscriber are on different nodes
    qos: int
    persistent: bool
    wall_s: float
    #: CPU seconds of each running node over the run.
    node_cpu: dict[str, float]
    kafka_cpu_s: float
    redis_cpu_s: float
    generator_cpu_s: float
    #: CPU seconds the whole machine was busy over the run (/proc/stat), everything
    #: included: what is not the nodes', Kafka's, Redis's or the generator's is other work.
    machine_busy_s: float
    primed: int  # priming runs before this one (persistent sessions)
    route: kafka_bytes.Traffic
    report: dict[str, Any] = field(repr=False)

    @property
    def node_cpu_s(self) -> float:
        return sum(self.node_cpu.values())

    def service_cpu(self) -> tuple[float, float, float]:
        """CPU seconds of the nodes, Kafka and Redis over the run."""
        return self.node_cpu_s, self.kafka_cpu_s, self.redis_cpu_s

    @property
    def other_cpu_s(self) -> float:
        """The machine's busy CPU seconds not spent by the measured processes."""
        ours = self.node_cpu_s + self.kafka_cpu_s + self.redis_cpu_s + self.generator_cpu_s
        return max(self.machine_busy_s - ours, 0.0)

    @property
    def delivered(self) -> int:
        received: int = self.report["delivery"]["received"]
        return received


class Cluster:
    """The services and the nodes of one measurement, and how to measure a run on them."""

    def __init__(self, work: Path, shim: Path, workers: int = 1, warm: float = 0.0) -> None:
        self.work, self.shim, self.workers = work, shim, workers
        self.redis: RedisServer = start_redis(work)
        self.kafka: KafkaServer | None = None
        self.nodes: dict[str, brokers.RunningBroker] = {}
        try:
            self.kafka = start_kafka(work)
            if warm > 0:  # a Kafka just started spends its CPU compiling
                kafka_clients.warm(self.kafka.bootstrap, self.kafka.pid, warm)
        except BaseException:
            self.stop()
            raise
        self.kafka_data = work / "kafka" / "data"  # tests/support/services.py's log.dirs

    @property
    def bootstrap(self) -> str:
        assert self.kafka is not None
        bootstrap: str = self.kafka.bootstrap
        return bootstrap

    def start(self, node_id: str) -> None:
        toml = (
            f'[cluster]\nnode_id = "{node_id}"\nkafka = "{self.bootstrap}"\n'
            f'redis = "{self.redis.url}"\ntopic_prefix = "{TOPIC_PREFIX}"\n'
            f'[redis]\nkey_prefix = "{KEY_PREFIX}"\n'
            # Room for the whole queue brokers.py allows (the config refuses less).
            "max_messages_per_client = 65535\n"
        )
        spec = brokers.Ferromq(toml, workers=self.workers)
        self.nodes[node_id] = brokers.start(
            spec, self.work / f"node-{node_id}", timeout=NODE_START_TIMEOUT
        )

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        if self.kafka is not None:
            self.kafka.stop()
        self.redis.stop()

    def ports(self, node_ids: Sequence[str]) -> list[int]:
        return [self.nodes[node_id].port for node_id in node_ids]

    @staticmethod
    def _machine_busy() -> float:
        """CPU seconds the machine has been busy since boot (all cores: not idle, not
        waiting for IO)."""
        ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")

    def _cpu(self) -> dict[str, float]:
        """CPU seconds so far of each node (by id), "kafka" and "redis"."""
        assert self.kafka is not None
        return {
            **{node_id: node.cpu_seconds() for node_id, node in self.nodes.items()},
            "kafka": brokers.cpu_seconds(self.kafka.pid),
            "redis": brokers.cpu_seconds(self.redis.pid),
            "machine": self._machine_busy(),
        }

    def prime(self, config: dict[str, Any], ports: list[int]) -> int:
        """Short runs of the same persistent clients until one loses nothing; returns
        how many ran. Raises RuntimeError when none did."""
        short = {**config, "count": 20, "duration": 0.0, "warmup": 0.0, "rate": 0.0}
        short["drain_timeout"] = 3.0
        for attempt in range(1, PRIME_ATTEMPTS + 1):
            report = steer.generate(short, ports, self.shim, self.work).report
            delivery = report["delivery"]
            if delivery["lost"] == 0 and delivery["drain_complete"]:
                return attempt
            time.sleep(1.0)
        raise RuntimeError(
            f"each of {PRIME_ATTEMPTS} priming runs lost messages "
            f"(the last {delivery['lost']} of {delivery['expected']})"
        )

    def measure(self, name: str, kind: str, config: dict[str, Any], node_ids: Sequence[str]) -> Run:
        """One measured generator run with its clients spread over ``node_ids``."""
        ports = self.ports(node_ids)
        config = {**config, "client_id_prefix": name, "topic_prefix": f"bench/{name}"}
        primed = self.prime(config, ports) if config.get("persistent") else 0
        start_mark = kafka_bytes.mark(self.bootstrap, self.kafka_data, TOPIC_PREFIX)
        cpu_before = self._cpu()
        began = time.monotonic()
        generated = steer.generate(config, ports, self.shim, self.work)
        wall = time.monotonic() - began
        cpu = {name: seconds - cpu_before[name] for name, seconds in self._cpu().items()}
        end_mark = kafka_bytes.mark(self.bootstrap, self.kafka_data, TOPIC_PREFIX)
        run = Run(
            name=name,
            kind=kind,
            nodes=len(set(node_ids)),
            running=len(self.nodes),
            crossing=steer.crossing_share(config["pairs"], node_ids),
            qos=config["pub_qos"],
            persistent=bool(config.get("persistent")),
            wall_s=wall,
            node_cpu={node_id: cpu[node_id] for node_id in self.nodes},
            kafka_cpu_s=cpu["kafka"],
            redis_cpu_s=cpu["redis"],
            generator_cpu_s=generated.cpu_s,
            machine_busy_s=cpu["machine"],
            primed=primed,
            route=kafka_bytes.route_traffic(self.bootstrap, start_mark, end_mark),
            report=generated.report,
        )
        print(summary(run), flush=True)
        return run


def p2p(qos: int, persistent: bool, pairs: int, **extra: Any) -> dict[str, Any]:
    return {
        "scenario": "p2p",
        "pairs": pairs,
        "pub_qos": qos,
        "sub_qos": qos,
        "payload": PAYLOAD,
        "persistent": persistent,
        "threads": 1,
        **extra,
    }


def _label(run: Run) -> str:
    sessions = "persistent" if run.persistent else "clean"
    return f"QoS {run.qos}, {sessions}"


def _lost(run: Run) -> str:
    delivery = run.report["delivery"]
    star = "" if delivery["drain_complete"] else "*"
    return f"{delivery['lost']}{star} / {delivery['duplicates']}"


def summary(run: Run) -> str:
    r = run.report
    return (
        f"{run.name}: {r['received_per_s']:,.0f} recv/s, p50 {r['latency_ms']['p50']:.2f} "
        f"p99 {r['latency_ms']['p99']:.2f} ms, lost/dup {_lost(run)}, nodes "
        f"{run.node_cpu_s:.1f} s, kafka {run.kafka_cpu_s:.1f} s, redis {run.redis_cpu_s:.1f} s, "
        f"route records {run.route.records} ({run.route.record_bytes:,} B), "
        f"other work {run.other_cpu_s:.1f} s"
    )


def latency_table(runs: list[Run]) -> list[str]:
    lines = [
        "| path | QoS | offered msg/s | delivered | e2e p50 ms | e2e p99 ms | e2e max ms "
        "| PUBACK p50 / p99 ms | lost / dup | other work (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for run in runs:
        r = run.report
        offered = r["config"]["pairs"] * r["config"]["rate"]
        ack = r["ack_latency_ms"]
        ack_text = f"{ack['p50']:.2f} / {ack['p99']:.2f}" if ack["count"] else "-"
        lines.append(
            f"| {'cross node' if run.crossing else 'same node'} | {run.qos} | {offered:,.0f} "
            f"| {run.delivered:,} | {r['latency_ms']['p50']:.2f} | {r['latency_ms']['p99']:.2f} "
            f"| {r['latency_ms']['max']:.2f} | {ack_text} | {_lost(run)} "
            f"| {run.other_cpu_s / run.wall_s:.2f} |"
        )
    return lines


def _per(count: float, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "-"


def throughput_table(runs: list[Run]) -> list[str]:
    lines = [
        "| nodes | P2P | pairs crossing | delivered msg/s | in+out msg/s "
        "| node CPU (cores: all (A / B / C)) | Kafka / Redis / generator / other CPU (cores) "
        "| CPU µs per delivered message: nodes / Kafka / Redis | delivered per node-core-s "
        "| in+out per core (nodes + Kafka + Redis) | e2e p50 / p99 ms | lost / dup |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        r, wall = run.report, run.wall_s
        service_cpu = run.node_cpu_s + run.kafka_cpu_s + run.redis_cpu_s
        each = f" ({' / '.join(f'{s / wall:.2f}' for s in run.node_cpu.values())})"
        each = each if run.nodes > 1 else ""
        micro = [1e6 * cpu / max(run.delivered, 1) for cpu in run.service_cpu()]
        lines.append(
            f"| {run.nodes} | {_label(run)} | {run.crossing:.0%} | {r['received_per_s']:,.0f} "
            f"| {r['in_out_per_s']:,.0f} | {run.node_cpu_s / wall:.2f}{each} "
            f"| {run.kafka_cpu_s / wall:.2f} / {run.redis_cpu_s / wall:.2f} / "
            f"{run.generator_cpu_s / wall:.2f} / {run.other_cpu_s / wall:.2f} "
            f"| {' / '.join(f'{m:.2f}' for m in micro)} "
            f"| {_per(run.delivered, run.node_cpu_s)} "
            f"| {_per(2 * run.delivered, service_cpu)} "
            f"| {r['latency_ms']['p50']:.2f} / {r['latency_ms']['p99']:.2f} | {_lost(run)} |"
        )
    return lines


def route_sizes(route: kafka_bytes.Traffic) -> tuple[int, int]:
    return route.record_bytes, route.log_bytes


def kafka_table(runs: list[Run], subs: kafka_bytes.Subscriptions | None) -> list[str]:
    lines = [
        "| run | messages crossing | route records | record bytes | log bytes "
        "| record bytes per message | log bytes per message | messages per record |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:  # same-node runs: nothing should reach the route topics
        route, crossed = run.route, round(run.delivered * run.crossing)
        per_message = [f"{n / crossed:,.1f}" if crossed else "-" for n in route_sizes(route)]
        lines.append(
            f"| {run.name} | {crossed:,} | {route.records:,} | {route.record_bytes:,} "
            f"| {route.log_bytes:,} | {' | '.join(per_message)} "
            f"| {crossed / max(route.records, 1):,.1f} |"
        )
    if subs is None:
        return lines
    lines += [
        "",
        f"Subscriptions topic (`{TOPIC_PREFIX}subscriptions`) at the end: "
        f"{subs.records:,} records written, {subs.live_keys:,} live keys "
        f"({subs.live_bytes:,} bytes of key + value: what it compacts to), "
        f"{subs.log_bytes:,} bytes of log (nothing compacted yet: the active segment).",
    ]
    return lines


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)
    #: What could not be measured (run name or "subscriptions topic") -> the error.
    failed: dict[str, str] = field(default_factory=dict)
    subscriptions: kafka_bytes.Subscriptions | None = None


def markdown(command: str, about: dict[str, str], results: Results) -> str:
    runs = results.runs
    lat = [run for run in runs if run.kind == "latency"]
    thr = [run for run in runs if run.kind == "throughput"]
    head = ", ".join(f"{key} {value}" for key, value in about.items() if value)
    failed = [f"- {name}: {error}" for name, error in results.failed.items()]
    return "\n".join(
        [
            "# Issue 17: the cluster on one machine",
            "",
            f"`{command}`",
            "",
            f"{head}. Nothing pinned: the nodes, Kafka (one KRaft JVM), redis-server and "
            "the generator (one thread) share the machine's cores.",
            "",
            "## Cross-node delivery latency against same-node",
            "",
            *latency_table(lat),
            "",
            "## Throughput, three nodes against one",
            "",
            *throughput_table(thr),
            "",
            "## Kafka bytes per message crossing",
            "",
            *kafka_table(runs, results.subscriptions),
            "",
            *(["## Not measured", "", *failed, ""] if failed else []),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--latency-pairs", type=int, default=10)
    parser.add_argument("--latency-rate", type=float, default=100.0, help="msg/s per pair")
    parser.add_argument("--latency-duration", type=float, default=10.0, help="s")
    parser.add_argument("--pairs", type=int, default=100, help="throughput pairs")
    parser.add_argument("--duration", type=float, default=5.0, help="throughput window, s")
    parser.add_argument(
        "--no-clean", action="store_true", help="skip the clean-session throughput runs"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="shards per node, each a member (issue 26)"
    )
    parser.add_argument(
        "--warm",
        type=float,
        default=kafka_clients.WARM_SECONDS,
        help="s of Kafka load before measuring (its JIT; 0: a cold Kafka, as before)",
    )
    args = parser.parse_args(argv)
    if not steer.pairs_cross(args.latency_pairs, 3) or not steer.pairs_cross(args.pairs, 3):
        parser.error(
            "--latency-pairs and --pairs must not be multiples of 3 (pairs would share a node)"
        )
    command = "python benches/cluster/measure.py " + shlex.join(argv or sys.argv[1:])
    about = machine()
    window = {"warmup": 1.0, "drain_timeout": 10.0}
    latency = {**window, "duration": args.latency_duration, "rate": args.latency_rate}
    # Connecting paced: a burst of 200 CONNECTs on one node had half refused with 0x03
    # (the cluster's client-id claim failing), which the window does not measure anyway.
    throughput = {**window, "duration": args.duration, "connect_rate": 200.0}
    sessions = [True] if args.no_clean else [True, False]
    results = Results()
    with tempfile.TemporaryDirectory(prefix="ferromq-cluster-bench-") as tmp:
        work = Path(tmp)
        cluster = Cluster(work, steer.build(work), args.workers, args.warm)

        def measure(name: str, kind: str, config: dict[str, Any], where: list[str]) -> None:
            try:
                results.runs.append(cluster.measure(name, kind, config, where))
            except RuntimeError as error:  # the generator failed, or priming never settled
                results.failed[name] = str(error)
                print(f"{name}: not measured: {error}", flush=True)

        try:
            cluster.start("a")
            for persistent in sessions:
                config = p2p(1, persistent, args.pairs, **throughput)
                name = f"tput-1node-qos1-{'persistent' if persistent else 'clean'}"
                measure(name, "throughput", config, ["a"])
            # A read per message, as with many publishers each sending now and then
            # (model.py's sparse cost): clean sessions, unprimed; a short and a long
            # window, whose difference leaves out connecting and subscribing.
            for name, seconds in (("short", args.duration), ("long", 3 * args.duration)):
                config = p2p(1, False, SPARSE_PAIRS, **{**throughput, "duration": seconds})
                config.update(rate=SPARSE_RATE, connect_rate=500.0)
                measure(f"tput-1node-sparse-{name}-qos1-clean", "throughput", config, ["a"])
            cluster.start("b")
            cluster.start("c")
            for where in (["a"], list(NODE_IDS)):
                for qos in (0, 1):
                    config = p2p(qos, True, args.latency_pairs, **latency)
                    measure(f"latency-{'cross' if len(where) > 1 else 'same'}-qos{qos}",
                            "latency", config, where)  # fmt: skip
            for persistent in sessions:
                config = p2p(1, persistent, args.pairs, **throughput)
                name = f"tput-3node-qos1-{'persistent' if persistent else 'clean'}"
                measure(name, "throughput", config, list(NODE_IDS))
            # The scale-out model's check (model.py): two pairs in three crossing.
            mixed_pairs = next(p for p in range(args.pairs, args.pairs + 9) if p % 9 == 2)
            config = p2p(1, True, mixed_pairs, **throughput)
            measure("tput-3node-mixed-qos1-persistent", "throughput", config, list(MIXED))
            try:
                results.subscriptions = kafka_bytes.subscriptions(
                    cluster.bootstrap, cluster.kafka_data, TOPIC_PREFIX
                )
            except RuntimeError as error:
                results.failed["subscriptions topic"] = str(error)
        finally:
            cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(command, about, results)
    (args.out / "results.md").write_text(text)
    body = {
        "command": command,
        "machine": about,
        "runs": [{**asdict(run), "delivered": run.delivered} for run in results.runs],
        "failed": results.failed,
        "subscriptions": asdict(results.subscriptions) if results.subscriptions else None,
    }
    (args.out / "results.json").write_text(json.dumps(body, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
