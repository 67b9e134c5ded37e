"""Kafka frozen and resumed (issue 17, Deliver 4): a Kafka of the test's own (the
suite's must keep serving the other tests) is stopped with SIGSTOP under two nodes and
continued with SIGCONT.

What a user would notice while it is frozen: a publisher and a subscriber on the same
node go on as before (QoS 0 and 1; the PUBACK comes); a QoS 1 message for a subscriber
on the other node is held, its PUBACK with it, and does not arrive. Once Kafka
continues, the held PUBACKs come, the subscriber on the other node receives every
message published while Kafka was frozen, in order, and later ones too: nothing lost.
The absence checks while frozen wait a bounded while: nothing can come that the test
could order them by.
"""

from __future__ import annotations

import os
import signal

from tests.cluster.conftest import ClusterFactory, wait_routed
from tests.conformance.support import (
    V5,
    connected,
    nothing_arrives,
    publish,
    receive,
    subscribe,
)
from tests.support import services

HELD = 5  # cross-node messages published while Kafka is frozen
WHILE_FROZEN = 2.0  # how long an absence is watched for while Kafka is frozen


def test_kafka_frozen_holds_cross_node_work_and_loses_nothing(
    cluster_factory: ClusterFactory, kafka_server: services.KafkaServer
) -> None:
    a, b = cluster_factory(2, kafka=kafka_server.bootstrap).nodes
    local = connected(a, "frozen-local-sub", V5)
    assert subscribe(local, ("local/#", 1)) == [1]
    remote = connected(b, "frozen-remote-sub", V5)
    assert subscribe(remote, ("remote/#", 1)) == [1]
    wait_routed(b, a)
    local_pub = connected(a, "frozen-local-pub", V5)
    remote_pub = connected(a, "frozen-remote-pub", V5)

    os.kill(kafka_server.pid, signal.SIGSTOP)
    # Same node: delivered and acknowledged as ever.
    publish(local_pub, "local/0", b"qos0")
    assert publish(local_pub, "local/1", b"qos1", qos=1) is not None  # its PUBACK
    assert [receive(local, timeout=10)["payload"] for _ in range(2)] == [b"qos0", b"qos1"]
    # Another node: held, unacknowledged, not delivered.
    for n in range(HELD):
        remote_pub.send(
            {"type": "publish", "topic": f"remote/{n}", "payload": b"%d" % n, "qos": 1,
             "packet_id": n + 1}
        )  # fmt: skip
    nothing_arrives(remote_pub, timeout=WHILE_FROZEN)
    nothing_arrives(remote, timeout=WHILE_FROZEN)
    # Local traffic still flows while cross-node work waits.
    assert publish(local_pub, "local/2", b"still", qos=1) is not None
    assert receive(local, timeout=10)["payload"] == b"still"

    os.kill(kafka_server.pid, signal.SIGCONT)
    acks = [remote_pub.recv(timeout=60) for _ in range(HELD)]
    assert [(p["type"], p["packet_id"], p["reason_code"]) for p in acks] == [
        ("puback", n + 1, 0) for n in range(HELD)
    ]
    got = [receive(remote, timeout=60)["payload"] for _ in range(HELD)]
    assert got == [b"%d" % n for n in range(HELD)]
    publish(remote_pub, "remote/after", b"after", qos=1)
    assert receive(remote, timeout=30)["payload"] == b"after"
    for client in (local, remote, local_pub, remote_pub):
        client.close()
