"""Shared subscriptions (`$share/{group}/{filter}`) over real sockets with paho-mqtt
3.1.1 and 5.0 clients: a group whose members are all away keeps its messages, a
member's unacknowledged messages go to another member when its connection ends, no
retained message on a shared subscribe, and the churn test of issue 6: three
members leave and return at random while 10,000 QoS 1 messages are published, and
every message arrives, at two members only when the first one's connection ended
before it acknowledged."""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conformance.support import (
    VERSIONS,
    closed_with,
    connected,
    fence,
    publish,
    recv_publish,
    subscribe,
)
from tests.conftest import RunningBroker, start_broker
from tests.support.paho_clients import paho_client
from tests.support.paho_clients import subscribe as paho_subscribe


def stop(client: paho.Client) -> None:
    client.disconnect()
    client.loop_stop()


@VERSIONS
def test_a_group_with_every_member_away_keeps_its_messages(
    broker: RunningBroker, version: int
) -> None:
    publisher, _ = paho_client(broker, f"away-pub-{version}", version)
    publisher.publish("orders/0", b"retained", qos=1, retain=True).wait_for_publish(5)
    member, inbox = paho_client(broker, f"away-member-{version}", version, clean=False)
    paho_subscribe(member, "$share/workers/orders/+", 1)
    paho_subscribe(member, "fence", 0)
    publisher.publish("fence", b"fence").wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"fence", "no retained message on $share"
    stop(member)

    for n in range(1, 21):
        publisher.publish(f"orders/{n}", str(n).encode(), qos=1).wait_for_publish(5)
    _back, inbox = paho_client(broker, f"away-member-{version}", version, clean=False)
    got = [inbox.get(timeout=5) for _ in range(20)]
    assert [m.payload for m in got] == [str(n).encode() for n in range(1, 21)]
    assert not any(m.retain for m in got)
    stop(publisher)


@VERSIONS
def test_an_unacknowledged_members_messages_go_to_another_member(
    broker: RunningBroker, version: int
) -> None:
    # A raw member that reads and never acknowledges, and a paho member.
    silent = connected(broker, f"silent-{version}", version)
    assert subscribe(silent, ("$share/w/jobs", 1)) == [1]
    steady, inbox = paho_client(broker, f"steady-{version}", version)
    paho_subscribe(steady, "$share/w/jobs", 1)
    assert subscribe(silent, "fence") == [0]
    publisher = connected(broker, f"jobs-pub-{version}", version)
    for n in range(10):
        publish(publisher, "jobs", b"%d" % n, qos=1)
    publish(publisher, "fence", b"end")
    silent_got = []
    while (packet := recv_publish(silent))["topic"] != "fence":
        silent_got.append(packet["payload"])
    assert 0 < len(silent_got) < 10, "round robin shares the group"

    silent.close()  # vanishes with its messages unacknowledged
    steady_got = [inbox.get(timeout=5).payload for _ in range(10)]
    assert sorted(steady_got) == sorted(b"%d" % n for n in range(10))
    moved = [p for p in steady_got if p in silent_got]
    assert moved == silent_got, "the silent member's messages, in their order"
    stop(steady)


def test_a_refused_qos1_delivery_is_not_offered_to_another_member(broker: RunningBroker) -> None:
    # [MQTT-4.8.2-6]: a PUBACK with a reason code of 0x80 or more ends the message.
    refuser = connected(broker, "refuser", 5)
    assert subscribe(refuser, ("$share/r/jobs", 1)) == [1]
    publisher = connected(broker, "refuse-pub", 5)
    publish(publisher, "jobs", b"x", qos=1)
    packet = recv_publish(refuser)
    refuser.send({"type": "puback", "packet_id": packet["packet_id"], "reason_code": 0x80})
    other = connected(broker, "other", 5)
    assert subscribe(other, ("$share/r/jobs", 1), "fence") == [1, 0]
    refuser.send({"type": "disconnect", "reason_code": 0})
    assert closed_with(refuser) == []  # the broker has ended the connection
    fence(publisher, other, "fence")


@pytest.mark.parametrize("loop", ["uvloop"])
def test_hash_topic_keeps_each_topic_at_one_member(tmp_path: Path, loop: str) -> None:
    broker = start_broker(tmp_path, loop, '[session]\nshare_strategy = "hash_topic"\n')
    try:
        members = [connected(broker, f"hash-{i}", 5) for i in range(2)]
        for member in members:
            assert subscribe(member, ("$share/h/sensors/+", 1), "fence") == [1, 0]
        publisher = connected(broker, "hash-pub", 5)
        topics = [f"sensors/{n}" for n in range(8)]
        for round_ in range(5):
            for topic in topics:
                publish(publisher, topic, b"%d" % round_, qos=1)
        publish(publisher, "fence", b"end")
        seen_at: dict[str, set[int]] = {}
        for index, member in enumerate(members):
            while (packet := recv_publish(member))["topic"] != "fence":
                seen_at.setdefault(packet["topic"], set()).add(index)
    finally:
        broker.stop()
    assert sorted(seen_at) == topics
    assert all(len(at) == 1 for at in seen_at.values()), "a topic stays at one member"
    assert {i for at in seen_at.values() for i in at} == {0, 1}, "topics spread over both"


