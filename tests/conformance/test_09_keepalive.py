"""09 Keep alive (§3.1.2.10, §3.12, §4.13) for 3.1.1 and 5.0: a silent client is
closed after 1.5 times its Keep Alive (v5: DISCONNECT 0x8D), any packet keeps it alive,
0 turns the mechanism off, and a v5 Server Keep Alive replaces the client's value."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker

from .support import (
    LOOPS,
    V5,
    VERSIONS,
    closed_with,
    connect,
    connected,
    nothing_arrives,
    ping,
    prop,
    publish,
)


@pytest.fixture(params=LOOPS)
def capped_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, "[limits]\nmax_keepalive = 1\n")
    yield running
    running.stop()


@VERSIONS
def test_silent_client_is_closed_after_one_and_a_half_keepalives(
    broker: RunningBroker, version: int
) -> None:
    # [MQTT-3.1.2-24 (3.1.1) / 3.1.2-22 (5.0)]: not before the keep alive is up, and
    # closed once 1.5 times of it passed without a packet; v5 says 0x8D first.
    client = connected(broker, "silent", version, keep_alive=1)
    nothing_arrives(client, timeout=0.9)
    assert closed_with(client, timeout=5) == ([0x8D] if version == V5 else [])


@VERSIONS
def test_pingreq_and_other_packets_keep_the_connection_alive(
    broker: RunningBroker, version: int
) -> None:
    # [MQTT-3.12.4-1]: PINGRESP for every PINGREQ. The timer counts any Control
    # Packet from the client, not only PINGREQ: 2.5 s of traffic outlives the 1.5 s
    # allowance of a 1 s keep alive several times over.
    client = connected(broker, "talker", version, keep_alive=1)
    for _ in range(5):
        ping(client)
        time.sleep(0.25)
        publish(client, "keepalive/nobody", b"x", qos=1)
        time.sleep(0.25)
    ping(client)


@VERSIONS
def test_keepalive_0_turns_the_mechanism_off(broker: RunningBroker, version: int) -> None:
    client = connected(broker, "no-keepalive", version, keep_alive=0)
    nothing_arrives(client, timeout=1.6)
    ping(client)


def test_v5_server_keep_alive_replaces_the_clients(capped_broker: RunningBroker) -> None:
    # [MQTT-3.2.2-21]: the client must use the Server Keep Alive, and the server holds
    # it to that value (here 1 s instead of the 60 s asked for).
    client, connack = connect(capped_broker, "capped", V5, keep_alive=60)
    assert prop(connack, "server_keep_alive") == 1
    assert closed_with(client, timeout=5) == [0x8D]
