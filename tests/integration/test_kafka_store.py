"""APPLICATION clients' queues in a real Kafka (``storage.application_store = "kafka"``),
DEVICE clients' in the embedded store, against a real ``ferromq serve`` and real
clients: seed 002 for an application client, ``kill -9`` mid-stream and a restart that
delivers every acknowledged message (restored from Kafka, then live), and a cluster that
cannot be reached at start-up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from paho.mqtt.enums import CallbackAPIVersion

from ferromq.storage.kafka import topic_name
from tests.conftest import RunningBroker, ferromq_command, start_broker
from tests.support import services
from tests.support.mqtt_raw import RawClient
from tests.support.seed_002 import seed_002
from tests.support.services import free_port

APP = "app-"


def kafka_config(bootstrap: str, prefix: str) -> str:
    return f"""
[session]
queue_limit = 20000

[storage]
application_client_prefixes = ["{APP}"]
application_store = "kafka"

[kafka]
bootstrap_servers = "{bootstrap}"
topic_prefix = "{prefix}"
"""


def unique_prefix() -> str:
    return f"test.{uuid.uuid4().hex[:8]}."


def kafka_topics(bootstrap: str, prefix: str) -> dict[str, tuple[int, int | None]]:
    """Topics under ``prefix``: their log end offset and the cursor group's commit."""

    async def read() -> dict[str, tuple[int, int | None]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        finally:
            await admin.close()
        found = {}
        for name in names:
            client = name.removeprefix(prefix)
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id=f"{prefix}cursor.{client}"
            )
            await consumer.start()
            try:
                tp = TopicPartition(name, 0)
                consumer.assign([tp])
                end = (await consumer.end_offsets([tp]))[tp]
                found[client] = (end, await consumer.committed(tp))
            finally:
                await consumer.stop()
        return found

    return asyncio.run(read())


