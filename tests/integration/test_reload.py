"""SIGHUP reloads the configuration of a running `ferromq serve` (ferromq.reload), with
real clients and a users file from `ferromq users add`, under uvloop and asyncio: a user
added to the users file can connect after SIGHUP while connected clients stay; an
invalid new configuration is logged naming the key and the broker keeps its settings;
a changed setting that needs a restart is logged as such."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, hang_up, start_broker
from tests.support.commands import users_add
from tests.support.mqtt_raw import RawClient


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.toml"
    assert users_add(path, "alice", "alice pw").returncode == 0
    return path


@pytest.fixture
def auth_broker(tmp_path: Path, loop: str, users: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, loop, auth_config(users))
    yield running
    running.stop()


def auth_config(users: Path, extra: str = "") -> str:
    return f'[auth]\nusers_file = "{users}"\n[storage]\nbackend = "memory"\n{extra}'


def connack_code(broker: RunningBroker, client_id: str, user: str, password: str) -> int:
    client = RawClient(broker.host, broker.port, version=5)
    try:
        connack = client.connect(client_id, username=user, password=password.encode())
        return int(connack["reason_code"])
    finally:
        client.close()


def still_served(client: RawClient, topic: str) -> bool:
    client.send({"type": "publish", "topic": topic, "payload": b"ping"})
    packet = client.recv()
    return packet["type"] == "publish" and bytes(packet["payload"]) == b"ping"


def subscribed_alice(broker: RunningBroker, topic: str) -> RawClient:
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect("alice-1", username="alice", password=b"alice pw")
    assert connack["reason_code"] == 0, connack
    client.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 0}]})
    assert client.recv()["type"] == "suback"
    return client


def test_a_user_added_to_the_users_file_connects_after_sighup(
    auth_broker: RunningBroker, users: Path
) -> None:
    alice = subscribed_alice(auth_broker, "reload/alice")
    assert users_add(users, "bob", "bob pw").returncode == 0
    assert connack_code(auth_broker, "bob-1", "bob", "bob pw") == 0x86  # not read yet

    hang_up(auth_broker, "configuration reloaded")

    assert connack_code(auth_broker, "bob-2", "bob", "bob pw") == 0
    assert still_served(alice, "reload/alice"), "a connected client was dropped by SIGHUP"
    alice.close()


def test_an_invalid_config_keeps_the_running_one(auth_broker: RunningBroker, users: Path) -> None:
    alice = subscribed_alice(auth_broker, "reload/alice")
    auth_broker.config_path.write_text(auth_config(users, "[limits]\nmax_inflight = 0\n"))

    hang_up(auth_broker, "reload refused, running configuration kept")

    auth_broker.wait_for_log("limits.max_inflight")
    assert still_served(alice, "reload/alice")
    assert connack_code(auth_broker, "alice-2", "alice", "alice pw") == 0
    alice.close()


def test_a_users_file_that_no_longer_parses_keeps_the_users_loaded(
    auth_broker: RunningBroker, users: Path
) -> None:
    users.write_text("[users.alice\n")

    hang_up(auth_broker, "reload refused, running configuration kept")

    auth_broker.wait_for_log(f"users file {users}")
    assert connack_code(auth_broker, "alice-2", "alice", "alice pw") == 0


def test_a_setting_that_needs_a_restart_is_logged_and_kept(
    auth_broker: RunningBroker, users: Path
) -> None:
    auth_broker.config_path.write_text(
        auth_config(users, '[limits]\nmax_client_id_length = 23\n[log]\nlevel = "debug"\n')
    )

    hang_up(auth_broker, "changed settings need a restart")

    log = auth_broker.log()
    assert "limits.max_client_id_length" in log.split("changed settings need a restart")[-1]
    # The running limit is kept: a 24-byte client id still connects.
    assert connack_code(auth_broker, "x" * 24, "alice", "alice pw") == 0
    assert "applied=log.level " in log
