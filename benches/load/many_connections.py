"""One node, many idle connections (issue 25 item 4): ``ferromq serve`` with W shards,
K ``ferromq bench conn`` generators opening C connections each from many loopback
source addresses (MQTT 3.1.1, keep alive 60 s: PINGREQs keep them), and what the node
and the kernel hold while all of them are open.

    python benches/load/many_connections.py --workers 10 --generators 10 --clients 19000

Why several processes: a process may hold ``RLIMIT_NOFILE`` descriptors, and on this
machine the hard limit is 20,000 and cannot be raised (no CAP_SYS_RESOURCE), so a
shard holds at most ~20,000 connections and a generator opens at most ~19,500. The node
is the supervisor and its shards; the figures are the node's (every process of it).

The generators are paced (``--connect-rate`` each): unpaced, ten of them on two cores
beside ten shards fell behind their own CONNECTs, and the broker closed those sockets at
its connect timeout (10 s), as it should with a slowloris.

Printed and written (``--json``): the connections held, the generators' connect rates
(CONNECT to CONNACK, each generator's wall rate and their sum), the node's RSS growth
per connection (peak and held), and the kernel's socket memory per connection (slab
caches, both ends counted since the generators are on this machine; socket buffers).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ferromq.bench_memory import kernel_memory, node_memory


def _wait_listening(port: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the node did not listen on {port} within {seconds:.0f} s")


def run(args: argparse.Namespace) -> dict[str, object]:
    ferromq = str(Path(sys.executable).with_name("ferromq"))
    work = Path(tempfile.mkdtemp(prefix="ferromq-many-"))
    node = subprocess.Popen(
        [ferromq, "serve", "-p", str(args.port), "--workers", str(args.workers)],
        cwd=work,
        stdout=(work / "node.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    generators: list[subprocess.Popen[bytes]] = []
    try:
        _wait_listening(args.port)
        time.sleep(2)
        before = {**node_memory(node.pid), **kernel_memory()}
        total = args.generators * args.clients
        addresses = max(1, min(254, total // 20_000 + 1))
        started = time.monotonic()
        for index in range(args.generators):
            generators.append(
                subprocess.Popen(
                    [
                        *(ferromq, "bench", "conn", "--port", str(args.port)),
                        *("--clients", str(args.clients), "--source-addresses", str(addresses)),
                        *("--client-id-prefix", f"g{index}-", "--keep-alive", "60"),
                        *("--connect-rate", str(args.connect_rate), "--connect-timeout", "600s"),
                        *("--duration", f"{args.hold}s", "--threads", "1", "--quiet"),
                        *("--json", str(work / f"g{index}.json")),
                    ],
                    stdout=subprocess.DEVNULL,
                )
            )
        # Held: the kernel counts both ends of every connection on this machine.
        peak_rss, held = before["VmRSS"], before
        while any(g.poll() is None for g in generators):
            sample = {**node_memory(node.pid), **kernel_memory()}
            peak_rss = max(peak_rss, sample["VmRSS"])
            if sample["tcp_inuse"] >= held["tcp_inuse"]:
                held = sample
            time.sleep(1)
        reports = [json.loads((work / f"g{i}.json").read_text()) for i in range(len(generators))]
    finally:
        for generator in generators:
            generator.kill()
        node.terminate()
        node.wait(30)
    connected = sum(r["clients"]["connected"] for r in reports)
    held_connections = (held["tcp_inuse"] - before["tcp_inuse"]) // 2
    per = max(held_connections, 1)
    return {
        "workers": args.workers,
        "planned": total,
        "connected": connected,
        "held_at_once": held_connections,
        "connect_per_s_sum": round(sum(r["clients"]["connect_per_s"] for r in reports)),
        "connect_seconds": round(time.monotonic() - started - args.hold, 1),
        "node_rss_held": round((held["VmRSS"] - before["VmRSS"]) / per),
        "node_rss_peak": round((peak_rss - before["VmRSS"]) / per),
        "node_rss_total_mib": round(held["VmRSS"] / 2**20),
        "kernel_slabs_both_ends": round(
            (held.get("slab_total", 0) - before.get("slab_total", 0)) / per
        ),
        "kernel_socket_buffers": round((held["tcp_buffers"] - before["tcp_buffers"]) / per),
        "failures": sum(r["clients"]["connect_failures"] for r in reports),
        "dropped": sum(r["clients"]["connection_errors"] for r in reports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--generators", type=int, default=10)
    parser.add_argument("--clients", type=int, default=19_000, help="per generator")
    parser.add_argument("--hold", type=int, default=60, help="seconds all stay open")
    parser.add_argument(
        "--connect-rate",
        type=int,
        default=1000,
        help="connections per second per generator (unpaced, ten generators on two cores "
        "send CONNECTs later than the broker's 10 s connect timeout allows)",
    )
    parser.add_argument("--port", type=int, default=18830)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args)
    for key, value in result.items():
        print(f"{key:24} {value:,}" if isinstance(value, int) else f"{key:24} {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
