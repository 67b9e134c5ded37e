"""Exactly once across the cluster's crashes (issue 24, docs/cluster.md "Adoption").

A numbered QoS 1 or QoS 2 publisher streams to a persistent subscriber on another
node (tests/crash/clients.py: both follow the protocol across reconnects, and the
tally counts what the subscriber's application saw). Mid-stream the node of one of
them is killed with SIGKILL; that client reconnects to the third node, at once (the
claim waits until the node is found dead and adopted) or once that node lists the
victim dead, and the stream goes on, then settles. No acknowledged message may be
lost, no QoS 2 message delivered twice, and a QoS 1 message only again with DUP.

A journaled publisher's QoS 2 message goes to Kafka only once its node's store has
its packet id and its routes; the publisher's node killed between the two leaves the
routes in the store, which whoever restores the publisher sends again to each
destination whose topic lacks them (engine/cluster.rs, "Crossing QoS 2"). With a
second subscriber on the third node, a message crosses to two nodes at once. With an
APPLICATION subscriber (``app-``), its queue is a Kafka topic beside the Redis store.
With an intercepting plugin, every message waits for its verdict before it is routed.

``FERROMQ_CRASH_KILLS`` (default 1) kills per trial: the killed node is started again
after each kill, and the next kill takes the node the same client is on then.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    Cluster,
    ClusterFactory,
    ClusterNode,
    reconnect,
    wait_members,
    wait_routed,
)
from tests.crash.clients import (
    QUEUE_ROOM,
    Publisher,
    Subscriber,
    Tally,
    settle,
    stream,
)
from tests.support.slow import slow

KILLS = int(os.environ.get("FERROMQ_CRASH_KILLS", "1"))
REPOSITORY = Path(__file__).resolve().parents[2]  # the plugins' module path
STREAM = 1.0  # seconds of publishing before a kill and after the reconnect
AT_ONCE, ONCE_DEAD = "at-once", "once-dead"
SUBSCRIBERS_NODE, PUBLISHERS_NODE = "subscriber", "publisher"


def peer_port(client: Subscriber) -> int:
    assert client.client is not None
    return int(client.client.sock.getpeername()[1])


def node_of(cluster: Cluster, port: int) -> ClusterNode:
    return next(node for node in cluster.nodes if node.port == port)


def application_store(kafka_bootstrap: str) -> str:
    """Config putting APPLICATION clients' (``app-``) queues in Kafka."""
    return (
        '[storage]\napplication_client_prefixes = ["app-"]\napplication_store = "kafka"\n'
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
        f'topic_prefix = "exactly.{os.getpid()}.{time.monotonic_ns()}."\n'
    )


@pytest.mark.parametrize(
    ("version", "qos", "victim", "when", "nodes_subscribed", "subscriber_kind"),
    [
        (5, 2, SUBSCRIBERS_NODE, AT_ONCE, 1, "device"),
        (4, 2, SUBSCRIBERS_NODE, ONCE_DEAD, 1, "device"),
        (4, 1, SUBSCRIBERS_NODE, AT_ONCE, 1, "device"),
        (5, 2, PUBLISHERS_NODE, AT_ONCE, 1, "device"),
        (4, 2, PUBLISHERS_NODE, ONCE_DEAD, 1, "device"),
        (5, 1, PUBLISHERS_NODE, AT_ONCE, 1, "device"),
        (5, 2, PUBLISHERS_NODE, AT_ONCE, 2, "device"),
        # the subscriber's queue in Kafka (docs/architecture.md, "APPLICATION clients in Kafka")
        (5, 2, SUBSCRIBERS_NODE, AT_ONCE, 1, "app"),
        (5, 2, PUBLISHERS_NODE, AT_ONCE, 1, "app"),
    ],
    ids=lambda value: str(value),
)
def test_kill_9_of_a_node_loses_and_doubles_nothing(
    cluster_factory: ClusterFactory,
    kafka_bootstrap: str,
    version: int,
    qos: int,
    victim: str,
    when: str,
    nodes_subscribed: int,
    subscriber_kind: str,
) -> None:
    application = subscriber_kind == "app"
    extra = QUEUE_ROOM + (application_store(kafka_bootstrap) if application else "")
    prefix = "app-" if application else ""
    trial(cluster_factory(extra=extra), version, qos, victim, when, nodes_subscribed, prefix)


