"""A rolling restart of a cluster loses nothing (issue 24; docs/cluster.md, "Faults"):
three nodes, a QoS 1 publisher and a persistent QoS 1 subscriber streaming across them,
each node stopped in turn (SIGTERM) and started again on the same config while the
clients reconnect to another node. The stream is paced (tests/crash/clients.py,
``BACKLOG``): a QoS 1 PUBACK waits for Kafka, not for the subscriber, and an unpaced
publisher on a loaded machine outran the subscriber by more than the default
``queue_limit`` (1,000), whose drops are by design, not loss. Once every flow is
complete, every message the publisher had acknowledged reached the subscriber's
application (tests/crash/clients.py counts it as the application sees it).

Two builds: with ``FERROMQ_PREVIOUS_BUILD`` naming another build's ``ferromq`` command
(``/path/to/venv/bin/ferromq``, a build with the same frame format version), the nodes
restart alternately on that build and on this one (node-a on the previous, node-b on
this, node-c on the previous), so the cluster runs both at once. Without it, both builds
are this one: the test then shows the restart itself loses nothing, not that two builds
read each other (the golden frames, rust/ferromq-core/tests/frames_golden.rs, cover the
format across builds).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster.conftest import ClusterFactory, ClusterNode, wait_members, wait_routed
from tests.crash.clients import (
    QUEUE_ROOM,
    Publisher,
    Subscriber,
    Tally,
    pump,
    settle,
    stream,
    stream_while,
)

PREVIOUS_BUILD = os.environ.get("FERROMQ_PREVIOUS_BUILD")
TOPIC = "rolling/stream"
STREAM_SECONDS = 2.0
RECONNECT_TIMEOUT = 30.0
ACKNOWLEDGED_AT_LEAST = 200


@contextmanager
def build_for(restart: int) -> Iterator[None]:
    """The build a node restarts on: the previous one for even restarts when
    ``FERROMQ_PREVIOUS_BUILD`` is set (found first on ``PATH``, which is how the cluster
    fixtures find ``ferromq``), else this one."""
    if PREVIOUS_BUILD is None or restart % 2:
        yield
        return
    command = Path(PREVIOUS_BUILD)
    assert command.name == "ferromq" and command.is_file(), PREVIOUS_BUILD
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{command.parent}{os.pathsep}{os.environ['PATH']}")
        yield


class Clients:
    """The publisher and the subscriber, each with the node it is connected to."""

    def __init__(self, nodes: list[ClusterNode]) -> None:
        self.nodes = nodes
        self.publisher = Publisher("rolling-pub", TOPIC, 1, 4)
        self.subscriber = Subscriber("rolling-sub", TOPIC, 1, 4)
        self.publisher_at, self.subscriber_at = nodes[1], nodes[0]
        self.subscriber.connect(self.subscriber_at.host, self.subscriber_at.port, True)
        wait_routed(self.subscriber_at, self.publisher_at)
        self.publisher.connect(self.publisher_at.host, self.publisher_at.port)

    def stream(self, seconds: float) -> None:
        stream(self.publisher, self.subscriber, seconds)

    def leave(self, stopped: ClusterNode) -> None:
        """Reconnect the clients of ``stopped`` to the other nodes, apart if possible."""
        alive = [node for node in self.nodes if node is not stopped]
        if self.subscriber_at is stopped:
            self.subscriber_at = next(
                (node for node in alive if node is not self.publisher_at), alive[0]
            )
            self._reconnect(self.subscriber_at, self._connect_subscriber)
        if self.publisher_at is stopped:
            self.publisher_at = next(
                (node for node in alive if node is not self.subscriber_at), alive[0]
            )
            self._reconnect(self.publisher_at, self.publisher.connect)

    def _connect_subscriber(self, host: str, port: int) -> None:
        self.subscriber.connect(host, port, False)

    def _reconnect(self, node: ClusterNode, connect: object) -> None:
        """Connect until the node takes the client (its claim may wait for the stopped
        node's adopter)."""
        assert callable(connect)
        deadline = time.monotonic() + RECONNECT_TIMEOUT
        while True:
            try:
                connect(node.host, node.port)
                pump(self.publisher, self.subscriber, publishing=False)
                return
            except (ConnectionError, OSError, TimeoutError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def test_a_rolling_restart_loses_no_acknowledged_message(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(count=3, extra=QUEUE_ROOM)
    clients = Clients(cluster.nodes)
    clients.stream(STREAM_SECONDS)
    for restart, node in enumerate(cluster.nodes):
        node.stop()  # SIGTERM: a clean stop
        clients.leave(node)
        clients.stream(STREAM_SECONDS)
        # Traffic goes on while the node starts: its start waits for its adopter to
        # finish with its topic, which must not wait for the cluster to fall quiet.
        with build_for(restart):
            stream_while(clients.publisher, clients.subscriber, node.start)
        for member in cluster.nodes:
            wait_members(member, alive=3)
        clients.stream(STREAM_SECONDS)
    # What was routed to a node's topic just before its stop reaches the subscriber
    # once the node's adopter, or the node back, reads it: seconds later, and after
    # newer messages (docs/cluster.md, "Order"). So the settle waits out a long quiet.
    settle(clients.publisher, clients.subscriber, quiet=10.0)

    tally = Tally.of(clients.publisher, clients.subscriber)
    assert tally.lost == [], str(tally)
    assert tally.acknowledged >= ACKNOWLEDGED_AT_LEAST, str(tally)
