"""``[[plugins]]`` (ferromq.plugins) in a running ``ferromq serve``, with clients over real
sockets: an intercepting plugin drops, rejects (v5: the reason code in PUBACK/PUBREC) and
rewrites messages, in order with the ones it passes; an observing plugin counts messages,
sees client events and publishes; a plugin that raises or hangs is logged, counted and
restarted while the broker keeps serving; a plugin installed as an entry point loads by
name; a missing plugin is one line from ``check-config``. The plugins are in
``tests/support/example_plugins.py``. In the suite's two-shard pass the clients may be
on different shards (each shard runs its own instance)."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.admin_client import admin_config, api, ok, scrape, value
from tests.support.commands import one_line_error, run_cli
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, subscribe
from tests.support.services import free_port

REPOSITORY = Path(__file__).resolve().parents[2]
MEMORY = '[storage]\nbackend = "memory"\n'
NOT_AUTHORIZED = 0x87
QUOTA_EXCEEDED = 0x97


def _plugin(name: str, **keys: str) -> str:
    lines = "".join(f"{key} = {value}\n" for key, value in keys.items())
    return f'[[plugins]]\nname = "{name}"\n{lines}'


class _Broker:
    """A broker with plugins from this repository and an admin listener for its metrics."""

    def __init__(
        self, tmp_path: Path, loop: str, config: str, env: dict[str, str] | None = None
    ) -> None:
        self.admin_port = free_port()
        self.running = start_broker(
            tmp_path,
            loop,
            config + MEMORY + admin_config(self.admin_port),
            env={"PYTHONPATH": str(REPOSITORY), **(env or {})},
        )

    def counter(self, name: str) -> float:
        return value(scrape(self.admin_port), f"ferromq_{name}_total")


def _publish(device: RawClient, topic: str, payload: bytes, qos: int, packet_id: int) -> int:
    """PUBLISH and, at QoS 1/2, the reason code of its PUBACK/PUBREC (the flow completed)."""
    packet: dict[str, Any] = {"type": "publish", "topic": topic, "payload": payload, "qos": qos}
    if qos:
        packet["packet_id"] = packet_id
    device.send(packet)
    if not qos:
        return 0
    ack = device.recv()
    assert ack["type"] == ("puback" if qos == 1 else "pubrec"), ack
    if qos == 2:
        device.send({"type": "pubrel", "packet_id": packet_id})
        assert device.recv()["type"] == "pubcomp"
    return int(ack.get("reason_code", 0))


def _device(broker: RunningBroker, client_id: str, version: int) -> RawClient:
    device = RawClient(broker.host, broker.port, version)
    assert device.connect(client_id)["reason_code"] == 0
    return device


def _wait_started(broker: RunningBroker, times: int) -> None:
    """Until the log says a plugin started ``times`` times (restarts included)."""
    deadline = time.monotonic() + 30
    while broker.log().count("plugin started") < times:
        assert time.monotonic() < deadline, broker.log()[-3000:]
        time.sleep(0.05)


def _received(inbox: queue.Queue[paho.MQTTMessage], marker: bytes) -> list[tuple[str, bytes]]:
    """(topic, payload) of each message up to the one whose payload is ``marker``."""
    got = []
    while (message := inbox.get(timeout=10)).payload != marker:
        got.append((message.topic, bytes(message.payload)))
    return got


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_an_intercepting_plugin_drops_rejects_and_rewrites_in_order(
    tmp_path: Path, loop: str, version: int, qos: int
) -> None:
    plugged = _Broker(tmp_path, loop, _plugin("tests.support.example_plugins:Moderator"))
    broker = plugged.running
    try:
        watcher, inbox = paho_client(broker, "watcher", 5)
        subscribe(watcher, "chat/#", 2)
        device = _device(broker, "device", version)
        sent = [
            ("chat/room", b"hello"),
            ("chat/room", b"buy spam now"),
            ("chat/secret", b"the code"),
            ("chat/shout/room", b"loud"),
            ("chat/room", b"bye"),
        ]
        answers = [
            _publish(device, topic, payload, qos, packet_id)
            for packet_id, (topic, payload) in enumerate(sent, start=1)
        ]
        _publish(device, "chat/room", b"end", qos, len(sent) + 1)
        assert _received(inbox, b"end") == [
            ("chat/room", b"hello"),
            ("chat/loud/room", b"LOUD"),
            ("chat/room", b"bye"),
        ]
        if qos:
            rejected = NOT_AUTHORIZED if version == 5 else 0  # 3.1.1 cannot refuse
            assert answers == [0, 0, rejected, 0, 0]
        assert plugged.counter("plugin_dropped") == 2
    finally:
        broker.stop()


def test_a_reject_code_comes_from_the_plugin_options(tmp_path: Path, loop: str) -> None:
    config = _plugin(
        "tests.support.example_plugins:Moderator", options=f"{{ reject_code = {QUOTA_EXCEEDED} }}"
    )
    broker = _Broker(tmp_path, loop, config).running
    try:
        device = _device(broker, "device", 5)
        assert _publish(device, "chat/secret", b"x", 1, 1) == QUOTA_EXCEEDED
        assert _publish(device, "other/topic", b"x", 1, 2) == 0x10  # not the plugin's
    finally:
        broker.stop()


def test_an_observing_plugin_counts_sees_events_and_publishes(tmp_path: Path, loop: str) -> None:
    broker = _Broker(tmp_path, loop, _plugin("tests.support.example_plugins:Tally")).running
    try:
        watcher, inbox = paho_client(broker, "watcher", 5)
        subscribe(watcher, "tally/#", 1)
        device = _device(broker, "sensor-1", 5)
        for packet_id in range(1, 11):
            assert _publish(device, "sensors/s1/t", b"20", 1, packet_id) in (0, 0x10)
        _publish(device, "other/topic", b"not seen", 1, 11)
        device.send({"type": "disconnect"})
        device.close()
        counts: list[int] = []
        events: list[dict[str, Any]] = []
        disconnected = False
        while not (counts and counts[-1] == 10 and disconnected):
            message = inbox.get(timeout=10)
            if message.topic == "tally/messages":
                counts.append(int(message.payload))
            else:
                events.append(json.loads(message.payload))
                disconnected = disconnected or events[-1]["kind"] == "disconnected"
        assert counts == sorted(counts)  # a running count, one publish per batch
        kinds = [(e["kind"], e["client_id"]) for e in events if e["client_id"] == "sensor-1"]
        assert kinds == [("connected", "sensor-1"), ("disconnected", "sensor-1")]
        assert {"kind": "subscribed", "client_id": "watcher", "filters": ["tally/#"]} in events
    finally:
        broker.stop()


def test_a_failing_plugin_is_restarted_and_the_broker_keeps_serving(
    tmp_path: Path, loop: str
) -> None:
    plugged = _Broker(tmp_path, loop, _plugin("tests.support.example_plugins:Fragile", timeout="1"))
    broker = plugged.running
    try:
        watcher, inbox = paho_client(broker, "watcher", 5)
        subscribe(watcher, "fragile/#", 1)
        device = _device(broker, "device", 5)
        assert _publish(device, "fragile/a", b"one", 1, 1) in (0, 0x10)
        assert inbox.get(timeout=10).payload == b"1:one"
        started = broker.log().count("plugin started")  # one per shard
        # It raises: the batch passes as it is (on_failure = "pass"), the plugin restarts.
        _publish(device, "fragile/a", b"boom", 1, 2)
        assert inbox.get(timeout=10).payload == b"boom"
        broker.wait_for_log("plugin failed, restarting", "RuntimeError: boom")
        _wait_started(broker, started + 1)
        # It hangs past its timeout: the same, and the broker never stopped serving.
        _publish(device, "fragile/a", b"hang", 1, 3)
        assert inbox.get(timeout=10).payload == b"hang"
        broker.wait_for_log("a batch took longer than 1 s")
        _publish(device, "fragile/a", b"after", 1, 4)
        payload = inbox.get(timeout=10).payload
        assert payload in (b"after", b"3:after"), payload  # passed while down, or the third
        assert plugged.counter("plugin_failures") == 2
        # The admin API and ferromq ctl say which plugin fails and why.
        status, answer = api(plugged.admin_port, "GET", "/plugins")
        assert status == 200
        [plugin] = answer["items"]
        assert plugin["name"] == "tests.support.example_plugins:Fragile"
        assert (plugin["intercepts"], plugin["failures"]) == (True, 2)
        assert plugin["last_error"] == "a batch took longer than 1 s"
        shown = ok(plugged.admin_port, "plugins")
        assert "tests.support.example_plugins:Fragile  fragile/#  True" in shown, shown
    finally:
        broker.stop()


def test_a_failing_plugin_drops_with_on_failure_drop(tmp_path: Path, loop: str) -> None:
    config = _plugin("tests.support.example_plugins:Fragile", on_failure='"drop"')
    broker = _Broker(tmp_path, loop, config).running
    try:
        watcher, inbox = paho_client(broker, "watcher", 5)
        subscribe(watcher, "#", 1)
        device = _device(broker, "device", 5)
        _publish(device, "fragile/a", b"boom", 1, 1)
        _publish(device, "marker", b"end", 1, 2)
        assert _received(inbox, b"end") == []
    finally:
        broker.stop()


def test_a_plugin_installed_as_an_entry_point_loads_by_name(tmp_path: Path, loop: str) -> None:
    site = tmp_path / "site"
    info = site / "moderation_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: moderation-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[ferromq.plugins]\nmoderator = tests.support.example_plugins:Moderator\n"
    )
    env = {"PYTHONPATH": f"{site}:{REPOSITORY}"}
    broker = _Broker(tmp_path, loop, _plugin("moderator"), env).running
    try:
        device = _device(broker, "device", 5)
        assert _publish(device, "chat/secret", b"x", 1, 1) == NOT_AUTHORIZED
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('name = "no_such_plugin"', ["plugins[0].name", "no_such_plugin", "entry point"]),
        ('name = "json:dumps"', ["plugins[0].name", "not a ferromq.plugins.Plugin"]),
        ('name = "tests.support.example_plugins:Moderator"\ntimeout = 0', ["plugins[0].timeout"]),
        ('name = "tests.support.example_plugins:Moderator"\noptions = 3', ["plugins[0].options"]),
    ],
)
def test_a_bad_plugin_entry_is_one_line(tmp_path: Path, entry: str, words: list[str]) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text(f"[[plugins]]\n{entry}\n")
    result = run_cli("check-config", "--config", str(config), env={"PYTHONPATH": str(REPOSITORY)})
    one_line_error(result, 2, *words)
