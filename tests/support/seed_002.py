"""Seed 002 as a scenario any store's test runs: a producer sends 2,000 QoS 1 messages;
a QoS 1 subscriber with a persistent session drops at about 500 (without DISCONNECT,
its in-flight messages unacknowledged) and returns at about 1,000."""

from __future__ import annotations

import threading

from tests.conftest import RunningBroker
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client

TOTAL = 2000


def seed_002(broker: RunningBroker, consumer_id: str, topic: str = "seam") -> None:
    """The scenario with the persistent subscriber ``consumer_id``; asserts that every
    message arrives in order and only DUP-flagged ones twice."""
    sub = RawClient(broker.host, broker.port, version=4)
    sub.connect(consumer_id, clean=False)
    sub.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 1}]})
    assert sub.recv()["type"] == "suback"

    producer, _ = paho_client(broker, f"{consumer_id}-producer", 4)
    sent = threading.Semaphore(0)

    def produce() -> None:
        for n in range(TOTAL):
            producer.publish(topic, n.to_bytes(4, "big"), qos=1).wait_for_publish(10)
            sent.release()

    thread = threading.Thread(target=produce)
    thread.start()

    received: list[tuple[int, bool]] = []

    def consume(client: RawClient, until: int, ack: bool = True) -> None:
        while len({n for n, _ in received}) < until:
            packet = client.recv(timeout=10)
            assert packet["type"] == "publish", packet
            received.append((int.from_bytes(packet["payload"], "big"), packet["dup"]))
            if ack:
                client.send({"type": "puback", "packet_id": packet["packet_id"]})

    consume(sub, 500)
    sub.close()  # vanish without DISCONNECT, in-flight messages unacknowledged
    for _ in range(1000):
        sent.acquire(timeout=30)
    sub = RawClient(broker.host, broker.port, version=4)
    assert sub.connect(consumer_id, clean=False)["session_present"] is True
    consume(sub, TOTAL)
    thread.join(30)

    first_seen: list[int] = []
    seen: set[int] = set()
    for n, dup in received:
        if n in seen:
            assert dup, f"message {n} delivered twice without DUP"
        else:
            seen.add(n)
            first_seen.append(n)
    assert first_seen == list(range(TOTAL)), "lost or reordered messages"
