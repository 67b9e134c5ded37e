"""The ``[stream]`` export on the embedded file sink, over real sockets: paho (v5) and raw
MQTT clients against ``ferromq serve``; what the broker wrote under
``[stream.files] directory`` is read back with fastavro, as Spark's avro source would.

Each test runs under uvloop and asyncio."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes

from tests.conftest import RunningBroker, start_broker
from tests.integration.test_embedded_store import publish_until_killed
from tests.support.admin_client import admin_config, get, scrape, value
from tests.support.commands import users_add
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import new_properties, paho_connect, stop
from tests.support.services import free_port

LOOPS = ["uvloop", "asyncio"]


def stream_broker(
    tmp_path: Path, loop: str, directory: Path, extra: str = "", files: str = ""
) -> RunningBroker:
    """A broker streaming to files in ``directory``; ``extra`` and ``files`` are more
    keys of ``[stream]`` and ``[stream.files]``."""
    config = f"""
[sys]
interval = 1

[stream]
enabled = true
node = "n1"
{extra}

[stream.files]
directory = "{directory}"
{files}
"""
    return start_broker(tmp_path, loop, config)


def records(directory: Path, kind: str) -> list[dict[str, Any]]:
    """Every record in the files in place under ``directory/kind``, in file order."""
    found: list[dict[str, Any]] = []
    for path in sorted((directory / kind).glob("*.avro")):
        with path.open("rb") as file:
            for record in fastavro.reader(file):
                assert isinstance(record, dict), record
                found.append(record)
    return found


def paho_v5(broker: RunningBroker, client_id: str) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.username_pw_set("alice")
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    client.connect(broker.host, broker.port)
    client.loop_start()
    assert connected.wait(5)
    return client


@pytest.mark.parametrize("loop", LOOPS)
def test_publishes_and_events_are_records_in_the_files(tmp_path: Path, loop: str) -> None:
    directory = tmp_path / "stream"
    broker = stream_broker(tmp_path, loop, directory, 'topics = ["dev/#"]')
    try:
        publisher = paho_v5(broker, "dev-1")
        for qos in (0, 1, 2):
            properties = new_properties(PacketTypes.PUBLISH)
            properties.ContentType = "application/json"
            properties.PayloadFormatIndicator = 1
            properties.ResponseTopic = "reply/dev-1"
            properties.CorrelationData = b"\x00\x01"
            properties.UserProperty = [("fw", "1.2"), ("fw", "1.3")]
            info = publisher.publish(
                "dev/1/temp", f"q{qos}".encode(), qos=qos, retain=qos == 2, properties=properties
            )
            info.wait_for_publish(5)
        publisher.publish("other/x", b"not streamed", qos=1).wait_for_publish(5)
        subscriber = paho_v5(broker, "sub-1")
        subscribed = threading.Event()
        subscriber.on_subscribe = lambda *_: subscribed.set()
        subscriber.subscribe("dev/#", qos=1)
        assert subscribed.wait(5)
        unsubscribed = threading.Event()
        subscriber.on_unsubscribe = lambda *_: unsubscribed.set()
        subscriber.unsubscribe("dev/#")
        assert unsubscribed.wait(5)
        subscriber.disconnect()
        subscriber.loop_stop()
        publisher.disconnect()
        publisher.loop_stop()
        # $SYS is published (and must not be streamed): wait until it has been.
        watcher = paho_v5(broker, "sys-watch")
        seen = threading.Event()
        watcher.on_message = lambda *_: seen.set()
        watcher.subscribe("$SYS/broker/uptime")
        assert seen.wait(5)
        watcher.disconnect()
        watcher.loop_stop()
    finally:
        assert broker.stop() == 0

    messages = records(directory, "messages")
    assert [(m["topic"], m["payload"], m["qos"]) for m in messages] == [
        ("dev/1/temp", b"q0", 0),
        ("dev/1/temp", b"q1", 1),
        ("dev/1/temp", b"q2", 2),
    ]
    for message in messages:
        assert message["schema_version"] == 1
        assert message["kind"] == "message"
        assert (message["node"], message["listener"]) == ("n1", "default")
        assert (message["client_id"], message["username"]) == ("dev-1", "alice")
        assert message["content_type"] == "application/json"
        assert message["payload_format"] == 1
        assert message["response_topic"] == "reply/dev-1"
        assert message["correlation_data"] == b"\x00\x01"
        assert message["user_properties"] == [
            {"key": "fw", "value": "1.2"}, {"key": "fw", "value": "1.3"},
        ]  # fmt: skip
    assert [m["retain"] for m in messages] == [False, False, True]
    assert len({m["id"] for m in messages}) == 3
    events = records(directory, "events")
    by_client = [(e["kind"], e["client_id"]) for e in events]
    for expected in [
        ("connected", "dev-1"),
        ("connected", "sub-1"),
        ("subscribed", "sub-1"),
        ("unsubscribed", "sub-1"),
        ("disconnected", "sub-1"),
        ("disconnected", "dev-1"),
    ]:
        assert expected in by_client, (expected, by_client)
    (subscribed_record,) = [
        e for e in events if e["kind"] == "subscribed" and e["client_id"] == "sub-1"
    ]
    assert (subscribed_record["topic"], subscribed_record["qos"]) == ("dev/#", 1)
    assert subscribed_record["listener"] == "default"
    disconnected = [e for e in events if e["kind"] == "disconnected"]
    assert {e["reason"] for e in disconnected} == {"client_disconnect"}
    assert not list(directory.rglob("*.part")), "every file closed into place at shutdown"


@pytest.mark.parametrize("loop", LOOPS)
def test_kill_9_loses_no_acknowledged_message_from_the_files(tmp_path: Path, loop: str) -> None:
    """A publisher streams QoS 1 messages with 50 in flight; the broker is killed with
    SIGKILL mid-stream. The restarted broker recovers the file left half-written, and
    every message whose PUBACK the publisher saw is in the files."""
    directory = tmp_path / "stream"
    broker = stream_broker(tmp_path, loop, directory)
    acknowledged = publish_until_killed(broker, lambda n: f"dev/{n % 7}", 2000)
    assert len(acknowledged) >= 2000
    assert list(directory.rglob(".*.part")), "the killed broker left its file half-written"

    broker = stream_broker(tmp_path, loop, directory)
    try:
        wait_until(lambda: "stream file recovered after a crash" in broker.log(), "recovered")
    finally:
        assert broker.stop() == 0
    stored = {int.from_bytes(m["payload"], "big") for m in records(directory, "messages")}
    missing = acknowledged - stored
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert not list(directory.rglob("*.part"))


@pytest.mark.parametrize("loop", LOOPS)
def test_files_roll_by_size_and_the_oldest_go_past_the_retained_bytes(
    tmp_path: Path, loop: str
) -> None:
    directory = tmp_path / "stream"
    files = "roll_bytes = 8192\nretention_bytes = 32768"
    broker = stream_broker(tmp_path, loop, directory, "events = false", files)
    try:
        publisher = RawClient(broker.host, broker.port, version=4)
        publisher.connect("p")
        for n in range(200):
            publisher.send(
                {"type": "publish", "topic": "t", "qos": 1, "packet_id": n + 1,
                 "payload": n.to_bytes(2, "big") + bytes(200)}
            )  # fmt: skip
            assert publisher.recv()["type"] == "puback"  # one batch (one block) each
    finally:
        assert broker.stop() == 0
    written = sorted((directory / "messages").glob("*.avro"))
    sizes = [path.stat().st_size for path in written]
    assert len(written) >= 3, "rolled at 8 KiB"
    assert sum(sizes) <= 32768, "files beyond 32 KiB in all were deleted"
    kept = [int.from_bytes(m["payload"][:2], "big") for m in records(directory, "messages")]
    assert kept[0] > 0, "the oldest went first"
    assert kept == list(range(kept[0], 200)), "what is kept is the newest, whole"
    assert not list((directory / "events").glob("*.avro")), "events = false"


@pytest.mark.parametrize("loop", LOOPS)
def test_metrics_and_readyz_report_the_stream(tmp_path: Path, loop: str) -> None:
    directory = tmp_path / "stream"
    port = free_port()
    config = (
        admin_config(port)
        + f"""
