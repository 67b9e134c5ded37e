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


def _wait_listening(node: subprocess.Popen[bytes], port: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if node.poll() is not None:  # another node on the port, say
            raise SystemExit(f"the node exited with {node.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the node did not listen on {port} within {seconds:.0f} s")


def _settled_memory(pid: int, seconds: float = 120.0) -> dict[str, int]:
    """The node's memory once its shards have started: the first port that listens is
    one shard's, and at fifty shards the others are still importing for a minute; the
    baseline is taken when the node's RSS has moved less than 0.5 % over three seconds."""
    deadline = time.monotonic() + seconds
    samples = [node_memory(pid)]
    while time.monotonic() < deadline:
        time.sleep(1)
        samples = [*samples[-3:], node_memory(pid)]
        rss = [sample["VmRSS"] for sample in samples]
        if len(rss) == 4 and max(rss) - min(rss) < max(rss) // 200:
            break
    return samples[-1]


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
        _wait_listening(node, args.port)
        before = {**_settled_memory(node.pid), **kernel_memory()}
        total = args.generators * args.clients
        # connect() takes even ports first and searches the odd ones only once a
        # source address's even ports are gone (14,116 of 28,232 here), at milliseconds
        # a connect: 725,000 connections from 51 addresses stalled there. So at most
        # 5,000 connections per address.
        addresses = max(1, min(254, total // 5_000 + 1))
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
        "node_anon_held": round((held["RssAnon"] - before["RssAnon"]) / per),
        "node_rss_before_mib": round(before["VmRSS"] / 2**20),
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