def test_seed_002_for_an_application_client_on_kafka(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    broker = start_broker(tmp_path, loop, kafka_config(kafka_bootstrap, prefix))
    try:
        seed_002(broker, f"{APP}seam")
        seed_002(broker, "device-seam", topic="device-seam")
    finally:
        broker.stop()
    topics = kafka_topics(kafka_bootstrap, prefix)
    assert list(topics) == [f"{APP}seam"], "only the application client has a topic"
    end, committed = topics[f"{APP}seam"]
    assert end >= 2000, "every delivery to the application client went through Kafka"
    assert committed == end, "every acknowledged delivery moved the cursor"


def publish_counting(
    broker: RunningBroker, count: int, start: int, acked: list[int], topic: str = "crash/stream"
) -> None:
    """Publish ``count`` QoS 1 messages to ``topic`` numbered from ``start`` (4 bytes, big
    endian); ``acked`` gets each number whose PUBACK arrived. Returns when done or when
    the broker went away."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{start}")
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    pending: dict[int, int] = {}
    client.on_publish = lambda _c, _u, mid, *_: acked.append(pending[mid])
    client.connect(broker.host, broker.port)
    client.loop_start()
    assert connected.wait(5)
    for n in range(start, start + count):
        info = client.publish(topic, n.to_bytes(4, "big"), qos=1)
        pending[info.mid] = n
        if not info.is_published():
            try:
                info.wait_for_publish(5)
            except RuntimeError:
                break  # the connection is gone
        if not client.is_connected():
            break
    client.loop_stop()
    client.disconnect()


def collect(broker: RunningBroker, client_id: str, until: set[int]) -> list[int]:
    """Reconnect ``client_id``'s session and read (acknowledging) until every number in
    ``until`` arrived; the numbers in arrival order."""
    sub = RawClient(broker.host, broker.port, version=4)
    assert sub.connect(client_id, clean=False)["session_present"] is True
    received: list[int] = []
    while not until <= set(received):
        packet = sub.recv(timeout=20)
        assert packet["type"] == "publish", packet
        received.append(int.from_bytes(packet["payload"], "big"))
        sub.send({"type": "puback", "packet_id": packet["packet_id"]})
    sub.close()
    return received


def first_occurrences(numbers: list[int]) -> list[int]:
    seen: set[int] = set()
    return [n for n in numbers if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]


def test_kill_9_loses_no_acknowledged_message_of_either_store(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    config = kafka_config(kafka_bootstrap, prefix)
    env = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    broker = start_broker(tmp_path, loop, config, env)
    subscribers = (f"{APP}crash", "device-crash")
    for client_id in subscribers:
        sub = RawClient(broker.host, broker.port, version=4)
        sub.connect(client_id, clean=False)
        sub.send(
            {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "crash/#", "qos": 1}]}
        )
        assert sub.recv()["type"] == "suback"
        sub.close()  # offline: everything queues

    acked: list[int] = []
    publisher = threading.Thread(target=publish_counting, args=(broker, 3000, 0, acked))
    publisher.start()
    while len(acked) < 800 and publisher.is_alive():
        threading.Event().wait(0.01)
    broker.process.kill()  # kill -9, mid-stream
    broker.process.wait()
    publisher.join(30)
    assert 800 <= len(acked) < 3000, "killed mid-stream"

    broker = start_broker(tmp_path, loop, config, env)
    try:
        # Live messages after the restart queue behind the restored ones.
        live: list[int] = []
        publish_counting(broker, 200, 10_000, live)
        assert len(live) == 200
        for client_id in subscribers:
            received = collect(broker, client_id, set(acked) | set(live))
            order = [n for n in first_occurrences(received) if n in set(acked) | set(live)]
            assert order == sorted(acked) + live, f"{client_id}: lost or reordered messages"
    finally:
        broker.stop()
    topics = kafka_topics(kafka_bootstrap, prefix)
    assert list(topics) == [f"{APP}crash"], "the device client's queue is not in Kafka"


def test_unreachable_kafka_at_start_up_exits_3_naming_it(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "ferromq.toml"
    config.write_text(kafka_config(address, "ferromq.app."))
    result = subprocess.run(
        [*ferromq_command(), "serve", "--config", str(config)],
        env={
            **os.environ,
            "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}",
            "FERROMQ_STORAGE__PATH": str(tmp_path / "store"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert f"kafka store at {address}" in result.stderr


def test_a_session_end_drops_its_kafka_queue(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    config = kafka_config(kafka_bootstrap, unique_prefix())
    env = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    broker = start_broker(tmp_path, loop, config, env)
    client_id = f"{APP}ending"

    def join(clean: bool) -> None:
        sub = RawClient(broker.host, broker.port, version=4)
        sub.connect(client_id, clean=clean)
        sub.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "end", "qos": 1}]})
        assert sub.recv()["type"] == "suback"
        sub.close()

    def publish(payload: bytes) -> None:
        pub = RawClient(broker.host, broker.port, version=4)
        pub.connect("end-publisher")
        pub.send({"type": "publish", "topic": "end", "qos": 1, "packet_id": 1, "payload": payload})
        assert pub.recv(timeout=30)["type"] == "puback"
        pub.close()

    try:
        join(clean=False)
        for n in range(5):
            publish(b"old %d" % n)
        join(clean=True)  # ends the session and its queue [MQTT-3.1.2-6]
        join(clean=False)
        publish(b"new")
        broker.stop()
        broker = start_broker(tmp_path, loop, config, env)
        publish(b"after restart")
        sub = RawClient(broker.host, broker.port, version=4)
        assert sub.connect(client_id, clean=False)["session_present"] is True
        payloads = [sub.recv(timeout=10)["payload"] for _ in range(2)]
        assert payloads == [b"new", b"after restart"]
    finally:
        broker.stop()


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped: the signal is
    only queued when ``kill`` returns, and a JVM thread already on a CPU of a loaded
    machine can still answer a request for a few milliseconds."""
    os.kill(pid, signal.SIGSTOP)
    tasks = Path(f"/proc/{pid}/task")
    for _ in range(500):
        states = [
            (task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks.iterdir()
        ]
        if all(state in "Tt" for state in states):
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"process {pid} did not stop: thread states {states}")


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """``pid`` stopped (:func:`freeze`) for the block, continued (SIGCONT) after it,
    however the block ends."""
    freeze(pid)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_kafka_down_holds_the_puback_until_it_returns(tmp_path: Path, loop: str) -> None:
    # A private Kafka: this test freezes it (SIGSTOP), as a hung or unreachable
    # cluster looks to the broker.
    kafka = services.start_kafka(tmp_path)
    config = kafka_config(kafka.bootstrap, unique_prefix()) + "request_timeout = 2\n"
    broker = start_broker(tmp_path, loop, config)
    try:
        sub = RawClient(broker.host, broker.port, version=4)
        sub.connect(f"{APP}patient", clean=False)
        sub.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "t", "qos": 1}]})
        assert sub.recv()["type"] == "suback"
        sub.close()
        pub = RawClient(broker.host, broker.port, version=4)
        pub.connect("publisher")
        pub.send({"type": "publish", "topic": "t", "qos": 1, "packet_id": 1, "payload": b"0"})
        assert pub.recv(timeout=30)["type"] == "puback"

        with frozen(kafka.pid):
            pub.send({"type": "publish", "topic": "t", "qos": 1, "packet_id": 2, "payload": b"1"})
            broker.wait_for_log("store write failed", f"kafka at {kafka.bootstrap}")
            with pytest.raises(TimeoutError):
                pub.recv(timeout=0.2)  # no PUBACK while the store cannot take it
        puback = pub.recv(timeout=60)
        assert (puback["type"], puback["packet_id"]) == ("puback", 2)

        sub = RawClient(broker.host, broker.port, version=4)
        assert sub.connect(f"{APP}patient", clean=False)["session_present"] is True
        payloads = [sub.recv(timeout=10)["payload"] for _ in range(2)]
        assert payloads == [b"0", b"1"]
    finally:
        broker.stop()
        kafka.stop()


def test_topic_names_are_kafka_names_and_distinct() -> None:
    assert topic_name("ferromq.app.", "app-1") == "ferromq.app.app-1"
    odd = topic_name("p.", "app/1 é")
    assert odd.startswith("p.app_1__.") and len(odd) == len("p.app_1__.") + 16
    assert topic_name("p.", "app/1") != topic_name("p.", "app_1")
    assert len(topic_name("p.", "x" * 300)) == 249
