"""A damaged embedded store over real restarts: each stored record carries a CRC32C,
so a flipped byte or a zeroed block costs only the records it touches. The broker logs
each damaged range with its offset, keeps (and never truncates) the intact records
after it, and real clients get every message whose records are intact. A segment of a
journal format newer than the broker reads is refused: exit 3, one line naming the
file and both versions."""

from __future__ import annotations

import re
from pathlib import Path

from ferromq._core import JOURNAL_FORMAT_VERSION, journal_header
from tests.integration.test_embedded_store import (
    broker_on,
    persistent_subscriber,
    queued_payloads,
)
from tests.integration.test_store_lock import EXIT_STORE_UNAVAILABLE, serve_once
from tests.support.mqtt_raw import RawClient
from tests.support.store_layout import segment_of

MESSAGES = 20
# The offline session ``neighbour`` lives on another shard than ``keeper`` at two
# workers (``shard_of``), in the same journal at one: its records are intact either way.
NEIGHBOUR = [b"yard-%d" % n for n in range(3)]


def stored_store(store: Path, tmp_path: Path, loop: str) -> Path:
    """A store holding MESSAGES queued QoS 1 messages for the offline session
    ``keeper`` and NEIGHBOUR for ``neighbour``; returns the one segment of the journal
    holding keeper's."""
    broker = broker_on(store, tmp_path, loop)
    persistent_subscriber(broker, "keeper", "plant/#").close()
    persistent_subscriber(broker, "neighbour", "yard/#").close()
    publisher = RawClient(broker.host, broker.port, version=4)
    publisher.connect("publisher")
    published = [("plant/a", b"payload-%02d" % n) for n in range(MESSAGES)]
    published += [("yard/a", payload) for payload in NEIGHBOUR]
    for packet_id, (topic, payload) in enumerate(published, 1):
        publisher.send(
            {"type": "publish", "topic": topic, "qos": 1, "packet_id": packet_id,
             "payload": payload}
        )  # fmt: skip
    acked = {publisher.recv()["packet_id"] for _ in published}
    assert acked == set(range(1, len(published) + 1))
    assert broker.stop() == 0
    return segment_of(store, "keeper")


def test_damaged_records_are_skipped_logged_and_the_rest_kept(tmp_path: Path, loop: str) -> None:
    store = tmp_path / "data"
    segment = stored_store(store, tmp_path, loop)
    data = bytearray(segment.read_bytes())
    flipped = data.index(b"payload-05") + 3
    data[flipped] ^= 0x01
    zeroed = data.index(b"payload-12")
    data[zeroed - 20 : zeroed + 20] = bytes(40)
    segment.write_bytes(data)

    broker = broker_on(store, tmp_path, loop)
    try:
        damaged = re.findall(r"store records damaged.* offset=(\d+) bytes=(\d+)", broker.log())
        assert len(damaged) == 2, broker.log()
        (first, first_len), (second, second_len) = ((int(o), int(n)) for o, n in damaged)
        assert first <= flipped < first + first_len
        assert second <= zeroed < second + second_len
        assert segment.read_bytes()[: len(data)] == data, "nothing after the damage is cut"
        payloads = queued_payloads(broker, "keeper")
        neighbours = queued_payloads(broker, "neighbour")
    finally:
        assert broker.stop() == 0
    assert payloads == [b"payload-%02d" % n for n in range(MESSAGES) if n not in (5, 12)]
    assert neighbours == NEIGHBOUR


def test_a_newer_journal_format_is_refused_naming_the_file_and_both_versions(
    tmp_path: Path, loop: str
) -> None:
    store = tmp_path / "data"
    store.mkdir()
    newer = JOURNAL_FORMAT_VERSION + 1
    segment = store / "journal-00000001.log"
    segment.write_bytes(journal_header()[:4] + newer.to_bytes(2, "little") + bytes(2))
    refused = serve_once(store, loop)
    assert refused.returncode == EXIT_STORE_UNAVAILABLE, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"ferromq: error: embedded store: {segment} is journal format version {newer};"
        f" this ferromq reads versions 0 to {JOURNAL_FORMAT_VERSION}"
    )
    assert "Traceback" not in refused.stderr
