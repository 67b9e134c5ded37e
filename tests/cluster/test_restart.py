"""A node stopped and started again (a rolling restart) keeps its sessions and gets what
was routed to it meanwhile (docs/cluster.md, "Faults"): while it is down other nodes
still hold its filters and route to its Kafka topic, acknowledging publishers once Kafka
has the records; started again under its node id, it restores the sessions it owns from
Redis and reads its topic from its committed offset. Nobody adopts a node that returns
within the adoption delay, so its clients find their sessions where they left them.
"""

from __future__ import annotations

from tests.cluster.conftest import ClusterFactory, wait_members, wait_routed
from tests.conformance.support import VERSIONS, connected, subscribe
from tests.conformance.test_08_session import persistent, resume
from tests.support.mqtt_raw import RawClient

MESSAGES = 200


def take_all(client: RawClient, count: int) -> list[int]:
    """``count`` QoS 1 messages, each acknowledged, as their payloads' numbers."""
    received = []
    for _ in range(count):
        packet = client.recv(timeout=30)
        assert packet["type"] == "publish", packet
        received.append(int(bytes(packet["payload"])))
        client.send({"type": "puback", "packet_id": packet["packet_id"]})
    return received


@VERSIONS
def test_a_restarted_node_delivers_what_was_published_while_it_was_down(
    cluster_factory: ClusterFactory, version: int
) -> None:
    a, b = cluster_factory(count=2).nodes
    client_id = f"rolling-{version}"
    subscriber = connected(a, client_id, version, **persistent(version, seconds=600))
    assert subscribe(subscriber, ("rolling/#", 1)) == [1]
    wait_routed(a, b)
    subscriber.send({"type": "disconnect"})
    subscriber.close()

    a.stop()  # SIGTERM: a clean stop, its sessions stay in Redis
    publisher = connected(b, f"rolling-pub-{version}", version)
    for n in range(MESSAGES):
        publisher.send(
            {"type": "publish", "topic": "rolling/n", "payload": b"%d" % n, "qos": 1,
             "packet_id": n % 60000 + 1}
        )  # fmt: skip
        ack = publisher.recv(timeout=30)
        assert (ack["type"], ack["packet_id"]) == ("puback", n % 60000 + 1), ack
    publisher.close()

    a.start()
    wait_members(b, alive=2)
    subscriber = resume(a, client_id, version)
    assert sorted(set(take_all(subscriber, MESSAGES))) == list(range(MESSAGES))
    subscriber.close()
