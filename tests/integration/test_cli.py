"""The command line as a user types it, under uvloop and asyncio: ``ferromq serve -p N``
then a real paho client, ``-p``/``-b`` over a configuration file's listeners, ``-V`` and
``ferromq version``, ``--pid-file``, a Mosquitto configuration given to ``-c``, and
usage errors as one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ferromq
from tests.conftest import RunningBroker, ferromq_command
from tests.support.paho_clients import paho_client, round_trip
from tests.support.services import free_port

MEMORY = {"FERROMQ_STORAGE__BACKEND": "memory"}


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
        env={**os.environ, **MEMORY},
    )


class Served:
    """``ferromq <args>`` running in ``cwd`` until stopped, its output in a file."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.log_path = cwd / f"serve-{time.monotonic_ns()}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*ferromq_command(), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, **MEMORY},
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + 15
        while "listening" not in self.log():
            assert self.process.poll() is None, f"ferromq exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"not listening:\n{self.log()}"
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def served() -> Iterator[list[Served]]:
    running: list[Served] = []
    yield running
    for one in running:
        one.stop()


def serve(running: list[Served], cwd: Path, loop: str, *args: str) -> Served:
    one = Served(cwd, "serve", "--loop", loop, *args)
    running.append(one)
    one.wait_listening()
    return one


def at(one: Served, port: int) -> RunningBroker:
    """``one`` as the paho helpers take a broker."""
    return RunningBroker("127.0.0.1", port, one.process, one.log_path, one.log_path)


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_serve_dash_p_listens_there_for_real_clients(
    served: list[Served], tmp_path: Path, loop: str
) -> None:
    port = free_port()
    one = serve(served, tmp_path, loop, "-p", str(port))
    sub, inbox = paho_client(at(one, port), "cli-sub", 5)
    pub, _ = paho_client(at(one, port), "cli-pub", 4)
    round_trip(sub, inbox, pub, 1)


def test_port_and_bind_replace_the_first_listener_of_the_file(
    served: list[Served], tmp_path: Path, loop: str
) -> None:
    first, second, given = free_port(), free_port(), free_port()
    config = tmp_path / "two.toml"
    config.write_text(
        f'[[listeners]]\nname = "first"\nport = {first}\n'
        f'[[listeners]]\nname = "second"\nport = {second}\n'
    )
    serve(served, tmp_path, loop, "-c", str(config), "-p", str(given), "-b", "127.0.0.1")
    assert accepts(given)
    assert accepts(second)
    assert not accepts(first)


def test_check_config_shows_what_the_command_line_changes(tmp_path: Path) -> None:
    result = run("check-config", "-p", "1884", "-b", "0.0.0.0", "-v", "--json")
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)
    assert settings["listeners"][0]["port"] == 1884
    assert settings["listeners"][0]["host"] == "0.0.0.0"
    assert settings["log"]["level"] == "debug"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["serve", "-p", "70000"], ["--port", "between 1 and 65535", "70000"]),
        (["serve", "-p", "mqtt"], ["--port", "integer"]),
        (
            ["serve", "--no-such-option"],
            ["unrecognized arguments: --no-such-option", "(see ferromq serve --help)"],
        ),
        (["serve", "-c"], ["-c/--config", "expected one argument"]),
        (["serve", "-c", "/nonexistent/ferromq.toml"], ["/nonexistent/ferromq.toml", "not found"]),
    ],
)
def test_mistakes_are_one_line_naming_the_problem(args: list[str], words: list[str]) -> None:
    one_line(run(*args), *words)


def test_dash_capital_v_and_version_show_the_package_and_compiled_modules() -> None:
    short = run("-V")
    assert short.returncode == 0
    line = short.stdout.strip()
    assert line.startswith(f"ferromq {ferromq.__version__} (")
    assert f"_core {ferromq.__version__}" in line
    assert f"_protocol {ferromq.__version__}" in line
    assert run("--version").stdout == short.stdout
    report = run("version")
    assert report.returncode == 0
    lines = report.stdout.splitlines()
    assert lines[0] == f"ferromq {ferromq.__version__}"
    assert lines[1].startswith(f"ferromq._core {ferromq.__version__} (Rust engine) /")
    assert lines[2].startswith(f"ferromq._protocol {ferromq.__version__} (Cython IO) /")


def test_a_mosquitto_configuration_gets_its_toml_equivalent(tmp_path: Path) -> None:
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        "# mosquitto.conf\n"
        "listener 1883 0.0.0.0\n"
        "allow_anonymous false\n"
        "password_file /etc/mosquitto/passwd\n"
        "persistence true\n"
    )
    line = one_line(run("serve", "-c", str(conf)), "Mosquitto", "TOML")
    assert '[[listeners]] port = 1883, host = "0.0.0.0"' in line
    assert "[auth] allow_anonymous = false, users_file = " in line
    assert "ferromq users import-mosquitto /etc/mosquitto/passwd" in line
    assert '[storage] backend = "embedded"' in line


def test_help_is_written_for_users() -> None:
    top = run("--help")
    assert top.returncode == 0
    assert "examples:" in top.stdout and "ferromq serve -b 0.0.0.0 -p 1884" in top.stdout
    serve_help = " ".join(run("serve", "--help").stdout.split())
    for option in ("-p PORT, --port PORT", "-b HOST, --bind HOST", "-c FILE, --config FILE"):
        assert option in serve_help
    assert "-v, --verbose" in serve_help and "--pid-file FILE" in serve_help
    assert "replace the port and host of the first listener" in serve_help
    assert "examples: ferromq serve -p 1884" in serve_help


def test_the_pid_file_exists_while_serving_and_guards_against_a_second_broker(
    served: list[Served], tmp_path: Path, loop: str
) -> None:
    pid_file = tmp_path / "ferromq.pid"
    pid_file.write_text("999999999\n")  # left by a process that is gone: stale
    first = serve(served, tmp_path, loop, "-p", str(free_port()), "--pid-file", str(pid_file))
    # Written once every listener accepts: a moment after the port does.
    deadline = time.monotonic() + 10
    while pid_file.read_text() != f"{first.process.pid}\n" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.read_text() == f"{first.process.pid}\n"

    second = run("serve", "-p", str(free_port()), "--pid-file", str(pid_file))
    one_line(second, str(pid_file), f"held by running process {first.process.pid}")
    assert pid_file.read_text() == f"{first.process.pid}\n"

    assert first.stop() == 0
    assert not pid_file.exists()
