"""The ``ferromq`` command as tests run it: any subcommand (``run_cli``), users added to
a users file, ``serve`` run until it exits, and the one line a refused command exits
with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ferromq_command
from tests.support.services import free_port


def users_add(
    path: Path, name: str, password: str, *options: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *ferromq_command(),
            "users",
            "add",
            name,
            "--password-stdin",
            "--file",
            str(path),
            *options,
        ],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )


def serve_exit(tmp_path: Path, config_text: str) -> subprocess.CompletedProcess[str]:
    """Run `ferromq serve` on ``config_text`` (listening on a free port) until it exits."""
    config = tmp_path / "ferromq.toml"
    config.write_text(config_text)
    return subprocess.run(
        [sys.executable, "-m", "ferromq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}"},
    )


def serve_error(tmp_path: Path, config_text: str, env: dict[str, str] | None = None) -> str:
    """The one line `ferromq serve` exits 2 with for ``config_text``."""
    config = tmp_path / "ferromq.toml"
    config.write_text(config_text)
    result = subprocess.run(
        [*ferromq_command(), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ferromq *args``, its output captured."""
    return subprocess.run(
        [*ferromq_command(), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    """``result`` exited with ``status`` and one ``ferromq: error:`` line holding
    ``words``, no traceback."""
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ferromq: error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
