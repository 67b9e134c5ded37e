"""``[[bridges]]`` (ferromq.bridge) between a running ``ferromq serve`` and a real
Mosquitto (Debian's ``mosquitto``), and between two ferromq brokers, with paho-mqtt
clients on both sides over real sockets: ``out`` topics arrive there under the remote
prefix, ``in`` topics here under the local one, in MQTT 3.1.1 (Mosquitto's bridge flag)
and 5.0 (No Local); a topic bridged both ways is not sent back; QoS 1 messages
published while the remote broker is down wait in the bridge's session and arrive
once it is back, also across a ``kill -9`` of ferromq; a bad bridge is one line from
``check-config``."""

from __future__ import annotations

import queue
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conftest import RunningBroker, Starter, start_broker
from tests.support.admin_client import admin_config, api, ok, scrape, value
from tests.support.commands import one_line_error, run_cli
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_raw import RawClient, sys_value_reaches
from tests.support.paho_clients import paho_client
from tests.support.services import free_port

pytestmark = pytest.mark.skipif(shutil.which("mosquitto") is None, reason="no mosquitto")


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    broker = Mosquitto(tmp_path)
    broker.start()
    yield broker
    broker.stop()


def _bridge(address: str, version: str, topics: str, extra: str = "") -> str:
    return f"""[[bridges]]
name = "central"
address = "{address}"
version = "{version}"
reconnect_min = 1
reconnect_max = 2
{extra}
{topics}
"""


EDGE_TOPICS = """[[bridges.topics]]
pattern = "sensors/#"
direction = "out"
remote_prefix = "edge1/"

[[bridges.topics]]
pattern = "cmd/#"
direction = "in"
remote_prefix = "edge1/"
"""


