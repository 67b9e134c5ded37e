"""``[[rewrite.rules]]`` (ferromq.rewrite) on a running ``ferromq serve`` with paho-mqtt
3.1.1 and 5.0 clients over real sockets: a legacy device's PUBLISH, retained message and
will arrive on the rewritten topic and never on the one it sent; a SUBSCRIBE and its
UNSUBSCRIBE are rewritten with the client's id; a SIGHUP replaces the rules; a bad rule
is one line from ``check-config`` naming its key. In the suite's two-shard pass the
publisher and the subscriber may be on different shards."""

from __future__ import annotations

import queue
import socket
import threading
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.conftest import RunningBroker, Starter, hang_up
from tests.support.commands import one_line_error, run_cli
from tests.support.paho_clients import paho_client

LEGACY = """[[rewrite.rules]]
action = "publish"
source = "legacy/#"
re = '^legacy/([^/]+)/temp$'
to = "sensors/$1/temperature"
"""
COMMANDS = """[[rewrite.rules]]
action = "subscribe"
source = "cmd/#"
re = '^cmd/(.*)$'
to = "devices/%c/cmd/$1"
"""
MEMORY = '[storage]\nbackend = "memory"\n'


def _published(broker: RunningBroker, topic: str, payload: bytes, retain: bool = False) -> None:
    publisher, _ = paho_client(broker, "publisher", 5)
    publisher.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)
    publisher.disconnect()
    publisher.loop_stop()


def _subscriber(
    broker: RunningBroker, client_id: str, version: int, *filters: str
) -> tuple[paho.Client, queue.Queue[paho.MQTTMessage]]:
    """A client with a SUBACK for each of ``filters``."""
    client, inbox = paho_client(broker, client_id, version)
    acknowledged: queue.Queue[int] = queue.Queue()
    client.on_subscribe = lambda _c, _u, mid, *_: acknowledged.put(mid)
    sent = {client.subscribe(topic_filter, qos=1)[1] for topic_filter in filters}
    assert {acknowledged.get(timeout=5) for _ in filters} == sent
    return client, inbox


def _topics_until_marker(inbox: queue.Queue[paho.MQTTMessage], marker: bytes) -> list[str]:
    """The topics received up to the next ``sync/marker`` carrying ``marker``."""
    topics = []
    while True:
        message = inbox.get(timeout=5)
        if message.topic != "sync/marker":
            topics.append(message.topic)
        elif message.payload == marker:
            return topics


@pytest.mark.parametrize("version", [4, 5])
def test_a_legacy_publish_arrives_on_the_rewritten_topic_only(
    started: Starter, loop: str, version: int
) -> None:
    broker = started(loop, LEGACY + MEMORY)
    watcher, inbox = _subscriber(
        broker, "watcher", version, "sensors/+/temperature", "legacy/#", "sync/#"
    )
    _published(broker, "legacy/d1/temp", b"21.5")
    _published(broker, "legacy/d1/humidity", b"40")  # source matches, expression not: kept
    _published(broker, "sync/marker", b"1")
    assert _topics_until_marker(inbox, b"1") == ["sensors/d1/temperature", "legacy/d1/humidity"]
    # Retained under the rewritten topic.
    _published(broker, "legacy/d2/temp", b"19", retain=True)
    late, late_inbox = paho_client(broker, "late", version)
    late.subscribe("sensors/d2/temperature", qos=1)
    retained = late_inbox.get(timeout=5)
    assert (retained.topic, retained.payload, retained.retain) == (
        "sensors/d2/temperature",
        b"19",
        True,
    )
    for client in (watcher, late):
        client.disconnect()
        client.loop_stop()


def test_a_will_is_published_on_the_rewritten_topic(started: Starter, loop: str) -> None:
    broker = started(loop, LEGACY + MEMORY)
    watcher, inbox = _subscriber(broker, "watcher", 5, "sensors/#", "legacy/#", "sync/#")
    device = paho.Client(CallbackAPIVersion.VERSION2, client_id="d3", protocol=paho.MQTTv311)
    device.will_set("legacy/d3/temp", b"lost", qos=1)
    device.connect(broker.host, broker.port)
    device.loop_start()
    device.publish("sync/marker", b"d3", qos=1).wait_for_publish(5)
    assert _topics_until_marker(inbox, b"d3") == []
    device.loop_stop()
    sock = device.socket()
    assert isinstance(sock, socket.socket)
    sock.shutdown(socket.SHUT_RDWR)  # gone without DISCONNECT: the will is published
    will = inbox.get(timeout=10)
    assert (will.topic, will.payload) == ("sensors/d3/temperature", b"lost")
    watcher.disconnect()
    watcher.loop_stop()


@pytest.mark.parametrize("version", [4, 5])
def test_a_subscription_is_rewritten_with_the_client_id_and_so_is_its_unsubscribe(
    started: Starter, loop: str, version: int
) -> None:
    broker = started(loop, COMMANDS + MEMORY)
    device, inbox = _subscriber(broker, "dev-1", version, "cmd/#", "sync/#")
    _published(broker, "devices/dev-1/cmd/reboot", b"now")
    _published(broker, "devices/dev-2/cmd/reboot", b"not yours")
    _published(broker, "cmd/reboot", b"not rewritten")  # a publish: the rule is subscribe only
    _published(broker, "sync/marker", b"1")
    assert _topics_until_marker(inbox, b"1") == ["devices/dev-1/cmd/reboot"]
    unsubscribed = threading.Event()
    device.on_unsubscribe = lambda *_: unsubscribed.set()
    device.unsubscribe("cmd/#")  # rewritten as the SUBSCRIBE was
    assert unsubscribed.wait(5)
    _published(broker, "devices/dev-1/cmd/reboot", b"again")
    _published(broker, "sync/marker", b"2")
    assert _topics_until_marker(inbox, b"2") == []
    device.disconnect()
    device.loop_stop()


def test_sighup_replaces_the_rules(started: Starter, loop: str) -> None:
    broker = started(loop, LEGACY + MEMORY)
    broker.config_path.write_text(LEGACY.replace("sensors/$1", "metrics/$1") + MEMORY)
    hang_up(broker, "configuration reloaded")
    watcher, inbox = _subscriber(broker, "watcher", 5, "metrics/#", "sensors/#", "sync/#")
    _published(broker, "legacy/d1/temp", b"20")
    _published(broker, "sync/marker", b"1")
    assert _topics_until_marker(inbox, b"1") == ["metrics/d1/temperature"]
    watcher.disconnect()
    watcher.loop_stop()


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        (
            LEGACY.replace("^legacy/([^/]+)/temp$", "^legacy/([^/]+/temp$"),
            'rewrite.rules[0].re: "^legacy/([^/]+/temp$": unclosed group',
        ),
        (
            LEGACY.replace("sensors/$1", "sensors/$2"),
            "rewrite.rules[0].to: $2: the expression has 1 group(s)",
        ),
        (
            LEGACY.replace('action = "publish"', 'action = "both"'),
            "rewrite.rules[0].action: expected one of",
        ),
        (LEGACY.replace('source = "legacy/#"\n', ""), "rewrite.rules[0].source: required"),
    ],
)
def test_a_bad_rule_is_one_line_naming_its_key(tmp_path: Path, rule: str, error: str) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text(rule)
    one_line_error(run_cli("check-config", "-c", str(config)), 2, error)
