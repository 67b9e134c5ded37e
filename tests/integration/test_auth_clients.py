"""Authentication with real clients against `ferromq serve` with a users file made by
`ferromq users add`: paho-mqtt 3.1.1 and 5.0 and mosquitto_pub with a user name and
password, a users file that cannot be loaded; under uvloop and asyncio."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.commands import serve_error, users_add
from tests.support.paho_clients import paho_connect, stop

USERS = {"sensor": ("s3nsor pw", "device"), "dashboard": ("dash pw", "application")}


@pytest.fixture(params=["uvloop", "asyncio"])
def auth_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    for name, (password, client_type) in USERS.items():
        assert users_add(users, name, password, "--client-type", client_type).returncode == 0
    running = start_broker(tmp_path, request.param, f'[auth]\nusers_file = "{users}"\n')
    yield running
    running.stop()


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


def test_serve_refuses_a_users_file_it_cannot_load(tmp_path: Path) -> None:
    error = serve_error(tmp_path, f'[auth]\nusers_file = "{tmp_path / "missing.toml"}"\n')
    assert "missing.toml: not found" in error
