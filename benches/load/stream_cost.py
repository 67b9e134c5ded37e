"""What the ``[stream]`` costs the broker (issue 15, "Numbers"): throughput with the
stream on against off, in the same run.

    python benches/load/stream_cost.py                   # ~2 minutes, starts its own Kafka
    python benches/load/stream_cost.py --rounds 3 --duration 10
    python benches/load/stream_cost.py --kafka 127.0.0.1:9092 --scenarios fanin-qos1
    python benches/load/stream_cost.py --configs off,kafka-async,kafka-async-registry

Scenarios: ``fanin-qos1`` and ``p2p-qos1`` of ``compare.py``'s default set (the same
generator configs, the generator ``ferromq bench``). Broker configs, each a fresh
broker process (memory store, so the stream is the only difference), pinned to core 1:

- ``off``: no stream;
- ``kafka-async``: ``sink = "kafka"``, ``delivery = "async"`` (the issue's goal: at
  most 25 % below ``off``);
- ``kafka-after``: ``delivery = "after_kafka"`` (every PUBACK waits for Kafka);
- ``files``: the embedded file sink (PUBACK waits for the file write);
- ``kafka-async-registry``, ``kafka-after-registry`` (not in the default set): the two
  Kafka configs with ``[stream.kafka] registry`` set, so every record value is in the
  Confluent wire format (issue 28: the registry format's cost). The registry is an
  Apicurio Registry from tests/support/services.py (or ``--registry URL``), asked once
  per broker start, pinned to the generator's core like Kafka.

Each round runs every config once, alternating (so drift hits all alike); the table
holds the median round of each, its ratio to ``off``, the broker's CPU seconds and,
apart, the Kafka JVM's (``/proc/<pid>/stat``; not counted when ``--kafka`` names a
running Kafka). Kafka is one KRaft node from tests/support/services.py, warmed by an unmeasured
run, and pinned (every thread) to the generator's core, so its CPU does not come out
of the broker's core: the ratio is the broker's own cost of streaming. Writes
``stream_cost.md`` and ``stream_cost.json`` to ``--out``. Run it alone on
the machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import brokers
from compare import _COMMON, SCENARIO_SETS
from kafka_shared import Row, run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support.services

from tests.support import services

SCENARIOS = ("fanin-qos1", "p2p-qos1")
#: Kafka's threads go to the generator's core (kafka_shared.py pins the broker to core 1).
GENERATOR_CORE = 0
CONFIGS = ("off", "kafka-async", "kafka-after", "files")
REGISTRY_CONFIGS = ("kafka-async-registry", "kafka-after-registry")


def broker_toml(name: str, kafka: str, work: Path, registry: str | None = None) -> str:
    """The broker's config for stream config ``name`` (directories under ``work``;
    ``registry``: the schema registry's URL for the ``-registry`` configs)."""
    if name == "off":
        return brokers.NO_STORE
    sink = "files" if name == "files" else "kafka"
    toml = (
        f'{brokers.NO_STORE}[stream]\nenabled = true\nsink = "{sink}"\nkey = "client"\n'
        f'[stream.files]\ndirectory = "{work}/files"\n'
    )
    if sink == "kafka":
        delivery = "async" if name.startswith("kafka-async") else "after_kafka"
        toml += (
            f'[stream.kafka]\nbootstrap_servers = "{kafka}"\ndelivery = "{delivery}"\n'
            f'messages_topic = "bench.{work.name}.messages"\n'
            f'events_topic = "bench.{work.name}.events"\nspill_directory = "{work}/spill"\n'
        )
        if name.endswith("-registry"):
            toml += f'registry = "{registry}"\n'
    return toml


def markdown(rows: dict[str, dict[str, Row]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| scenario | stream | in+out msg/s | of off | broker CPU s | Kafka CPU s | "
        "PUBACK mean / p99 ms | lost / dup |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, by_config in rows.items():
        off = by_config["off"].in_out_per_s
        for name, r in by_config.items():
            lines.append(
                f"| {scenario} | {name} | {r.in_out_per_s:,.0f} | {r.in_out_per_s / off:.0%} | "
                f"{r.broker_cpu_s:.2f} | {r.kafka_cpu_s:.2f} | {r.ack_mean_ms:.2f} / "
                f"{r.ack_p99_ms:.2f} | {r.lost} / {r.duplicates} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0, help="measured window (s)")
    parser.add_argument("--kafka", help="bootstrap servers of a running Kafka")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"stream configs, off first ({', '.join(CONFIGS + REGISTRY_CONFIGS)})",
    )
    parser.add_argument("--registry", help="a running schema registry's Confluent API URL")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results-stream")
    args = parser.parse_args(argv)
    command = "python benches/load/stream_cost.py " + shlex.join(argv or sys.argv[1:])
    scenarios = args.scenarios.split(",")
    configs = args.configs.split(",")
    unknown = set(configs) - set(CONFIGS + REGISTRY_CONFIGS)
    if configs[0] != "off" or unknown:
        parser.error(f"--configs: off first, then of {CONFIGS + REGISTRY_CONFIGS}")
    medians: dict[str, dict[str, Row]] = {}
    with tempfile.TemporaryDirectory(prefix="ferromq-stream-cost-") as tmp_name:
        tmp = Path(tmp_name)
        kafka = None if args.kafka else services.start_kafka(tmp)
        bootstrap = args.kafka or kafka.bootstrap  # type: ignore[union-attr]
        kafka_pid = kafka.pid if kafka else None
        registry = None
        if not args.registry and set(configs) & set(REGISTRY_CONFIGS):
            registry = services.start_registry(tmp)
        registry_url = args.registry or (registry.ccompat if registry else None)
        for pid in (kafka_pid, registry.pid if registry else None):
            if pid is not None:
                subprocess.run(
                    ["taskset", "-a", "-p", "-c", str(GENERATOR_CORE), str(pid)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
        try:
            for scenario in scenarios:
                config = {**_COMMON, **SCENARIO_SETS["default"][scenario]}
                config["duration"] = args.duration
                if kafka is not None and not medians:
                    # A fresh JVM spends its first seconds compiling: warm it, unmeasured.
                    work = tmp / "warm-up"
                    spec = brokers.Ferromq(broker_toml("kafka-async", bootstrap, work))
                    run("warm-up", spec, config, work, kafka_pid)
                rounds: dict[str, list[Row]] = {name: [] for name in configs}
                for n in range(args.rounds):
                    for name in configs:
                        work = tmp / f"{scenario}-{name}-{n}"
                        spec = brokers.Ferromq(broker_toml(name, bootstrap, work, registry_url))
                        pid = kafka_pid if name.startswith("kafka") else None
                        rounds[name].append(run(name, spec, config, work, pid))
                medians[scenario] = {
                    name: sorted(rows, key=lambda r: r.in_out_per_s)[len(rows) // 2]
                    for name, rows in rounds.items()
                }
                print(markdown({scenario: medians[scenario]}, command), flush=True)
        finally:
            if kafka is not None:
                kafka.stop()
            if registry is not None:
                registry.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(medians, command)
    (args.out / "stream_cost.md").write_text(table)
    results = {
        "command": command,
        "rows": {s: {n: asdict(r) for n, r in by.items()} for s, by in medians.items()},
        "async_of_off": {
            s: by["kafka-async"].in_out_per_s / by["off"].in_out_per_s
            for s, by in medians.items()
            if "kafka-async" in by
        },
    }
    (args.out / "stream_cost.json").write_text(json.dumps(results) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
