"""Fixtures for the cluster suite (issue 17, docs/cluster.md): real ``ferromq serve``
nodes joined on the session's real Kafka and Redis (tests/conftest.py), and the helpers
the tests wait with.

- A node is one ``ferromq serve`` process with its own TOML file: one MQTT listener,
  the admin listener (loopback, no token), ``[cluster] node_id``, ``kafka``, ``redis`` and
  a ``topic_prefix``, and a ``[redis] key_prefix``. The nodes of one cluster share both
  prefixes; each cluster gets its own, so no test sees another test's nodes, topics or
  sessions. Its ports are chosen once, so ``kill()`` (SIGKILL) and ``start()`` again run
  the same node id on the same addresses, as an operator restarting it would.
- A node runs ``FERROMQ_CLUSTER_SHARDS`` shards (1 by default), each a member of the
  cluster (docs/cluster.md, "Nodes of several shards"); the helpers speak of nodes, a
  node's state being its members' (:meth:`ClusterNode.states`).
- The nodes of a cluster alternate event loops (uvloop, asyncio, uvloop, ...), so every
  cluster test runs both loops, across the bus, at once.
- Subscriptions reach the other nodes asynchronously (a SUBACK means the subscription is
  in Kafka, not that every node has read it): :func:`wait_routed` returns once a
  subscription made at one node before it was called is routed from another, by a
  publish probe on a topic of its own. The subscriptions topic is one partition read in
  order, so once a node routes the probe's (later) subscription it has read the test's.
  Membership is read from ``GET /api/v1/cluster`` (:func:`wait_members`).
- ``cluster_factory`` starts a test's own cluster (for tests that kill, stop or freeze
  something); ``cluster`` is one three-node cluster shared by a module's tests that
  leave the nodes as they found them.
- With ``FERROMQ_CLUSTER_NETNS=<ms>`` every node runs in a network namespace of its own
  (tests/cluster/netns.py), ``<ms>`` away from Redis and Kafka each way, its clients and
  admin API reached at its namespace's address: nothing may depend on loopback timing
  (issue 26 item 5). Tests that need the services on other addresses than the cluster's
  one Redis and one Kafka skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ferromq.cluster.names import member_id
from tests.cluster import netns
from tests.conftest import RunningBroker, serving, spawn_serve
from tests.crash.clients import Publisher, Subscriber, stream
from tests.support.admin_client import get
from tests.support.mqtt_raw import RawClient
from tests.support.services import free_ports

LOOPS = ("uvloop", "asyncio")
#: Shards per node (``FERROMQ_CLUSTER_SHARDS``, 1 by default): each is a member.
NODE_SHARDS = int(os.environ.get("FERROMQ_CLUSTER_SHARDS", "1"))
NODE_IDS = ("node-a", "node-b", "node-c", "node-d")
# A node started again right after its kill waits until its adopter has done with every
# member's topic (10 s quiet each): at two shards, two adoptions one after the other.
START_TIMEOUT = 60.0
ROUTE_TIMEOUT = 60.0
MEMBERS_TIMEOUT = 30.0
#: Milliseconds each node is from Redis and Kafka, each in a namespace of its own; None:
#: every node on the machine's loopback.
NETNS_DELAY = (
    float(os.environ["FERROMQ_CLUSTER_NETNS"]) if os.environ.get("FERROMQ_CLUSTER_NETNS") else None
)
NETNS_TOKEN = "netns-admin"  # an admin listener off loopback needs a token
RECONNECT_TIMEOUT = 60.0


@dataclass
class ClusterNode(RunningBroker):
    """One node of a test's cluster: a ``ferromq serve`` that can be killed and started
    again on its ports. ``log()`` reads the current incarnation's output."""

    node_id: str = ""
    admin_port: int = 0
    loop: str = "uvloop"
    incarnation: int = 1
    prefix: tuple[str, ...] = ()  # before its command: a network namespace's
    admin_token: str | None = None

    def start(self) -> None:
        """Start this node (again): the same node id, config and ports."""
        assert self.process.poll() is not None, f"{self.node_id} is still running"
        self.incarnation += 1
        self.process, self.log_path = _spawn(
            self.config_path, self.node_id, self.loop, self.incarnation, self.prefix
        )
        wait_serving(self)

    @property
    def member_ids(self) -> list[str]:
        """The members of the cluster this node is: itself, or one per shard."""
        return [member_id(self.node_id, shard, NODE_SHARDS) for shard in range(NODE_SHARDS)]

    def members(self) -> dict[str, Any]:
        """This node's ``GET /api/v1/cluster`` answer; fails on any other status."""
        status, body = get(self.admin_port, "/api/v1/cluster", self.admin_token, host=self.host)
        assert status == 200, f"GET /api/v1/cluster on {self.node_id}: {status} {body!r}"
        answer = json.loads(body)
        assert isinstance(answer, dict)
        return answer

    def states(self) -> dict[str, str]:
        """Each node's state as this node reports it, by node id: its members' state
        when they agree, else theirs joined by "/" (a node of shards is a member per
        shard, ``<node>.<shard>``)."""
        by_node: dict[str, set[str]] = {}
        for member in self.members()["nodes"]:
            by_node.setdefault(member["node"], set()).add(member["state"])
        return {node: "/".join(sorted(states)) for node, states in by_node.items()}


