"""Redis and Kafka restarted under a stream (issue 24, docs/cluster.md "Faults").

A numbered QoS 1 or QoS 2 publisher on one node of three streams to a persistent
subscriber on another node (tests/crash/clients.py: both follow the protocol, and the
tally counts what the subscriber's application saw), so every message crosses Kafka
and every session write goes to Redis. Mid-stream the cluster's Redis or its Kafka,
each the test's own, is killed with SIGKILL, stays down while the stream goes on, and
is started again on the same port with the same files (Redis replays its AOF, written
with fsync always; Kafka recovers its log directory), while the stream still goes on.
Both clients stay connected throughout: while Redis is away (within the members'
lease) connected clients carry on and the store's writes are retried; while Kafka is
away cross-node acknowledgements are held and the records sent again.

The publisher pauses while ``BACKLOG`` of its messages are published but not yet
delivered (``stream`` in tests/crash/clients.py), well below the subscriber's queue
room: while Redis is away a QoS 1 delivery to a persistent session waits for the store,
but the publisher's PUBACK does not (it waits for Kafka), so an unpaced stream fills the
subscriber's queue, and a queue over ``queue_limit`` drops by design, which is not what
this test is about.

The stream must resume: a message published after the service answers again is
acknowledged. Then it settles. No acknowledged message may be lost, no QoS 2 message
delivered twice, and a QoS 1 message only again with DUP (neither client reconnects,
so nothing is ever resent by the publisher).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.cluster.conftest import Cluster, ClusterFactory, streaming
from tests.crash.clients import (
    QUEUE_ROOM,
    Publisher,
    Subscriber,
    Tally,
    settle,
    step,
    stream,
    stream_while,
)
from tests.support import services
from tests.support.slow import slow

STREAM = 1.0  # seconds of publishing before the kill and after the stream resumed
REDIS_DOWN = 2.0  # seconds Redis stays killed while the stream goes on
REDIS_LEASE = 15  # [cluster] lease: longer than Redis is away
KAFKA_DOWN = 3.0  # seconds Kafka stays killed while the stream goes on
RESUME_TIMEOUT = 60.0  # for a message published after the restart to be acknowledged
# (MQTT version, QoS): Redis restarts in a moment, so all four; a killed Kafka takes
# ~15 s to serve again (its old broker registration expires first, in 9 s), so three.
# (MQTT version, QoS); CI runs QoS 1 on 3.1.1 and QoS 2 on 5.0, the rest with FERROMQ_SLOW=1.
REDIS_CASES = [(4, 1), slow(5, 1), slow(4, 2), (5, 2)]
KAFKA_CASES = [(4, 1), slow(4, 2), (5, 2)]


def number(payload: bytes) -> int:
    return int.from_bytes(payload, "big")


def stream_until_resumed(publisher: Publisher, subscriber: Subscriber, after: int) -> None:
    """Stream until a message numbered above ``after`` is acknowledged."""
    deadline = time.monotonic() + RESUME_TIMEOUT
    while not any(number(payload) > after for payload in publisher.acknowledged):
        if time.monotonic() > deadline:
            pytest.fail(
                f"nothing published after message {after} acknowledged in "
                f"{RESUME_TIMEOUT:.0f} s; open flows {sorted(publisher.flows)[:10]}"
            )
        step(publisher, subscriber)


def kill_9(service: services.Service) -> None:
    """SIGKILL, as a crash or the OOM killer would stop it; the process is reaped."""
    os.kill(service.pid, signal.SIGKILL)
    service.stop()


def restart_mid_stream(
    cluster: Cluster,
    service: services.RedisServer | services.KafkaServer,
    down: float,
    name: str,
    version: int,
    qos: int,
) -> None:
    """Stream from node-a to node-b, restart ``service`` (killed, ``down`` seconds
    away, started again) mid-stream, then check what the subscriber got."""
    a, b, _ = cluster.nodes
    publisher, subscriber = streaming(a, b, name, f"restart/{name}", qos, version, STREAM)
    before = len(publisher.acknowledged)
    kill_9(service)
    stream(publisher, subscriber, down)
    stream_while(publisher, subscriber, service.start)
    back_at = publisher.next  # the last message published before the service was back
    while_away = len(publisher.acknowledged) - before
    stream_until_resumed(publisher, subscriber, back_at)
    stream(publisher, subscriber, STREAM)
    settle(publisher, subscriber)
    tally = Tally.of(publisher, subscriber)
    resumed = sum(number(payload) > back_at for payload in publisher.acknowledged)
    print(  # shown with pytest -s
        f"{name}: {tally}; {before} acknowledged before the kill, {while_away} until "
        f"{service.name} was back, {resumed} published after it"
    )
    assert tally.lost == [], str(tally)
    assert tally.duplicated == [], str(tally)
    assert resumed > 0


@pytest.mark.parametrize(("version", "qos"), REDIS_CASES, ids=lambda value: str(value))
def test_redis_restart_loses_and_doubles_nothing(
    redis_server: services.RedisServer, cluster_factory: ClusterFactory, version: int, qos: int
) -> None:
    # A lease that outlasts the restart: what a longer one is for (test_partition.py
    # has Redis away past the lease).
    cluster = cluster_factory(redis=redis_server.url, extra=QUEUE_ROOM, lease=REDIS_LEASE)
    restart_mid_stream(cluster, redis_server, REDIS_DOWN, f"redis-{version}-{qos}", version, qos)


@pytest.mark.parametrize(("version", "qos"), KAFKA_CASES, ids=lambda value: str(value))
def test_kafka_restart_loses_and_doubles_nothing(
    kafka_server: services.KafkaServer, cluster_factory: ClusterFactory, version: int, qos: int
) -> None:
    cluster = cluster_factory(kafka=kafka_server.bootstrap, extra=QUEUE_ROOM)
    restart_mid_stream(cluster, kafka_server, KAFKA_DOWN, f"kafka-{version}-{qos}", version, qos)
