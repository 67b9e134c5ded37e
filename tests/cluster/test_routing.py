"""Three nodes act as one broker to clients (issue 17, Deliver 2 and 3): real paho
clients (MQTT 3.1.1 and 5.0) on different nodes of one cluster (tests/cluster/conftest.py)
on the session's real Kafka and Redis.

What a user would notice: a message published on node A reaches subscribers on B and C,
every message in order at the QoS of the flow, and is not sent to a node with no
subscriber of it (that node's ``GET /api/v1/cluster`` figures count no record); a
retained message set through A is given to a new subscriber on C; a shared
subscription ``$share/g/...`` with members on B and C hands each message to exactly one
member of the group. The paho scenarios of
tests/integration/test_broker_clients.py run with the publisher on A, the subscriber on
B and a persistent subscriber's return on C.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from functools import partial

import paho.mqtt.client as paho
import pytest

from tests.cluster.conftest import Cluster, wait_routed
from tests.integration.test_broker_clients import SCENARIOS, Placement
from tests.support.paho_clients import paho_client, stop, subscribe
from tests.support.waiting import wait_for

COUNT = 20


def drain(inbox: queue.Queue[paho.MQTTMessage], count: int) -> list[paho.MQTTMessage]:
    """The next ``count`` messages of ``inbox`` (each within 10 s)."""
    return [inbox.get(timeout=10) for _ in range(count)]


@pytest.mark.parametrize("version", [4, 5], ids=["v311", "v5"])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_on_a_is_received_on_b_and_c(cluster: Cluster, version: int, qos: int) -> None:
    a, b, c = cluster.nodes
    topic = f"plant/{version}-{qos}"
    subscribers = [
        paho_client(node, f"route-{node.node_id}-{version}-{qos}", version) for node in (b, c)
    ]
    for client, _ in subscribers:
        subscribe(client, f"{topic}/+/temp", qos)
    wait_routed(b, a)
    wait_routed(c, a)
    publisher, _ = paho_client(a, f"route-pub-{version}-{qos}", version)
    for n in range(COUNT):
        publisher.publish(f"{topic}/{n % 3}/temp", b"%d" % n, qos=qos).wait_for_publish(10)
    for node, (client, inbox) in zip((b, c), subscribers, strict=True):
        got = drain(inbox, COUNT)
        assert [m.payload for m in got] == [b"%d" % n for n in range(COUNT)], node.node_id
        assert {m.qos for m in got} == {qos}, node.node_id
        stop(client)
    stop(publisher)


def test_a_publish_goes_only_to_nodes_with_a_matching_subscriber(cluster: Cluster) -> None:
    a, b, c = cluster.nodes
    only_b, inbox = paho_client(b, "only-b", 5)
    subscribe(only_b, "only-b/#", 1)
    watcher, fences = paho_client(c, "fence-c", 5)
    subscribe(watcher, "fence/c", 0)
    wait_routed(b, a)
    wait_routed(c, a)
    publisher, _ = paho_client(a, "only-b-pub", 5)

    def fenced() -> int:
        """C's records received once a fence from A reached C: node C's topic is read
        in order, so everything A sent C before the fence has been counted."""
        publisher.publish("fence/c", b"fence", qos=0)
        while fences.get(timeout=10).payload != b"fence":
            pass
        return int(c.members()["figures"]["batches_received"])

    before = fenced()
    for n in range(COUNT):
        publisher.publish(f"only-b/{n}", b"%d" % n, qos=1).wait_for_publish(10)
    assert [m.payload for m in drain(inbox, COUNT)] == [b"%d" % n for n in range(COUNT)]
    # Node C has no subscriber of only-b/#: it received the second fence and nothing else.
    assert fenced() - before == 1
    for client in (only_b, watcher, publisher):
        stop(client)


def test_retained_message_set_on_a_reaches_a_new_subscriber_on_c(cluster: Cluster) -> None:
    a, _, c = cluster.nodes
    publisher, _ = paho_client(a, "retain-pub", 5)
    publisher.publish("status/door", b"open", qos=1, retain=True).wait_for_publish(10)
    stop(publisher)
    seen: list[paho.MQTTMessage] = []

    def a_new_subscriber_on_c_gets_it() -> bool:
        # Each attempt a new client: a retained message goes to a subscriber at SUBSCRIBE.
        late, inbox = paho_client(c, "retain-late", 4)
        try:
            subscribe(late, "status/#", 1)
            seen.append(inbox.get(timeout=0.5))
            return True
        except queue.Empty:
            return False
        finally:
            stop(late)

    wait_for(a_new_subscriber_on_c_gets_it, "a subscriber on node-c gets the retained message")
    assert (seen[0].topic, seen[0].payload, seen[0].retain, seen[0].qos) == (
        "status/door",
        b"open",
        True,
        1,
    )


def test_shared_subscription_delivers_each_message_once_across_nodes(cluster: Cluster) -> None:
    a, b, c = cluster.nodes
    ids = [f"share-{node.node_id}" for node in (b, c)]
    members = [paho_client(node, client_id, 5) for node, client_id in zip((b, c), ids, strict=True)]
    for client_id, (client, _) in zip(ids, members, strict=True):
        subscribe(client, "$share/g/jobs/#", 1)
        # A plain subscription of each member's own: its fence below.
        subscribe(client, f"fence/{client_id}", 0)
    wait_routed(b, a)
    wait_routed(c, a)
    publisher, _ = paho_client(a, "share-pub", 5)
    count = 40
    for n in range(count):
        publisher.publish(f"jobs/{n % 4}", b"%d" % n, qos=1).wait_for_publish(10)
    for client_id in ids:
        publisher.publish(f"fence/{client_id}", b"fence", qos=0)
    received: list[bytes] = []
    for client, inbox in members:
        # Messages to one node arrive in order: once its fence is in, so is every job
        # routed to it before.
        while (message := inbox.get(timeout=10)).payload != b"fence":
            received.append(bytes(message.payload))
        stop(client)
    stop(publisher)
    assert sorted(received, key=int) == [b"%d" % n for n in range(count)]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_paho_scenario_with_clients_on_different_nodes(
    cluster: Cluster, scenario: Callable[[Placement], None]
) -> None:
    a, b, c = cluster.nodes
    scenario(Placement(publisher=a, subscriber=b, returning=c, routed=partial(wait_routed, b, a)))
