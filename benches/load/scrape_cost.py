"""What a Prometheus scrape costs with 10,000 clients connected (issue 14, "Numbers").

One ferromq broker (memory store, ``[admin]`` on) and two ``ferromq bench`` processes:

1. ``conn`` holds ``--clients`` idle connections (from ``--source-addresses`` loopback
   addresses, so 10,000 fit in the ephemeral ports) for the whole run;
2. once the broker's ``ferromq_connections_open`` says they are all in, ``/metrics``
   is fetched ``--scrapes`` times back to back: milliseconds per scrape (wall time at
   the client: the collector walking the engine's sessions, the text exposition and
   the HTTP round trip), and the body's size;
3. ``p2p`` runs ``--rounds`` times with a scrape every second from a thread of this
   script and ``--rounds`` times without, alternating (so drift hits both sides), each
   ``--duration`` seconds: throughput with scrapes over throughput without, the median
   round of each. The goal is at least 98 %.

    python benches/load/scrape_cost.py --out benches/load/results-scrape

Run it alone on the machine: the figures are timings. The script raises its soft
RLIMIT_NOFILE to the hard limit, which the broker and the generators inherit.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import Ferromq, free_port, start


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        body: bytes = response.read()
        return body


def open_connections(port: int) -> float:
    for family in text_string_to_metric_families(scrape(port).decode()):
        if family.name == "ferromq_connections_open":
            return sum(sample.value for sample in family.samples)
    raise RuntimeError("no ferromq_connections_open in /metrics")


def bench(scenario: str, broker_port: int, *options: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ferromq", "bench", scenario, "--port", str(broker_port),
               "--quiet", *options]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def scrape_cost(admin_port: int, scrapes: int) -> dict[str, Any]:
    times_ms, size = [], 0
    for _ in range(scrapes):
        started = time.perf_counter()
        size = len(scrape(admin_port))
        times_ms.append((time.perf_counter() - started) * 1000)
    return {
        "scrapes": scrapes,
        "scrape_ms_median": statistics.median(times_ms),
        "scrape_ms_mean": statistics.fmean(times_ms),
        "scrape_ms_max": max(times_ms),
        "body_bytes": size,
    }


def p2p_round(args: argparse.Namespace, broker_port: int, admin_port: int, scraping: bool) -> float:
    """Messages received per second in one p2p run, scraping every second or not."""
    report = Path(tempfile.mkstemp(suffix=".json")[1])
    done = threading.Event()

    def scrape_every_second() -> None:
        while not done.wait(1.0):
            scrape(admin_port)

    scraper = threading.Thread(target=scrape_every_second, daemon=True)
    if scraping:
        scraper.start()
    run = bench(
        "p2p", broker_port, "--pairs", str(args.pairs), "--qos", str(args.qos),
        "--duration", str(args.duration), "--threads", "1", "--json", str(report),
    )  # fmt: skip
    run.wait()
    done.set()
    if scraping:
        scraper.join()
    received: float = json.loads(report.read_text())["received_per_s"]
    report.unlink()
    return received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--source-addresses", type=int, default=2)
    parser.add_argument("--connect-rate", type=int, default=2000)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds per p2p round")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--qos", type=int, default=1, choices=(0, 1, 2))
    parser.add_argument("--out", type=Path, default=Path("benches/load/results-scrape"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    admin_port = free_port()
    config = f'[storage]\nbackend = "memory"\n[admin]\nenabled = true\nport = {admin_port}\n'
    broker = start(Ferromq(config), Path(tempfile.mkdtemp(prefix="scrape-cost-")))
    idle = bench(
        "conn", broker.port, "--clients", str(args.clients),
        "--source-addresses", str(args.source_addresses),
        "--connect-rate", str(args.connect_rate), "--duration", "86400", "--threads", "1",
        "--client-id-prefix", "idle",  # never p2p's client ids: no takeover between them
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while open_connections(admin_port) < args.clients:
            if time.monotonic() > deadline or idle.poll() is not None:
                raise RuntimeError(f"{args.clients} idle clients did not all connect")
            time.sleep(0.5)
        result: dict[str, Any] = {"clients": args.clients, **scrape_cost(admin_port, args.scrapes)}
        rounds: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for scraping in (False, True):
                rounds[scraping].append(p2p_round(args, broker.port, admin_port, scraping))
        result.update(
            p2p_pairs=args.pairs,
            p2p_qos=args.qos,
            received_per_s_without_scrapes=rounds[False],
            received_per_s_with_scrapes=rounds[True],
            throughput_ratio=statistics.median(rounds[True]) / statistics.median(rounds[False]),
        )
    finally:
        idle.terminate()
        idle.wait()
        broker.stop()
    (args.out / "scrape_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
