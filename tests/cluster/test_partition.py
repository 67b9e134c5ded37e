"""Partitions (issue 26 item 4; docs/cluster.md, "Partitions"): a node frozen, or
cut off from Redis, while its clients stay connected. No client id may be served by
two nodes at once, and nothing acknowledged may be lost.

A numbered publisher streams to persistent subscribers (tests/crash/clients.py: both
follow the protocol across reconnects; the tally counts what each subscriber's
application saw), at QoS 1 and QoS 2.

- **A node frozen** (SIGSTOP of all its processes, as a paused VM or a stalled host):
  the cluster lists it dead once its lease ends, and a subscriber that moves away is
  served by the node that adopts it. A second subscriber stays connected to the frozen
  node. When the node continues (SIGCONT), its lease has run out: it stops (one line,
  exit 3 for a node of one shard; a node's shards are started again by its supervisor)
  and the second subscriber's connection is closed, so that subscriber is never served
  by the frozen node and by the adopter at once. It reconnects elsewhere and gets
  everything it missed. The frozen node started again rejoins.
- **Redis frozen past the lease** (SIGSTOP of the cluster's Redis): every node stops
  within the lease rather than serve clients no one can account for; once Redis
  continues and the nodes start again, the clients reconnect, nothing acknowledged is
  lost, no QoS 2 message is delivered twice.
- **One node cut off** from Redis and Kafka by dropped traffic, in a network namespace
  of its own (tests/cluster/netns.py) while its clients still reach it: it stops
  within its lease and closes its clients' connections; the other nodes serve on, and
  its subscriber, reconnected to one of them, gets everything acknowledged. When the
  link heals the node starts again and rejoins.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.cluster import netns
from tests.cluster.conftest import (
    NETNS_TOKEN,
    NODE_SHARDS,
    ClusterFactory,
    ClusterNode,
    add_node,
    reconnect,
    streaming,
    wait_members,
    wait_routed,
    wait_serving,
)
from tests.crash.clients import QUEUE_ROOM, Subscriber, Tally, settle, stream
from tests.support import services
from tests.support.admin_client import get
from tests.support.services import free_ports
from tests.support.slow import slow
from tests.support.waiting import wait_for

STREAM = 1.0  # seconds of publishing before a fault and after the clients are back
LEASE = 5  # [cluster] lease, the default
# A node frozen or cut off stops within its lease; a node's shards may take a restart
# and a failed start more.
STOPPED_WITHIN = LEASE + 30.0
LOST_LINE = "cluster: lease lost"
CASES = [(5, 1), (5, 2), slow(4, 2)]  # (MQTT version, QoS); 3.1.1 with FERROMQ_SLOW=1


def node_pids(node: ClusterNode) -> list[int]:
    """The node's supervisor and its shards (or the node's one process)."""
    return [node.process.pid, *node.shards()]


def signal_node(node: ClusterNode, signum: int) -> None:
    for pid in node_pids(node):
        os.kill(pid, signum)


def assert_closed(subscriber: Subscriber, within: float) -> None:
    """The subscriber's connection is closed by its node within ``within`` seconds
    (whatever it was sent before is read and answered as a client would)."""
    assert subscriber.client is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            for packet in subscriber.client.poll():
                subscriber.read(packet)
        except (ConnectionError, OSError):
            return
        time.sleep(0.05)
    pytest.fail(f"{subscriber.client_id}'s connection to the frozen node is still open")


def session_listed(node: ClusterNode, client_id: str) -> bool:
    """Whether ``GET /api/v1/clients/<client_id>`` on ``node`` finds the session."""
    status, _ = get(
        node.admin_port, f"/api/v1/clients/{client_id}", node.admin_token, host=node.host
    )
    return status == 200


def check(*tallies: Tally) -> None:
    """No subscriber lost an acknowledged message or got one twice (all printed)."""
    print(*tallies, sep="\n")  # shown with pytest -s
    for tally in tallies:
        assert tally.lost == [], str(tally)
        assert tally.duplicated == [], str(tally)


@pytest.mark.parametrize(("version", "qos"), CASES, ids=lambda value: str(value))
def test_a_frozen_node_gives_its_clients_up_when_it_continues(
    cluster_factory: ClusterFactory, version: int, qos: int
) -> None:
    # The subscriber left on the frozen node is not read while it is frozen, so what is
    # published for it meanwhile is not paced by it: room for it in its queue.
    a, b, c = cluster_factory(3, extra=QUEUE_ROOM, lease=LEASE).nodes
    name = f"frozen-{version}-{qos}"
    publisher, moving = streaming(b, a, name, f"partition/{name}", qos, version, 0)
    staying = Subscriber(f"stay-{name}", moving.topic, qos, version)
    staying.connect(a.host, a.port, subscribe=True)
    # At two shards it may be another member of a than the first subscriber, whose new
    # key b must read before it routes there (a SUBACK does not wait for that).
    wait_routed(a, b)
    stream(publisher, moving, STREAM, others=[staying])

    signal_node(a, signal.SIGSTOP)
    try:
        wait_members(c, alive=2, states={a.node_id: "dead"})
        assert moving.client is not None
        moving.client.close()
        reconnect(moving, c)  # adopts the frozen node
        stream(publisher, moving, STREAM)
        # An operator finds the session of the client still on the frozen node on its
        # adopter, whichever shard took it (at two shards the adopter of both of the
        # node's members is the shard the moving client's CONNECT reached).
        wait_for(
            lambda: session_listed(c, staying.client_id),
            f"{c.node_id}'s admin API lists {staying.client_id}",
        )
        assert LOST_LINE not in a.log()
    finally:
        signal_node(a, signal.SIGCONT)

    assert_closed(staying, within=STOPPED_WITHIN)
    a.wait_for_log(LOST_LINE, timeout=STOPPED_WITHIN)
    if NODE_SHARDS == 1:
        assert a.process.wait(STOPPED_WITHIN) == 3
    reconnect(staying, b)
    stream(publisher, moving, STREAM, others=[staying])
    settle(publisher, moving, others=[staying])
    check(Tally.of(publisher, moving), Tally.of(publisher, staying))

    if NODE_SHARDS == 1:
        a.start()
    wait_members(b, alive=3)


@pytest.mark.parametrize(("version", "qos"), CASES[:2], ids=lambda value: str(value))
def test_redis_frozen_past_the_lease_stops_the_nodes_and_loses_nothing(
    redis_server: services.RedisServer, cluster_factory: ClusterFactory, version: int, qos: int
) -> None:
    a, b = cluster_factory(2, redis=redis_server.url, extra=QUEUE_ROOM, lease=LEASE).nodes
    name = f"redis-frozen-{version}-{qos}"
    publisher, subscriber = streaming(a, b, name, f"partition/{name}", qos, version, STREAM)

    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        with pytest.raises((ConnectionError, OSError)):
            stream(publisher, subscriber, STOPPED_WITHIN)
        for node in (a, b):
            node.wait_for_log(LOST_LINE, timeout=STOPPED_WITHIN)
            assert node.process.wait(STOPPED_WITHIN) == 3
        stopped_after = time.monotonic() - frozen_at
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)
    print(f"{name}: both nodes stopped {stopped_after:.1f} s after Redis froze")

    a.start()
    b.start()
    reconnect(subscriber, b)
    reconnect(publisher, a)
    stream(publisher, subscriber, STREAM)
    settle(publisher, subscriber)
    check(Tally.of(publisher, subscriber))


@pytest.fixture
def namespace(kafka_bootstrap: str, redis_url: str) -> Iterator[netns.Namespace]:
    """A namespace that reaches the session's Kafka and Redis at their addresses."""
    missing = netns.available()
    if missing:
        pytest.skip(missing)
    redis_port = urlsplit(redis_url).port
    assert redis_port is not None
    space = netns.Namespace([int(kafka_bootstrap.rsplit(":", 1)[1]), redis_port])
    space.start()
    yield space
    space.stop()


