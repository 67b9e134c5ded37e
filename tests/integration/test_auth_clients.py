"""Authentication with real clients against `ferromq serve` with a users file made by
`ferromq users add`: paho-mqtt 3.1.1 and 5.0 and mosquitto_pub with a user name and
password, a users file that cannot be loaded; under uvloop and asyncio."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.conftest import RunningBroker, ferromq_command, start_broker

USERS = {"sensor": ("s3nsor pw", "device"), "dashboard": ("dash pw", "application")}


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


@pytest.fixture(params=["uvloop", "asyncio"])
def auth_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    for name, (password, client_type) in USERS.items():
        assert users_add(users, name, password, "--client-type", client_type).returncode == 0
    running = start_broker(tmp_path, request.param, f'[auth]\nusers_file = "{users}"\n')
    yield running
    running.stop()


def paho_connect(
    broker: RunningBroker, client_id: str, version: int, username: str, password: str
) -> tuple[paho.Client, Any, queue.Queue[paho.MQTTMessage]]:
    """Connect and wait for the CONNACK; returns the client, its reason code and inbox."""
    protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
    client.username_pw_set(username, password)
    inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
    client.on_message = lambda _c, _u, message: inbox.put(message)
    answered: queue.Queue[Any] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason_code, _p: answered.put(reason_code)
    client.connect(broker.host, broker.port)
    client.loop_start()
    reason_code = answered.get(timeout=5)
    return client, reason_code, inbox


def stop(client: paho.Client) -> None:
    client.disconnect()
    client.loop_stop()


def connack(broker: RunningBroker, username: str, password: str, version: int) -> str:
    """The reason paho reports for a CONNECT of ``username`` (client id
    ``<username>-<version>``); the client is disconnected again."""
    client, code, _ = paho_connect(broker, f"{username}-{version}", version, username, password)
    stop(client)
    return str(code)


@pytest.mark.parametrize("version", [4, 5])
def test_paho_user_name_and_password(auth_broker: RunningBroker, version: int) -> None:
    sub, code, inbox = paho_connect(auth_broker, f"sub-{version}", version, "sensor", "s3nsor pw")
    assert code == "Success"
    done = threading.Event()
    sub.on_subscribe = lambda *_: done.set()
    sub.subscribe("plant/#", 1)
    assert done.wait(5)
    pub, code, _ = paho_connect(auth_broker, f"pub-{version}", version, "dashboard", "dash pw")
    assert code == "Success"
    pub.publish("plant/1", b"21.5", qos=1).wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"21.5"
    bad, code, _ = paho_connect(auth_broker, f"bad-{version}", version, "sensor", "guess")
    # 0x86 in 5.0; 3.1.1's return code 4, which paho reports by the same name.
    assert code == "Bad user name or password"
    for client in (sub, pub, bad):
        stop(client)
    log = auth_broker.log()
    assert "username=dashboard client_type=application" in log
    assert "username=sensor client_type=device" in log


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients missing")
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_pub_user_name_and_password(auth_broker: RunningBroker, version: str) -> None:
    sub, code, inbox = paho_connect(auth_broker, f"msub-{version}", 5, "dashboard", "dash pw")
    assert code == "Success"
    done = threading.Event()
    sub.on_subscribe = lambda *_: done.set()
    sub.subscribe("fleet/#", 1)
    assert done.wait(5)

    def mosquitto_pub(password: str, payload: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "mosquitto_pub",
                *("-h", auth_broker.host, "-p", str(auth_broker.port), "-V", version),
                *("-u", "sensor", "-P", password, "-t", "fleet/1", "-m", payload, "-q", "1"),
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )

    assert mosquitto_pub("guess", "refused").returncode != 0
    assert mosquitto_pub("s3nsor pw", "accepted").returncode == 0
    assert inbox.get(timeout=5).payload == b"accepted"  # and not the refused one
    stop(sub)


def test_users_add_writes_a_credential_and_refuses_a_duplicate(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    added = users_add(users, "ops", "pw one", "--client-type", "application")
    assert added.returncode == 0, added.stderr
    text = users.read_text()
    assert '[users."ops"]' in text and 'client_type = "application"' in text
    assert "pw one" not in text  # only the salted credential
    assert users.stat().st_mode & 0o077 == 0  # readable by its owner only
    again = users_add(users, "ops", "pw two")
    assert again.returncode == 2 and "exists" in again.stderr
    assert users.read_text() == text
    empty = users_add(users, "nobody", "")
    assert empty.returncode == 2 and "empty password" in empty.stderr


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


def test_serve_refuses_a_users_file_it_cannot_load(tmp_path: Path) -> None:
    error = serve_error(tmp_path, f'[auth]\nusers_file = "{tmp_path / "missing.toml"}"\n')
    assert "missing.toml: not found" in error
