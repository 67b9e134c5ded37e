"""The two clients of a crash trial, counting what an application would see.

A publisher streams numbered messages at QoS 1 or 2 with a persistent session and a
window of open flows; a subscriber with a persistent session receives them. Both follow
the protocol as a real client must across reconnects:

- the publisher resends an unacknowledged QoS 1 PUBLISH with DUP, and for QoS 2 either
  the PUBLISH with DUP (no PUBREC yet) or the PUBREL (PUBREC seen) [MQTT-4.4.0-1];
- the subscriber hands a QoS 1 PUBLISH to the application every time it arrives, and a
  QoS 2 PUBLISH only when its packet id is not awaiting PUBREL (the receiver's side of
  [MQTT-4.3.3-9]); it keeps those ids across reconnects, as a persistent client must.

`Tally` compares the two: an acknowledged message (PUBACK, or PUBREC for QoS 2) that the
subscriber's application never got is *lost*; a QoS 2 message it got twice is a
*duplicate*; a QoS 1 message it got again is a duplicate unless the copy came with DUP
or the publisher had sent it again with DUP (redeliveries of what was in flight, which
QoS 1 allows).
"""

from __future__ import annotations

import select
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tests.support.mqtt_raw import RawClient

IN_FLIGHT = 20
#: A paced stream (``stream``) publishes only while fewer of its messages than this are
#: published and not yet delivered. A QoS 1 PUBACK does not wait for the subscriber, so
#: an unpaced publisher outruns a slow one (a loaded machine, a subscriber that is
#: reconnecting) and its queue drops past ``queue_limit`` by design, which is not loss.
#: Brokers under such a stream run with ``QUEUE_ROOM``, well above it.
BACKLOG = 20_000
QUEUE_ROOM = "[session]\nqueue_limit = 50000\n"


class Publisher:
    """Numbered messages on ``topic``, ``IN_FLIGHT`` flows open at a time."""

    def __init__(self, client_id: str, topic: str, qos: int, version: int) -> None:
        self.client_id, self.topic, self.qos, self.version = client_id, topic, qos, version
        self.client: RawClient | None = None
        self.next = 0
        # packet id -> (payload, PUBREC seen), in send order
        self.flows: dict[int, tuple[bytes, bool]] = {}
        self.acknowledged: set[bytes] = set()
        # sent again with DUP after a reconnect: the broker may deliver these twice
        # at QoS 1 (it cannot tell a retransmission of a stored message from a new one)
        self.resent: set[bytes] = set()

    def connect(self, host: str, port: int) -> None:
        self.client = RawClient(host, port, version=self.version)
        self.client.connect(self.client_id, clean=False, **_expiry(self.version))
        for packet_id, (payload, released) in self.flows.items():
            if released:
                self.client.send({"type": "pubrel", "packet_id": packet_id})
            else:
                self.resent.add(payload)
                self.client.send(self._publish(packet_id, payload, dup=True))

    def fill(self) -> None:
        assert self.client is not None
        while len(self.flows) < IN_FLIGHT:
            self.next += 1
            packet_id = self.next % 65535 + 1
            payload = self.next.to_bytes(4, "big")
            self.flows[packet_id] = (payload, False)
            self.client.send(self._publish(packet_id, payload))

    def handle(self, packet: dict[str, Any]) -> None:
        assert self.client is not None
        packet_id = packet.get("packet_id")
        if packet_id not in self.flows:
            return
        payload, _ = self.flows[packet_id]
        if packet["type"] == "puback":
            self.acknowledged.add(payload)
            del self.flows[packet_id]
        elif packet["type"] == "pubrec":
            self.acknowledged.add(payload)
            self.flows[packet_id] = (payload, True)
            self.client.send({"type": "pubrel", "packet_id": packet_id})
        elif packet["type"] == "pubcomp":
            del self.flows[packet_id]

    def _publish(self, packet_id: int, payload: bytes, dup: bool = False) -> dict[str, Any]:
        return {"type": "publish", "topic": self.topic, "qos": self.qos,
                "packet_id": packet_id, "payload": payload, "dup": dup}  # fmt: skip


class Subscriber:
    """A persistent subscriber of ``topic``; ``delivered`` is what its application got."""

    def __init__(self, client_id: str, topic: str, qos: int, version: int) -> None:
        self.client_id, self.topic, self.qos, self.version = client_id, topic, qos, version
        self.client: RawClient | None = None
        self.unreleased: set[int] = set()
        self.delivered: list[bytes] = []
        self.seen: set[bytes] = set()
        # QoS 1: payloads received again without DUP (never allowed)
        self.fresh_repeats: list[bytes] = []

    def connect(self, host: str, port: int, subscribe: bool) -> None:
        self.client = RawClient(host, port, version=self.version)
        self.client.connect(self.client_id, clean=False, **_expiry(self.version))
        if subscribe:
            self.client.send({"type": "subscribe", "packet_id": 1,
                              "filters": [{"filter": self.topic, "qos": self.qos}]})  # fmt: skip
            while self.client.recv(10)["type"] != "suback":
                pass

    def read(self, packet: dict[str, Any]) -> str:
        """What the packet is to this client: "new", "dup", "pubrel" or "other"."""
        if packet["type"] == "publish" and packet["topic"] == self.topic:
            payload = bytes(packet["payload"])
            if packet["qos"] == 2:
                packet_id = int(packet["packet_id"])
                if packet_id in self.unreleased:
                    return "dup"
                self.unreleased.add(packet_id)
            elif not packet.get("dup") and payload in self.seen:
                self.fresh_repeats.append(payload)
            self.delivered.append(payload)
            self.seen.add(payload)
            return "new"
        if packet["type"] == "pubrel":
            self.unreleased.discard(int(packet["packet_id"]))
            return "pubrel"
        return "other"

    def answer(self, packet: dict[str, Any]) -> None:
        assert self.client is not None
        if packet["type"] == "publish" and packet["qos"]:
            ack = "puback" if packet["qos"] == 1 else "pubrec"
            self.client.send({"type": ack, "packet_id": packet["packet_id"]})
        elif packet["type"] == "pubrel":
            self.client.send({"type": "pubcomp", "packet_id": packet["packet_id"]})


