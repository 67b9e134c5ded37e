"""The engine's limits against `ferromq serve` over real sockets with paho-mqtt 3.1.1 and
5.0, under uvloop and asyncio: publish rates (a 3.1.1 publisher over the rate is read
less and loses nothing; v5 clients of one user name share its bucket and the one over it
gets DISCONNECT 0x96), subscriptions per client (SUBACK 0x97 / 0x80), and retained
limits (PUBACK 0x97 for v5, not stored for 3.1.1, existing retained messages kept)."""

from __future__ import annotations

import queue
import threading
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from tests.conftest import RunningBroker, Starter


class Client:
    """A paho client (3.1.1 or 5.0) with what the broker told it in queues."""

    def __init__(
        self, broker: RunningBroker, client_id: str, version: int, username: str | None = None
    ) -> None:
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=MQTTProtocolVersion(version),
        )
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.acks: queue.Queue[int] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.disconnects: queue.Queue[int] = queue.Queue()
        connected = threading.Event()
        self.client.on_connect = lambda *_: connected.set()
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_publish = lambda _c, _u, _mid, code, _p: self.acks.put(code.value)
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: self.subacks.put(
            [code.value for code in codes]
        )
        self.client.on_disconnect = lambda _c, _u, _f, code, _p: self.disconnects.put(code.value)
        if username is not None:
            self.client.username_pw_set(username)
        self.client.max_queued_messages_set(0)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert connected.wait(5), f"{client_id} did not connect"

    def subscribe(self, topic: str, qos: int = 1) -> list[int]:
        self.client.subscribe(topic, qos)
        return self.subacks.get(timeout=5)

    def receive(self, count: int, timeout: float = 30.0) -> list[paho.MQTTMessage]:
        deadline = time.monotonic() + timeout
        return [
            self.messages.get(timeout=max(0.1, deadline - time.monotonic())) for _ in range(count)
        ]

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_throttled_v311_publisher_loses_nothing(started: Starter, loop: str) -> None:
    broker = started(loop, "[limits]\nmax_publish_rate = 100\n")
    subscriber = Client(broker, "sub", paho.MQTTv311)
    assert subscriber.subscribe("rated", qos=1) == [1]
    publisher = Client(broker, "pub", paho.MQTTv311)
    # 300 messages at 100/s with a second's burst: read less for about two seconds.
    infos = [publisher.client.publish("rated", str(i).encode(), qos=1) for i in range(300)]
    got = subscriber.receive(300)
    assert [int(m.payload) for m in got] == list(range(300)), "in order, none lost"
    for info in infos:
        info.wait_for_publish(10)
    assert publisher.disconnects.empty(), "the broker did not disconnect it"
    assert publisher.client.is_connected()
    publisher.stop()
    subscriber.stop()


def test_one_users_v5_connections_share_a_rate(started: Starter, loop: str) -> None:
    broker = started(loop, "[limits]\nmax_publish_rate_per_user = 20\n")
    first = Client(broker, "first", paho.MQTTv5, username="ann")
    second = Client(broker, "second", paho.MQTTv5, username="ann")
    other = Client(broker, "other", paho.MQTTv5, username="bob")
    for client in (first, other):
        infos = [client.client.publish("t", b"x", qos=1) for _ in range(15)]
        for info in infos:
            info.wait_for_publish(5)
    # Five tokens left in ann's bucket (20 a second, 15 spent), so second's
    # sixth message is over it; bob spent his own.
    for _ in range(15):
        second.client.publish("t", b"x")
    assert second.disconnects.get(timeout=5) == 0x96  # Message rate too high
    assert other.disconnects.empty() and other.client.is_connected(), "bob has his own"
    for client in (first, other):
        client.stop()


def test_subscriptions_per_client(started: Starter, loop: str) -> None:
    broker = started(loop, "[limits]\nmax_subscriptions_per_client = 2\n")
    for version, refused in ((paho.MQTTv5, 0x97), (paho.MQTTv311, 0x80)):
        client = Client(broker, f"subs{version}", version)
        assert client.subscribe("a") == [1]
        assert client.subscribe("b/#") == [1]
        assert client.subscribe("c") == [refused]
        assert client.subscribe("a", qos=0) == [0], "replacing a held filter is allowed"
        client.client.unsubscribe("a")
        assert client.subscribe("c") == [1]
        client.stop()


def test_retained_limit_keeps_existing_messages(started: Starter, loop: str) -> None:
    broker = started(loop, "[limits]\nmax_retained_messages = 2\n")
    v5 = Client(broker, "v5", paho.MQTTv5)
    v3 = Client(broker, "v3", paho.MQTTv311)
    v5.client.publish("r/1", b"one", qos=1, retain=True).wait_for_publish(5)
    v5.client.publish("r/2", b"two", qos=1, retain=True).wait_for_publish(5)
    v5.client.publish("r/3", b"three", qos=1, retain=True).wait_for_publish(5)
    v3.client.publish("r/4", b"four", qos=1, retain=True).wait_for_publish(5)
    codes = [v5.acks.get(timeout=5) for _ in range(3)]
    # 0x10: nobody subscribed; 0x97: Quota exceeded, the third is not stored.
    assert codes == [0x10, 0x10, 0x97]
    late = Client(broker, "late", paho.MQTTv311)
    late.subscribe("r/#", qos=0)
    got = sorted(m.payload for m in late.receive(2))
    assert got == [b"one", b"two"]
    v3.client.publish("r/fence", b"fence", qos=1).wait_for_publish(5)
    assert late.receive(1)[0].payload == b"fence", "nothing more was retained"
    for client in (v5, v3, late):
        client.stop()
