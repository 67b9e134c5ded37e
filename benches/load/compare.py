"""Side-by-side load test: the same scenarios against ferromq, Mosquitto, amqtt and the
peers (FlashMQ, rumqttd, NanoMQ, Mosquitto 2.1).

    python benches/load/compare.py --scenarios default        # a few minutes
    python benches/load/compare.py --scenarios large          # bigger, slower
    python benches/load/compare.py --scenarios sharedsub --brokers ferromq,mosquitto
    python benches/load/compare.py --scenarios cores --broker-cores 2 \\
        --brokers ferromq-w1,ferromq-w2,flashmq,rumqttd,nanomq --versus ferromq-w2

Each scenario runs against each broker in turn, on a fresh broker process (no state
carried between scenarios) pinned with ``taskset`` to the cores ``--broker-cores``
gives it (cores.py: by default core 1, with the generator, ``ferromq.bench``'s Rust
threads, on core 0) and told to use that many (``BrokerSpec.using``). The CPU time of
the broker's process tree over the run (utime + stime from /proc) gives *delivered
per broker-core-second*: messages received by subscribers divided by the CPU seconds
the broker spent, a rate that does not depend on how many cores the broker could use,
and *broker cores*: those CPU seconds over the run's wall time. Ratios are against
Mosquitto (for p99 latency, below 1 is better) and, with ``--versus NAME``, of that
broker against each other one. Writes ``results.md``, ``results.json`` and PNG plots
to ``--out``. A broker that is not installed (or a scenario it cannot run, like MQTT 5
on amqtt) is skipped with the reason in the table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import brokers
import cores
import plots

from ferromq import bench
from ferromq._core import BenchError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.tls_certs import (  # from the repository root, put on the path above
    Pem,
    authority,
)

# name -> generator config (keys of ferromq-bench's Config). Warm-up 1 s, window 5 s.
_COMMON = {"warmup": 1.0, "duration": 5.0, "drain_timeout": 5.0, "payload": 64}
SCENARIO_SETS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {
        # QoS 0 has no flow control: unpaced, the generator would only fill socket
        # buffers, so it runs at a fixed offered load (100 pairs x 100 msg/s).
        "p2p-qos0": {"scenario": "p2p", "pairs": 100, "rate": 100, "pub_qos": 0, "sub_qos": 0},
        "p2p-qos1": {"scenario": "p2p", "pairs": 100, "pub_qos": 1, "sub_qos": 1},
        "p2p-qos1-persistent": {
            "scenario": "p2p",
            "pairs": 100,
            "pub_qos": 1,
            "sub_qos": 1,
            "persistent": True,
        },
        "p2p-qos2": {"scenario": "p2p", "pairs": 100, "pub_qos": 2, "sub_qos": 2},
        "p2p-qos1-mqtt5": {
            "scenario": "p2p",
            "pairs": 100,
            "pub_qos": 1,
            "sub_qos": 1,
            "protocol": 5,
        },
        "fanin-qos1": {
            "scenario": "fanin",
            "publishers": 100,
            "subscribers": 1,
            "pub_qos": 1,
            "sub_qos": 1,
        },
        "fanout-qos0": {
            "scenario": "fanout",
            "publishers": 1,
            "subscribers": 100,
            "rate": 500,
            "pub_qos": 0,
            "sub_qos": 0,
        },
        "sharedsub-qos1": {
            "scenario": "sharedsub",
            "publishers": 50,
            "subscribers": 5,
            "pub_qos": 1,
            "sub_qos": 1,
        },
        "conn-1000": {"scenario": "conn", "clients": 1000, "connect_rate": 500, "duration": 2},
    },
    # Issue 5's comparison: each shape open-loop (publishers never wait) and at its
    # sustainable rate (QoS 1: 16 in flight per publisher; QoS 0: a rate ladder).
    "broker": {
        "fanin-qos0-open": {
            "scenario": "fanin",
            "publishers": 100,
            "subscribers": 1,
            "pub_qos": 0,
            "sub_qos": 0,
        },
        # QoS 0 has no acknowledgement to bound it: its sustainable rate is the highest
        # offered rate delivered without loss, found on a ladder of rates per publisher.
        "fanin-qos0-sustainable": {
            "scenario": "fanin",
            "publishers": 100,
            "subscribers": 1,
            "pub_qos": 0,
            "sub_qos": 0,
            "rates": [500, 1000, 1500, 2000, 3000, 5000, 8000, 12000],
        },
        "fanin-qos1-open": {
            "scenario": "fanin",
            "publishers": 100,
            "subscribers": 1,
            "pub_qos": 1,
            "sub_qos": 1,
            "inflight": 65_535,
        },
        "fanin-qos1-bounded": {
            "scenario": "fanin",
            "publishers": 100,
            "subscribers": 1,
            "pub_qos": 1,
            "sub_qos": 1,
            "inflight": 16,
        },
        "p2p-qos1-persistent-open": {
            "scenario": "p2p",
            "pairs": 100,
            "pub_qos": 1,
            "sub_qos": 1,
            "persistent": True,
            "payload": 62,
            "inflight": 65_535,
        },
        "p2p-qos1-persistent-bounded": {
            "scenario": "p2p",
            "pairs": 100,
            "pub_qos": 1,
            "sub_qos": 1,
            "persistent": True,
            "payload": 62,
            "inflight": 16,
        },
        "fanout-qos0-open": {
            "scenario": "fanout",
            "publishers": 1,
            "subscribers": 100,
            "pub_qos": 0,
            "sub_qos": 0,
        },
        "fanout-qos0-sustainable": {
            "scenario": "fanout",
            "publishers": 1,
            "subscribers": 100,
            "pub_qos": 0,
            "sub_qos": 0,
            "rates": [1000, 2000, 3000, 5000, 8000, 12000, 20000],
        },
        "conn-10k-idle": {
            "scenario": "conn",
            "clients": 10_000,
            "connect_rate": 2000,
            "source_addresses": 2,
            "duration": 3,
        },
    },
    # Issue 6: fan-in into one 10-member shared group ($share/bench/...), QoS 1, open
    # loop and at 16 in flight per publisher.
    "sharedsub": {
        "sharedsub-qos1-open": {
            "scenario": "sharedsub",
            "publishers": 100,
            "subscribers": 10,
            "pub_qos": 1,
            "sub_qos": 1,
            "inflight": 65_535,
        },
        "sharedsub-qos1-bounded": {
            "scenario": "sharedsub",
            "publishers": 100,
            "subscribers": 10,
            "pub_qos": 1,
            "sub_qos": 1,
            "inflight": 16,
        },
    },
    # Issue 13: the same shapes over TLS and WebSocket, with one certificate (ECDSA
    # P-256, from tests/support/tls_certs.py) for every broker, and the TLS connection set-up
    # rate (1,000 clients connecting unpaced; TLS 1.3, full handshakes).
    "transports": {
        **{
            f"p2p-qos1-{transport}": {
                "scenario": "p2p",
                "pairs": 100,
                "pub_qos": 1,
                "sub_qos": 1,
                "transport": transport,
            }
            for transport in ("tcp", "tls", "ws", "wss")
        },
        **{
            f"fanin-qos0-{transport}": {
                "scenario": "fanin",
                "publishers": 100,
                "subscribers": 1,
                "rate": 1000,
                "pub_qos": 0,
                "sub_qos": 0,
                "transport": transport,
            }
            for transport in ("tcp", "tls", "ws")
        },
        **{
            f"conn-1000-{transport}": {
                "scenario": "conn",
                "clients": 1000,
                "duration": 1,
                "transport": transport,
            }
            for transport in ("tcp", "tls")
        },
    },
    # Issue 13: P2P QoS 1 with and without 1,000 ACL rules (ferromq only). Every rule
    # applies to every client and shares the generator's first topic level, so each
    # check walks the same trie node the run's own rule sits in; default deny.
    "acl": {
        **{
            f"p2p-qos1-acl-{rules}": {
                "scenario": "p2p",
                "pairs": 100,
                "pub_qos": 1,
                "sub_qos": 1,
                "topic_prefix": "fleet",
                **({"acl_rules": rules} if rules else {}),
            }
            for rules in (0, 1000)
        },
    },
    # Issue 27: a plugin's cost per message, P2P QoS 1 (100 pairs) paced at 10k and
    # 100k msg/s: no plugin, one observing every message, one deciding every message.
    "plugins": {
        f"p2p-qos1-{rate // 1000}k{'-' + plugin.lower() if plugin else ''}": {
            "scenario": "p2p",
            "pairs": 100,
            "pub_qos": 1,
            "sub_qos": 1,
            "rate": rate // 100,
            **({"ferromq_plugin": plugin} if plugin else {}),
        }
        for rate in (10_000, 100_000)
        for plugin in ("", "Observer", "Interceptor")
    },
    "large": {
        "p2p-qos1-1k": {"scenario": "p2p", "pairs": 1000, "pub_qos": 1, "sub_qos": 1},
        "p2p-qos1-1k-persistent": {
            "scenario": "p2p",
            "pairs": 1000,
            "pub_qos": 1,
            "sub_qos": 1,
            "persistent": True,
        },
        "fanin-qos1-1k": {
            "scenario": "fanin",
            "publishers": 1000,
            "subscribers": 2,
            "pub_qos": 1,
            "sub_qos": 1,
        },
        "fanout-qos1": {
            "scenario": "fanout",
            "publishers": 2,
            "subscribers": 1000,
            "rate": 100,
            "pub_qos": 1,
            "sub_qos": 1,
        },
        "conn-20k": {
            "scenario": "conn",
            "clients": 20_000,
            "connect_rate": 2000,
            "source_addresses": 4,
            "duration": 5,
        },
    },
}


# Issue 16: a broker given N cores (--broker-cores N), on the shapes of the per-core
# comparisons of issues 14 and 15. QoS 0 runs paced (nothing bounds it; unpaced, the
# generator only fills socket buffers) at 500k msg/s offered, a load that keeps a core
# busy. P2P persistent also runs on ferromq's embedded store (a journal per shard).
SCENARIO_SETS["cores"] = {
    "fanin-qos0-500k": {
        "scenario": "fanin",
        "publishers": 100,
        "subscribers": 1,
        "rate": 5000,
        "pub_qos": 0,
        "sub_qos": 0,
    },
    "fanout-qos0-500k": {
        "scenario": "fanout",
        "publishers": 1,
        "subscribers": 100,
        "rate": 5000,
        "pub_qos": 0,
        "sub_qos": 0,
    },
    "p2p-qos1-persistent": SCENARIO_SETS["default"]["p2p-qos1-persistent"],
    "p2p-qos1-persistent-stored": {
        **SCENARIO_SETS["default"]["p2p-qos1-persistent"],
        "ferromq_store": "embedded",
    },
    "sharedsub-qos1": SCENARIO_SETS["default"]["sharedsub-qos1"],
    "fanin-qos1": SCENARIO_SETS["default"]["fanin-qos1"],
}


@dataclass
class Row:
    scenario: str
    broker: str
    skipped: str | None = None
    received_per_s: float = 0.0
    in_out_per_s: float = 0.0
    per_core_s: float = 0.0
    broker_cpu_s: float = 0.0
    #: broker CPU seconds over the run's wall seconds (connect, warm-up, window, drain).
    broker_cores: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    lost: int = 0
    duplicates: int = 0
    connected: int = 0
    connect_per_s: float = 0.0
    #: ladder rows: the highest offered rate (msg/s, all publishers) sustained.
    sustained_offered_per_s: float = 0.0
    #: conn rows: (peak RSS while connections are held - RSS before) / connections.
    rss_per_connection: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)


def transport_listener(transport: str, work: Path) -> tuple[brokers.Listener, dict[str, Any]]:
    """The broker listener for ``transport`` and the generator keys that reach it; TLS
    ones share one certificate per run, made on first use in ``work/certs``."""
    if transport not in ("tls", "wss"):
        return brokers.Listener(transport), {}
    cafile, server = _certificates(work / "certs")
    return brokers.Listener(transport, server.cert, server.key), {"tls_ca_file": str(cafile)}


@functools.cache
def _certificates(directory: Path) -> tuple[Path, Pem]:
    directory.mkdir(parents=True, exist_ok=True)
    # Mosquitto started as root reads them after dropping to its own user.
    for readable in (directory.parent, directory):
        readable.chmod(0o755)
    ca = authority(directory, "bench")
    return ca.cafile, ca.server()


def acl_broker(rules: int, prefix: str, work: Path, node: brokers.Ferromq) -> brokers.Ferromq:
    """``node`` with ``rules`` ACL rules for every client: ``rules - 1`` denials under
    the generator's topic ``prefix`` that its topics never match, then one allow for
    the prefix, default deny."""
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        f'[[rules]]\npermission = "deny"\naction = "all"\ntopic = "{prefix}/blocked-{i}/#"\n'
        for i in range(rules - 1)
    ]
    lines.append(f'[[rules]]\npermission = "allow"\naction = "all"\ntopic = "{prefix}/#"\n')
    acl_file = work / "acl.toml"
    acl_file.write_text("".join(lines))
    return node.configured(f'{brokers.NO_STORE}[acl]\nfile = "{acl_file}"\ndefault = "deny"\n')


# Scenario keys that configure ferromq (the other brokers skip those scenarios).
FERROMQ_ONLY = {
    "acl_rules": "ACL cost",
    "ferromq_store": "the durable store",
    "ferromq_plugin": "a plugin's cost",
}


def ferromq_variant(
    name: str, config: dict[str, Any], node: brokers.Ferromq, work: Path
) -> brokers.Ferromq:
    """``node`` configured as ``config``'s ferromq-only keys say."""
    if "acl_rules" in config:
        return acl_broker(config["acl_rules"], config["topic_prefix"], work / f"{name}-acl", node)
    if "ferromq_plugin" in config:
        # bench_plugins.py, beside this file, on the broker's module path.
        here = str(Path(__file__).resolve().parent)
        path = os.environ.get("PYTHONPATH", "")
        if here not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, path) if p)
        plugin = f'[[plugins]]\nname = "bench_plugins:{config["ferromq_plugin"]}"\n'
        return node.configured(brokers.NO_STORE + plugin)
    if "ferromq_store" in config:
        path = work / f"{name}-{node.name}-store"
        return node.configured(
            f'[storage]\nbackend = "{config["ferromq_store"]}"\npath = "{path}"\n'
        )
    return node


