"""The ``jwt`` provider with real paho-mqtt clients against `ferromq serve`: tokens
signed by the test (HS256, RS256, ES256) in the password field, checked with a key
file or a JWK set served by a real local HTTP server (cached, fetched again for a new
``kid``), refused when forged, expired or for another user, 0x88 when the JWK set
cannot be fetched, and a connection closed with v5 DISCONNECT 0xA0 when its token
expires. Under uvloop and asyncio."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq._core import shard_of
from tests.conftest import RunningBroker, start_broker, suite_workers
from tests.support.commands import serve_error
from tests.support.json_service import json_service
from tests.support.jwt_keys import ALGORITHMS, SigningKey
from tests.support.paho_clients import connack, paho_connect, stop
from tests.support.services import free_port

LOOPS = ["uvloop", "asyncio"]


def claims(sub: str = "dev-1", lifetime: float = 600, **extra: Any) -> dict[str, Any]:
    return {"sub": sub, "exp": int(time.time() + lifetime), **extra}


def jwt_config(key_setting: str) -> str:
    return f'[auth]\nproviders = ["jwt"]\n{key_setting}\n'


@pytest.fixture(params=[(a, loop) for a in ALGORITHMS for loop in LOOPS], ids=str)
def key_file_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RunningBroker, SigningKey]]:
    algorithm, loop = request.param
    key = SigningKey.generate(algorithm)
    path = key.key_file(tmp_path / "jwt.key")
    running = start_broker(tmp_path, loop, jwt_config(f'jwt_key_file = "{path}"'))
    yield running, key
    running.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_tokens_signed_with_the_key_log_in_and_others_are_refused(
    key_file_broker: tuple[RunningBroker, SigningKey], version: int
) -> None:
    broker, key = key_file_broker
    refused = "Bad user name or password"
    valid = key.sign(
        claims(
            client_type="application",
            acl=[{"permission": "allow", "action": "subscribe", "topic": "sensors/#"}],
        )
    )
    assert connack(broker, "dev-1", valid, version) == "Success"
    forged = SigningKey.generate(key.algorithm).sign(claims())
    assert connack(broker, "dev-1", forged, version) == refused
    for other in ALGORITHMS:  # a token for another kind of key
        if other != key.algorithm:
            token = SigningKey.generate(other).sign(claims())
            assert connack(broker, "dev-1", token, version) == refused
    assert connack(broker, "dev-1", key.sign(claims(lifetime=-60)), version) == refused
    assert connack(broker, "someone-else", valid, version) == refused
    broker.wait_for_log("username=dev-1 client_type=application")


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_is_closed_when_its_token_expires(tmp_path: Path, loop: str) -> None:
    key = SigningKey.generate("HS256")
    path = key.key_file(tmp_path / "secret")
    broker = start_broker(tmp_path, loop, jwt_config(f'jwt_key_file = "{path}"'))
    try:
        for version in (5, 4):
            token = key.sign(claims(lifetime=2))
            client, code, _ = paho_connect(broker, f"short-{version}", version, "dev-1", token)
            assert code == "Success"
            closed: queue.Queue[Any] = queue.Queue()
            client.on_disconnect = lambda _c, _u, _f, reason, _p, q=closed: q.put(reason)
            reason = closed.get(timeout=15)
            stop(client)
            if version == 5:
                assert str(reason) == "Maximum connect time"
            else:  # 3.1.1 has no server DISCONNECT: the connection is just closed
                assert reason.is_failure
        assert broker.log().count("credentials expired") == 2
    finally:
        broker.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_keys_come_from_a_jwk_set_fetched_once(tmp_path: Path, loop: str) -> None:
    rsa_key, ec_key = SigningKey.generate("RS256"), SigningKey.generate("ES256")
    jwk_set = {"keys": [rsa_key.jwk("rsa-1"), ec_key.jwk("ec-1")]}
    with json_service(lambda *_: (200, jwk_set)) as jwks:
        config = jwt_config(f'jwt_jwks_url = "{jwks.url}/jwks.json"')
        broker = start_broker(tmp_path, loop, config)
        try:
            for version in (4, 5):
                rsa_token = rsa_key.sign(claims(), kid="rsa-1")
                assert connack(broker, "dev-1", rsa_token, version) == "Success"
                ec_token = ec_key.sign(claims(), kid="ec-1")
                assert connack(broker, "dev-1", ec_token, version) == "Success"
                wrong_kid = ec_key.sign(claims(), kid="rsa-1")
                assert connack(broker, "dev-1", wrong_kid, version) == "Bad user name or password"
            # Cached for jwt_jwks_refresh (5 minutes) by each shard: fetched once by each
            # shard that served one of the clients (dev-1-4 and dev-1-5).
            owners = {shard_of(f"dev-1-{version}", suite_workers()) for version in (4, 5)}
            assert len(jwks.requests) == len(owners)
        finally:
            broker.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_new_kid_fetches_the_jwk_set_again(tmp_path: Path, loop: str) -> None:
    old, new = SigningKey.generate("ES256"), SigningKey.generate("RS256")
    jwk_set = {"keys": [old.jwk("old")]}
    with json_service(lambda *_: (200, jwk_set)) as jwks:
        config = jwt_config(f'jwt_jwks_url = "{jwks.url}/jwks.json"\njwt_jwks_refresh = "1s"')
        broker = start_broker(tmp_path, loop, config)
        try:
            assert connack(broker, "dev-1", old.sign(claims(), kid="old"), 5) == "Success"
            jwk_set["keys"].append(new.jwk("new"))  # the issuer rotates its keys
            time.sleep(1.2)  # past jwt_jwks_refresh: the set may be fetched again
            assert connack(broker, "dev-1", new.sign(claims(), kid="new"), 5) == "Success"
            assert len(jwks.requests) >= 2
        finally:
            broker.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_an_unreachable_jwk_set_fails_closed(tmp_path: Path, loop: str) -> None:
    key = SigningKey.generate("RS256")
    url = f"http://127.0.0.1:{free_port()}/jwks.json"  # nothing listens there
    broker = start_broker(tmp_path, loop, jwt_config(f'jwt_jwks_url = "{url}"'))
    try:
        for version in (4, 5):
            token = key.sign(claims(), kid="k")
            assert connack(broker, "dev-1", token, version) == "Server unavailable"
    finally:
        broker.stop()


def test_a_missing_key_file_stops_serve(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    message = serve_error(tmp_path, jwt_config(f'jwt_key_file = "{missing}"'))
    assert message == f"ferromq: error: auth.jwt_key_file: {missing}: not found"


@pytest.mark.parametrize("loop", LOOPS)
def test_audience_issuer_and_client_type_claims_are_checked(tmp_path: Path, loop: str) -> None:
    key = SigningKey.generate("ES256")
    path = key.key_file(tmp_path / "jwt.pem")
    settings = f'jwt_key_file = "{path}"\njwt_audience = "mqtt"\njwt_issuer = "https://idp"'
    broker = start_broker(tmp_path, loop, jwt_config(settings))
    ours: dict[str, Any] = {"aud": "mqtt", "iss": "https://idp"}
    try:
        assert connack(broker, "dev-1", key.sign(claims(**ours)), 5) == "Success"
        wrongs: list[dict[str, Any]] = [
            {**ours, "aud": "web"},
            {**ours, "iss": "https://other"},
            {"aud": "mqtt"},
        ]
        for wrong in wrongs:
            assert connack(broker, "dev-1", key.sign(claims(**wrong)), 5) == (
                "Bad user name or password"
            )
        bad_type = claims(**ours, client_type="robot")
        assert connack(broker, "dev-1", key.sign(bad_type), 5) == "Not authorized"
    finally:
        broker.stop()