@dataclass
class Cluster:
    nodes: list[ClusterNode]
    prefix: str
    namespaces: list[netns.Namespace] = field(default_factory=list)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for space in self.namespaces:
            space.stop()


def _spawn(
    config: Path, node_id: str, loop: str, incarnation: int = 1, prefix: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = config.with_name(f"{node_id}.{incarnation}.log")
    env = {**os.environ, "FERROMQ_SERVER__WORKERS": str(NODE_SHARDS)}
    return spawn_serve(config, loop, log_path, env, prefix=prefix), log_path


def wait_serving(node: ClusterNode) -> None:
    """Until the node's MQTT and admin listeners are up; fails with its log if it exits."""
    admin_line = f"admin listening address={node.host}:{node.admin_port}"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if node.process.poll() is not None:
            raise RuntimeError(f"{node.node_id} exited while starting:\n{node.log()}")
        log = node.log()
        if serving(log) and admin_line in log:
            return
        time.sleep(0.05)
    node.process.kill()
    raise RuntimeError(f"{node.node_id} did not serve in {START_TIMEOUT:.0f} s:\n{node.log()}")


def node_config(
    node_id: str, mqtt_port: int, admin_port: int, kafka: str, redis: str, prefix: str,
    *, redis_cluster: bool = False, extra: str = "", lease: int = 5, host: str = "127.0.0.1",
    admin_token: str | None = None,
) -> str:  # fmt: skip
    """The TOML of one node of the cluster whose prefixes are ``prefix``, whose
    members hold a lease of ``lease`` seconds (docs/cluster.md, "Partitions"),
    listening for MQTT and admin requests on ``host`` (the admin API with
    ``admin_token``). The Redis store keeps every message a session may hold (the
    tests' streams raise ``session.queue_limit``: ``QUEUE_ROOM``)."""
    token = f'token = "{admin_token}"' if admin_token else ""
    return f"""\
[[listeners]]
host = "{host}"
port = {mqtt_port}

[admin]
enabled = true
host = "{host}"
port = {admin_port}
{token}

[cluster]
node_id = "{node_id}"
kafka = "{kafka}"
redis = "{redis}"
topic_prefix = "{prefix}."
lease = {lease}

[redis]
key_prefix = "{prefix}:"
cluster = {str(redis_cluster).lower()}
max_messages_per_client = 65535
{extra}"""


def start_cluster(
    directory: Path, kafka: str, redis: str, count: int = 3, *, redis_cluster: bool = False,
    extra: str = "", lease: int = 5,
) -> Cluster:  # fmt: skip
    """``count`` nodes (node-a, node-b, ...) of a new cluster, each serving and listing
    all of them alive; their event loops alternate. ``extra`` is appended to every
    node's TOML; ``lease`` is ``[cluster] lease``."""
    prefix = f"ct{uuid.uuid4().hex[:10]}"
    directory.mkdir(parents=True, exist_ok=True)
    cluster = Cluster([], prefix)
    ports = free_ports(2 * count)  # chosen together: none twice
    try:
        for n in range(count):
            place: dict[str, Any] = {}
            if NETNS_DELAY is not None:
                place = _namespace(cluster, kafka, redis, redis_cluster)
            add_node(
                cluster, directory, kafka, redis, (ports[2 * n], ports[2 * n + 1]),
                redis_cluster=redis_cluster, extra=extra, lease=lease, **place,
            )  # fmt: skip
        for node in cluster.nodes:
            wait_serving(node)
        for node in cluster.nodes:
            wait_members(node, alive=count)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _namespace(cluster: Cluster, kafka: str, redis: str, redis_cluster: bool) -> dict[str, Any]:
    """A namespace of its own for the cluster's next node: ``add_node``'s keywords."""
    if redis_cluster:
        pytest.skip("FERROMQ_CLUSTER_NETNS relays one Redis server, not a Redis Cluster")
    missing = netns.available()
    if missing:
        pytest.skip(f"FERROMQ_CLUSTER_NETNS: {missing}")
    redis_port = urlsplit(redis).port
    assert redis_port is not None and NETNS_DELAY is not None
    space = netns.Namespace([int(kafka.rsplit(":", 1)[1]), redis_port], delay_ms=NETNS_DELAY)
    space.start()
    cluster.namespaces.append(space)
    return {"host": space.node_address, "prefix": tuple(space.exec_prefix),
            "admin_token": NETNS_TOKEN}  # fmt: skip


def add_node(
    cluster: Cluster, directory: Path, kafka: str, redis: str, ports: tuple[int, int],
    *, host: str = "127.0.0.1", prefix: tuple[str, ...] = (), admin_token: str | None = None,
    **options: Any,
) -> ClusterNode:  # fmt: skip
    """Start the next node of ``cluster`` (node-a, node-b, ...; event loops alternate)
    on ``ports`` (MQTT, admin), listening for MQTT on ``host``, its command after
    ``prefix``; ``options`` as :func:`node_config`'s. It is not waited for."""
    n = len(cluster.nodes)
    node_id, loop = NODE_IDS[n], LOOPS[n % len(LOOPS)]
    mqtt_port, admin_port = ports
    config = directory / f"{node_id}.toml"
    text = node_config(
        node_id, mqtt_port, admin_port, kafka, redis, cluster.prefix,
        host=host, admin_token=admin_token, **options,
    )  # fmt: skip
    config.write_text(text)
    process, log_path = _spawn(config, node_id, loop, prefix=prefix)
    node = ClusterNode(
        host, mqtt_port, process, log_path, config,
        node_id=node_id, admin_port=admin_port, loop=loop, prefix=prefix,
        admin_token=admin_token,
    )  # fmt: skip
    cluster.nodes.append(node)
    return node


ClusterFactory = Callable[..., Cluster]


@pytest.fixture
def cluster_factory(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> Iterator[ClusterFactory]:
    """Start a test's own clusters (``count``, ``redis``/``redis_cluster``, ``kafka``,
    ``extra``, ``lease`` as :func:`start_cluster`); every node is stopped when the test
    ends."""
    clusters: list[Cluster] = []

    def start(count: int = 3, **options: Any) -> Cluster:
        kafka = options.pop("kafka", kafka_bootstrap)
        redis = options.pop("redis", redis_url)
        directory = tmp_path / f"cluster-{len(clusters)}"
        clusters.append(start_cluster(directory, kafka, redis, count, **options))
        return clusters[-1]

    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, redis_url: str
) -> Iterator[Cluster]:
    """Three nodes shared by a module's tests, which leave them running and use client
    ids and topics of their own."""
    running = start_cluster(tmp_path_factory.mktemp("cluster"), kafka_bootstrap, redis_url)
    yield running
    running.stop()


def wait_routed(subscriber_at: RunningBroker, publisher_at: RunningBroker) -> None:
    """Return once every subscription made at ``subscriber_at`` before this call is
    routed from ``publisher_at``: a probe subscribes at one, and QoS 0 probes are
    published at the other until one arrives."""
    topic = f"probe/{uuid.uuid4().hex}"
    listener = RawClient(subscriber_at.host, subscriber_at.port, version=5)
    prober = RawClient(publisher_at.host, publisher_at.port, version=5)
    try:
        assert listener.connect(f"{topic}-sub")["reason_code"] == 0
        assert prober.connect(f"{topic}-pub")["reason_code"] == 0
        listener.send(
            {"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 0}]}
        )
        assert listener.recv()["type"] == "suback"
        deadline = time.monotonic() + ROUTE_TIMEOUT
        while time.monotonic() < deadline:
            prober.send({"type": "publish", "topic": topic, "payload": b"probe", "qos": 0})
            try:
                if listener.recv(timeout=0.2)["type"] == "publish":
                    return
            except TimeoutError:
                continue
        pytest.fail(
            f"a subscription at {_name(subscriber_at)} was not routed from "
            f"{_name(publisher_at)} within {ROUTE_TIMEOUT:.0f} s"
            + "".join(f"\n--- {_name(n)}:\n{_tail(n)}" for n in (subscriber_at, publisher_at))
        )
    finally:
        listener.close()
        prober.close()


def streaming(
    publisher_at: ClusterNode, subscriber_at: ClusterNode, name: str, topic: str,
    qos: int, version: int, seconds: float,
) -> tuple[Publisher, Subscriber]:  # fmt: skip
    """A numbered publisher ``pub-<name>`` on ``publisher_at`` that has streamed
    ``seconds`` to a persistent subscriber ``sub-<name>`` of ``topic`` on
    ``subscriber_at``, once its subscription is routed (tests/crash/clients.py)."""
    publisher = Publisher(f"pub-{name}", topic, qos, version)
    subscriber = Subscriber(f"sub-{name}", topic, qos, version)
    subscriber.connect(subscriber_at.host, subscriber_at.port, subscribe=True)
    wait_routed(subscriber_at, publisher_at)
    publisher.connect(publisher_at.host, publisher_at.port)
    stream(publisher, subscriber, seconds)
    return publisher, subscriber


def reconnect(client: Publisher | Subscriber, node: ClusterNode) -> None:
    """Connect ``client`` to ``node``, again while the claim outlasts a CONNACK wait
    (finding the old node dead and adopting it), as a real client retries."""
    deadline = time.monotonic() + RECONNECT_TIMEOUT
    while True:
        try:
            if isinstance(client, Subscriber):
                client.connect(node.host, node.port, subscribe=False)
            else:
                client.connect(node.host, node.port)
            return
        except (TimeoutError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise


def wait_members(
    node: ClusterNode, alive: int, states: dict[str, str] | None = None
) -> dict[str, str]:
    """Until ``node``'s ``GET /api/v1/cluster`` lists ``alive`` nodes alive (every
    member of each) and each node id of ``states`` in that state; returns the states
    it saw (:meth:`ClusterNode.states`)."""
    deadline = time.monotonic() + MEMBERS_TIMEOUT
    while True:
        seen = node.states()
        counted = sum(state == "alive" for state in seen.values())
        wanted = all(seen.get(node_id) == state for node_id, state in (states or {}).items())
        if counted == alive and wanted:
            return seen
        if time.monotonic() > deadline:
            pytest.fail(
                f"{node.node_id} lists {seen}, not {alive} alive and {states} "
                f"after {MEMBERS_TIMEOUT:.0f} s"
            )
        time.sleep(0.1)


def _tail(broker: RunningBroker, lines: int = 15) -> str:
    return "\n".join(broker.log().splitlines()[-lines:])


def _name(broker: RunningBroker) -> str:
    return broker.node_id if isinstance(broker, ClusterNode) else f"port {broker.port}"