[stream]
enabled = true

[stream.files]
directory = "{directory}"
"""
    )
    broker = start_broker(tmp_path, loop, config)
    try:
        assert value(scrape(port), "ferromq_stream_records_total") == 0
        publisher = RawClient(broker.host, broker.port, version=4)
        publisher.connect("p")
        for n in range(10):
            publisher.send(
                {"type": "publish", "topic": "t", "qos": 1, "packet_id": n + 1, "payload": b"x"}
            )
            assert publisher.recv()["type"] == "puback"
        samples = scrape(port)
        assert value(samples, "ferromq_stream_records_total") == 11, "10 messages, 1 connect"
        assert value(samples, "ferromq_stream_batches_total") >= 1
        assert value(samples, "ferromq_stream_errors_total") == 0
        assert value(samples, "ferromq_stream_up") == 1
        status, body = get(port, "/readyz")
        assert status == 200
        assert json.loads(body)["stream"] == {"state": "ok", "errors": 0, "last_error": ""}
    finally:
        assert broker.stop() == 0
    assert len(list((directory / "messages").glob("*.avro"))) == 1, "closed at shutdown"


def wait_until(condition: Callable[[], bool], what: str, deadline: float = 15.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.05)


@pytest.mark.parametrize("loop", LOOPS)
def test_files_roll_by_time_and_expire_by_age_while_the_broker_runs(
    tmp_path: Path, loop: str
) -> None:
    directory = tmp_path / "stream"
    files = "roll_seconds = 1\nretention_seconds = 1"
    broker = stream_broker(tmp_path, loop, directory, "events = false", files)
    placed = directory / "messages"
    try:
        publisher = RawClient(broker.host, broker.port, version=4)
        publisher.connect("p")
        publisher.send({"type": "publish", "topic": "t", "qos": 1, "packet_id": 1, "payload": b"a"})
        assert publisher.recv()["type"] == "puback"
        wait_until(lambda: len(list(placed.glob("*.avro"))) == 1, "the first file put in place")
        (first,) = placed.glob("*.avro")
        publisher.send({"type": "publish", "topic": "t", "qos": 1, "packet_id": 2, "payload": b"b"})
        assert publisher.recv()["type"] == "puback"
        wait_until(
            lambda: not first.exists() and len(list(placed.glob("*.avro"))) == 1,
            "the second file in place and the first, older than 1 s, deleted",
        )
        assert [m["payload"] for m in records(directory, "messages")] == [b"b"]
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("loop", LOOPS)
def test_a_refused_connect_is_an_auth_refused_record_with_the_peer(
    tmp_path: Path, loop: str
) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "alice", "right").returncode == 0
    directory = tmp_path / "stream"
    config = f"""
[auth]
users_file = "{users}"

[stream]
enabled = true

[stream.files]
directory = "{directory}"
"""
    broker = start_broker(tmp_path, loop, config)
    try:
        client, reason, _ = paho_connect(broker, "intruder", 5, "alice", "wrong")
        assert reason == 134  # Bad User Name or Password
        client.loop_stop()
        client, reason, _ = paho_connect(broker, "owner", 5, "alice", "right")
        assert reason == 0
        stop(client)
    finally:
        assert broker.stop() == 0
    events = records(directory, "events")
    (refused,) = [e for e in events if e["kind"] == "auth_refused"]
    assert (refused["client_id"], refused["username"]) == ("intruder", "alice")
    assert (refused["reason_code"], refused["reason"]) == (0x86, "Bad User Name or Password")
    assert refused["peer"].startswith("127.0.0.1:")
    (connected,) = [e for e in events if e["kind"] == "connected"]
    assert (connected["client_id"], connected["username"]) == ("owner", "alice")
    assert connected["peer"].startswith("127.0.0.1:")
