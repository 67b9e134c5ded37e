"""A message that comes alone: what the broker spends per message when each publisher
sends now and then, so that every message is a read, a PUBACK and a delivery of its own
(the load of TBMQ's published runs, where a device sends one message a second or less).

    python benches/load/sparse.py --brokers ferromq,flashmq,rumqttd --out DIR

Each broker, started fresh and pinned to core 1 (the generator, ``ferromq bench``, on
core 0), takes ``--pairs`` P2P pairs (QoS 1, clean sessions, 62-byte payload) each
publishing ``--rate`` msg/s for ``--duration`` s. The broker's CPU is read from
``/proc/<pid>/stat`` (user and system apart, its threads and children included) over a
window that starts ``--settle`` s after the run starts (the clients have connected) and
lasts ``--window`` s, and divided by the messages delivered in that window at the
offered rate. Reported per broker: user and system µs per delivered message, the
generator's delivery report (lost, duplicates). Timings: run it alone on the machine.
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

import brokers
from compare import machine

PAYLOAD = 62


def _ticks(pid: int) -> tuple[int, int]:
    """User and system clock ticks of ``pid`` and its descendants so far."""
    user = system = 0
    for member in brokers.process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11]) + int(fields[13])
        system += int(fields[12]) + int(fields[14])
    return user, system


def measure(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    spec = brokers.named(name)
    running = brokers.start(spec, work / name, core=1)
    try:
        report_path = work / f"{name}.json"
        bench = subprocess.Popen(
            [
                "taskset", "-c", "0", sys.executable, "-m", "ferromq", "bench", "p2p",
                "--port", str(running.port), "--qos", "1", "--pairs", str(args.pairs),
                "--rate", str(args.rate), "--payload", str(PAYLOAD),
                "--duration", f"{args.duration}s", "--connect-rate", "1000",
                "--quiet", "--json", str(report_path),
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        samples: dict[str, tuple[int, int]] = {}

        def sample() -> None:
            time.sleep(args.settle)
            samples["start"] = _ticks(running.process.pid)
            time.sleep(args.window)
            samples["end"] = _ticks(running.process.pid)

        sampler = threading.Thread(target=sample)
        sampler.start()
        _, stderr = bench.communicate()
        sampler.join()
        if bench.returncode != 0:
            raise RuntimeError(f"{name}: generator failed: {stderr.decode()[-500:]}")
        report = json.loads(report_path.read_text())
    finally:
        running.stop()
    hz = os.sysconf("SC_CLK_TCK")
    user = (samples["end"][0] - samples["start"][0]) / hz
    system = (samples["end"][1] - samples["start"][1]) / hz
    delivered = args.pairs * args.rate * args.window
    return {
        "broker": name,
        "user_us": 1e6 * user / delivered,
        "system_us": 1e6 * system / delivered,
        "cores": (user + system) / args.window,
        "received_per_s": report["received_per_s"],
        "delivery": report["delivery"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="ferromq,flashmq,rumqttd")
    parser.add_argument("--pairs", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=25.0, help="msg/s per publisher")
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=12.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results-sparse")
    args = parser.parse_args(argv)
    if args.settle + args.window > args.duration:
        parser.error("--settle + --window must fit in --duration")
    command = "python benches/load/sparse.py " + " ".join(argv or sys.argv[1:])
    results = []
    with tempfile.TemporaryDirectory(prefix="ferromq-sparse-") as tmp:
        for name in args.brokers.split(","):
            results.append(measure(name, args, Path(tmp)))
            print(json.dumps(results[-1]), flush=True)
    about = ", ".join(f"{key} {value}" for key, value in machine().items())
    lines = [
        "# A message that comes alone",
        "",
        f"`{command}`",
        "",
        about,
        "",
        f"{args.pairs:,} P2P pairs, QoS 1, clean, {PAYLOAD} B, {args.rate:g} msg/s each "
        f"({args.pairs * args.rate:,.0f} msg/s); broker on core 1, generator on core 0; "
        f"broker CPU over {args.window:g} s from {args.settle:g} s in.",
        "",
        "| broker | received msg/s | broker cores | user µs per message | system µs per "
        "message | total µs | lost / dup |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        d = r["delivery"]
        lines.append(
            f"| {r['broker']} | {r['received_per_s']:,.0f} | {r['cores']:.2f} "
            f"| {r['user_us']:.2f} | {r['system_us']:.2f} "
            f"| {r['user_us'] + r['system_us']:.2f} | {d['lost']} / {d['duplicates']} |"
        )
    text = "\n".join([*lines, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sparse.md").write_text(text)
    (args.out / "sparse.json").write_text(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
