"""A node of shards as the tests see it from outside: its shard processes (from the
supervisor's log and /proc), whether it serves, and waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import RunningBroker


def node_serving(running: RunningBroker) -> bool:
    return "node serving" in running.log()


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def with_retries(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def shard_pids(running: RunningBroker) -> dict[int, int]:
    """Each shard's pid, from the supervisor's latest "shard started" lines."""
    pids: dict[int, int] = {}
    for line in running.log().splitlines():
        if "INFO ferromq.node shard started" in line:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            pids[int(fields["shard"])] = int(fields["pid"])
    return pids
