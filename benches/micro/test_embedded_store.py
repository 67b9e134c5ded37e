"""Why the embedded store is a write-ahead log: the same durable batches stored by the
log (``ferromq.storage.embedded``) and by SQLite, the obvious embedded database, each
synced to disk before it counts as stored.

A batch is what the engine journals when ``MESSAGES`` QoS 1 messages of 62 bytes are
routed to an offline persistent subscriber: a Message and an Enqueue record each, in
the journal's documented layout (rust/ferromq-core/src/durability/record.rs and log.rs), read back
through ``Engine.restore`` first so the bytes are known to be valid. SQLite stores the
same records one row each (client, sequence, record) in WAL mode with
``synchronous=FULL``, one transaction per batch; the log appends the batch buffer and
fdatasyncs it.

    pytest benches/micro/test_embedded_store.py --benchmark-enable --benchmark-only -o addopts=""
"""

from __future__ import annotations

import asyncio
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.storage.embedded import EmbeddedStore

MESSAGES = 100
PAYLOAD = b"x" * 62
CLIENT = b"device-000042"


def _record(kind: int, body: bytes) -> bytes:
    return struct.pack("<BI", kind, len(body)) + body


def _text(value: bytes) -> bytes:
    return struct.pack("<H", len(value)) + value


def _blob(value: bytes) -> bytes:
    return struct.pack("<I", len(value)) + value


def journal_records() -> list[tuple[int, bytes]]:
    """(sequence, Message + Enqueue records) per message, behind one Session record."""
    records = []
    for sequence in range(MESSAGES):
        message = _record(
            5,
            struct.pack("<QBBQ", sequence + 1, 1, 0, 0)
            + _text(b"plant/7/temperature")
            + _blob(b"\x00")  # an empty property block
            + _blob(PAYLOAD),
        )
        enqueue = _record(
            6,
            _text(CLIENT) + struct.pack("<QHQBBB", sequence, sequence + 1, sequence + 1, 1, 0, 0),
        )
        records.append((sequence, message + enqueue))
    return records


@pytest.fixture(scope="module")
def batch() -> list[tuple[int, bytes]]:
    session = _record(1, _text(CLIENT) + struct.pack("<IB", 3600, 0))
    records = journal_records()
    # The default config's embedded store: the engine journals.
    report = engine_from_config(Config()).restore(session + b"".join(r for _, r in records), 0)
    assert report.error is None and report.messages == MESSAGES
    return records


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[EmbeddedStore]:
    store = EmbeddedStore(tmp_path / "wal", fsync="batch")
    asyncio.run(store.load())
    store.loaded(0)
    yield store
    asyncio.run(store.close())


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE records (client TEXT, sequence INTEGER, record BLOB)")
    yield db
    db.close()


def test_write_ahead_log(
    benchmark: BenchmarkFixture, wal: EmbeddedStore, batch: list[tuple[int, bytes]]
) -> None:
    data = b"".join(record for _, record in batch)
    benchmark(wal._write, data)


def test_sqlite(
    benchmark: BenchmarkFixture, sqlite: sqlite3.Connection, batch: list[tuple[int, bytes]]
) -> None:
    rows = [("device-000042", sequence, record) for sequence, record in batch]

    def store() -> None:
        sqlite.execute("BEGIN")
        sqlite.executemany("INSERT INTO records VALUES (?, ?, ?)", rows)
        sqlite.execute("COMMIT")

    benchmark(store)
