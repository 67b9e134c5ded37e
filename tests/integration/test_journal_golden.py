"""Golden embedded-store directories, one per journal format version
(tests/golden/journal-v<N>, written by tests/golden/make_journal.py with the release
that introduced the format): every release must restore each to the same state — the
counts of the restore report, and real clients getting their stored sessions, queued
messages, QoS 2 flows and retained messages back after reconnecting."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ferromq._core import JOURNAL_FORMAT_VERSION
from tests.conftest import RunningBroker, start_broker
from tests.integration.test_embedded_store import drain
from tests.support.mqtt_raw import RawClient
from tests.support.store_layout import Restored, restored

GOLDEN = Path(__file__).parent.parent / "golden"
VERSIONS = sorted(p.name for p in GOLDEN.glob("journal-v*"))
RESTORED = Restored(sessions=4, messages=10, retained=3)


def resumed(broker: RunningBroker, client_id: str, version: int = 4, **fields: Any) -> RawClient:
    client = RawClient(broker.host, broker.port, version)
    assert client.connect(client_id, clean=False, **fields)["session_present"] is True
    return client


def test_every_format_version_has_a_golden_store() -> None:
    assert [f"journal-v{n}" for n in range(JOURNAL_FORMAT_VERSION + 1)] == VERSIONS


@pytest.mark.parametrize("golden", VERSIONS)
def test_a_golden_store_restores_to_the_same_state(tmp_path: Path, loop: str, golden: str) -> None:
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / golden, store)
    broker = start_broker(tmp_path, loop, env={"FERROMQ_STORAGE__PATH": str(store)})
    try:
        assert restored(broker.log(), "embedded") == RESTORED
        assert "damaged" not in broker.log() and "unreadable" not in broker.log()

        sub = resumed(broker, "golden-sub")
        got = [(p["topic"], p["payload"], p["qos"]) for p in drain(sub)]
        assert got == [
            *((f"golden/q1/{n}", b"q1-%d" % n, 1) for n in range(3)),
            ("golden/q2", b"q2-0", 2),
            ("golden/q2", b"q2-1", 2),
            ("golden/retained/a", b"ra", 1),
        ]
        sub.close()

        v5 = resumed(broker, "golden-v5", 5, properties=[("session_expiry_interval", 3600)])
        got5 = drain(v5)
        assert [p["payload"] for p in got5] == [b"q1-%d" % n for n in range(3)]
        assert all(("subscription_identifier", 7) in p["properties"] for p in got5)
        v5.close()

        # Outbound QoS 2 stored after PUBREC: the PUBREL is sent again, not the PUBLISH.
        rel = resumed(broker, "golden-rel")
        pubrel = rel.recv()
        assert pubrel["type"] == "pubrel", pubrel
        rel.send({"type": "pubcomp", "packet_id": pubrel["packet_id"]})
        rel.close()

        # Inbound QoS 2 stored before PUBREL: the retried PUBLISH is not a new message.
        watcher = RawClient(broker.host, broker.port)
        watcher.connect("golden-watcher")
        watcher.send({"type": "subscribe", "packet_id": 1,
                      "filters": [{"filter": "elsewhere/#", "qos": 2}]})  # fmt: skip
        assert watcher.recv()["type"] == "suback"
        inbound = resumed(broker, "golden-inbound")
        inbound.send({"type": "publish", "topic": "elsewhere/in", "payload": b"in", "qos": 2,
                      "packet_id": 42, "dup": True})  # fmt: skip
        pubrec = inbound.recv()
        assert (pubrec["type"], pubrec["packet_id"]) == ("pubrec", 42)
        inbound.send({"type": "pubrel", "packet_id": 42})
        assert inbound.recv()["type"] == "pubcomp"
        assert drain(watcher, idle=1.0) == []
        inbound.close()

        fresh = RawClient(broker.host, broker.port, 5)
        fresh.connect("golden-fresh")
        fresh.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "#", "qos": 1}]})
        assert fresh.recv()["type"] == "suback"
        retained = {p["topic"]: p for p in drain(fresh)}
        assert {t: p["payload"] for t, p in retained.items()} == {
            "golden/retained/a": b"ra",
            "config/b": b"rb",
            "config/c": b'{"v": 5}',
        }
        assert ("content_type", "json") in retained["config/c"]["properties"]
        fresh.close()
    finally:
        assert broker.stop() == 0
