"""A ``[[bridges]]`` entry on every node of a cluster (issue 27 item 2, docs/bridges.md):
one member runs it at a time (it holds the bridge in Redis), messages published at any
node reach the remote broker (a real Mosquitto) through it, and when that member is
killed with ``kill -9`` another takes the bridge over and carries on."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import paho.mqtt.client as paho

from tests.cluster.conftest import ClusterFactory, ClusterNode
from tests.support.mosquitto import Mosquitto
from tests.support.paho_clients import paho_client

TAKEOVER_TIMEOUT = 90.0


def _bridge(mosquitto: Mosquitto) -> str:
    return f"""
[[bridges]]
name = "central"
address = "{mosquitto.host}:{mosquitto.port}"
reconnect_min = 1
reconnect_max = 2

[[bridges.topics]]
pattern = "sensors/#"
remote_prefix = "edge1/"
"""


def _running(nodes: list[ClusterNode], timeout: float = TAKEOVER_TIMEOUT) -> ClusterNode:
    """The one node whose current incarnation has connected the bridge."""
    deadline = time.monotonic() + timeout
    while True:
        running = [node for node in nodes if "bridge connected" in node.log()]
        if running:
            assert len(running) == 1, [node.node_id for node in running]
            return running[0]
        assert time.monotonic() < deadline, "no node connected the bridge"
        time.sleep(0.1)


def _published(node: ClusterNode, topic: str, payload: bytes) -> None:
    client, _ = paho_client(node, f"pub-{time.monotonic_ns()}", 5)
    client.publish(topic, payload, qos=1).wait_for_publish(10)
    client.disconnect()
    client.loop_stop()


def _arrives(inbox: queue.Queue[paho.MQTTMessage], node: ClusterNode, payload: bytes) -> None:
    """Publish at ``node`` until ``payload`` arrives at Mosquitto: the bridge's
    subscription reaches the other nodes through Kafka a moment after it is made."""
    deadline = time.monotonic() + TAKEOVER_TIMEOUT
    while True:
        _published(node, "sensors/t", payload)
        try:
            while (message := inbox.get(timeout=1)).payload != payload:
                pass
            assert message.topic == "edge1/sensors/t"
            return
        except queue.Empty:
            assert time.monotonic() < deadline, f"{payload!r} never arrived"


def test_one_member_runs_a_bridge_and_another_takes_it_over_after_kill_9(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    mosquitto = Mosquitto(tmp_path)
    mosquitto.start()
    try:
        nodes = cluster_factory(count=2, extra=_bridge(mosquitto)).nodes
        holder = _running(nodes)
        (other,) = [node for node in nodes if node is not holder]
        other.wait_for_log("bridge held by another member")
        central, inbox = paho_client(mosquitto, "central-app", 5)
        central.subscribe("edge1/#", qos=1)
        _arrives(inbox, other, b"via-the-holder")
        assert mosquitto.log().count("as ferromq-bridge-central") == 1
        holder.kill()
        assert _running([other]) is other
        _arrives(inbox, other, b"after-the-takeover")
        central.disconnect()
        central.loop_stop()
    finally:
        mosquitto.stop()
