"""Write a golden embedded-store directory with the ferromq on the path.

Run from the repository root with the release whose format the golden file keeps
(``python -m tests.golden.make_journal tests/golden/journal-v<N>``). Every later release
must read each golden directory back to the state ``GOLDEN`` describes
(tests/integration/test_journal_golden.py). The state covers every record kind: a
v3.1.1 and a v5 persistent session with subscriptions (one with a subscription
identifier), queued QoS 1 and QoS 2 messages, an inbound QoS 2 flow waiting for its
PUBREL, an outbound QoS 2 flow waiting for its PUBCOMP, an unsubscribed filter, a
session that ended, and retained messages (one with v5 properties, one cleared).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from tests.conftest import start_broker
from tests.support.mqtt_raw import RawClient

V4, V5 = 4, 5


def _subscribe(client: RawClient, filters: list[dict[str, object]], **fields: object) -> None:
    client.send({"type": "subscribe", "packet_id": 1, "filters": filters, **fields})
    assert client.recv()["type"] == "suback"


def _publish(client: RawClient, topic: str, payload: bytes, qos: int, packet_id: int,
             **fields: object) -> None:  # fmt: skip
    client.send({"type": "publish", "topic": topic, "payload": payload, "qos": qos,
                 "packet_id": packet_id, **fields})  # fmt: skip
    if qos == 0:
        return
    ack = client.recv()
    if qos == 2:
        assert ack["type"] == "pubrec", ack
        client.send({"type": "pubrel", "packet_id": packet_id})
        assert client.recv()["type"] == "pubcomp"
    elif qos == 1:
        assert ack["type"] == "puback", ack


def build(store: Path, work: Path) -> None:
    broker = start_broker(work, "asyncio", env={"FERROMQ_STORAGE__PATH": str(store)})
    try:
        host, port = broker.host, broker.port
        sub = RawClient(host, port, V4)
        sub.connect("golden-sub", clean=False)
        _subscribe(sub, [{"filter": "golden/#", "qos": 2}, {"filter": "gone/+", "qos": 1}])
        sub.send({"type": "unsubscribe", "packet_id": 2, "filters": ["gone/+"]})
        assert sub.recv()["type"] == "unsuback"
        sub.close()

        v5 = RawClient(host, port, V5)
        v5.connect("golden-v5", clean=False, properties=[("session_expiry_interval", 3600)])
        _subscribe(
            v5, [{"filter": "golden/q1/+", "qos": 1}], properties=[("subscription_identifier", 7)]
        )
        v5.close()

        rel = RawClient(host, port, V4)
        rel.connect("golden-rel", clean=False)
        _subscribe(rel, [{"filter": "rel/t", "qos": 2}])

        ended = RawClient(host, port, V4)
        ended.connect("golden-ended", clean=False)
        _subscribe(ended, [{"filter": "golden/#", "qos": 1}])
        ended.close()
        ended = RawClient(host, port, V4)
        ended.connect("golden-ended", clean=True)  # ends the stored session
        ended.close()

        pub = RawClient(host, port, V5)
        pub.connect("golden-pub")
        for n in range(3):
            _publish(pub, f"golden/q1/{n}", b"q1-%d" % n, 1, n + 1)
        for n in range(2):
            _publish(pub, "golden/q2", b"q2-%d" % n, 2, 10 + n)
        _publish(pub, "golden/retained/a", b"ra", 1, 20, retain=True)
        _publish(pub, "config/b", b"rb", 0, 0, retain=True)
        v5_properties = [("content_type", "json"), ("message_expiry_interval", 10**8)]
        _publish(pub, "config/c", b'{"v": 5}', 1, 21, retain=True, properties=v5_properties)
        _publish(pub, "config/d", b"cleared", 1, 22, retain=True)
        _publish(pub, "config/d", b"", 1, 23, retain=True)

        # Outbound QoS 2 waiting for PUBCOMP: the subscriber stops after PUBREC.
        _publish(pub, "rel/t", b"rel", 2, 30)
        delivery = rel.recv()
        assert delivery["type"] == "publish" and delivery["qos"] == 2, delivery
        rel.send({"type": "pubrec", "packet_id": delivery["packet_id"]})
        assert rel.recv()["type"] == "pubrel"
        rel.close()
        pub.close()

        # Inbound QoS 2 waiting for PUBREL: the publisher stops after PUBREC.
        inbound = RawClient(host, port, V4)
        inbound.connect("golden-inbound", clean=False)
        inbound.send({"type": "publish", "topic": "elsewhere/in", "payload": b"in", "qos": 2,
                      "packet_id": 42})  # fmt: skip
        assert inbound.recv()["type"] == "pubrec"
        inbound.close()
    finally:
        assert broker.stop() == 0, broker.log()
    print(broker.log())


def main() -> None:
    target = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        store = Path(work) / "store"
        build(store, Path(work))
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for segment in sorted(store.glob("journal-*.log")):
            shutil.copy(segment, target / segment.name)


if __name__ == "__main__":
    main()
