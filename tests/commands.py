"""The ``ferromq`` command as tests run it: users added to a users file, and the one
line a refused ``ferromq serve`` exits with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import ferromq_command


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