def run_one(
    name: str,
    config: dict[str, Any],
    spec: brokers.BrokerSpec,
    work: Path,
    placement: cores.Placement,
) -> Row:
    row = Row(name, spec.name)
    variant = [what for key, what in FERROMQ_ONLY.items() if key in config]
    if variant:
        if not isinstance(spec, brokers.Ferromq):
            row.skipped = f"{variant[0]} is measured on ferromq only"
            return row
        spec = ferromq_variant(name, config, spec, work)
        config = {k: v for k, v in config.items() if k not in FERROMQ_ONLY}
    reason = spec.missing()
    transport = config.get("transport", "tcp")
    if reason is None and config.get("protocol", 4) not in spec.protocols:
        reason = f"{spec.name} does not speak MQTT {config['protocol']}"
    if reason is None and transport not in spec.transports:
        reason = f"not set up here for {transport}"
    if reason is not None:
        row.skipped = reason
        return row
    listener, reach = transport_listener(transport, work)
    try:
        broker = brokers.start(
            spec, work / f"{name}-{spec.name}", core=placement.broker, listener=listener
        )
    except RuntimeError as err:
        row.skipped = str(err)
        return row
    try:
        cpu_before = broker.cpu_seconds()
        started = time.monotonic()
        with RssSampler(broker) as rss:
            report = bench.run(
                {**_COMMON, **config, **reach, "port": broker.port, "progress": False}
            )
        row.broker_cpu_s = broker.cpu_seconds() - cpu_before
        row.broker_cores = row.broker_cpu_s / (time.monotonic() - started)
    except BenchError as err:
        row.skipped = f"run failed: {err}"
        return row
    finally:
        broker.stop()
    delivery = report["delivery"]
    row.report = report
    row.received_per_s = report["received_per_s"]
    row.in_out_per_s = report["in_out_per_s"]
    row.per_core_s = delivery["received"] / row.broker_cpu_s if row.broker_cpu_s else 0.0
    row.p50_ms = report["latency_ms"]["p50"]
    row.p99_ms = report["latency_ms"]["p99"]
    row.lost = delivery["lost"]
    row.duplicates = delivery["duplicates"]
    row.connected = report["clients"]["connected"]
    row.connect_per_s = report["clients"]["connect_per_s"]
    if config["scenario"] == "conn" and row.connected:
        row.rss_per_connection = (rss.peak - rss.before) / row.connected
        # Set-up cost: connections (handshake, CONNECT, CONNACK) per broker CPU second.
        row.per_core_s = row.connected / row.broker_cpu_s if row.broker_cpu_s else 0.0
    return row


