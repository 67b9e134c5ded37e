"""The systemd unit and its configuration (docs/systemd/), and the broker's side of
``Type=notify``.

- The shipped configuration passes ``ferromq check-config`` and keeps its data where
  the unit lets the broker write; the unit runs it as notify service, reloads with
  SIGHUP, as the ``ferromq`` user.
- ``systemd-analyze verify`` accepts the unit: a lint of its keys and values, skipped
  where systemd-analyze is not installed.
- Under systemd the broker says READY=1 only once a client can connect and its store is
  open, and STOPPING=1 when SIGTERM begins the shutdown: told over a unix datagram socket
  the test binds and names in NOTIFY_SOCKET, as systemd does (sd_notify(3)), at a path
  and in the abstract namespace.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from ferromq.config import load_config
from tests.conftest import ferromq_command, start_broker
from tests.support.commands import run_cli
from tests.support.paho_clients import paho_client

SYSTEMD_DOCS = Path(__file__).resolve().parents[2] / "docs" / "systemd"
UNIT = SYSTEMD_DOCS / "ferromq.service"
CONFIG = SYSTEMD_DOCS / "ferromq.toml"


def unit_settings() -> dict[str, list[str]]:
    """Each key of the unit file with its values (systemd allows a key more than once)."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line.strip() and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_shipped_configuration_passes_check_config(tmp_path: Path) -> None:
    # Its data directory is the unit's StateDirectory, which systemd creates for the
    # ferromq user (checked below); here it is one the test may create.
    result = run_cli(
        "check-config", "--config", str(CONFIG), env={"FERROMQ_STORAGE__PATH": str(tmp_path)}
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_the_unit_runs_the_shipped_configuration_where_it_may_write() -> None:
    settings = unit_settings()
    command = shlex.split(settings["ExecStart"][0])
    assert command[1:3] == ["serve", "--config"]
    assert f"docs/systemd/ferromq.toml {command[3]}" in UNIT.read_text()  # its install line
    data = load_config(CONFIG, {}).storage.path
    assert data == f"/var/lib/{settings['StateDirectory'][0]}"
    assert data in settings["ReadWritePaths"][0].split()
    assert settings["WorkingDirectory"] == [data]
    assert settings["Type"] == ["notify"]
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert settings["User"] == ["ferromq"]
    assert settings["ProtectSystem"] == ["strict"]
    assert settings["NoNewPrivileges"] == ["yes"]


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (Debian package systemd); the unit lint needs it",
)
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify also checks that ExecStart's program exists: point it at this ferromq.
    unit = tmp_path / "ferromq.service"
    installed = shlex.join(ferromq_command())
    unit.write_text(UNIT.read_text().replace("/opt/ferromq/bin/ferromq", installed))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    complaints = [line for line in result.stderr.splitlines() if "ferromq.service" in line]
    assert result.returncode == 0 and not complaints, result.stderr


@pytest.mark.parametrize("namespace", ["path", "abstract"])
def test_ready_once_serving_and_stopping_at_sigterm(
    tmp_path: Path, loop: str, namespace: str
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        if namespace == "path":
            address = str(tmp_path / "notify")
            systemd.bind(address)
        else:
            address = f"@ferromq-test-{uuid.uuid4().hex}"
            systemd.bind("\0" + address[1:])
        systemd.settimeout(15)
        broker = start_broker(tmp_path, loop, env={"NOTIFY_SOCKET": address})
        try:
            assert systemd.recv(4096) == b"READY=1"
            # Ready means serving: the store is open (its lock taken) and a client
            # connects at once.
            assert (tmp_path / f"store-{broker.port}" / "LOCK").is_file()
            client, _ = paho_client(broker, "ready-check", 5)
            client.disconnect()
            client.loop_stop()
            broker.process.send_signal(signal.SIGTERM)
            assert systemd.recv(4096) == b"STOPPING=1"
            assert broker.process.wait(15) == 0
        finally:
            broker.stop()
