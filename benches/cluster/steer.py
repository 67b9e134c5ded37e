"""Run ``ferromq bench`` with its clients spread over several nodes (steer.c).

The generator connects every client to one port. :func:`generate` runs it in a child
Python with the ``steer.so`` shim preloaded and ``source_addresses`` set to the number of
nodes: client n (subscribers first, then publishers) binds 127.0.0.(1 + n % N) and the
shim sends that connection to the (n % N)-th node's port. In a P2P run of P pairs,
subscriber i lands on node i % N and its publisher on node (P + i) % N: on another node
for every pair when P is not a multiple of N (:func:`pairs_cross`).

The shim is compiled once per run of the harness (``cc``) and checked with real sockets
(:func:`build`) before any figure depends on it. The child's CPU time is measured from
its resource usage once it has been reaped.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("steer.c")

# The child: one generator run, config as JSON on stdin, report as JSON to the file named.
_CHILD = (
    "import json, sys\n"
    "from ferromq import bench\n"
    "report = bench.run(json.load(sys.stdin))\n"
    "open(sys.argv[1], 'w').write(json.dumps(report))\n"
)


@dataclass(frozen=True)
class Generated:
    report: dict[str, Any]
    #: The generator process's user + system CPU seconds.
    cpu_s: float


def build(workdir: Path) -> Path:
    """Compile steer.c into ``workdir/steer.so`` and check that it steers; raises
    RuntimeError naming what failed."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build benches/cluster/steer.c")
    shim = workdir / "steer.so"
    command = [cc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(SOURCE), "-ldl"]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {built.stderr.strip()}")
    _check(shim)
    return shim


def _check(shim: Path, nodes: int = 3) -> None:
    """Three listeners; a child connects from 127.0.0.1..3 to the first one's port: each
    connection must arrive at the listener of its source address."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(nodes)]
    try:
        ports = [sock.getsockname()[1] for sock in listeners]
        child = (
            "import socket, sys\n"
            "for k in range(1, int(sys.argv[2]) + 1):\n"
            "    s = socket.socket()\n"
            "    s.bind((f'127.0.0.{k}', 0))\n"
            "    s.connect(('127.0.0.1', int(sys.argv[1])))\n"
            "    s.close()\n"
        )
        subprocess.run(
            [sys.executable, "-c", child, str(ports[0]), str(nodes)],
            env=_env(shim, ports), check=True, timeout=30,
        )  # fmt: skip
        for k, sock in enumerate(listeners, start=1):
            sock.settimeout(5)
            conn, (peer, _) = sock.accept()
            conn.close()
            if peer != f"127.0.0.{k}":
                raise RuntimeError(f"steer.so sent 127.0.0.{k}'s connection elsewhere ({peer})")
    except (OSError, subprocess.SubprocessError) as error:
        raise RuntimeError(f"steer.so does not steer connections: {error}") from error
    finally:
        for sock in listeners:
            sock.close()


def _env(shim: Path | None, ports: Sequence[int]) -> dict[str, str]:
    env = dict(os.environ)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
        env["FERROMQ_STEER_PORTS"] = ",".join(map(str, ports))
    return env


def pairs_cross(pairs: int, nodes: int) -> bool:
    """Whether every pair's publisher and subscriber land on different nodes."""
    return nodes > 1 and pairs % nodes != 0


def crossing_share(pairs: int, where: Sequence[str]) -> float:
    """The share of ``pairs`` whose publisher and subscriber land on different nodes
    when client n goes to the node ``where[n % len(where)]`` (a node may stand at
    several places: ``["a", "a", "a", "b", "b", "b", "c", "c", "c"]`` with pairs = 2
    mod 9 crosses two pairs in three, as clients placed at random on three nodes do)."""
    if len(set(where)) < 2:
        return 0.0
    count = len(where)
    crossing = sum(1 for i in range(pairs) if where[i % count] != where[(pairs + i) % count])
    return crossing / pairs


def generate(
    config: dict[str, Any], ports: Sequence[int], shim: Path | None, workdir: Path
) -> Generated:
    """One generator run against ``ports`` (one node, or several steered by ``shim``).
    Raises RuntimeError with the generator's error when the run fails."""
    config = {**config, "host": "127.0.0.1", "port": ports[0], "progress": False}
    if len(ports) > 1:
        if shim is None:
            raise ValueError("several nodes need the steer.so shim")
        config["source_addresses"] = len(ports)
    out = workdir / "report.json"
    out.unlink(missing_ok=True)
    # The only child reaped while it runs is the generator (the nodes, Kafka and Redis
    # are reaped when stopped), so the children's usage grows by the generator's alone.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(out)],
        input=json.dumps(config), text=True, capture_output=True,
        env=_env(shim if len(ports) > 1 else None, ports), check=False,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"generator failed: {last}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Generated(json.loads(out.read_text()), cpu)
