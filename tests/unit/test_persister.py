"""The persister outlives a bug in a store operation: with a real engine and a real
embedded store whose first compaction raises a non-IO error, the error is logged with
its traceback, the store is reported failing, writes go on, the compaction is retried
and succeeds (the store is ok again), and everything journaled reads back."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.storage.embedded import EmbeddedStore
from ferromq.storage.persister import Persister, StoreHealth

TOPICS = 400


class CompactionWithABug(EmbeddedStore):
    """An embedded store whose first compaction hits a bug (not an IO error)."""

    bugs = 1

    async def compact(self, snapshot: bytes) -> None:
        if self.bugs:
            self.bugs -= 1
            raise KeyError("a bug in compaction")
        await super().compact(snapshot)


async def publish_until_recovered(tmp_path: Path) -> tuple[StoreHealth, bool]:
    engine = engine_from_config(Config())
    store = CompactionWithABug(tmp_path, fsync="off", compact_after=1024)
    store.loaded(engine.restore(await store.load(), 0).valid_len)
    persister = Persister(engine, store, lambda: None)
    persister.start()
    for n in range(TOPICS):
        engine.publish(f"t/{n}", b"x" * 64, 0, True, 0)
        persister.kick()
        await asyncio.sleep(0.002)  # lets the compaction retry come due
    running = persister.running
    await persister.stop()
    return persister.health, running


def test_a_bug_in_compaction_is_logged_with_its_traceback_and_survived(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="ferromq.storage"):
        health, running = asyncio.run(publish_until_recovered(tmp_path))
    assert running, "the persister task never ends while the broker runs"
    failed = [r for r in caplog.records if r.getMessage() == "store compaction failed"]
    assert len(failed) == 1
    assert failed[0].exc_info is not None and failed[0].exc_info[0] is KeyError
    assert health == StoreHealth(True, 1, "compaction: 'a bug in compaction'")
    assert any(r.getMessage() == "store recovered" for r in caplog.records)

    async def restore() -> int:
        store = EmbeddedStore(tmp_path)
        try:
            retained: int = engine_from_config(Config()).restore(await store.load(), 0).retained
            return retained
        finally:
            await store.close()

    assert asyncio.run(restore()) == TOPICS


def test_a_stop_ends_though_the_writer_loses_its_cancellation(tmp_path: Path) -> None:
    # The writer waits out its flush interval in asyncio.wait_for; a second kick (a full
    # batch: the engine's Persist at shutdown) in the loop turn of the stop ends that
    # wait, and before Python 3.12 wait_for then returns instead of raising the stop's
    # cancellation (CPython gh-86296). The writer ran on and waited for work forever,
    # and so did the stop: a broker that never exited.
    async def stop_in_the_turn_of_a_kick() -> bool:
        engine = engine_from_config(Config())
        store = EmbeddedStore(tmp_path, fsync="off")
        store.loaded(engine.restore(await store.load(), 0).valid_len)
        persister = Persister(engine, store, lambda: None, flush_interval=60.0)
        persister.start()
        engine.publish("t", b"x", 0, True, 0)
        persister.kick()
        await asyncio.sleep(0.05)  # the writer waits out its flush interval

        async def kick_and_stop() -> None:
            persister.kick()
            await persister.stop()

        stopping = asyncio.ensure_future(kick_and_stop())
        done, _ = await asyncio.wait({stopping}, timeout=10)
        return bool(done) and not persister.running

    assert asyncio.run(stop_in_the_turn_of_a_kick()), "Persister.stop() never returned"
