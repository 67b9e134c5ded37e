"""Wills outlive their node (issue 24, docs/cluster.md "Wills").

- A client with a will (v5, Will Delay Interval, a persistent session) is on node B,
  which is killed with SIGKILL. Another client of B reconnects to C, which adopts B's
  sessions: the will is published by C once its delay has run, and a watcher on A gets
  it. If the will's own client reconnects first (it adopts B itself), the will is
  cancelled [MQTT-3.1.3-9].
- A client leaves B without DISCONNECT; its will waits for its delay. B is killed and
  started again at once: it restores the pending will from the store and publishes it
  when it is due.
- Clean sessions (3.1.1 clean session, 5.0 expiry 0) on B with wills: B is killed, C
  adopts B's clients and publishes both wills at once; a clean client that had sent
  DISCONNECT before the kill has no will to publish.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import ClusterFactory, ClusterNode, wait_routed
from tests.conformance.support import V5, connect, connected, subscribe
from tests.conformance.test_08_session import persistent
from tests.support.mqtt_raw import RawClient

WILL_DELAY = 3
ARRIVAL_TIMEOUT = 30.0


def with_will(node: ClusterNode, client_id: str, topic: str) -> RawClient:
    """A persistent v5 client of ``node`` whose will, on ``topic``, waits WILL_DELAY s."""
    fields = persistent(V5, seconds=600)
    will = {"topic": topic, "payload": b"gone", "qos": 1, "retain": False,
            "properties": [("will_delay_interval", WILL_DELAY)]}  # fmt: skip
    client, connack = connect(node, client_id, V5, will=will, **fields)
    assert connack["reason_code"] == 0
    return client


def watching(node: ClusterNode, topic: str) -> RawClient:
    watcher = connected(node, f"watch-{topic.replace('/', '-')}", V5)
    assert subscribe(watcher, (topic, 1)) == [1]
    return watcher


def wills_within(watcher: RawClient, seconds: float, enough: int | None = None) -> list[bytes]:
    """The wills ``watcher`` gets within ``seconds``, or until it has ``enough``."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and len(got) != enough:
        try:
            packet = watcher.recv(timeout=left)
        except TimeoutError:
            break
        if packet["type"] == "publish":
            got.append(bytes(packet["payload"]))
            if packet["qos"]:
                watcher.send({"type": "puback", "packet_id": packet["packet_id"]})
    return got


@pytest.mark.parametrize("client_returns", [False, True], ids=["adopter-publishes", "cancelled"])
def test_a_will_on_a_killed_node_is_published_by_its_adopter(
    cluster_factory: ClusterFactory, client_returns: bool
) -> None:
    a, b, c = cluster_factory().nodes
    topic = f"wills/{'back' if client_returns else 'gone'}"
    watcher = watching(a, topic)
    testament = with_will(b, "testament", topic)
    other = connected(b, "bystander", V5, **persistent(V5, seconds=600))
    wait_routed(a, b)
    wait_routed(a, c)
    killed_at = time.monotonic()
    b.kill()
    testament.close()
    other.close()
    reconnecting = "testament" if client_returns else "bystander"
    client, connack = connect(c, reconnecting, V5, connack_timeout=60, **persistent(V5, 600))
    assert (connack["reason_code"], connack["session_present"]) == (0, True)
    got = wills_within(watcher, WILL_DELAY + (3 if client_returns else ARRIVAL_TIMEOUT))
    if client_returns:
        assert got == [], "the will's client came back within the delay"
    else:
        assert got[:1] == [b"gone"], "the adopter publishes the will"
        assert time.monotonic() - killed_at >= WILL_DELAY, "not before its delay"
    client.close()
    watcher.close()


def test_the_wills_of_clean_sessions_on_a_killed_node_are_published_by_its_adopter(
    cluster_factory: ClusterFactory,
) -> None:
    a, b, c = cluster_factory().nodes
    topic = "wills/clean"
    watcher = watching(a, topic)
    clean = []
    for client_id, version in [("clean-311", 4), ("clean-5", V5), ("polite", V5)]:
        will = {"topic": topic, "payload": client_id.encode(), "qos": 1, "retain": False}
        clean.append(connected(b, client_id, version, will=will))
    bystander = connected(b, "clean-bystander", V5, **persistent(V5, seconds=600))
    wait_routed(a, b)
    clean[2].send({"type": "disconnect"})  # a normal disconnect: its will is discarded
    time.sleep(0.5)  # B stored that
    b.kill()
    for client in clean:
        client.close()
    bystander.close()
    client, connack = connect(c, "clean-bystander", V5, connack_timeout=60, **persistent(V5, 600))
    assert connack["reason_code"] == 0
    got = wills_within(watcher, ARRIVAL_TIMEOUT, enough=2) + wills_within(watcher, 2)
    assert sorted(got) == [b"clean-311", b"clean-5"], "the adopter publishes both, once"
    client.close()
    watcher.close()


def test_a_pending_will_survives_a_restart_of_its_node(cluster_factory: ClusterFactory) -> None:
    a, b, _ = cluster_factory().nodes
    topic = "wills/restart"
    watcher = watching(a, topic)
    client = with_will(b, "restarted", topic)
    wait_routed(a, b)
    client.sock.close()  # no DISCONNECT: the will waits for its delay on B
    time.sleep(0.5)  # B has stored it pending
    left_at = time.monotonic()
    b.kill()
    b.start()
    got = wills_within(watcher, ARRIVAL_TIMEOUT)
    assert got[:1] == [b"gone"], "B restored the pending will and published it"
    assert time.monotonic() - left_at >= WILL_DELAY - 0.5
    watcher.close()
