"""What the admin listener's cost benchmarks share (``scrape_cost.py``,
``api_listing_cost.py``; issue 14, "Numbers").

- :func:`idle_broker`: one ferromq broker (memory store, ``[admin]`` on, no token)
  and a ``ferromq bench conn`` process holding ``--clients`` idle connections (client
  ids ``idle-c0`` ... from ``--source-addresses`` loopback addresses, so 10,000 fit in
  the ephemeral ports) for the whole run, once the broker's ``connections_open``
  (``/api/v1/stats``) says they are all in;
- :func:`timings_ms`: one admin request made N times back to back, its wall time at
  the client in milliseconds (median, mean, max);
- :func:`throughput_ratio`: ``p2p`` run ``--rounds`` times with the request made every
  second from a thread and ``--rounds`` times without, alternating (so drift hits both
  sides), each ``--duration`` seconds: throughput with over throughput without, the
  median round of each. The goal is at least 98 %.

Run them alone on the machine: the figures are timings. :func:`idle_broker` raises the
soft RLIMIT_NOFILE to the hard limit, which the broker and the generators inherit.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import Ferromq, free_port, start

IDLE_PREFIX = "idle"
"""The idle clients' id prefix (``idle-c<n>``), never p2p's: no takeover between them."""


def add_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The options every admin cost benchmark takes; results go to ``--out`` (``out``)."""
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--source-addresses", type=int, default=2)
    parser.add_argument("--connect-rate", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds per p2p round")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--qos", type=int, default=1, choices=(0, 1, 2))
    parser.add_argument("--out", type=Path, default=Path(out))


def get(admin_port: int, path: str) -> bytes:
    """The body of ``GET path`` on the admin listener."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}{path}", timeout=30) as response:
        body: bytes = response.read()
        return body


def bench(scenario: str, broker_port: int, *options: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ferromq", "bench", scenario, "--port", str(broker_port),
               "--quiet", *options]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


@contextmanager
def idle_broker(args: argparse.Namespace) -> Iterator[tuple[int, int]]:
    """A broker holding ``args.clients`` idle connections: (MQTT port, admin port)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    admin_port = free_port()
    config = f'[storage]\nbackend = "memory"\n[admin]\nenabled = true\nport = {admin_port}\n'
    broker = start(Ferromq(config), Path(tempfile.mkdtemp(prefix="admin-cost-")))
    idle = bench(
        "conn", broker.port, "--clients", str(args.clients),
        "--source-addresses", str(args.source_addresses),
        "--connect-rate", str(args.connect_rate), "--duration", "86400", "--threads", "1",
        "--client-id-prefix", IDLE_PREFIX,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while json.loads(get(admin_port, "/api/v1/stats"))["connections_open"] < args.clients:
            if time.monotonic() > deadline or idle.poll() is not None:
                raise RuntimeError(f"{args.clients} idle clients did not all connect")
            time.sleep(0.5)
        yield broker.port, admin_port
    finally:
        idle.terminate()
        idle.wait()
        broker.stop()


def timings_ms(request: Callable[[], object], times: int) -> dict[str, float]:
    """``request`` made ``times`` times back to back: milliseconds each, summarised."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        request()
        spent.append((time.perf_counter() - started) * 1000)
    return {
        "ms_median": statistics.median(spent),
        "ms_mean": statistics.fmean(spent),
        "ms_max": max(spent),
    }


def _p2p_round(
    args: argparse.Namespace, broker_port: int, request: Callable[[], object] | None
) -> float:
    """Messages received per second in one p2p run, with ``request`` every second."""
    report = Path(tempfile.mkstemp(suffix=".json")[1])
    done = threading.Event()

    def every_second(request: Callable[[], object]) -> None:
        while not done.wait(1.0):
            request()

    caller = None if request is None else threading.Thread(target=every_second, args=(request,))
    if caller is not None:
        caller.start()
    run = bench(
        "p2p", broker_port, "--pairs", str(args.pairs), "--qos", str(args.qos),
        "--duration", str(args.duration), "--threads", "1", "--json", str(report),
    )  # fmt: skip
    run.wait()
    done.set()
    if caller is not None:
        caller.join()
    received: float = json.loads(report.read_text())["received_per_s"]
    report.unlink()
    return received


def throughput_ratio(
    args: argparse.Namespace, broker_port: int, request: Callable[[], object], what: str
) -> dict[str, Any]:
    """p2p throughput with ``request`` every second (``what``: "scrapes", "listings")
    against none."""
    rounds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for requesting in (False, True):
            rounds[requesting].append(
                _p2p_round(args, broker_port, request if requesting else None)
            )
    return {
        "p2p_pairs": args.pairs,
        "p2p_qos": args.qos,
        f"received_per_s_without_{what}": rounds[False],
        f"received_per_s_with_{what}": rounds[True],
        "throughput_ratio": statistics.median(rounds[True]) / statistics.median(rounds[False]),
    }


def write_result(out: Path, name: str, result: dict[str, Any]) -> None:
    """``result`` as ``out/name`` (JSON), and on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (out / name).write_text(text)
    print(text, end="")
