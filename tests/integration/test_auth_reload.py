"""SIGHUP with a provider chain (users file, JWT key file, HTTP service) on a running
`ferromq serve`, real paho-mqtt clients and a real local HTTP service, under uvloop and
asyncio: the new JWT key file is read, a user added to the users file connects, the
HTTP answers cached before are asked again, and the replaced chain's HTTP session is
closed (nothing left unclosed when the broker stops)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.conftest import hang_up, start_broker
from tests.support.commands import users_add
from tests.support.json_service import json_service
from tests.support.jwt_keys import SigningKey
from tests.support.paho_clients import connack


def allow_svc(_method: str, _path: str, body: Any) -> tuple[int, Any]:
    known = body["username"].startswith("svc-")
    return 200, {"result": "allow" if known else "ignore"}


def test_sighup_rebuilds_the_provider_chain(tmp_path: Path, loop: str) -> None:
    users, key_file = tmp_path / "users.toml", tmp_path / "jwt.key"
    assert users_add(users, "alice", "alice pw").returncode == 0
    old_key, new_key = SigningKey.generate("ES256"), SigningKey.generate("RS256")
    old_key.key_file(key_file)
    with json_service(allow_svc) as service:
        config = (
            f'[auth]\nproviders = ["users_file", "http", "jwt"]\nusers_file = "{users}"\n'
            f'http_url = "{service.url}/auth"\njwt_key_file = "{key_file}"\n'
            '[storage]\nbackend = "memory"\n'
        )
        broker = start_broker(tmp_path, loop, config)
        token = {"sub": "dev-1", "exp": int(time.time() + 600)}
        try:
            assert connack(broker, "svc-1", "pw", 5) == "Success"
            assert connack(broker, "dev-1", old_key.sign(token), 5) == "Success"
            new_key.key_file(key_file)
            assert users_add(users, "bob", "bob pw").returncode == 0
            asked = len(service.requests)
            assert connack(broker, "svc-1", "pw", 5) == "Success"
            assert len(service.requests) == asked  # cached

            hang_up(broker, "configuration reloaded")

            assert connack(broker, "dev-1", new_key.sign(token), 5) == "Success"
            refused = connack(broker, "dev-1", old_key.sign(token), 5)
            assert refused == "Bad user name or password"
            assert connack(broker, "bob", "bob pw", 5) == "Success"
            assert connack(broker, "svc-1", "pw", 5) == "Success"
            assert len(service.requests) > asked  # the new chain's cache starts empty
        finally:
            broker.stop()
        assert "Unclosed" not in broker.log()
