"""The ``http`` provider with real paho-mqtt clients against `ferromq serve` and an
authentication service the test runs on a real loopback socket: allow (with client
type and ACL data), deny, ignore (the users file behind it decides), answers cached,
and fail closed with 0x88 Server unavailable on a 5xx, a timeout or no service at all.
Under uvloop and asyncio."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_broker
from tests.support.commands import serve_error, users_add
from tests.support.json_service import json_service
from tests.support.paho_clients import connack
from tests.support.services import free_port

LOOPS = ["uvloop", "asyncio"]
UNAVAILABLE = "Server unavailable"  # 0x88; 3.1.1's return code 3 has the same name


def answer(release: threading.Event, _method: str, _path: str, body: Any) -> tuple[int, Any]:
    """The service: svc-* users with password "good" are applications; "slow" answers
    after the broker stopped waiting; "boom" is a crash; "locked" is forbidden; others
    are someone else's."""
    username = body["username"]
    if username == "slow":
        release.wait(10)
    if username == "boom":
        return 500, {"error": "database down"}
    if username == "locked":
        return 403, "forbidden"
    if username is None or not username.startswith("svc-"):
        return 200, {"result": "ignore"}
    if body["password"] != "good":
        return 200, {"result": "deny"}
    return 200, {
        "result": "allow",
        "client_type": "application",
        "acl": [{"permission": "allow", "action": "publish", "topic": "x/#"}],
    }


def http_config(url: str, users: Path, extra: str = "") -> str:
    return (
        f'[auth]\nproviders = ["http", "users_file"]\nhttp_url = "{url}"\n'
        f'users_file = "{users}"\nhttp_timeout = 1\n{extra}'
    )


@pytest.mark.parametrize("loop", LOOPS)
def test_the_service_decides_and_fails_closed(tmp_path: Path, loop: str) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "local", "local pw").returncode == 0
    release = threading.Event()
    with json_service(lambda *a: answer(release, *a)) as service:
        broker = start_broker(tmp_path, loop, http_config(f"{service.url}/auth", users))
        try:
            for version in (4, 5):
                assert connack(broker, "svc-a", "good", version) == "Success"
                assert connack(broker, "svc-a", "bad", version) == "Bad user name or password"
                assert connack(broker, "local", "local pw", version) == "Success"  # ignored
                assert connack(broker, "boom", "pw", version) == UNAVAILABLE
                assert connack(broker, "locked", "pw", version) == "Bad user name or password"
                assert connack(broker, "slow", "pw", version) == UNAVAILABLE
            release.set()
            method, path, body = service.requests[0]
            assert (method, path) == ("POST", "/auth")
            assert body["username"] == "svc-a" and body["password"] == "good"
            assert body["client_id"] == "svc-a-4" and body["protocol"] == 4
            assert body["peer"].startswith("127.0.0.1:")
            asked = [request[2]["username"] for request in service.requests]
            # Each answer is cached, per client id (here: per version); a failure is not.
            assert asked.count("svc-a") == 4 and asked.count("boom") == 2
            assert connack(broker, "svc-a", "good", 4) == "Success"
            assert len(service.requests) == len(asked)  # from the cache
            broker.wait_for_log("username=svc-a client_type=application")
        finally:
            release.set()
            broker.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_no_service_is_server_unavailable(tmp_path: Path, loop: str) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "local", "local pw").returncode == 0
    url = f"http://127.0.0.1:{free_port()}/auth"  # nothing listens there
    broker = start_broker(tmp_path, loop, http_config(url, users))
    try:
        for version in (4, 5):
            assert connack(broker, "local", "local pw", version) == UNAVAILABLE
    finally:
        broker.stop()


def test_a_bad_service_url_is_one_line(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    error = serve_error(tmp_path, http_config("localhost:8080/auth", users))
    assert error.endswith(
        'auth.http_url: expected an http:// or https:// URL, got "localhost:8080/auth"'
    )
