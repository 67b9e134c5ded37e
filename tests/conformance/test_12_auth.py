"""12 Authentication (§3.1.2.11.9-10, §3.15 AUTH, §4.12) with a users file: user name
and password in CONNECT for 3.1.1 and 5.0, the SCRAM-SHA-256 exchange over AUTH
packets, its protocol errors, re-authentication, and an exchange left hanging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq.auth.scram import ScramCredential
from ferromq.auth.users import UserRecord, save_users
from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient
from tests.support.scram_client import ScramClient

from .support import LOOPS, V5, VERSIONS, closed_with, open_client, ping, prop, publish, subscribe

SCRAM = "SCRAM-SHA-256"
CONTINUE, REAUTHENTICATE = 0x18, 0x19
PASSWORD = "correct horse"


def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.toml"
    alice = UserRecord(ScramCredential.derive(PASSWORD))
    save_users(
        path, {"alice": alice, "bob": UserRecord(ScramCredential.derive("bobs"), "application")}
    )
    return path


def auth_config(tmp_path: Path, extra: str = "") -> str:
    return f'[auth]\nusers_file = "{users_file(tmp_path)}"\n{extra}'


@pytest.fixture(params=LOOPS)
def auth_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, auth_config(tmp_path))
    yield running
    running.stop()


def auth_packet(reason: int, data: bytes, method: str = SCRAM) -> dict[str, Any]:
    return {
        "type": "auth",
        "reason_code": reason,
        "properties": [("authentication_method", method), ("authentication_data", data)],
    }


def scram_connect(
    broker: RunningBroker, client_id: str, user: str, password: str
) -> tuple[RawClient, ScramClient, dict[str, Any]]:
    """CONNECT with SCRAM and answer the broker's challenge; returns the CONNACK."""
    client = open_client(broker, V5)
    scram = ScramClient(user, password)
    client.send(
        {
            "type": "connect",
            "protocol_version": V5,
            "client_id": client_id,
            "clean_start": True,
            "properties": [
                ("authentication_method", SCRAM),
                ("authentication_data", scram.first()),
            ],
        }
    )
    challenge = client.recv()
    # [MQTT-4.12.0-2], with the method of CONNECT [MQTT-4.12.0-5].
    assert challenge["type"] == "auth" and challenge["reason_code"] == CONTINUE, challenge
    assert prop(challenge, "authentication_method") == SCRAM
    client.send(auth_packet(CONTINUE, scram.final(prop(challenge, "authentication_data"))))
    return client, scram, client.recv()


def reauthenticate(client: RawClient, scram: ScramClient) -> dict[str, Any]:
    """AUTH 0x19 and one round trip; returns what the broker answered last."""
    client.send(auth_packet(REAUTHENTICATE, scram.first()))
    challenge = next_non_publish(client)
    assert challenge["type"] == "auth" and challenge["reason_code"] == CONTINUE, challenge
    client.send(auth_packet(CONTINUE, scram.final(prop(challenge, "authentication_data"))))
    return next_non_publish(client)


def next_non_publish(client: RawClient) -> dict[str, Any]:
    """The next packet that is not a PUBLISH; PUBLISHes stay queued in order."""
    skipped = []
    while (packet := client.recv())["type"] == "publish":
        skipped.append(packet)
    client.pending[:0] = skipped
    return packet


def test_scram_exchange_connects_with_the_server_signature(auth_broker: RunningBroker) -> None:
    client, scram, connack = scram_connect(auth_broker, "scram1", "alice", PASSWORD)
    assert connack["type"] == "connack" and connack["reason_code"] == 0, connack
    assert prop(connack, "authentication_method") == SCRAM
    assert scram.server_signature_ok(prop(connack, "authentication_data"))
    assert subscribe(client, ("a/b", 1)) == [1]
    publish(client, "a/b", b"hello")
    assert client.recv()["payload"] == b"hello"
    auth_broker.wait_for_log("client_type=device")


def test_scram_wrong_password_is_refused_with_0x86(auth_broker: RunningBroker) -> None:
    client, _, connack = scram_connect(auth_broker, "scram2", "alice", "wrong")
    assert connack["type"] == "connack" and connack["reason_code"] == 0x86, connack
    assert prop(connack, "authentication_method") is None
    assert closed_with(client) == []


def test_scram_unknown_user_is_refused_like_a_wrong_password(auth_broker: RunningBroker) -> None:
    client, _, connack = scram_connect(auth_broker, "scram3", "mallory", PASSWORD)
    assert connack["reason_code"] == 0x86, connack
    assert closed_with(client) == []


def test_unknown_method_is_refused_with_0x8c(auth_broker: RunningBroker) -> None:
    client = open_client(auth_broker, V5)
    connack = client.connect("m1", properties=[("authentication_method", "KERBEROS")])
    assert connack["reason_code"] == 0x8C  # [MQTT-4.12.0-1]
    assert closed_with(client) == []


def test_auth_without_a_method_in_connect_is_a_protocol_error(auth_broker: RunningBroker) -> None:
    # [MQTT-4.12.0-7], before CONNACK and after it.
    client = open_client(auth_broker, V5)
    client.send(
        {
            "type": "connect",
            "protocol_version": V5,
            "client_id": "n1",
            "clean_start": True,
            "username": "alice",
            "password": PASSWORD.encode(),
        }
    )
    client.send(auth_packet(CONTINUE, b""))
    connack = client.recv()
    assert connack["type"] == "connack" and connack["reason_code"] == 0x82, connack
    client = open_client(auth_broker, V5)
    assert client.connect("n2", username="alice", password=PASSWORD.encode())["reason_code"] == 0
    client.send(auth_packet(REAUTHENTICATE, b"n,,n=alice,r=x"))
    assert closed_with(client) == [0x82]


