"""Overload: publishers offer more than one subscriber reads. Does the broker keep its
memory within ``[session] memory_budget`` / ``max_queued_bytes``, and what do the
publishers see?

Two generator processes (``ferromq bench``), so neither is the other's bottleneck:

- *fast*: ``fanin`` with ``--publishers`` unpaced QoS 1 publishers and one subscriber
  that reads as fast as it can;
- *slow*: ``fanin`` with one publisher at 1 msg/s and one subscriber reading
  ``--sub-read-rate`` bytes a second, on the same topics (it receives the fast
  publishers' messages too: its report counts them as ``stale``, another run's).

For each broker configuration the script samples the broker's RSS every 100 ms and
reads its $SYS counters at the end (drops by reason, publishers paused, memory used).

    python benches/load/overload.py --duration 10 --out benches/load/results-overload

Configurations (each with ``queue_limit = 64000``, so the message count does not bound
the slow subscriber's queue first):

- ``unbounded``: no byte bounds: the slow subscriber's queue grows to 64,000 messages;
- ``budget``: ``memory_budget`` only: publishers are read less once the total passes
  it, so everyone, the fast subscriber included, goes at the slow one's pace (the
  trade-off of a shared budget), and nothing is dropped;
- ``session``: ``max_queued_bytes`` below ``memory_budget``: the slow subscriber's
  queue is bounded on its own and drops (counted as ``session_bytes``) while the
  publishers and the fast subscriber keep their pace.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import Ferromq, RunningBroker, start

MiB = 1024 * 1024
CONFIGS: dict[str, dict[str, str]] = {
    "unbounded": {},
    "budget": {"FERROMQ_SESSION__MEMORY_BUDGET": str(16 * MiB)},
    "session": {
        "FERROMQ_SESSION__MEMORY_BUDGET": str(16 * MiB),
        "FERROMQ_SESSION__MAX_QUEUED_BYTES": str(4 * MiB),
    },
}
SYS_TOPICS = (
    "memory/used",
    "publishers/paused",
    "clients/held",
    "messages/dropped/session_bytes",
    "messages/dropped/queue_full",
    "publish/messages/dropped",
)


def bench(args: argparse.Namespace, port: int, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "ferromq", "bench", "fanin", "--port", str(port),
        "--qos", "1", "--payload", str(args.payload), "--threads", "1", "--quiet",
        "--json", str(out), *extra,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def sys_values(port: int) -> dict[str, int]:
    """The broker's $SYS counters of interest, as last published."""
    values: dict[str, int] = {}
    done = threading.Event()

    def on_message(_c: Any, _u: Any, message: paho.MQTTMessage) -> None:
        values[message.topic.removeprefix("$SYS/broker/")] = int(message.payload)
        if len(values) == len(SYS_TOPICS):
            done.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="overload-sys")
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    for topic in SYS_TOPICS:
        client.subscribe("$SYS/broker/" + topic)
    client.loop_start()
    done.wait(5)
    client.loop_stop()
    client.disconnect()
    return values


def run_one(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"overload-{name}-"))
    os.environ.update(CONFIGS[name])
    broker: RunningBroker = start(
        Ferromq('[sys]\ninterval = 1\n[storage]\nbackend = "memory"\n'), workdir
    )
    for key in CONFIGS[name]:
        del os.environ[key]
    try:
        slow = bench(
            args, broker.port, out / f"{name}-slow.json",
            "--publishers", "1", "--subscribers", "1", "--rate", "1",
            "--sub-read-rate", str(args.sub_read_rate), "--client-id-prefix", "slow",
            "--duration", str(args.duration + 2), "--drain-timeout", "1",
        )  # fmt: skip
        time.sleep(1)
        fast = bench(
            args, broker.port, out / f"{name}-fast.json",
            "--publishers", str(args.publishers), "--subscribers", "1",
            "--duration", str(args.duration), "--client-id-prefix", "fast",
        )  # fmt: skip
        peak = 0
        while fast.poll() is None:
            peak = max(peak, broker.rss_bytes())
            time.sleep(0.1)
        counters = sys_values(broker.port)
        slow.wait()
    finally:
        broker.stop()
    fast_report = json.loads((out / f"{name}-fast.json").read_text())
    slow_report = json.loads((out / f"{name}-slow.json").read_text())
    return {
        "config": name,
        "peak_rss_mib": peak / MiB,
        "offered_per_s": fast_report["sent_per_s"],
        "fast_received_per_s": fast_report["received_per_s"],
        "pub_ack_p99_ms": fast_report["ack_latency_ms"]["p99"],
        "pub_ack_max_ms": fast_report["ack_latency_ms"]["max"],
        "fast_lost": fast_report["delivery"]["lost"],
        "slow_received": slow_report["delivery"]["stale"] + slow_report["delivery"]["received"],
        **{f"sys:{k}": v for k, v in counters.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--payload", type=int, default=4096)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--sub-read-rate", type=float, default=MiB, help="bytes/s")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", type=Path, default=Path("benches/load/results-overload"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run_one(name, args, args.out) for name in args.configs.split(",")]
    (args.out / "overload.json").write_text(json.dumps(rows, indent=2) + "\n")
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
