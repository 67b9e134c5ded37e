"""Overload and the subscriber that never reads, against `ferromq serve` over real
sockets under uvloop and asyncio.

- A raw socket subscribes to a busy topic and never calls ``recv``: while its backlog
  fills ``memory_budget`` the publisher is read less; once that has lasted a second,
  the engine drops the stuck subscriber's oldest deliveries (counted in
  ``$SYS/broker/messages/dropped/memory_budget``) and the publisher goes on. The
  broker's queued bytes stay within the budget and an honest paho subscriber on the
  same topic receives every message, in order.
- ``memory_budget`` with one slow subscriber that does read: the publisher is read
  less (``$SYS/broker/publishers/paused``) instead of the broker dropping, and the
  subscriber receives every message. Counts only: no timing is asserted.
"""

from __future__ import annotations

import queue
import socket
import threading
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from ferromq._core import encode
from tests.conftest import RunningBroker, Starter

KiB = 1024
BUDGET = 512 * KiB


def paho_client(broker: RunningBroker, client_id: str) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
    client.max_queued_messages_set(0)
    client.max_inflight_messages_set(100)
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    client.connect(broker.host, broker.port)
    client.loop_start()
    assert connected.wait(5), f"{client_id} did not connect"
    return client


def collector(client: paho.Client, topic: str, qos: int) -> queue.Queue[bytes]:
    got: queue.Queue[bytes] = queue.Queue()
    subscribed = threading.Event()
    client.on_message = lambda _c, _u, message: got.put(bytes(message.payload))
    client.on_subscribe = lambda *_: subscribed.set()
    client.subscribe(topic, qos)
    assert subscribed.wait(5)
    return got


def sys_counter(broker: RunningBroker, name: str, at_least: int) -> int:
    """``$SYS/broker/<name>`` once it reaches ``at_least`` (or its last value)."""
    client = paho_client(broker, f"sys-{name}")
    values = collector(client, f"$SYS/broker/{name}", 0)
    value, deadline = -1, time.monotonic() + 15
    while value < at_least and time.monotonic() < deadline:
        try:
            value = int(values.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            break
    client.loop_stop()
    client.disconnect()
    return value


def never_reading_subscriber(broker: RunningBroker, topic: str) -> socket.socket:
    """A raw MQTT 3.1.1 subscriber that sends CONNECT and SUBSCRIBE and never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((broker.host, broker.port))
    sock.sendall(
        encode({"type": "connect", "protocol_version": 4, "client_id": "stuck"}, 4)
        + encode({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 1}]}, 4)
    )
    return sock


def test_never_reading_subscriber_costs_the_broker_a_bounded_queue(
    started: Starter, loop: str
) -> None:
    broker = started(
        loop,
        f"""
[session]
memory_budget = {BUDGET}
queue_limit = 60000
[limits]
write_buffer_high_water = "64KiB"
max_inflight = 32
[sys]
interval = 1
""",
    )
    honest = paho_client(broker, "honest")
    received = collector(honest, "busy", 1)
    stuck = never_reading_subscriber(broker, "busy")
    publisher = paho_client(broker, "publisher")
    # Twice the budget: it fills, and each second it stays full (memory.rs, STALL_MS)
    # the stuck subscriber's oldest quarter is trimmed, so a few trims, not twenty.
    count, payload = 1000, b"x" * KiB
    for i in range(count):
        publisher.publish("busy", i.to_bytes(4, "big") + payload, qos=1)
    got = [received.get(timeout=60) for _ in range(count)]
    assert [int.from_bytes(p[:4], "big") for p in got] == list(range(count))
    dropped = sys_counter(broker, "messages/dropped/memory_budget", 1)
    assert dropped > 0, "the stuck subscriber's backlog was trimmed and counted"
    queued = sys_counter(broker, "messages/queued_bytes", 0)
    assert 0 < queued <= BUDGET, "what the broker holds for it stays within the budget"
    assert broker.process.poll() is None
    stuck.close()
    for client in (honest, publisher):
        client.loop_stop()
        client.disconnect()


def test_memory_budget_reads_publishers_less_instead_of_dropping(
    started: Starter, loop: str
) -> None:
    broker = started(
        loop,
        """
[session]
memory_budget = "512KiB"
queue_limit = 60000
[limits]
write_buffer_high_water = "64KiB"
[sys]
interval = 1
""",
    )
    subscriber = paho_client(broker, "slow")
    got: queue.Queue[bytes] = queue.Queue()

    def slow_reader(_c: object, _u: object, message: paho.MQTTMessage) -> None:
        time.sleep(0.0005)  # a consumer slower than the publisher
        got.put(bytes(message.payload))

    subscribed = threading.Event()
    subscriber.on_subscribe = lambda *_: subscribed.set()
    subscriber.subscribe("flood", 1)
    assert subscribed.wait(5)
    subscriber.on_message = slow_reader
    publisher = paho_client(broker, "flooder")
    disconnected = threading.Event()
    publisher.on_disconnect = lambda *_: disconnected.set()
    count, payload = 6000, b"y" * (4 * KiB)
    for i in range(count):
        publisher.publish("flood", i.to_bytes(4, "big") + payload, qos=0)
    received = [got.get(timeout=120) for _ in range(count)]
    assert [int.from_bytes(p[:4], "big") for p in received] == list(range(count))
    assert sys_counter(broker, "publishers/paused", 1) >= 1, "the publisher was read less"
    assert sys_counter(broker, "publish/messages/dropped", 0) == 0
    assert not disconnected.is_set()
    for client in (subscriber, publisher):
        client.loop_stop()
        client.disconnect()
