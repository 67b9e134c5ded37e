"""The embedded store's data directory belongs to one broker at a time: a second
``ferromq serve`` on it exits 3 with one line naming the directory and the holder's
pid, and a holder killed with ``kill -9`` leaves no lock behind (the kernel drops it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import RunningBroker, ferromq_command, start_broker
from tests.support.services import free_port

EXIT_STORE_UNAVAILABLE = 3


def broker_on(store: Path, tmp_path: Path, loop: str) -> RunningBroker:
    return start_broker(tmp_path, loop, env={"FERROMQ_STORAGE__PATH": str(store)})


def serve_once(store: Path, loop: str) -> subprocess.CompletedProcess[str]:
    """A ``ferromq serve`` on ``store`` that is expected to exit by itself."""
    env = {
        **os.environ,
        "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}",
        "FERROMQ_STORAGE__PATH": str(store),
    }
    return subprocess.run(
        [*ferromq_command(), "serve", "--loop", loop],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_second_broker_on_the_same_directory_exits_3_naming_it_and_the_holder(
    tmp_path: Path, loop: str
) -> None:
    store = tmp_path / "data"
    first = broker_on(store, tmp_path, loop)
    try:
        second = serve_once(store, loop)
        assert second.returncode == EXIT_STORE_UNAVAILABLE, second.stderr
        errors = [line for line in second.stderr.splitlines() if "error" in line.lower()]
        assert errors == [
            f"ferromq: error: embedded store at {store} is in use by another ferromq"
            f" (pid {first.process.pid})"
        ], second.stderr
        assert "Traceback" not in second.stderr
        assert first.process.poll() is None, "the holder keeps running"
    finally:
        assert first.stop() == 0


def test_a_holder_killed_with_sigkill_does_not_block_the_next_start(
    tmp_path: Path, loop: str
) -> None:
    store = tmp_path / "data"
    first = broker_on(store, tmp_path, loop)
    first.process.kill()
    first.process.wait()
    assert (store / "LOCK").exists(), "the file stays; the lock does not"
    second = broker_on(store, tmp_path, loop)
    try:
        second.wait_for_log("store restored")
    finally:
        assert second.stop() == 0
