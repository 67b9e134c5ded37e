"""The installed console script answers --version and --help, and serves nothing yet."""

from __future__ import annotations

import shutil
import subprocess
import sys

import ferromq


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    script = shutil.which("ferromq")
    command = [script] if script else [sys.executable, "-m", "ferromq"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=30)


def test_version_is_the_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"ferromq {ferromq.__version__}"


def test_help_describes_the_broker() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "MQTT" in result.stdout
    assert "usage: ferromq" in result.stdout


def test_unknown_command_is_refused() -> None:
    result = run_cli("serve-nothing")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_both_compiled_modules_import() -> None:
    import ferromq._core
    import ferromq._protocol

    assert ferromq._core.__version__ == ferromq.__version__
    assert ferromq._protocol.ReadArena().size > 0
