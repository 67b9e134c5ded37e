"""The persister: moves the engine's journal into the store, batch by batch.

The engine raises one ``Persist`` event when records appear (not one per record), and a
second one when a store's batch size is reached (``Engine.set_journal_flush_records``).
The persister waits ``flush_interval`` after the first (0: the next loop turn), or
less if the second comes, and writes everything pending as one batch; while a batch is
being written new records accumulate and go out as the next batch the moment it returns
(group commit). After each write it calls
``Engine.journal_done(batch)``, which releases the PUBACK/PUBREC held for that batch,
and flushes the IO hub so they leave this loop turn.

A failed write is not confirmed, so nothing waiting for it is acknowledged; the batch
is retried with backoff until the store takes it, and the log says which store failed
and why. Batches are never reordered or skipped. At shutdown the retries stop after
``STOP_RETRIES_FOR`` seconds, so a broker whose store is down still exits: what was
not stored was never acknowledged, and the log says how much was left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ferromq._core import Engine
from ferromq.log import log_event
from ferromq.storage import Store

__all__ = ["Persister"]

logger = logging.getLogger("ferromq.storage")

RETRY_FIRST = 0.05
RETRY_MAX = 5.0
STOP_RETRIES_FOR = 10.0


class Persister:
    def __init__(
        self,
        engine: Engine,
        store: Store,
        flush_output: Callable[[], None],
        flush_interval: float = 0.0,
    ) -> None:
        self.engine = engine
        self.store = store
        self._flush_output = flush_output
        self._flush_interval = flush_interval
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # A batch taken from the engine and not yet stored: it survives a cancelled
        # write, so ``stop`` writes it before anything taken after it.
        self._unwritten: tuple[int, bytes] | None = None
        self.batches_written = 0
        # Set by ``stop``: the loop time after which a failed write is not retried.
        self._give_up_at: float | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def kick(self) -> None:
        """The engine has records (its ``Persist`` event)."""
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._flush_interval:
                # A second kick means the batch is full: write it now.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self._flush_interval)
                self._wakeup.clear()
            await self._write_pending()

    async def _write_pending(self) -> None:
        """Write batches until the journal is empty, compacting when the store asks."""
        while True:
            if self._unwritten is None:
                self._unwritten = self.engine.take_journal()
                if self._unwritten is None:
                    return
            batch, data = self._unwritten
            await self._write_with_retry(data)
            self._unwritten = None
            self.engine.journal_done(batch)
            self.batches_written += 1
            self._flush_output()
            if self.store.wants_compaction():
                await self._compact()

    async def _write_with_retry(self, data: bytes) -> None:
        delay = RETRY_FIRST
        while True:
            try:
                await self.store.write(data)
                return
            except (OSError, ConnectionError, TimeoutError) as exc:
                if self._give_up_at is not None and self._loop_time() >= self._give_up_at:
                    raise
                log_event(
                    logger,
                    logging.ERROR,
                    "store write failed; acknowledgements wait",
                    store=self.store.name,
                    error=str(exc) or type(exc).__name__,
                    retry_in=f"{delay:.2f}s",
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _compact(self) -> None:
        # Everything journaled so far is stored; the snapshot covers it and any record
        # still pending, which replays idempotently after it.
        snapshot = self.engine.snapshot()
        await self.store.compact(snapshot)
        log_event(
            logger, logging.INFO, "store compacted", store=self.store.name, bytes=len(snapshot)
        )

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def stop(self) -> None:
        """Write what is pending (retrying for ``STOP_RETRIES_FOR`` at most), then close
        the store."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._give_up_at = self._loop_time() + STOP_RETRIES_FOR
        try:
            await self._write_pending()
        except (OSError, ConnectionError, TimeoutError) as exc:
            unwritten = len(self._unwritten[1]) if self._unwritten else 0
            log_event(
                logger,
                logging.ERROR,
                "store unavailable at shutdown; unstored changes dropped, none was acknowledged",
                store=self.store.name,
                error=str(exc) or type(exc).__name__,
                batch_bytes=unwritten,
                pending_records=self.engine.journal_pending(),
            )
        await self.store.close()