# A rung of a rate ladder passes when nothing is lost and p99 latency stays under this.
SUSTAINABLE_P99_MS = 1000.0


def run_ladder(
    name: str,
    config: dict[str, Any],
    spec: brokers.BrokerSpec,
    work: Path,
    placement: cores.Placement,
) -> Row:
    """The highest offered rate (``config["rates"]``, msg/s per publisher, ascending)
    the broker sustains: no loss and p99 under SUSTAINABLE_P99_MS. The row is that
    rung's run, named with the total offered rate; the first failing rung ends it."""
    base = {k: v for k, v in config.items() if k != "rates"}
    publishers = base.get("publishers", base.get("pairs", 1))
    best: Row | None = None
    for rate in config["rates"]:
        row = run_one(name, {**base, "rate": rate}, spec, work / f"rate-{rate}", placement)
        if row.skipped or row.lost or row.p99_ms > SUSTAINABLE_P99_MS:
            break
        row.sustained_offered_per_s = rate * publishers
        best = row
    if best is None:
        row.skipped = row.skipped or f"lost messages at the lowest rate ({config['rates'][0]})"
        return row
    return best


class RssSampler:
    """Samples the broker's RSS every 50 ms while the (GIL-releasing) generator runs."""

    def __init__(self, broker: brokers.RunningBroker) -> None:
        self.broker = broker
        self.before = broker.rss_bytes()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.broker.rss_bytes())
            except OSError:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def machine() -> dict[str, str]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    versions = {"mosquitto": "", "amqtt": ""}
    try:
        out = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, check=False)
        versions["mosquitto"] = out.stdout.splitlines()[0] if out.stdout else ""
    except FileNotFoundError:
        pass
    try:
        from importlib.metadata import version

        versions["amqtt"] = f"amqtt {version('amqtt')}"
    except Exception:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg before": Path("/proc/loadavg").read_text().split(" ", 1)[0],
        **versions,
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def versus(rows: list[Row], reference: str) -> list[str]:
    """A table of ``reference`` against each other broker of the run, per scenario:
    its deliveries per broker-core-second and per second over theirs (above 1:
    ``reference`` ahead)."""
    measured = {(r.scenario, r.broker): r for r in rows if r.skipped is None}
    others = [b for b in dict.fromkeys(r.broker for r in rows) if b != reference]
    lines = [
        f"## {reference} against each broker",
        "",
        f"{reference}'s deliveries per broker-core-second (per-core) and per second (recv) "
        "over each other broker's on the same scenario; above 1: "
        f"{reference} ahead.",
        "",
        "| scenario | " + " | ".join(f"per-core vs {b} | recv vs {b}" for b in others) + " |",
        "|---|" + "---:|---:|" * len(others),
    ]
    for scenario in dict.fromkeys(r.scenario for r in rows):
        ref = measured.get((scenario, reference))
        if ref is None or ref.report["scenario"] == "conn":
            continue
        cells = []
        for b in others:
            other = measured.get((scenario, b))
            cells += (
                [
                    _ratio(ref.per_core_s, other.per_core_s),
                    _ratio(ref.received_per_s, other.received_per_s),
                ]
                if other
                else ["-", "-"]
            )
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return lines


