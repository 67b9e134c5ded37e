"""The embedded store's compaction policy, driven with a real engine's journal and
snapshots on real files: a rewrite is paid for by the bytes written since the last
one, so the number of rewrites grows with the logarithm of what is written while the
state grows, and rewritten bytes stay proportional to written bytes when the state is
large (never a whole-state rewrite per batch)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

from ferromq._core import Engine
from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.storage.embedded import EmbeddedStore

COMPACT_AFTER = 4096


@dataclass
class Traffic:
    written: int = 0
    rewrites: int = 0
    rewritten: int = 0


async def retain_each(
    engine: Engine, store: EmbeddedStore, topics: list[str], payload: bytes
) -> Traffic:
    """One retained message per topic, one batch each, compacting as the store asks
    (what the Persister does)."""
    traffic = Traffic()
    for topic in topics:
        engine.publish(topic, payload, 0, True, 0)
        taken = engine.take_journal()
        assert taken is not None
        await store.write(taken[1])
        traffic.written += len(taken[1])
        if store.wants_compaction():
            snapshot = engine.snapshot()
            await store.compact(snapshot)
            traffic.rewrites += 1
            traffic.rewritten += len(snapshot)
    return traffic


async def opened(path: Path) -> EmbeddedStore:
    store = EmbeddedStore(path, fsync="off", compact_after=COMPACT_AFTER)
    assert await store.load() == b""
    store.loaded(0)
    return store


def test_rewrites_stay_logarithmic_in_writes_while_the_state_grows(tmp_path: Path) -> None:
    async def run() -> Traffic:
        store = await opened(tmp_path)
        try:
            return await retain_each(
                engine_from_config(Config()), store, [f"t/{n}" for n in range(3000)], b"x" * 64
            )
        finally:
            await store.close()

    traffic = asyncio.run(run())
    # Each snapshot is at least twice the one before it, and no larger than it plus
    # what was written since.
    assert 0 < traffic.rewrites <= math.log2(traffic.written / COMPACT_AFTER) + 2, traffic
    assert traffic.rewritten <= 2 * traffic.written, traffic


def test_rewritten_bytes_stay_proportional_to_written_bytes_with_a_large_state(
    tmp_path: Path,
) -> None:
    topics = [f"t/{n}" for n in range(300)]

    async def run() -> Traffic:
        store = await opened(tmp_path)
        engine = engine_from_config(Config())
        try:
            await retain_each(engine, store, topics, b"a" * 512)
            # The state (~170 KB, 40 times compact_after) now stays the same size.
            return await retain_each(engine, store, topics * 4, b"b" * 512)
        finally:
            await store.close()

    traffic = asyncio.run(run())
    assert traffic.rewrites >= 1, traffic
    assert traffic.rewritten <= traffic.written, traffic