@pytest.mark.parametrize(("version", "qos"), CASES[:2], ids=lambda value: str(value))
def test_a_node_cut_off_from_redis_and_kafka_stops_and_its_subscriber_moves(
    cluster_factory: ClusterFactory,
    namespace: netns.Namespace,
    kafka_bootstrap: str,
    redis_url: str,
    version: int,
    qos: int,
) -> None:
    cluster = cluster_factory(2, extra=QUEUE_ROOM, lease=LEASE)
    a, b = cluster.nodes
    mqtt_port, admin_port = free_ports(2)
    c = add_node(
        cluster, a.config_path.parent, kafka_bootstrap, redis_url, (mqtt_port, admin_port),
        host=namespace.node_address, prefix=tuple(namespace.exec_prefix),
        admin_token=NETNS_TOKEN, extra=QUEUE_ROOM, lease=LEASE,
    )  # fmt: skip
    wait_serving(c)
    wait_members(a, alive=3)
    name = f"cut-{version}-{qos}"
    publisher, subscriber = streaming(a, c, name, f"partition/{name}", qos, version, STREAM)

    namespace.cut()
    cut_at = time.monotonic()
    with pytest.raises((ConnectionError, OSError)):  # the subscriber's, closed by c
        stream(publisher, subscriber, STOPPED_WITHIN)
    closed_after = time.monotonic() - cut_at
    c.wait_for_log(LOST_LINE, timeout=STOPPED_WITHIN)
    assert c.process.wait(STOPPED_WITHIN) == 3
    print(f"{name}: the cut-off node closed its clients {closed_after:.1f} s after the cut")
    assert closed_after < LEASE + 5

    reconnect(subscriber, b)  # the publisher on a never lost its connection
    stream(publisher, subscriber, STREAM)
    settle(publisher, subscriber)
    check(Tally.of(publisher, subscriber))

    namespace.heal()
    c.start()
    wait_members(a, alive=3)