def markdown(
    rows: list[Row],
    info: dict[str, str],
    command: str,
    placement: cores.Placement,
    reference: str | None = None,
) -> str:
    lines = [
        "| scenario | broker | recv msg/s | in+out msg/s | recv per broker-core-s "
        "| broker cores | p50 ms | p99 ms | lost | dup | recv vs mosquitto "
        "| per-core vs mosquitto | p99 vs mosquitto |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {r.scenario: r for r in rows if r.broker == "mosquitto" and r.skipped is None}
    for r in rows:
        if r.skipped is not None:
            lines.append(f"| {r.scenario} | {r.broker} | skipped: {r.skipped} |||||||||||")
            continue
        ref = base.get(r.scenario)
        if r.report["scenario"] == "conn":
            lines.append(
                f"| {r.scenario} | {r.broker} | {r.connected} connected, "
                f"{r.connect_per_s:,.0f} conn/s | {r.rss_per_connection:,.0f} B RSS/conn | | "
                f"{r.broker_cores:.2f} | {r.report['connect_latency_ms']['p50']:.2f} | "
                f"{r.report['connect_latency_ms']['p99']:.2f} | | | "
                f"{_ratio(r.connect_per_s, ref.connect_per_s) if ref else '-'} "
                f"| {r.per_core_s:,.0f} conn per broker-core-s"
                f"{f' ({_ratio(r.per_core_s, ref.per_core_s)})' if ref else ''} | |"
            )
            continue
        label = r.scenario
        if r.sustained_offered_per_s:
            label += f" (sustains {r.sustained_offered_per_s / 1000:,.0f}k/s offered)"
        lines.append(
            f"| {label} | {r.broker} | {r.received_per_s:,.0f} | {r.in_out_per_s:,.0f} "
            f"| {r.per_core_s:,.0f} | {r.broker_cores:.2f} | {r.p50_ms:.2f} "
            f"| {r.p99_ms:.2f} | {r.lost:,}"
            f"{'' if r.report['delivery']['drain_complete'] else '*'} "
            f"| {r.duplicates:,} | {_ratio(r.received_per_s, ref.received_per_s) if ref else '-'} "
            f"| {_ratio(r.per_core_s, ref.per_core_s) if ref else '-'} "
            f"| {_ratio(r.p99_ms, ref.p99_ms) if ref else '-'} |"
        )
    header = [
        "# Load comparison",
        "",
        f"Command: `{command}`",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if v),
        "",
        placement.describe(),
        "",
        told(len(placement.broker)),
        "*broker cores*: CPU seconds of the broker's processes over the run's wall "
        "seconds (connect, warm-up, window, drain); *recv per broker-core-s*: every "
        "delivery of the run over those CPU seconds. "
        "conn rows show connections, connect latency (CONNECT → CONNACK) and the "
        "broker's RSS growth per held connection, and in the per-core column the "
        "connections set up per second of broker CPU (with TLS the generator's own "
        "handshakes cap the wall-clock rate; this one does not depend on it). "
        "`*`: the broker had not delivered everything when the drain timeout ended the "
        "run, so *lost* also counts messages still queued in it.",
        "",
    ]
    tail = ["", *versus(rows, reference)] if reference else []
    return "\n".join(header + lines + tail) + "\n"


