"""Run the codec micro-benchmarks and print ferromq's ratio to each peer.

    python benches/micro/report.py [extra pytest args]

Runs ``pytest benches/micro --benchmark-enable --benchmark-only --benchmark-json=...``
and prints, per group, each implementation's median and minimum time, its packets per
second and how many times faster each ferromq variant is (the peer's median over
ferromq's): ``ferromq`` builds a dict per packet, ``ferromq-batch`` returns a
``FrameBatch`` and materialises every PUBLISH field (type, QoS, packet id, topic,
payload) as Python columns, with no object per packet. The
median, not the mean: on a shared machine, and with the cyclic GC running over the
objects a decode creates, a few slow rounds drag the mean far from the typical round.
pytest's own table is printed above it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

BENCHES = Path(__file__).resolve().parent


def run(extra: list[str]) -> dict[str, list[dict[str, object]]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(BENCHES / "test_codec_bench.py"),
            "--benchmark-enable",
            "--benchmark-only",
            f"--benchmark-json={out}",
            "-p",
            "no:cacheprovider",
            *extra,
        ]
        subprocess.run(cmd, check=True)
        data = json.loads(out.read_text())
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for bench in data["benchmarks"]:
        groups[bench["group"]].append(bench)
    return groups


def report(groups: dict[str, list[dict[str, object]]]) -> str:
    lines = []
    for group, benches in sorted(groups.items()):
        rows = []
        for bench in benches:
            info = bench["extra_info"]
            stats = bench["stats"]
            assert isinstance(info, dict) and isinstance(stats, dict)
            median, fastest = float(stats["median"]), float(stats["min"])
            rows.append((str(info["impl"]), median, fastest, int(info["packets"])))
        ours = {impl: median for impl, median, _, _ in rows if impl.startswith("ferromq")}
        lines.append(f"\n{group}")
        ratio_headers = "".join(f"{'vs ' + impl:>24}" for impl in ours)
        header = f"{'median':>12}{'min':>12}{'packets/s':>14}{ratio_headers}"
        lines.append(f"  {'implementation':<30}{header}")
        for impl, median, fastest, packets in sorted(rows, key=lambda row: row[1]):
            # How many times slower this peer is than each ferromq variant.
            ratios = "".join(
                f"{'-' if impl.startswith('ferromq') else f'{median / base:,.1f}x':>24}"
                for base in ours.values()
            )
            times = f"{median * 1e3:>10.2f}ms{fastest * 1e3:>10.2f}ms"
            lines.append(f"  {impl:<30}{times}{packets / median:>14,.0f}{ratios}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(sys.argv[1:])))