class _Endpoint:
    """host and port of a broker, for paho_client."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port


def _client(
    where: RunningBroker | Mosquitto,
    client_id: str,
    *filters: str,
    clean: bool = True,
    qos: int = 1,
) -> tuple[paho.Client, queue.Queue[paho.MQTTMessage]]:
    client, inbox = paho_client(_Endpoint(where.host, where.port), client_id, 5, clean=clean)
    acknowledged: queue.Queue[int] = queue.Queue()
    client.on_subscribe = lambda _c, _u, mid, *_: acknowledged.put(mid)
    sent = {client.subscribe(topic_filter, qos=qos)[1] for topic_filter in filters}
    assert {acknowledged.get(timeout=5) for _ in filters} == sent
    return client, inbox


def _publish(
    where: RunningBroker | Mosquitto, topic: str, payloads: list[bytes], qos: int = 1
) -> None:
    client, _ = paho_client(_Endpoint(where.host, where.port), f"pub-{time.monotonic_ns()}", 5)
    for payload in payloads:
        client.publish(topic, payload, qos=qos).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def _received(inbox: queue.Queue[paho.MQTTMessage], count: int) -> list[tuple[str, bytes]]:
    return [(m.topic, bytes(m.payload)) for m in (inbox.get(timeout=10) for _ in range(count))]


def _connected(broker: RunningBroker, times: int = 1) -> None:
    deadline = time.monotonic() + 20
    while broker.log().count("bridge connected") < times:
        assert time.monotonic() < deadline, broker.log()[-3000:]
        time.sleep(0.05)


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_out_and_in_topics_cross_a_mosquitto_bridge_under_their_prefixes(
    started: Starter, loop: str, mosquitto: Mosquitto, version: str
) -> None:
    remote = f"{mosquitto.host}:{mosquitto.port}"
    edge = started(loop, _bridge(remote, version, EDGE_TOPICS))
    _connected(edge)
    central, central_inbox = _client(mosquitto, "central-app", "edge1/sensors/#")
    local, local_inbox = _client(edge, "local-app", "cmd/#")
    _publish(edge, "sensors/t1", [b"21.5", b"21.6"])
    assert _received(central_inbox, 2) == [
        ("edge1/sensors/t1", b"21.5"),
        ("edge1/sensors/t1", b"21.6"),
    ]
    _publish(mosquitto, "edge1/cmd/reboot", [b"now"])
    assert _received(local_inbox, 1) == [("cmd/reboot", b"now")]
    # Not out: cmd/ is only "in"; nothing else crossed.
    _publish(edge, "cmd/local", [b"stays"])
    _publish(edge, "sensors/t1", [b"marker"])
    assert _received(central_inbox, 1) == [("edge1/sensors/t1", b"marker")]
    for client in (central, local):
        client.disconnect()
        client.loop_stop()


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_a_topic_bridged_both_ways_is_not_sent_back(
    started: Starter, loop: str, mosquitto: Mosquitto, version: str
) -> None:
    topics = '[[bridges.topics]]\npattern = "shared/#"\ndirection = "both"\n'
    edge = started(loop, _bridge(f"{mosquitto.host}:{mosquitto.port}", version, topics))
    _connected(edge)
    central, central_inbox = _client(mosquitto, "central-app", "shared/#")
    local, local_inbox = _client(edge, "local-app", "shared/#")
    _publish(edge, "shared/a", [b"from-edge"])
    _publish(mosquitto, "shared/b", [b"from-central"])
    _publish(edge, "shared/end", [b"end"])
    # Each once on each side (messages from both sides may interleave either way).
    expected = [("shared/a", b"from-edge"), ("shared/b", b"from-central"), ("shared/end", b"end")]
    assert sorted(_received(central_inbox, 3)) == expected
    assert sorted(_received(local_inbox, 3)) == expected
    time.sleep(0.5)  # an echo would come within a round trip
    assert central_inbox.empty() and local_inbox.empty()
    for client in (central, local):
        client.disconnect()
        client.loop_stop()


@pytest.mark.parametrize("qos", [1, 2])
def test_messages_wait_for_a_remote_broker_that_is_down_even_across_kill_9(
    tmp_path: Path, loop: str, mosquitto: Mosquitto, qos: int
) -> None:
    topics = EDGE_TOPICS.replace('direction = "out"', f'direction = "out"\nqos = {qos}')
    config = _bridge(f"{mosquitto.host}:{mosquitto.port}", "5", topics)
    store = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    edge = start_broker(tmp_path, loop, config, env=store)
    try:
        _connected(edge)
        # A persistent subscriber on Mosquitto, there before and after its restart.
        central, _ = _client(mosquitto, "central-app", "edge1/#", clean=False, qos=qos)
        central.disconnect()
        central.loop_stop()
        mosquitto.stop()
        edge.wait_for_log("bridge disconnected")
        _publish(edge, "sensors/t1", [b"%d" % n for n in range(10)], qos)
        edge.kill()  # kill -9 while the messages wait for the bridge
        edge = start_broker(tmp_path, loop, config, env=store)
        _publish(edge, "sensors/t1", [b"%d" % n for n in range(10, 20)], qos)
        mosquitto.start()
        _connected(edge)
        central, central_inbox = paho_client(
            _Endpoint(mosquitto.host, mosquitto.port),
            "central-app",
            5,
            clean=False,
        )
        got = _received(central_inbox, 20)
        assert got == [("edge1/sensors/t1", b"%d" % n) for n in range(20)]
        time.sleep(0.5)
        assert central_inbox.empty(), "a message came twice"
        central.disconnect()
        central.loop_stop()
    finally:
        edge.stop()


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_a_bridge_over_websocket_crosses_a_mosquitto_both_ways(
    started: Starter, loop: str, mosquitto: Mosquitto, version: str
) -> None:
    remote = f"ws://{mosquitto.host}:{mosquitto.websocket_port}/mqtt"
    edge = started(loop, _bridge(remote, version, EDGE_TOPICS))
    _connected(edge)
    central, central_inbox = _client(mosquitto, "central-app", "edge1/sensors/#")
    local, local_inbox = _client(edge, "local-app", "cmd/#")
    # Past 125 and 65,535 bytes: every length form of a frame, both ways.
    payloads = [b"21.5", b"x" * 300, b"y" * 70_000]
    _publish(edge, "sensors/t1", payloads)
    assert _received(central_inbox, 3) == [("edge1/sensors/t1", p) for p in payloads]
    _publish(mosquitto, "edge1/cmd/reboot", [b"now", b"z" * 70_000])
    assert _received(local_inbox, 2) == [("cmd/reboot", b"now"), ("cmd/reboot", b"z" * 70_000)]
    for client in (central, local):
        client.disconnect()
        client.loop_stop()


def test_a_bridge_over_websocket_reaches_a_second_ferromq(started: Starter, loop: str) -> None:
    websocket_port = free_port()
    central = started(
        loop,
        '[[listeners]]\nport = 1883\n[[listeners]]\nname = "ws"\n'
        f'port = {websocket_port}\nprotocol = "ws"\n',
    )
    remote = f"ws://{central.host}:{websocket_port}/mqtt"
    edge = started(loop, _bridge(remote, "5", EDGE_TOPICS))
    _connected(edge)
    app, inbox = _client(central, "central-app", "edge1/#")
    local, local_inbox = _client(edge, "local-app", "cmd/#")
    _publish(edge, "sensors/t2", [b"1", b"2" * 200])
    assert _received(inbox, 2) == [("edge1/sensors/t2", b"1"), ("edge1/sensors/t2", b"2" * 200)]
    _publish(central, "edge1/cmd/x", [b"go"])
    assert _received(local_inbox, 1) == [("cmd/x", b"go")]
    central.wait_for_log("client connected", "ferromq-bridge-central", "listener=ws")
    for client in (app, local):
        client.disconnect()
        client.loop_stop()


def test_a_second_ferromq_is_bridged_as_a_mosquitto_is(started: Starter, loop: str) -> None:
    central = started(loop, "")
    admin_port = free_port()
    edge = started(
        loop,
        "[sys]\ninterval = 1\n"
        + admin_config(admin_port)
        + _bridge(f"{central.host}:{central.port}", "5", EDGE_TOPICS),
    )
    _connected(edge)
    metrics = scrape(admin_port)
    assert value(metrics, "ferromq_bridge_up", bridge="central") == 1
    assert value(metrics, "ferromq_bridge_connects_total", bridge="central") == 1
    status, answer = api(admin_port, "GET", "/bridges")
    assert status == 200
    assert [(b["name"], b["connected"], b["connects"]) for b in answer["items"]] == [
        ("central", True, 1)
    ]
    assert f"central  {central.host}:{central.port}  True" in ok(admin_port, "bridges")
    watcher = RawClient(edge.host, edge.port, 5)
    assert watcher.connect("watcher")["reason_code"] == 0
    sys_value_reaches(watcher, "$SYS/broker/bridges/connected", 1)
    app, inbox = _client(central, "central-app", "edge1/#")
    local, local_inbox = _client(edge, "local-app", "cmd/#")
    _publish(edge, "sensors/t2", [b"1"])
    assert _received(inbox, 1) == [("edge1/sensors/t2", b"1")]
    _publish(central, "edge1/cmd/x", [b"go"])
    assert _received(local_inbox, 1) == [("cmd/x", b"go")]
    for client in (app, local):
        client.disconnect()
        client.loop_stop()


@pytest.mark.parametrize(
    ("bridge", "error"),
    [
        (_bridge("nowhere", "5", EDGE_TOPICS), "bridges[0].address: expected host:port"),
        (_bridge("ftp://h:1/x", "5", EDGE_TOPICS), "bridges[0].address: scheme 'ftp'"),
        (_bridge("ws://:80/mqtt", "5", EDGE_TOPICS), "bridges[0].address: no host"),
        (_bridge("h:1", "5", ""), "bridges[0].topics: at least one"),
        (
            _bridge("h:1", "5", '[[bridges.topics]]\npattern = "a/#/b"\n'),
            'bridges[0].topics: "a/#/b" is no topic filter',
        ),
    ],
)
def test_a_bad_bridge_is_one_line_naming_its_key(tmp_path: Path, bridge: str, error: str) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text(bridge)
    one_line_error(run_cli("check-config", "-c", str(config)), 2, error)
