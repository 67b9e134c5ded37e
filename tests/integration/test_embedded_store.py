"""The embedded store over real sockets: a broker restarted on its data directory gives
persistent sessions back their subscriptions, queued messages and the retained
messages; ``kill -9`` at any moment loses no message the publisher saw acknowledged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient
from tests.support.store_layout import segment_of

LOOPS = ["uvloop", "asyncio"]


def broker_on(store: Path, tmp_path: Path, loop: str) -> RunningBroker:
    """A broker on the embedded store in ``store``, fsync every batch, with room to
    queue every message these tests send to an offline session."""
    return start_broker(
        tmp_path,
        loop,
        env={
            "FERROMQ_STORAGE__PATH": str(store),
            "FERROMQ_STORAGE__FSYNC": "batch",
            "FERROMQ_SESSION__QUEUE_LIMIT": "60000",
        },
    )


def persistent_subscriber(broker: RunningBroker, client_id: str, topic: str) -> RawClient:
    client = RawClient(broker.host, broker.port, version=4)
    client.connect(client_id, clean=False)
    client.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 1}]})
    assert client.recv()["type"] == "suback"
    return client


def drain(client: RawClient, idle: float = 1.5) -> list[dict[str, Any]]:
    """Every PUBLISH until the broker goes quiet, each acknowledged (QoS 1 and 2)."""
    got: list[dict[str, Any]] = []
    while True:
        try:
            packet = client.recv(timeout=idle)
        except TimeoutError:
            return got
        if packet["type"] == "pubrel":
            client.send({"type": "pubcomp", "packet_id": packet["packet_id"]})
            continue
        assert packet["type"] == "publish", packet
        got.append(packet)
        if packet["qos"]:
            ack = "puback" if packet["qos"] == 1 else "pubrec"
            client.send({"type": ack, "packet_id": packet["packet_id"]})


def queued_payloads(broker: RunningBroker, client_id: str) -> list[bytes]:
    """What the stored session ``client_id`` gets on resuming, in order."""
    client = RawClient(broker.host, broker.port, version=4)
    try:
        assert client.connect(client_id, clean=False)["session_present"] is True
        return [packet["payload"] for packet in drain(client)]
    finally:
        client.close()


def publish_until_killed(broker: RunningBroker, topic: Callable[[int], str], goal: int) -> set[int]:
    """Publish QoS 1 messages 1, 2, ... (4-byte big-endian payloads, on ``topic(n)``)
    with 50 in flight until ``goal`` are acknowledged, then SIGKILL the broker; the
    numbers whose PUBACK arrived."""
    publisher = RawClient(broker.host, broker.port, version=4, timeout=2)
    publisher.connect("streamer")
    acked: set[int] = set()
    stop = threading.Event()

    def read_acks() -> None:
        while not stop.is_set():
            try:
                packet = publisher.recv(timeout=0.5)
            except (TimeoutError, ConnectionError, OSError):
                if broker.process.poll() is not None:
                    return
                continue
            if packet["type"] == "puback":
                acked.add(int(packet["packet_id"]))

    reader = threading.Thread(target=read_acks)
    reader.start()
    sent = 0
    try:
        while len(acked) < goal and sent < 60_000:
            while sent - len(acked) < 50 and sent < 60_000:
                sent += 1
                publisher.send(
                    {"type": "publish", "topic": topic(sent), "qos": 1,
                     "packet_id": sent % 65535 + 1, "payload": sent.to_bytes(4, "big")}
                )  # fmt: skip
            time.sleep(0.001)
        broker.kill()
    finally:
        stop.set()
        reader.join(10)
    return {packet_id - 1 for packet_id in acked}  # packet id = n % 65535 + 1


@pytest.mark.parametrize("loop", LOOPS)
def test_restart_gives_back_sessions_queues_and_retained(tmp_path: Path, loop: str) -> None:
    store = tmp_path / "data"
    broker = broker_on(store, tmp_path, loop)
    persistent_subscriber(broker, "keeper", "plant/#").close()
    publisher = RawClient(broker.host, broker.port, version=4)
    publisher.connect("publisher")
    for n in range(100):
        publisher.send(
            {"type": "publish", "topic": "plant/a", "qos": 1, "packet_id": n + 1,
             "payload": n.to_bytes(2, "big")}
        )  # fmt: skip
    publisher.send(
        {"type": "publish", "topic": "config/x", "qos": 1, "packet_id": 200, "retain": True,
         "payload": b"v1"}
    )  # fmt: skip
    acked = {publisher.recv()["packet_id"] for _ in range(101)}
    assert acked == set(range(1, 101)) | {200}
    assert broker.stop() == 0

    broker = broker_on(store, tmp_path, loop)
    try:
        broker.wait_for_log("store restored")
        keeper = RawClient(broker.host, broker.port, version=4)
        assert keeper.connect("keeper", clean=False)["session_present"] is True
        got = drain(keeper)
        assert [int.from_bytes(p["payload"], "big") for p in got] == list(range(100))
        # The subscription survived: a live message still reaches the session.
        publisher = RawClient(broker.host, broker.port, version=4)
        publisher.connect("publisher")
        publisher.send({"type": "publish", "topic": "plant/b", "qos": 0, "payload": b"live"})
        assert keeper.recv()["payload"] == b"live"
        late = RawClient(broker.host, broker.port, version=4)
        late.connect("late")
        late.send(
            {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "config/#", "qos": 1}]}
        )
        assert late.recv()["type"] == "suback"
        retained = late.recv()
        assert (retained["topic"], retained["payload"], retained["retain"]) == (
            "config/x", b"v1", True,
        )  # fmt: skip
    finally:
        broker.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_kill_9_loses_no_acknowledged_message(tmp_path: Path, loop: str) -> None:
    """A publisher streams QoS 1 messages with 50 in flight; the broker is killed with
    SIGKILL mid-stream. After a restart on the same directory the persistent
    subscriber receives every message whose PUBACK the publisher had seen."""
    store = tmp_path / "data"
    broker = broker_on(store, tmp_path, loop)
    persistent_subscriber(broker, "survivor", "stream").close()

    acknowledged = publish_until_killed(broker, lambda n: "stream", 3000)
    assert len(acknowledged) >= 3000

    broker = broker_on(store, tmp_path, loop)
    try:
        survivor = RawClient(broker.host, broker.port, version=4)
        assert survivor.connect("survivor", clean=False)["session_present"] is True
        received = [int.from_bytes(p["payload"], "big") for p in drain(survivor)]
        missing = acknowledged - set(received)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        assert received == sorted(received), "order kept"
    finally:
        broker.stop()


def test_a_torn_log_tail_is_cut_off_and_the_rest_restored(tmp_path: Path) -> None:
    store = tmp_path / "data"
    broker = broker_on(store, tmp_path, "asyncio")
    persistent_subscriber(broker, "keeper", "t").close()
    publisher = RawClient(broker.host, broker.port, version=4)
    publisher.connect("publisher")
    publisher.send({"type": "publish", "topic": "t", "qos": 1, "packet_id": 1, "payload": b"a"})
    assert publisher.recv()["type"] == "puback"
    assert broker.stop() == 0
    with segment_of(store, "keeper").open("ab") as log:
        log.write(b"\x06\xff\x00\x00")  # half a record header, as a crash leaves it

    broker = broker_on(store, tmp_path, "asyncio")
    try:
        broker.wait_for_log("store tail unreadable, cut off")
        keeper = RawClient(broker.host, broker.port, version=4)
        keeper.connect("keeper", clean=False)
        assert [p["payload"] for p in drain(keeper)] == [b"a"]
    finally:
        broker.stop()