def told(broker_cores: int) -> str:
    """What each broker is told about its cores (brokers.py, ``BrokerSpec.using``)."""
    if broker_cores == 1:
        return (
            "Each broker runs with its own thread defaults (FlashMQ and NanoMQ size "
            "their pools by the machine's CPUs, on the one core they are given); "
            "ferromq runs one process (`--workers 1`; ferromq-w<N>: N)."
        )
    return (
        f"Each broker is told to use {broker_cores} cores where it has a setting for it: "
        f"ferromq `--workers {broker_cores}` (ferromq-w<N>: `--workers N`), FlashMQ "
        f"`thread_count {broker_cores}`; rumqttd has no thread setting (one router "
        "thread, one runtime thread per listener) and NanoMQ 0.25.3 ignores its "
        "(a task pool of 2 x the machine's CPUs), so both run with their defaults."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", choices=sorted(SCENARIO_SETS), default="default")
    parser.add_argument("--only", nargs="*", help="run only these scenario names")
    parser.add_argument(
        "--brokers",
        default="ferromq,mosquitto,amqtt",
        help="comma-separated, in run order; ferromq-w<N>: ferromq with N workers",
    )
    parser.add_argument(
        "--broker-cores",
        type=int,
        default=1,
        help="cores the broker is pinned to and told to use (default 1: core 1, "
        "generator on core 0; all of them: the generator shares them)",
    )
    parser.add_argument(
        "--versus", metavar="BROKER", help="add a table of this broker against each other one"
    )
    parser.add_argument("--duration", type=float, help="override the measured window (s)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    command = "python benches/load/compare.py " + shlex.join(argv or sys.argv[1:])
    try:
        placement = cores.place(args.broker_cores)
        specs = [brokers.named(name).using(args.broker_cores) for name in args.brokers.split(",")]
    except ValueError as err:
        parser.error(str(err))
    if args.versus is not None and args.versus not in {spec.name for spec in specs}:
        parser.error(f"--versus {args.versus}: not one of --brokers")
    info = machine()
    # Worker threads inherit this: the generator stays on its own cores.
    os.sched_setaffinity(0, placement.generator)
    scenarios = SCENARIO_SETS[args.scenarios]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ferromq-load-") as tmp:
        for name, config in scenarios.items():
            if args.only and name not in args.only:
                continue
            if args.duration is not None and config["scenario"] != "conn":
                config = {**config, "duration": args.duration}
            for spec in specs:
                run = run_ladder if "rates" in config else run_one
                row = run(name, config, spec, Path(tmp), placement)
                status = row.skipped or (
                    f"{row.received_per_s:,.0f} recv/s, p99 {row.p99_ms:.2f} ms, "
                    f"lost {row.lost}, broker CPU {row.broker_cpu_s:.1f} s"
                )
                print(f"{name:<28} {spec.name:<10} {status}", flush=True)
                rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, info, command, placement, args.versus)
    (args.out / "results.md").write_text(table)
    (args.out / "results.json").write_text(
        json.dumps({"command": command, "machine": info, "rows": [asdict(r) for r in rows]}) + "\n"
    )
    plots.draw(rows, args.out)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
