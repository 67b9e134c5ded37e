"""Takeover across nodes (issue 17, Deliver 3): one owner node per client id at a time.

A persistent client connected to node A is taken over by the same client id connecting
to node B: A ends the old connection (MQTT 5: DISCONNECT 0x8E Session taken over
[MQTT-3.1.4-3]; 3.1.1: the connection is closed), B answers CONNACK with Session
Present, and the session moves whole: the messages A had sent and not had
acknowledged are sent again on B with DUP set and their order kept [MQTT-4.4.0-1],
[MQTT-3.3.1-1], those still queued for it follow (read back from the store, they may
carry DUP too), and later messages reach it at B.
Raw packets (tests/support/mqtt_raw.py) over real sockets, so the test sees
exactly what the client gets; the publisher is on node C.

Wills follow the session: a will with a delay, left by a client of node A, reaches a
watcher on node B when the delay runs out; the client's return on node C within the
delay cancels it [MQTT-3.1.3-9].
"""

from __future__ import annotations

from typing import Any

from tests.cluster.conftest import Cluster, wait_routed
from tests.conformance.support import (
    V5,
    VERSIONS,
    closed_with,
    connect,
    connected,
    nothing_arrives,
    ping,
    publish,
    recv_publish,
    subscribe,
)
from tests.conformance.test_07_will import expect_will, will
from tests.conformance.test_08_session import persistent
from tests.support.mqtt_raw import RawClient

# A v5 client takes two messages at a time (Receive Maximum): two are in flight at A
# when it is taken over and the rest wait queued in its session.
RECEIVE_MAXIMUM = 2
COUNT = 5


def connect_fields(version: int) -> dict[str, Any]:
    fields = persistent(version, seconds=300)
    if version == V5:
        fields["properties"] = [*fields["properties"], ("receive_maximum", RECEIVE_MAXIMUM)]
    return fields


@VERSIONS
def test_takeover_across_nodes_moves_the_session(cluster: Cluster, version: int) -> None:
    a, b, c = cluster.nodes
    client_id, topic = f"mover-{version}", f"orders/{version}"
    old = connected(a, client_id, version, **connect_fields(version))
    assert subscribe(old, (f"{topic}/#", 1)) == [1]
    wait_routed(a, c)
    publisher = connected(c, f"orders-pub-{version}", version)
    for n in range(COUNT):
        publish(publisher, f"{topic}/{n}", b"%d" % n, qos=1)
    # The first messages reach the client at A, which does not acknowledge them.
    in_flight = RECEIVE_MAXIMUM if version == V5 else COUNT
    sent_at_a = [recv_publish(old, timeout=10) for _ in range(in_flight)]
    assert [p["payload"] for p in sent_at_a] == [b"%d" % n for n in range(in_flight)]

    new, connack = connect(b, client_id, version, **connect_fields(version))
    # [MQTT-3.2.2-2]: the session was there; the old connection ends at A.
    assert (connack["reason_code"], connack["session_present"]) == (0, True)
    assert closed_with(old, timeout=10) == ([0x8E] if version == V5 else [])

    redelivered = []
    for _ in range(COUNT):
        packet = recv_publish(new, timeout=10)
        new.send({"type": "puback", "packet_id": packet["packet_id"]})
        redelivered.append(packet)
    assert [p["payload"] for p in redelivered] == [b"%d" % n for n in range(COUNT)]
    # Those A had sent go again with DUP [MQTT-3.3.1-1]; the session comes from the
    # store, so the queued ones may carry it too ("might be re-delivery").
    assert all(p["dup"] for p in redelivered[:in_flight])

    # Its subscription now lives at B: a later message is routed there.
    wait_routed(b, c)
    publish(publisher, f"{topic}/later", b"later", qos=1)
    assert recv_publish(new, timeout=10)["payload"] == b"later"
    for client in (new, publisher):
        client.close()


def test_clean_start_on_another_node_discards_the_session(cluster: Cluster) -> None:
    a, b, c = cluster.nodes
    old = connected(a, "restarter", V5, **persistent(V5, seconds=300))
    assert subscribe(old, ("restart/#", 1)) == [1]
    new = connected(b, "restarter", V5, clean=True)
    assert closed_with(old, timeout=10) == [0x8E]
    # [MQTT-3.1.2-4]: a clean start begins empty; nothing of the old session is kept.
    assert subscribe(new, ("restart/fence", 0)) == [0]
    wait_routed(b, c)
    publisher = connected(c, "restart-pub", V5)
    publish(publisher, "restart/old", b"old subscription", qos=1)
    publish(publisher, "restart/fence", b"fence")
    assert recv_publish(new, timeout=10)["payload"] == b"fence"
    for client in (new, publisher):
        client.close()


# Longer than a claim across nodes takes, so a return comes within it.
WILL_DELAY = 5


def will_watcher(cluster: Cluster) -> RawClient:
    """A watcher of ``wills/#`` on node B, routed from node A."""
    a, b, _ = cluster.nodes
    watch = connected(b, "will-watcher", V5)
    assert subscribe(watch, ("wills/#", 1)) == [1]
    wait_routed(b, a)
    return watch


def leave_a_will(cluster: Cluster, client_id: str, delay: int) -> None:
    """``client_id`` connects to node A with a will of that delay and vanishes."""
    dying = connected(
        cluster.nodes[0], client_id, V5, **persistent(V5, seconds=60),
        will=will(f"wills/{client_id}", will_delay_interval=delay),
    )  # fmt: skip
    dying.close()  # no DISCONNECT: the will stands


def test_will_with_a_delay_reaches_a_watcher_on_another_node(cluster: Cluster) -> None:
    watch = will_watcher(cluster)
    leave_a_will(cluster, "delayed", delay=1)
    expect_will(watch, "wills/delayed")
    watch.close()


def test_a_return_on_another_node_cancels_a_delayed_will(cluster: Cluster) -> None:
    watch = will_watcher(cluster)
    leave_a_will(cluster, "returning", delay=WILL_DELAY)
    back = connected(cluster.nodes[2], "returning", V5, **persistent(V5, seconds=60))
    ping(back)
    nothing_arrives(watch, timeout=WILL_DELAY + 1)
    for client in (back, watch):
        client.close()
