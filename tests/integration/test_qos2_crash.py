"""QoS 2 exactly once across ``kill -9``, both directions, over real sockets.

A persistent QoS 2 publisher streams numbered messages to a persistent QoS 2
subscriber; both follow the protocol as a real client must across reconnects (the
publisher resends an unfinished flow's PUBLISH with DUP or its PUBREL, the
subscriber keeps the ids it PUBRECed until PUBREL so a DUP of one is not delivered
twice). The broker is killed with SIGKILL at the moments a crash used to break
exactly once, taking turns: just as the subscriber reads a PUBREL (before the
broker had stored the PUBREC behind it, a restart resent the PUBLISH [MQTT-4.3.3-6])
and just as it reads a new message (before the broker had stored the publisher's
packet id, the retransmission was routed again [MQTT-4.3.3-9]). After each restart
on the same store the stream goes on; at the end no message was delivered twice,
and every message the publisher saw PUBRECed arrived.
"""

from __future__ import annotations

import select
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningBroker
from tests.integration.mqtt_raw import RawClient
from tests.integration.test_embedded_store import broker_on

LOOPS = ["uvloop", "asyncio"]
KILLS = 12
IN_FLIGHT = 20
TOPIC = "qos2/stream"


class Publisher:
    """Numbered QoS 2 messages, ``IN_FLIGHT`` flows open at a time."""

    def __init__(self) -> None:
        self.client: RawClient | None = None
        self.next = 0
        # packet id -> (payload, PUBREC seen), in send order
        self.flows: dict[int, tuple[bytes, bool]] = {}
        self.pubreced: set[bytes] = set()

    def connect(self, broker: RunningBroker) -> None:
        self.client = RawClient(broker.host, broker.port, version=4)
        self.client.connect("qos2-publisher", clean=False)
        for packet_id, (payload, released) in self.flows.items():
            if released:
                self.client.send({"type": "pubrel", "packet_id": packet_id})
            else:
                self.client.send(publish(packet_id, payload, dup=True))

    def fill(self) -> None:
        assert self.client is not None
        while len(self.flows) < IN_FLIGHT:
            self.next += 1
            packet_id = self.next % 65535 + 1
            payload = self.next.to_bytes(4, "big")
            self.flows[packet_id] = (payload, False)
            self.client.send(publish(packet_id, payload))

    def handle(self, packet: dict[str, Any]) -> None:
        assert self.client is not None
        packet_id = int(packet["packet_id"])
        if packet["type"] == "pubrec" and packet_id in self.flows:
            payload, _ = self.flows[packet_id]
            self.flows[packet_id] = (payload, True)
            self.pubreced.add(payload)
            self.client.send({"type": "pubrel", "packet_id": packet_id})
        elif packet["type"] == "pubcomp":
            self.flows.pop(packet_id, None)


class Subscriber:
    """Delivers a QoS 2 message when its packet id is new, keeps the id until
    PUBREL (the receiver's side of [MQTT-4.3.3-9])."""

    def __init__(self) -> None:
        self.client: RawClient | None = None
        self.unreleased: set[int] = set()
        self.delivered: list[bytes] = []

    def connect(self, broker: RunningBroker, subscribe: bool) -> None:
        self.client = RawClient(broker.host, broker.port, version=4)
        self.client.connect("qos2-subscriber", clean=False)
        if subscribe:
            self.client.send(
                {"type": "subscribe", "packet_id": 1, "filters": [{"filter": TOPIC, "qos": 2}]}
            )

    def read(self, packet: dict[str, Any]) -> str:
        """What the packet is to this client: "new", "dup", "pubrel" or "other"."""
        if packet["type"] == "publish":
            packet_id = int(packet["packet_id"])
            if packet_id in self.unreleased:
                return "dup"
            self.unreleased.add(packet_id)
            self.delivered.append(packet["payload"])
            return "new"
        if packet["type"] == "pubrel":
            self.unreleased.discard(int(packet["packet_id"]))
            return "pubrel"
        return "other"

    def answer(self, packet: dict[str, Any]) -> None:
        assert self.client is not None
        if packet["type"] == "publish":
            self.client.send({"type": "pubrec", "packet_id": packet["packet_id"]})
        elif packet["type"] == "pubrel":
            self.client.send({"type": "pubcomp", "packet_id": packet["packet_id"]})


def publish(packet_id: int, payload: bytes, dup: bool = False) -> dict[str, Any]:
    return {"type": "publish", "topic": TOPIC, "qos": 2, "packet_id": packet_id,
            "payload": payload, "dup": dup}  # fmt: skip


def run(
    broker: RunningBroker, publisher: Publisher, subscriber: Subscriber, kill_on: str | None
) -> None:
    """Stream until the subscriber reads a `kill_on` packet ("pubrel" or "new")
    after 100 new messages in this life, then SIGKILL the broker before it answers.
    With no `kill_on`, run until every flow is complete and the broker is quiet."""
    assert publisher.client is not None and subscriber.client is not None
    fresh = 0
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kill_on is not None:
            publisher.fill()
        sockets = [publisher.client.sock, subscriber.client.sock]
        select.select(sockets, [], [], 0.05)
        for packet in publisher.client.poll():
            publisher.handle(packet)
        packets = subscriber.client.poll()
        for packet in packets:
            seen = subscriber.read(packet)
            fresh += seen == "new"
            if kill_on is not None and fresh > 100 and seen == kill_on:
                broker.process.send_signal(signal.SIGKILL)
                broker.process.wait(10)
                return
            subscriber.answer(packet)
        if packets or publisher.flows:
            quiet_since = time.monotonic()
        elif kill_on is None and time.monotonic() - quiet_since > 0.5:
            return
    if kill_on is not None:
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(10)
        return
    raise AssertionError(f"flows still open at the end: {sorted(publisher.flows)[:10]}")


@pytest.mark.parametrize("loop", LOOPS)
def test_qos2_is_exactly_once_across_kill_9(tmp_path: Path, loop: str) -> None:
    store = tmp_path / "data"
    publisher, subscriber = Publisher(), Subscriber()
    for life in range(KILLS + 1):
        broker = broker_on(store, tmp_path, loop)
        try:
            subscriber.connect(broker, subscribe=life == 0)
            publisher.connect(broker)
            kill_on = None if life == KILLS else ("pubrel", "new")[life % 2]
            run(broker, publisher, subscriber, kill_on)
        finally:
            broker.stop()
            for client in (publisher.client, subscriber.client):
                if client is not None:
                    client.close()

    twice = {payload: n for payload, n in Counter(subscriber.delivered).items() if n > 1}
    assert not twice, (
        f"{len(twice)} of {len(subscriber.delivered)} messages delivered twice, e.g. "
        f"{[int.from_bytes(p, 'big') for p in list(twice)[:5]]}"
    )
    missing = publisher.pubreced - set(subscriber.delivered)
    assert not missing, f"{len(missing)} PUBRECed messages never arrived"
    assert len(publisher.pubreced) > KILLS * 100