@pytest.mark.parametrize(
    ("qos", "victim"),
    # CI: QoS 2 with the publisher's node killed (the plugin's node); the rest slow.
    [(2, PUBLISHERS_NODE), slow(1, PUBLISHERS_NODE), slow(2, SUBSCRIBERS_NODE)],
    ids=lambda value: str(value),
)
def test_with_an_intercepting_plugin_a_kill_9_loses_and_doubles_nothing(
    cluster_factory: ClusterFactory, monkeypatch: pytest.MonkeyPatch, qos: int, victim: str
) -> None:
    """Every message waits for a plugin's verdict on the publisher's node
    (tests/support/example_plugins.py, ``PassThrough``) before it crosses."""
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    extra = QUEUE_ROOM + '[[plugins]]\nname = "tests.support.example_plugins:PassThrough"\n'
    trial(cluster_factory(extra=extra), 5, qos, victim, AT_ONCE, 1, "", tag="plugin-")


def trial(
    cluster: Cluster,
    version: int,
    qos: int,
    victim: str,
    when: str,
    nodes_subscribed: int,
    subscriber_prefix: str,
    tag: str = "",
) -> None:
    """Stream from a publisher on the first node to a subscriber on the second (and
    a third on the last with ``nodes_subscribed`` 2), kill the ``victim``'s node
    ``KILLS`` times, and check what the subscribers' applications saw."""
    a, b, c = cluster.nodes
    name = f"{tag}{victim}-{version}-{qos}-{when}-{nodes_subscribed}"
    topic = f"exactly/{name}"
    publisher = Publisher(f"pub-{name}", topic, qos, version)
    subscriber = Subscriber(f"{subscriber_prefix}sub-{name}", topic, qos, version)
    subscriber.connect(b.host, b.port, subscribe=True)
    wait_routed(b, a)
    # On the third node: it stays up, and the publisher moves to it.
    others = [Subscriber(f"sub-{name}-c", topic, qos, version)] if nodes_subscribed == 2 else []
    for other in others:
        other.connect(c.host, c.port, subscribe=True)
        wait_routed(c, a)
    publisher.connect(a.host, a.port)
    for kill in range(KILLS):
        stream(publisher, subscriber, STREAM, others)
        moving = subscriber if victim == SUBSCRIBERS_NODE else publisher
        staying = publisher if moving is subscriber else subscriber
        assert moving.client is not None and staying.client is not None
        dead = node_of(cluster, moving.client.sock.getpeername()[1])
        stayed = node_of(cluster, staying.client.sock.getpeername()[1])
        target = next(node for node in cluster.nodes if node not in (dead, stayed))
        also_moving = [o for o in others if o.client and peer_port(o) == dead.port]
        dead.kill()
        if when == ONCE_DEAD:
            wait_members(target, alive=2, states={dead.node_id: "dead"})
        reconnect(moving, target)
        for other in also_moving:
            reconnect(other, target)
        stream(publisher, subscriber, STREAM, others)
        settle(publisher, subscriber, others=others)
        for reader in (subscriber, *others):
            tally = Tally.of(publisher, reader)
            print(f"{name} kill {kill + 1}, {reader.client_id}: {tally}")  # pytest -s
            assert tally.lost == [], f"kill {kill + 1}, {reader.client_id}: {tally}"
            assert tally.duplicated == [], f"kill {kill + 1}, {reader.client_id}: {tally}"
        if kill + 1 < KILLS:
            dead.start()
            wait_members(target, alive=3)
    assert Tally.of(publisher, subscriber).acknowledged > 0