def test_auth_with_another_method_is_a_protocol_error(auth_broker: RunningBroker) -> None:
    client = open_client(auth_broker, V5)
    scram = ScramClient("alice", PASSWORD)
    client.send(
        {
            "type": "connect",
            "protocol_version": V5,
            "client_id": "mm",
            "clean_start": True,
            "properties": [
                ("authentication_method", SCRAM),
                ("authentication_data", scram.first()),
            ],
        }
    )
    challenge = client.recv()
    assert challenge["type"] == "auth", challenge
    client.send(auth_packet(CONTINUE, b"c=biws", method="SCRAM-SHA-1"))  # [MQTT-4.12.0-5]
    connack = client.recv()
    assert connack["type"] == "connack" and connack["reason_code"] == 0x82, connack
    assert closed_with(client) == []


def test_reauthentication_succeeds_while_messages_flow(auth_broker: RunningBroker) -> None:
    client, _, connack = scram_connect(auth_broker, "re1", "alice", PASSWORD)
    assert connack["reason_code"] == 0
    publisher, _, _ = scram_connect(auth_broker, "re1-pub", "bob", "bobs")
    subscribe(client, "t")
    # [MQTT-4.12.1-1]: AUTH 0x19, same method; the broker's answers interleave with
    # deliveries, which go on during the exchange.
    again = ScramClient("alice", PASSWORD)
    client.send(auth_packet(REAUTHENTICATE, again.first()))
    publish(publisher, "t", b"during", qos=1)
    challenge = next_non_publish(client)
    assert challenge["type"] == "auth" and challenge["reason_code"] == CONTINUE, challenge
    assert client.recv()["payload"] == b"during"
    client.send(auth_packet(CONTINUE, again.final(prop(challenge, "authentication_data"))))
    done = next_non_publish(client)
    assert done["type"] == "auth" and done["reason_code"] == 0, done
    assert prop(done, "authentication_method") == SCRAM
    assert again.server_signature_ok(prop(done, "authentication_data"))
    publish(publisher, "t", b"after", qos=1)
    assert client.recv()["payload"] == b"after"
    auth_broker.wait_for_log("reauthenticated")


def test_failed_reauthentication_disconnects_with_0x87(auth_broker: RunningBroker) -> None:
    client, _, connack = scram_connect(auth_broker, "re2", "alice", PASSWORD)
    assert connack["reason_code"] == 0
    last = reauthenticate(client, ScramClient("alice", "wrong"))
    # [MQTT-4.12.1-2]: DISCONNECT (0x87: DISCONNECT has no 0x86), then the close.
    assert last["type"] == "disconnect" and last["reason_code"] == 0x87, last
    assert closed_with(client) == []


def test_reauthentication_as_another_user_disconnects_with_0x87(
    auth_broker: RunningBroker,
) -> None:
    client, _, connack = scram_connect(auth_broker, "re3", "alice", PASSWORD)
    assert connack["reason_code"] == 0
    client.send(auth_packet(REAUTHENTICATE, ScramClient("bob", "bobs").first()))
    assert closed_with(client) == [0x87]


@pytest.mark.parametrize("loop", LOOPS)
def test_stalled_exchanges_are_refused_at_the_connect_timeout(tmp_path: Path, loop: str) -> None:
    config = auth_config(tmp_path, "[limits]\nconnect_timeout = 1\n")
    broker = start_broker(tmp_path, loop, config)
    try:
        # The client never answers the challenge: CONNACK 0x87, then the close.
        client = open_client(broker, V5)
        client.send(
            {
                "type": "connect",
                "protocol_version": V5,
                "client_id": "stall1",
                "clean_start": True,
                "properties": [
                    ("authentication_method", SCRAM),
                    ("authentication_data", ScramClient("alice", PASSWORD).first()),
                ],
            }
        )
        assert client.recv()["type"] == "auth"
        connack = client.recv()
        assert connack["type"] == "connack" and connack["reason_code"] == 0x87, connack
        assert closed_with(client) == []
        # A re-authentication left hanging: DISCONNECT 0x87.
        connected, _, connack = scram_connect(broker, "stall2", "alice", PASSWORD)
        assert connack["reason_code"] == 0
        connected.send(auth_packet(REAUTHENTICATE, ScramClient("alice", PASSWORD).first()))
        assert connected.recv()["type"] == "auth"
        assert closed_with(connected) == [0x87]
    finally:
        broker.stop()


@VERSIONS
def test_user_name_and_password(auth_broker: RunningBroker, version: int) -> None:
    refused_bad, refused_anonymous = (0x86, 0x87) if version == V5 else (4, 5)
    cases: list[tuple[dict[str, Any], int]] = [
        ({"username": "alice", "password": PASSWORD.encode()}, 0),
        ({"username": "alice", "password": b"wrong"}, refused_bad),
        ({"username": "mallory", "password": PASSWORD.encode()}, refused_bad),
        ({}, refused_anonymous),  # no user name, and anonymous access is off
    ]
    for fields, code in cases:
        client = open_client(auth_broker, version)
        connack = client.connect(f"pw-{version}", **fields)
        assert connack["reason_code"] == code, (fields, connack)
        if code:
            assert closed_with(client) == []
        else:
            ping(client)
            client.close()