def _expiry(version: int) -> dict[str, Any]:
    """A session that outlives the connection: v5 says so with an expiry, 3.1.1 with
    clean session 0 alone."""
    return {"properties": [("session_expiry_interval", 3600)]} if version == 5 else {}


@dataclass
class Tally:
    """Loss and duplicates as the subscriber's application saw them."""

    acknowledged: int
    delivered: int
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, publisher: Publisher, subscriber: Subscriber) -> Tally:
        counts = Counter(subscriber.delivered)
        if publisher.qos == 2:
            twice = [payload for payload, n in counts.items() if n > 1]
        else:
            twice = [
                p for p in dict.fromkeys(subscriber.fresh_repeats) if p not in publisher.resent
            ]
        lost = publisher.acknowledged - counts.keys()
        return cls(
            acknowledged=len(publisher.acknowledged),
            delivered=len(counts),
            lost=sorted(_number(p) for p in lost),
            duplicated=sorted(_number(p) for p in twice),
        )

    def __str__(self) -> str:
        return (
            f"{self.acknowledged} acknowledged, {self.delivered} delivered, "
            f"{len(self.lost)} lost {self.lost[:8]}, "
            f"{len(self.duplicated)} duplicated {self.duplicated[:8]}"
        )


def _number(payload: bytes) -> int:
    return int.from_bytes(payload, "big")


def pump(
    publisher: Publisher,
    subscriber: Subscriber,
    publishing: bool,
    stop_at: str | None = None,
    others: Sequence[Subscriber] = (),
) -> tuple[int, bool]:
    """One round of the clients: fill the publisher's window (when ``publishing``),
    read and answer what arrived (at ``subscriber`` and the ``others`` subscribed to
    the same topic). Returns the number of new deliveries and whether it stopped at a
    ``stop_at`` packet ("new" or "pubrel"): read by ``subscriber``, not answered, the
    moment to kill a broker. Raises ConnectionError when a broker went away."""
    assert publisher.client is not None and subscriber.client is not None
    if publishing:
        publisher.fill()
    readers = [subscriber, *others]
    sockets = [publisher.client.sock] + [s.client.sock for s in readers if s.client]
    select.select(sockets, [], [], 0.05)
    for packet in publisher.client.poll():
        publisher.handle(packet)
    fresh = 0
    for other in others:
        assert other.client is not None
        for packet in other.client.poll():
            fresh += other.read(packet) == "new"
            other.answer(packet)
    for packet in subscriber.client.poll():
        seen = subscriber.read(packet)
        fresh += seen == "new"
        if seen == stop_at:
            return fresh, True
        subscriber.answer(packet)
    return fresh, False


def step(publisher: Publisher, subscriber: Subscriber, others: Sequence[Subscriber] = ()) -> None:
    """One round of the clients; the publisher publishes unless ``BACKLOG`` of its
    messages are published and not yet delivered to every subscriber."""
    backlog = publisher.next - min(len(s.seen) for s in (subscriber, *others))
    pump(publisher, subscriber, publishing=backlog < BACKLOG, others=others)


def stream(
    publisher: Publisher, subscriber: Subscriber, seconds: float, others: Sequence[Subscriber] = ()
) -> None:
    """Publish for ``seconds``, paced by ``BACKLOG``, reading and answering as it goes."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        step(publisher, subscriber, others)


def stream_while(publisher: Publisher, subscriber: Subscriber, action: Callable[[], None]) -> None:
    """Run ``action`` (a service or a broker starting) in a thread while the paced
    stream goes on; its exception, if any, is raised here."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(action)
        while not running.done():
            step(publisher, subscriber)
        running.result()


def settle(
    publisher: Publisher,
    subscriber: Subscriber,
    quiet: float = 1.0,
    others: Sequence[Subscriber] = (),
) -> None:
    """Run the clients without new messages until every flow is complete and nothing
    has arrived for ``quiet`` seconds (at most 30 s)."""
    quiet_since = time.monotonic()
    deadline = quiet_since + 30
    while time.monotonic() < deadline:
        fresh, _ = pump(publisher, subscriber, publishing=False, others=others)
        if fresh or publisher.flows:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > quiet:
            return
    raise AssertionError(f"flows still open: {sorted(publisher.flows)[:10]}")
