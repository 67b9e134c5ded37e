"""``[auto_subscribe]`` (ferromq.auto_subscribe) on a running ``ferromq serve`` with
paho-mqtt 3.1.1 and 5.0 clients over real sockets: a device that never subscribes
receives on the filters rendered with its client id and user name, a filter whose
placeholder has no value for a client is skipped, a SIGHUP changes the filters for the
next CONNECT, and a bad filter is one line from ``check-config``. In the suite's
two-shard pass the publisher and the device are on different shards."""

from __future__ import annotations

import queue
import subprocess
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conftest import RunningBroker, Starter, hang_up
from tests.support.paho_clients import paho_client

CONFIG = """[auto_subscribe]
topics = {topics}
qos = 1
[storage]
backend = "memory"
"""


def _received(
    broker: RunningBroker, inbox: queue.Queue[paho.MQTTMessage], topic: str
) -> paho.MQTTMessage:
    """Publish on ``topic`` until one arrives: the subscription reaches the node's other
    shards a moment after the CONNACK."""
    publisher, _ = paho_client(broker, "publisher", 5)
    deadline = time.monotonic() + 5
    try:
        while True:
            publisher.publish(topic, b"order", qos=1).wait_for_publish(5)
            try:
                return inbox.get(timeout=0.2)
            except queue.Empty:
                assert time.monotonic() < deadline, f"nothing on {topic}:\n{broker.log()[-2000:]}"
    finally:
        publisher.disconnect()
        publisher.loop_stop()


@pytest.mark.parametrize("version", [4, 5])
def test_a_device_receives_on_its_rendered_filters_without_subscribing(
    started: Starter, loop: str, version: int
) -> None:
    topics = '["devices/%c/cmd", "users/%u/inbox"]'
    broker = started(loop, CONFIG.format(topics=topics))
    device, inbox = paho_client(
        broker, "dev-7", version, configure=lambda c: c.username_pw_set("alice")
    )
    message = _received(broker, inbox, "devices/dev-7/cmd")
    assert (message.topic, message.payload, message.qos) == ("devices/dev-7/cmd", b"order", 1)
    assert _received(broker, inbox, "users/alice/inbox").topic == "users/alice/inbox"
    device.disconnect()
    device.loop_stop()
    # Without a user name, users/%u/inbox has no value: skipped, the other made.
    anonymous, anonymous_inbox = paho_client(broker, "dev-8", version)
    assert _received(broker, anonymous_inbox, "devices/dev-8/cmd").topic == "devices/dev-8/cmd"
    anonymous.disconnect()
    anonymous.loop_stop()


def test_sighup_changes_the_filters_for_the_next_connect(started: Starter, loop: str) -> None:
    broker = started(loop, CONFIG.format(topics='["old/%c"]'))
    broker.config_path.write_text(CONFIG.format(topics='["new/%c"]'))
    hang_up(broker, "configuration reloaded")
    device, inbox = paho_client(broker, "dev-1", 5)
    assert _received(broker, inbox, "new/dev-1").topic == "new/dev-1"
    device.disconnect()
    device.loop_stop()


def test_a_bad_filter_is_one_line_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text(CONFIG.format(topics='["ok/%c", "a/%x"]'))
    checked = subprocess.run(
        ["ferromq", "check-config", "-c", str(config)], capture_output=True, text=True
    )
    assert checked.returncode == 2
    assert checked.stderr.strip().splitlines() == [
        'ferromq: error: auto_subscribe.topics[1]: topic "a/%x": unknown placeholder "%x" '
        "(%u, %c, %C, %{claim} or %%)"
    ]