# The churn test. Sessions are persistent, so the group lives on while every member
# is away, and the queue limit is above the message count: a drop could only be a
# loss this test is about.
TOTAL = 10_000
CHURN_EVERY = 200
SEED = 6
GROUP_FILTER = "$share/churn/work/+"


@dataclass
class Receipt:
    seq: int
    member: str
    connection: int
    dup: bool


@dataclass
class Log:
    """Receipts and connection ends in the order they happened, across threads."""

    connections: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[Receipt | int] = field(default_factory=list)  # int: a connection ended
    seen: set[int] = field(default_factory=set)
    all_seen: threading.Event = field(default_factory=threading.Event)

    def receipt(self, receipt: Receipt) -> None:
        with self.lock:
            self.events.append(receipt)
            self.seen.add(receipt.seq)
            if len(self.seen) == TOTAL:
                self.all_seen.set()

    def ended(self, connection: int) -> None:
        with self.lock:
            self.events.append(connection)


class Member:
    """One member of the group: a persistent session, one paho client per connection."""

    def __init__(self, broker: RunningBroker, name: str, version: int, log: Log) -> None:
        self.broker, self.name, self.version, self.log = broker, name, version, log
        self.client: paho.Client | None = None
        self.connection = 0
        self.subscribed = False

    def join(self) -> None:
        connection = self.connection = next(self.log.connections)

        def on_message(message: paho.MQTTMessage) -> None:
            seq = int(message.payload)
            self.log.receipt(Receipt(seq, self.name, connection, bool(message.dup)))

        self.client, _ = paho_client(
            self.broker, self.name, self.version, clean=False, on_message=on_message
        )
        if not self.subscribed:
            paho_subscribe(self.client, GROUP_FILTER, 1)
            self.subscribed = True

    def leave(self, abrupt: bool) -> None:
        assert self.client is not None
        self.log.ended(self.connection)
        if abrupt:
            # Stop reading, then drop the socket: acknowledgements still queued in paho
            # never reach the broker.
            self.client.loop_stop()
            sock = self.client.socket()
            if sock is not None:
                sock.close()
        else:
            stop(self.client)
        self.client = None


def check_churn(log: Log) -> dict[str, object]:
    """Assert every message arrived and each second copy is explained; the counts."""
    first: dict[int, Receipt] = {}
    ended: set[int] = set()
    redelivered = unexplained = 0
    per_member: Counter[str] = Counter()
    for event in log.events:
        if isinstance(event, int):
            ended.add(event)
            continue
        per_member[event.member] += 1
        earlier = first.get(event.seq)
        if earlier is None:
            first[event.seq] = event
        elif event.dup or earlier.connection in ended:
            redelivered += 1
        else:
            unexplained += 1
    assert sorted(first) == list(range(TOTAL)), "every message received"
    assert unexplained == 0, "a second copy without a disconnect before the ack or DUP"
    return {
        "received per member": dict(sorted(per_member.items())),
        "distinct": len(first),
        "redelivered": redelivered,
        "duplicates unexplained": unexplained,
        "connections": next(log.connections) - 1,
    }


@pytest.fixture(params=["uvloop", "asyncio"])
def roomy_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, "[session]\nqueue_limit = 20000\n")
    yield running
    running.stop()


@VERSIONS
def test_churn_loses_nothing_and_duplicates_only_after_a_disconnect(
    roomy_broker: RunningBroker, version: int
) -> None:
    log = Log()
    members = [Member(roomy_broker, f"churn-{version}-{i}", version, log) for i in range(3)]
    for member in members:
        member.join()
    publisher, _ = paho_client(roomy_broker, f"churn-pub-{version}", version)
    rng = random.Random(SEED)
    last = None
    for seq in range(TOTAL):
        last = publisher.publish(f"work/{seq % 7}", str(seq).encode(), qos=1)
        if seq % CHURN_EVERY == CHURN_EVERY - 1:
            last.wait_for_publish(10)  # the broker has routed the batch: churn mid-flow
            member = rng.choice(members)
            if member.client is None:
                member.join()
            else:
                member.leave(abrupt=rng.random() < 0.5)
    assert last is not None
    last.wait_for_publish(30)
    for member in members:
        if member.client is None:
            member.join()
    assert log.all_seen.wait(30), f"{TOTAL - len(log.seen)} messages never arrived"
    for member in members:
        member.leave(abrupt=False)
    stop(publisher)
    counts = check_churn(log)
    print(f"\nshared churn v{version}: {counts}")
