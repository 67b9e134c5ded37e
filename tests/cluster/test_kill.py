"""A node killed with ``kill -9`` mid-stream loses nothing (issue 17, Deliver 4).

A publisher on node A publishes numbered QoS 1 messages without pause; a persistent
QoS 1 subscriber (3.1.1 CleanSession=0 / 5.0 Clean Start=0 with a Session Expiry) is
connected to node B. B is killed with SIGKILL while messages flow; the subscriber
reconnects to node C (at once, as clients do, or once C lists B dead), finds its
session (Session Present), and the publisher goes on
until messages published after the reconnect reach it there. Every message A had
acknowledged (PUBACK) to its publisher must reach the subscriber: loss 0. QoS 1 allows
duplicates; they are counted and shown, not failed. B, started again with the same
node id, rejoins: the other nodes list it alive, and it routes again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter

import paho.mqtt.client as paho
import pytest

from tests.cluster.conftest import ClusterFactory, wait_members, wait_routed
from tests.conformance.support import V5, connect, connected, subscribe
from tests.conformance.test_08_session import persistent
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, stop

BEFORE_KILL = 50  # messages the subscriber has at B when B is killed
AFTER_RECONNECT = 50  # messages published after the reconnect that must reach it at C
DELIVERY_TIMEOUT = 60.0
QUEUE_ROOM = "[session]\nqueue_limit = 50000\n"
# When the subscriber reconnects: at once, as a client does (C may still see B alive),
# or once C lists B dead.
AT_ONCE, ONCE_DEAD = "at once", "once B is dead"


class Publisher(threading.Thread):
    """Publishes ``stream/<n>`` at QoS 1, n = 0, 1, ..., one after the other, until
    stopped; ``acked`` holds every n the broker acknowledged."""

    def __init__(self, client: paho.Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.acked: list[int] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            info = self.client.publish("stream/n", b"%d" % n, qos=1)
            while not info.is_published() and not self.stopping.is_set():
                info.wait_for_publish(0.2)
            if info.is_published():
                self.acked.append(n)
            n += 1

    def stop(self) -> list[int]:
        self.stopping.set()
        self.join(30)
        return self.acked


def take(client: RawClient, received: list[int], until: int | None = None) -> None:
    """Receive and acknowledge QoS 1 messages into ``received`` until it holds
    ``until`` messages (None: until the connection breaks; ConnectionError ends it)."""
    while until is None or len(received) < until:
        packet = client.recv(timeout=DELIVERY_TIMEOUT)
        assert packet["type"] == "publish", packet
        received.append(int(bytes(packet["payload"])))
        client.send({"type": "puback", "packet_id": packet["packet_id"]})


@pytest.mark.parametrize(
    ("version", "reconnect"),
    [(4, AT_ONCE), (V5, AT_ONCE), (V5, ONCE_DEAD)],
    ids=["v311-at-once", "v5-at-once", "v5-once-b-is-dead"],
)
def test_kill_9_of_a_subscribers_node_loses_no_acknowledged_message(
    cluster_factory: ClusterFactory, version: int, reconnect: str
) -> None:
    # The publisher is not throttled and the session is offline for seconds: it queues
    # more than the default session.queue_limit (1000), whose drop policy would lose
    # the oldest by configuration, not by the cluster.
    a, b, c = cluster_factory(extra=QUEUE_ROOM).nodes
    client_id = f"survivor-{version}"
    fields = persistent(version, seconds=600)
    subscriber = connected(b, client_id, version, **fields)
    assert subscribe(subscriber, ("stream/#", 1)) == [1]
    wait_routed(b, a)
    publisher = Publisher(paho_client(a, f"stream-pub-{version}", V5)[0])
    publisher.start()
    received: list[int] = []
    try:
        take(subscriber, received, until=BEFORE_KILL)
        b.kill()
        with contextlib.suppress(ConnectionError):  # until B's connection breaks
            take(subscriber, received)
        subscriber.close()
        if reconnect == ONCE_DEAD:
            wait_members(c, alive=2, states={b.node_id: "dead"})
        # C holds the CONNECT until B is found dead and its sessions adopted.
        subscriber, connack = connect(c, client_id, version, connack_timeout=60, **fields)
        assert (connack["reason_code"], connack["session_present"]) == (0, True)
        last_before = publisher.acked[-1]
        take(subscriber, received, until=len(received) + 1)
        while max(received) <= last_before + AFTER_RECONNECT:
            take(subscriber, received, until=len(received) + 1)
    finally:
        acked = publisher.stop()
        stop(publisher.client)
    missing = set(acked) - set(received)
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while missing and time.monotonic() < deadline:
        try:
            take(subscriber, received, until=len(received) + 1)
        except TimeoutError:
            break
        missing = set(acked) - set(received)
    duplicates = sum(count - 1 for count in Counter(received).values())
    counted = f"{len(acked)} acknowledged, {len(received)} received, {duplicates} duplicates"
    print(f"kill -9 mid-stream, v{version}: {counted}")  # shown with pytest -s
    assert sorted(missing) == [], f"lost {len(missing)}: {counted}"
    subscriber.close()

    # While it is down the others list it dead (or adopted by the node that took its
    # sessions); back under its node id, it is a member again, serving and routing.
    # Each member of b dead or adopted (one shard's clients adopted, another's not).
    assert set(wait_members(a, alive=2)[b.node_id].split("/")) <= {"dead", "adopted"}
    b.start()
    assert wait_members(a, alive=3, states={b.node_id: "alive"})[b.node_id] == "alive"
    wait_members(b, alive=3)
    watcher = connected(b, f"back-{version}", version)
    assert subscribe(watcher, ("back/t", 0)) == [0]
    wait_routed(b, a)
    watcher.close()
