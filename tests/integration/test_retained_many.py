"""A subscription matching 100,000 retained messages receives every one of them,
paced by the socket and the client's window, at QoS 0 and 1, v3.1.1 and v5 (one
with Receive Maximum 10) — never cut at the write buffer's high-water mark or the
session queue's limit (engine/retained_cursor.rs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferromq._core import encode
from tests.conftest import RunningBroker, start_broker
from tests.support.mqtt_raw import RawClient

RETAINED = 100_000
BURST = 5_000


def load(broker: RunningBroker) -> None:
    """RETAINED retained QoS 1 messages (so a QoS 1 subscription receives QoS 1),
    published in pipelined bursts of 5,000, each burst's PUBACKs read after it."""
    publisher = RawClient(broker.host, broker.port, version=4, timeout=30)
    publisher.connect("loader")
    for start in range(0, RETAINED, BURST):
        publisher.send_raw(
            b"".join(
                encode({"type": "publish", "topic": f"r/{n}", "qos": 1, "retain": True,
                        "packet_id": n % BURST + 1, "payload": n.to_bytes(4, "big")}, 4)
                for n in range(start, start + BURST)
            )
        )  # fmt: skip
        for _ in range(BURST):
            assert publisher.recv()["type"] == "puback"
    publisher.close()


def receive_retained(
    broker: RunningBroker, version: int, qos: int, receive_maximum: int | None = None
) -> list[int]:
    """Subscribe to '#' and read until every retained message came or the broker
    went quiet; QoS 1 is acknowledged as it arrives, a window's worth at a time.
    The messages are QoS 1: a QoS 0 subscription receives them at QoS 0."""
    client = RawClient(broker.host, broker.port, version=version, timeout=30)
    properties = [] if receive_maximum is None else [("receive_maximum", receive_maximum)]
    client.connect(f"sub-{version}-{qos}", properties=properties)
    client.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "#", "qos": qos}]})
    assert client.recv()["type"] == "suback"
    got: list[int] = []
    try:
        while len(got) < RETAINED:
            first = client.recv(timeout=3)
            acks = []
            for packet in [first, *client.poll()]:
                assert packet["type"] == "publish" and packet["retain"], packet
                got.append(int.from_bytes(packet["payload"], "big"))
                if packet["qos"] == 1:
                    acks.append(encode({"type": "puback", "packet_id": packet["packet_id"]},
                                       version))  # fmt: skip
            client.send_raw(b"".join(acks))
    except TimeoutError:
        pass
    finally:
        client.close()
    return got


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_every_retained_message_reaches_a_new_subscription(tmp_path: Path, loop: str) -> None:
    broker = start_broker(tmp_path, loop, env={"FERROMQ_STORAGE__BACKEND": "memory"})
    try:
        load(broker)
        subscribers = {
            "v3.1.1 QoS 0": receive_retained(broker, 4, 0),
            "v3.1.1 QoS 1": receive_retained(broker, 4, 1),
            "v5 QoS 0": receive_retained(broker, 5, 0),
            "v5 QoS 1, Receive Maximum 10": receive_retained(broker, 5, 1, receive_maximum=10),
        }
    finally:
        broker.stop()
    counts = {name: len(got) for name, got in subscribers.items()}
    assert counts == dict.fromkeys(subscribers, RETAINED), f"arrived of {RETAINED}: {counts}"
    for got in subscribers.values():
        assert sorted(got) == list(range(RETAINED))
