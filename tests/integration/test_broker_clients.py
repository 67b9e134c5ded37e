"""`ferromq serve` with real clients over real sockets: paho-mqtt (3.1.1 and 5.0),
Debian's mosquitto_pub/mosquitto_sub, and raw packets; under uvloop and asyncio.

The paho scenarios between a publisher and a subscriber take a :class:`Placement`
(where each client connects), so tests/cluster runs the same scenarios with the two
clients on different nodes of a cluster; here both are the one broker.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, round_trip, subscribe


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_paho_round_trip(broker: RunningBroker, version: int, qos: int) -> None:
    sub, inbox = paho_client(broker, f"sub-{version}-{qos}", version)
    pub, _ = paho_client(broker, f"pub-{version}-{qos}", version)
    round_trip(sub, inbox, pub, qos)


@dataclass(frozen=True)
class Placement:
    """Where a scenario's clients connect: publishers at ``publisher``, subscribers at
    ``subscriber``, a persistent subscriber's return at ``returning``; ``routed()``
    returns once the subscriptions made at ``subscriber`` reach ``publisher``."""

    publisher: RunningBroker
    subscriber: RunningBroker
    returning: RunningBroker
    routed: Callable[[], None]

    @classmethod
    def one(cls, broker: RunningBroker) -> Placement:
        """Every client on one broker, where a SUBACK means routed."""
        return cls(broker, broker, broker, lambda: None)


def qos_is_downgraded_to_the_subscription(at: Placement) -> None:
    sub, inbox = paho_client(at.subscriber, "downgrade-sub", 4)
    subscribe(sub, "d", 1)
    at.routed()
    pub, _ = paho_client(at.publisher, "downgrade-pub", 5)
    pub.publish("d", b"x", qos=2).wait_for_publish(5)
    assert inbox.get(timeout=5).qos == 1


def persistent_session_queues_while_offline(at: Placement) -> None:
    sub, inbox = paho_client(at.subscriber, "persistent", 4, clean=False)
    subscribe(sub, "jobs", 1)
    at.routed()
    sub.disconnect()
    sub.loop_stop()
    pub, _ = paho_client(at.publisher, "jobs-pub", 4)
    for i in range(5):
        pub.publish("jobs", str(i).encode(), qos=1).wait_for_publish(5)
    _again, inbox = paho_client(at.returning, "persistent", 4, clean=False)
    # On another node of a cluster the session comes over first (a claim, the old
    # owner's release, a restore from the store): seconds on a loaded machine.
    assert [inbox.get(timeout=15).payload for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]


def will_is_published_when_a_client_vanishes(at: Placement) -> None:
    watcher, inbox = paho_client(at.subscriber, "will-watcher", 5)
    subscribe(watcher, "wills/#", 1)
    at.routed()
    dying = RawClient(at.publisher.host, at.publisher.port, version=4)
    dying.connect(
        "dying",
        will={"topic": "wills/dying", "payload": b"offline", "qos": 1, "retain": False},
    )
    dying.close()  # no DISCONNECT: abnormal end
    assert inbox.get(timeout=5).payload == b"offline"


SCENARIOS = [
    qos_is_downgraded_to_the_subscription,
    persistent_session_queues_while_offline,
    will_is_published_when_a_client_vanishes,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_paho_scenario(broker: RunningBroker, scenario: Callable[[Placement], None]) -> None:
    scenario(Placement.one(broker))


def test_retained_message_reaches_a_late_subscriber(broker: RunningBroker) -> None:
    pub, _ = paho_client(broker, "retain-pub", 4)
    pub.publish("status/door", b"open", qos=1, retain=True).wait_for_publish(5)
    sub, inbox = paho_client(broker, "retain-sub", 5)
    subscribe(sub, "status/#", 1)
    message = inbox.get(timeout=5)
    assert (message.topic, message.payload, message.retain) == ("status/door", b"open", True)
    pub.publish("status/door", b"", qos=1, retain=True).wait_for_publish(5)  # clears
    late, late_inbox = paho_client(broker, "retain-late", 4)
    subscribe(late, "status/#", 1)
    with pytest.raises(queue.Empty):
        late_inbox.get(timeout=0.5)


def test_malformed_packet_closes_only_that_connection(broker: RunningBroker) -> None:
    sub, inbox = paho_client(broker, "bystander", 4)
    subscribe(sub, "ok", 0)
    bad = RawClient(broker.host, broker.port, version=5)
    bad.connect("bad")
    bad.send_raw(b"\x30\x04\x00\x01+\x00")  # wildcard in a topic name
    got = bad.expect_closed()
    assert [p["reason_code"] for p in got if p["type"] == "disconnect"] == [0x90]
    pub, _ = paho_client(broker, "still-ok", 4)
    pub.publish("ok", b"alive").wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"alive"
    rejected = [line for line in broker.log().splitlines() if "connection rejected" in line]
    assert len(rejected) == 1 and "0x90" in rejected[0] and "wildcard" in rejected[0]


def test_keepalive_timeout_closes_the_connection(broker: RunningBroker) -> None:
    idle = RawClient(broker.host, broker.port, version=5)
    idle.connect("idle", keep_alive=1)
    started = time.monotonic()
    got = idle.expect_closed(timeout=5)
    assert [p["reason_code"] for p in got if p["type"] == "disconnect"] == [0x8D]
    assert time.monotonic() - started >= 1.0


def test_sys_tree_is_published_and_hidden_from_hash(broker: RunningBroker) -> None:
    sub, inbox = paho_client(broker, "sys-reader", 4)
    subscribe(sub, "$SYS/broker/version", 0)
    assert inbox.get(timeout=5).payload.startswith(b"ferromq ")
    everything, all_inbox = paho_client(broker, "hash-reader", 4)
    subscribe(everything, "#", 0)
    with pytest.raises(queue.Empty):
        all_inbox.get(timeout=0.5)


def test_sigterm_sends_v5_clients_server_shutting_down(broker: RunningBroker) -> None:
    client = RawClient(broker.host, broker.port, version=5)
    client.connect("shutdown-watch")
    assert broker.stop() == 0
    got = client.expect_closed()
    assert [p["reason_code"] for p in got if p["type"] == "disconnect"] == [0x8B]


@pytest.mark.skipif(shutil.which("mosquitto_sub") is None, reason="mosquitto-clients missing")
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_clients(broker: RunningBroker, version: str) -> None:
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h",
            broker.host,
            "-p",
            str(broker.port),
            "-V",
            version,
            "-t",
            "fleet/#",
            "-q",
            "1",
            "-C",
            "3",
            "-v",
            "-i",
            f"msub-{version}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    for i in range(3):
        subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                broker.host,
                "-p",
                str(broker.port),
                "-V",
                version,
                "-t",
                f"fleet/{i}",
                "-m",
                f"m{i}",
                "-q",
                "1",
            ],
            check=True,
            timeout=10,
        )
    out, _ = sub.communicate(timeout=10)
    assert out.splitlines() == ["fleet/0 m0", "fleet/1 m1", "fleet/2 m2"]


def test_a_slow_subscriber_pauses_nothing_else(tmp_path: Path) -> None:
    """A subscriber that stops reading has its queue fill and drop (counted in $SYS);
    a subscriber that reads keeps receiving every message."""
    running = start_broker(
        tmp_path,
        "uvloop",
        '[limits]\nwrite_buffer_high_water = "64KiB"\n'
        "[session]\nqueue_limit = 5000\n[sys]\ninterval = 1\n",
    )
    try:
        stalled = RawClient(running.host, running.port, version=4)
        stalled.connect("stalled")
        stalled.send(
            {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "bp/#", "qos": 1}]}
        )
        assert stalled.recv()["type"] == "suback"  # and never reads or acknowledges again
        fast, inbox = paho_client(running, "fast", 4)
        subscribe(fast, "bp/#", 1)
        publisher, _ = paho_client(running, "bp-pub", 4)
        # More than the stalled session's window (1024) and queue (5000) can hold.
        total = 10_000
        payload = b"x" * 1024
        # In steps the reading subscriber keeps up with: a publisher that outran it
        # would fill its queue too (nothing holds a publisher back for a slow reader),
        # and this test is about the stalled one.
        received = []
        for start in range(0, total, 500):
            sent = [
                publisher.publish("bp/data", i.to_bytes(4, "big") + payload, qos=1)
                for i in range(start, start + 500)
            ]
            for info in sent:
                info.wait_for_publish(30)
            received += [inbox.get(timeout=10) for _ in range(500)]
        assert [int.from_bytes(m.payload[:4], "big") for m in received] == list(range(total))
        watcher, sys_inbox = paho_client(running, "bp-sys", 4)
        subscribe(watcher, "$SYS/broker/publish/messages/dropped", 0)
        # Everything beyond its window (1024) and queue (5000) was dropped and counted;
        # $SYS is published every second, so read until the count has caught up.
        expected = total - 1024 - 5000
        dropped = 0
        deadline = time.monotonic() + 10
        while dropped < expected and time.monotonic() < deadline:
            dropped = int(sys_inbox.get(timeout=5).payload)
        assert dropped == expected
    finally:
        running.stop()
