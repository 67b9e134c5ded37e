"""The accept path (ferromq.listener) with real brokers and real sockets, under uvloop
and asyncio: running out of file descriptors pauses accepting (logged with the limit,
counted in $SYS) instead of accepting and resetting; ``listeners[].max_connections``
and ``limits.max_connections`` refuse connections at accept, counted by reason."""

from __future__ import annotations

import selectors
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient
from tests.support.services import free_port

NOFILE = 32
# More clients than the broker has descriptors: its own use (~7 to ~15) plus these.
CLIENTS = NOFILE + 8
SYS_FAST = "[sys]\ninterval = 1\n"
MEMORY = '[storage]\nbackend = "memory"\n'


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[RunningBroker]]:
    running: list[RunningBroker] = []
    yield running
    for broker in running:
        broker.stop()


def connack_or_none(client: RawClient, timeout: float) -> dict[str, object] | None:
    try:
        return client.recv(timeout)
    except (TimeoutError, ConnectionError):
        return None


def sys_value(client: RawClient, topic: str, at_least: int, timeout: float = 15.0) -> int:
    """The first value of the retained $SYS ``topic`` that reaches ``at_least`` (the
    client subscribed to it), or the last one seen when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    value = -1
    while value < at_least and time.monotonic() < deadline:
        try:
            packet = client.recv(deadline - time.monotonic())
        except TimeoutError:
            break
        if packet["type"] == "publish" and packet["topic"] == topic:
            value = int(bytes(packet["payload"]))
    return value


def connects(host: str, port: int, client_id: str, source: str | None = None) -> RawClient | None:
    """A client connected as ``client_id`` (from the local address ``source``), or None
    when the broker closed the socket without a CONNACK."""
    client = RawClient(host, port, source=source)
    client.send({"type": "connect", "protocol_version": 4, "client_id": client_id})
    if connack_or_none(client, 5.0) is None:
        client.close()
        return None
    return client


def connected(host: str, port: int, client_id: str, source: str | None = None) -> RawClient:
    client = connects(host, port, client_id, source)
    assert client is not None, f"{client_id} could not connect"
    return client


def subscribed(
    broker: RunningBroker, client_id: str, *topics: str, source: str | None = None
) -> RawClient:
    client = connected(broker.host, broker.port, client_id, source)
    client.send(
        {"type": "subscribe", "packet_id": 1, "filters": [{"filter": t, "qos": 0} for t in topics]}
    )
    assert client.recv()["type"] == "suback"
    return client


def round_trip(client: RawClient, topic: str) -> bool:
    """``client`` (subscribed to ``topic``) publishes to it and gets the message back."""
    client.send({"type": "publish", "topic": topic, "payload": b"still here"})
    for _ in range(100):
        packet = client.recv()
        if packet["type"] == "publish" and packet["topic"] == topic:
            return bytes(packet["payload"]) == b"still here"
    return False


def waiting_for_connack(clients: list[RawClient], timeout: float) -> list[RawClient]:
    """The clients that got no CONNACK within ``timeout`` (their CONNECT was sent)."""
    waiting = set(clients)
    with selectors.DefaultSelector() as selector:
        for client in clients:
            selector.register(client.sock, selectors.EVENT_READ, client)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for key, _ in selector.select(deadline - time.monotonic()):
                client = key.data
                selector.unregister(client.sock)
                if connack_or_none(client, 5.0) is not None:
                    waiting.discard(client)
    return [client for client in clients if client in waiting]


def test_out_of_descriptors_pauses_accepting_and_serves_the_waiting_clients_later(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    broker = start_broker(tmp_path, loop, SYS_FAST + MEMORY, nofile=NOFILE)
    brokers.append(broker)
    paused = "$SYS/broker/clients/accept_paused/fd_exhausted"
    watcher = subscribed(broker, "watcher", "alive", paused)

    clients = []
    for index in range(CLIENTS):
        client = RawClient(broker.host, broker.port)  # the kernel completes the handshake
        client.send({"type": "connect", "protocol_version": 4, "client_id": f"c{index}"})
        clients.append(client)
    waiting = waiting_for_connack(clients, timeout=3.0)
    served = [client for client in clients if client not in waiting]

    assert served and waiting, "the broker ran out of descriptors part way through"
    broker.wait_for_log("accept paused: out of file descriptors")
    broker.wait_for_log(f"nofile_limit={NOFILE}")
    assert sys_value(watcher, paused, at_least=1) >= 1
    assert round_trip(watcher, "alive"), "a connected client stopped being served"

    # Freeing descriptors serves the waiting clients, as many at a time as were freed.
    for client in served:
        client.close()
    while waiting:
        still = waiting_for_connack(waiting, timeout=15.0)
        assert len(still) < len(waiting), (
            "clients that waited while descriptors ran out were not served once they freed up"
        )
        for client in waiting:
            if client not in still:
                client.close()
        waiting = still
    assert round_trip(watcher, "alive")
    watcher.close()
    assert broker.stop() == 0, broker.log()


def test_listener_max_connections_refuses_at_accept_and_counts(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    config = "[[listeners]]\nmax_connections = 3\n" + SYS_FAST + MEMORY
    broker = start_broker(tmp_path, loop, config)
    brokers.append(broker)
    refused_topic = "$SYS/broker/clients/refused/listener_max_connections"
    watcher = subscribed(broker, "watcher", refused_topic)
    others = [connected(broker.host, broker.port, f"ok{index}") for index in range(2)]

    extra = RawClient(broker.host, broker.port)
    extra.send({"type": "connect", "protocol_version": 4, "client_id": "one-too-many"})
    assert extra.expect_closed() == [], "the fourth connection got an answer"
    assert sys_value(watcher, refused_topic, at_least=1) >= 1
    broker.wait_for_log("connection refused at accept")
    broker.wait_for_log("listeners[0] (default).max_connections = 3")

    others.pop().close()  # a slot frees up (once the broker has seen the close)
    assert any(connects(broker.host, broker.port, f"after{n}") for n in range(50))


def test_broker_max_connections_counts_every_listener(
    tmp_path: Path, loop: str, brokers: list[RunningBroker]
) -> None:
    second = free_port()
    config = (
        "[[listeners]]\n"
        '[[listeners]]\nname = "second"\nhost = "127.0.0.1"\n'
        f"port = {second}\n"
        "[limits]\nmax_connections = 2\n" + SYS_FAST + MEMORY
    )
    broker = start_broker(tmp_path, loop, config)
    brokers.append(broker)
    refused_topic = "$SYS/broker/clients/refused/max_connections"
    watcher = subscribed(broker, "watcher", refused_topic)  # first listener
    other = connected(broker.host, second, "second")

    extra = RawClient(broker.host, second)
    extra.send({"type": "connect", "protocol_version": 4, "client_id": "third"})
    assert extra.expect_closed() == [], "a third connection got an answer"
    assert sys_value(watcher, refused_topic, at_least=1) >= 1
    broker.wait_for_log("limits.max_connections = 2")
    other.close()
