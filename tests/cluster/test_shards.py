"""A cluster of nodes of several shards (docs/cluster.md, "Nodes of several shards"):
each shard is a member, named ``<node>.<shard>``, and a node's shards reach each other
over the node's rings, never through Kafka.

The crash trials are the promise's kinds of kill on a node of shards, mid-stream at
QoS 1 and QoS 2: the shard that holds the publisher's or the subscriber's session
(the supervisor starts it again), or the supervisor alone (its shards follow it; the
node is started again). The client reconnects to the same node and the stream goes
on, then settles: no acknowledged message lost, none delivered twice (QoS 1 again only
with DUP), as the client applications count them (tests/crash/clients.py).

Runs with ``FERROMQ_CLUSTER_SHARDS=2`` (or more); skipped at one shard per node.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from ferromq._core import shard_of
from tests.cluster.conftest import (
    NODE_SHARDS,
    ClusterFactory,
    ClusterNode,
    reconnect,
    streaming,
    wait_routed,
)
from tests.crash.clients import QUEUE_ROOM, Publisher, Subscriber, Tally, settle, stream
from tests.crash.trial import shard_pids, wait_gone

pytestmark = pytest.mark.skipif(
    NODE_SHARDS < 2, reason="nodes of one shard (set FERROMQ_CLUSTER_SHARDS=2)"
)

STREAM = 1.0  # seconds of publishing before a kill and after the reconnect
RESTART_TIMEOUT = 30.0
_SHARD_STARTED = re.compile(r"shard started .*\bshard=(\d+) pid=(\d+)")


def shard_pid(node: ClusterNode, shard: int) -> int | None:
    """The pid the node's supervisor last started shard ``shard`` as."""
    pid = None
    for found in _SHARD_STARTED.finditer(node.log()):
        if int(found[1]) == shard:
            pid = int(found[2])
    return pid


def kill_shard(node: ClusterNode, shard: int) -> None:
    """SIGKILL shard ``shard`` of ``node``; returns once the supervisor started it again."""
    victim = shard_pid(node, shard)
    assert victim is not None, node.log()
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + RESTART_TIMEOUT
    while shard_pid(node, shard) in (victim, None):
        assert time.monotonic() < deadline, f"shard {shard} not started again:\n{node.log()}"
        time.sleep(0.05)


def kill_supervisor(node: ClusterNode) -> None:
    """SIGKILL the node's supervisor alone, wait for its shards to follow, start it again."""
    shards = shard_pids(node)
    node.process.send_signal(signal.SIGKILL)
    node.process.wait(10)
    wait_gone(shards)
    node.start()


def test_every_shard_is_a_member_and_siblings_route_over_the_rings(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(count=2)
    a, b = cluster.nodes
    listed = {member["node_id"]: member for member in a.members()["nodes"]}
    assert sorted(listed) == sorted(a.member_ids + b.member_ids)
    assert {member["node"] for member in listed.values()} == {"node-a", "node-b"}
    assert {member["state"] for member in listed.values()} == {"alive"}
    # A subscriber on each shard of node b, and one beside the publisher on node a.
    subscribers = []
    for shard in range(NODE_SHARDS):
        client_id = next(
            f"sibling-sub-{n}"
            for n in range(1000)
            if shard_of(f"sibling-sub-{n}", NODE_SHARDS) == shard
        )
        subscriber = Subscriber(client_id, "siblings/t", 1, 5)
        subscriber.connect(b.host, b.port, subscribe=True)
        subscribers.append(subscriber)
    local = Subscriber("sibling-local", "siblings/t", 1, 5)
    local.connect(a.host, a.port, subscribe=True)
    wait_routed(b, a)
    publisher = Publisher("sibling-pub", "siblings/t", 1, 5)
    publisher.connect(a.host, a.port)
    stream(publisher, subscribers[0], STREAM, [*subscribers[1:], local])
    settle(publisher, subscribers[0], others=[*subscribers[1:], local])
    for reader in (*subscribers, local):
        tally = Tally.of(publisher, reader)
        assert tally.lost == [] and tally.duplicated == [], f"{reader.client_id}: {tally}"
    assert Tally.of(publisher, local).acknowledged > 0


@pytest.mark.parametrize(
    ("version", "qos", "victim", "kill"),
    [
        (5, 2, "subscriber", "shard"),
        (4, 1, "subscriber", "shard"),
        (5, 2, "publisher", "shard"),
        (4, 1, "publisher", "shard"),
        (5, 2, "subscriber", "supervisor"),
        (4, 1, "publisher", "supervisor"),
    ],
    ids=lambda value: str(value),
)
def test_kill_9_of_a_shard_or_a_supervisor_loses_and_doubles_nothing(
    cluster_factory: ClusterFactory, version: int, qos: int, victim: str, kill: str
) -> None:
    cluster = cluster_factory(count=2, extra=QUEUE_ROOM)
    a, b = cluster.nodes
    name = f"{victim}-{kill}-{version}-{qos}"
    publisher, subscriber = streaming(a, b, name, f"shards/{name}", qos, version, STREAM)
    moving, node = (subscriber, b) if victim == "subscriber" else (publisher, a)
    if kill == "shard":
        kill_shard(node, shard_of(moving.client_id, NODE_SHARDS))
    else:
        kill_supervisor(node)
    reconnect(moving, node)
    stream(publisher, subscriber, STREAM)
    settle(publisher, subscriber)
    tally = Tally.of(publisher, subscriber)
    print(f"{name}: {tally}")  # pytest -s
    assert tally.lost == [], str(tally)
    assert tally.duplicated == [], str(tally)
    assert tally.acknowledged > 0
