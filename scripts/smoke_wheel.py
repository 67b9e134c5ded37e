"""Smoke-test ferromq as installed from its wheel into a virtualenv of its own.

scripts/test.sh builds the wheel once, repairs it into a manylinux wheel with
auditwheel, installs it into a fresh virtualenv and runs this against that virtualenv
(``python scripts/smoke_wheel.py VENV``). It checks what a user of the wheel meets
first, outside the source tree and with no PYTHONPATH or FERROMQ_* setting of the
caller leaking in:

- ``ferromq --help`` answers;
- both compiled modules import, from the virtualenv;
- the wheel carries its licence file and declares pyproject.toml's licence expression;
- the web dashboard's files are installed with the package (``admin/static``);
- ``ferromq serve`` on its embedded default (a free loopback port through
  FERROMQ_LISTEN) carries one message from mosquitto_pub to mosquitto_sub, keeps its
  data in ./ferromq-data, and stops cleanly on SIGTERM.

Each failed check exits non-zero with one line naming it.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMEOUT = 15.0
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
TOPIC = "smoke/wheel"
PAYLOAD = "hello from the wheel"

# Run by the virtualenv's python: where both modules come from, the licence, and the
# dashboard's entry module (package data; "missing" when the wheel lacks it).
_INSTALLED = """
import importlib.metadata, importlib.resources, ferromq._core, ferromq._protocol
dist = importlib.metadata.distribution("ferromq")
print(ferromq._core.__file__)
print(ferromq._protocol.__file__)
print(dist.metadata["License-Expression"])
print(*(str(f) for f in dist.files if f.name == "LICENSE"))
asset = importlib.resources.files("ferromq") / "admin" / "static" / "app.js"
print(asset if asset.is_file() else "missing")
"""


class SmokeFailure(Exception):
    pass


def clean_environment() -> dict[str, str]:
    """The caller's environment without what would point ferromq elsewhere."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("FERROMQ_") and name not in ("PYTHONPATH", "VIRTUAL_ENV")
    }


def run(command: list[str], cwd: Path) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=clean_environment(), capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise SmokeFailure(f"{' '.join(command)}: exit {result.returncode}: {result.stderr}")
    return result.stdout


def check_installed(venv: Path, work: Path) -> None:
    if "usage: ferromq" not in run([str(venv / "bin" / "ferromq"), "--help"], work):
        raise SmokeFailure("ferromq --help printed no usage")
    installed = run([str(venv / "bin" / "python"), "-c", _INSTALLED], work).splitlines()
    core, protocol, license_expression, license_file, dashboard = installed
    if dashboard == "missing":
        raise SmokeFailure("the wheel has no dashboard files (ferromq/admin/static/app.js)")
    for module in (core, protocol, dashboard):
        if not Path(module).resolve().is_relative_to(venv.resolve()):
            raise SmokeFailure(f"{module} is not the virtualenv's")
    declared = re.search(r'^license = "([^"]+)"', PYPROJECT.read_text(), re.MULTILINE)
    expected = declared[1] if declared else "(no licence in pyproject.toml)"
    if license_expression != expected or not license_file.endswith("licenses/LICENSE"):
        raise SmokeFailure(f"licence metadata: {license_expression!r}, file {license_file!r}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(output: Path, text: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while text not in output.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SmokeFailure(f"{what}: no {text!r} in:\n{output.read_text(errors='replace')}")
        time.sleep(0.05)


def check_round_trip(venv: Path, work: Path) -> None:
    port = free_port()
    env = {**clean_environment(), "FERROMQ_LISTEN": f"127.0.0.1:{port}"}
    broker_log, sub_log = work / "broker.log", work / "sub.log"
    address = ["-h", "127.0.0.1", "-p", str(port), "-t", TOPIC, "-q", "1"]
    with broker_log.open("w") as log, sub_log.open("w") as out:
        broker = subprocess.Popen(
            [str(venv / "bin" / "ferromq"), "serve"], cwd=work, env=env, stderr=log
        )
        try:
            wait_for(broker_log, "listening", broker, "ferromq serve")
            # -d says when the SUBACK is in (line-buffered by stdbuf, as the output is a
            # file), so the message is published after it; -C 1: one message, then exit.
            sub = subprocess.Popen(
                ["stdbuf", "-oL", "mosquitto_sub", *address, "-d", "-C", "1"], stdout=out
            )
            try:
                wait_for(sub_log, "received SUBACK", sub, "mosquitto_sub")
                run(["mosquitto_pub", *address, "-m", PAYLOAD], work)
                sub.wait(TIMEOUT)
            finally:
                sub.kill()
            if PAYLOAD not in sub_log.read_text().splitlines():
                raise SmokeFailure(f"mosquitto_sub received no {PAYLOAD!r}:\n{sub_log.read_text()}")
            if not (work / "ferromq-data").is_dir():
                raise SmokeFailure("the embedded default store made no ./ferromq-data")
        finally:
            broker.terminate()
            try:
                status = broker.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                broker.kill()
                raise
    if status != 0:
        raise SmokeFailure(f"ferromq serve exited {status} on SIGTERM:\n{broker_log.read_text()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path, help="the virtualenv the wheel is installed in")
    venv: Path = parser.parse_args().venv
    with tempfile.TemporaryDirectory(prefix="ferromq-smoke-") as directory:
        work = Path(directory)
        try:
            check_installed(venv, work)
            check_round_trip(venv, work)
        except (SmokeFailure, subprocess.TimeoutExpired) as exc:
            print(f"wheel smoke test: {exc}", file=sys.stderr)
            return 1
    print(f"wheel smoke test: {venv}: --help, imports, licence, dashboard, serve round trip: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
