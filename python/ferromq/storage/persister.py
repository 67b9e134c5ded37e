"""The persister: moves the engine's journal into the store, batch by batch.

The engine raises one ``Persist`` event when records appear (not one per record), and a
second one when a store's batch size is reached (``Engine.set_journal_flush_records``).
The persister waits ``flush_interval`` after the first (0: the next loop turn), or
less if the second comes, and writes everything pending as one batch; while a batch is
being written new records accumulate and go out as the next batch the moment it returns
(group commit). After each write it calls ``Engine.journal_done(batch)``, which
releases the PUBACK/PUBREC held for that batch, and flushes the IO hub so they leave
this loop turn.

Supervision: the persister never ends while the broker runs. A failed write is not
confirmed, so nothing waiting for it is acknowledged; the batch is retried with
backoff until the store takes it. A failed compaction (or snapshot) leaves the log as
it was and writes go on; it is retried with backoff, with or without new writes. Any
other error (a bug) is handled the same way, logged with its traceback. Each failure
is logged at once with the operation, the store and the cause; its state (``health``:
ok or failing, error count, last error) goes to ``$SYS/broker/store/`` and
``Broker.ready()``, and the first success after failures logs "store recovered".
Each stored batch is measured once (its bytes, the write's duration: histograms for
``/metrics``, never per record), and failures are counted per operation.
Batches are never reordered or skipped. At shutdown the retries stop after
``STOP_RETRIES_FOR`` seconds, so a broker whose store is down still exits: what was
not stored was never acknowledged, and the log says how much was left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ferromq._core import Engine
from ferromq.histogram import LATENCY_SECONDS, SIZE_BYTES, Histogram
from ferromq.log import log_error, log_event
from ferromq.storage import Store

__all__ = ["Persister", "StoreHealth"]

logger = logging.getLogger("ferromq.storage")

RETRY_FIRST = 0.05
RETRY_MAX = 5.0
STOP_RETRIES_FOR = 10.0
# Errors of the store's IO; anything else is a bug, logged with its traceback.
IO_ERRORS = (OSError, ConnectionError, TimeoutError)


@dataclass(frozen=True)
class StoreHealth:
    """The store writer's state, for $SYS and readiness."""

    ok: bool = True
    errors: int = 0
    last_error: str = ""

    @property
    def state(self) -> str:
        return "ok" if self.ok else "failing"


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
        self.health = StoreHealth()
        self.batch_bytes = Histogram(SIZE_BYTES)
        self.write_seconds = Histogram(LATENCY_SECONDS)
        self.errors_by_operation: Counter[str] = Counter()
        # Operations whose last attempt failed.
        self._failing: set[str] = set()
        # A failed compaction waits until this loop time, then the delay doubles.
        self._compact_at = 0.0
        self._compact_delay = RETRY_FIRST

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    @property
    def running(self) -> bool:
        """The writer task is alive (it ends only with ``stop``)."""
        return self._task is not None and not self._task.done()

    def kick(self) -> None:
        """The engine has records (its ``Persist`` event)."""
        self._wakeup.set()

    async def _run(self) -> None:
        delay = RETRY_FIRST
        while self._give_up_at is None:  # until ``stop``, should its cancellation be lost
            await self._wait_for_work()
            self._wakeup.clear()
            if self._flush_interval:
                # A second kick means the batch is full: write it now.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self._flush_interval)
                self._wakeup.clear()
            try:
                await self._write_pending()
                self._succeeded("persist")
                delay = RETRY_FIRST
            except Exception as exc:
                self._failed("persist", exc, delay)
                self._wakeup.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _wait_for_work(self) -> None:
        """Until the engine has records, or a failed compaction's retry is due (so a
        broker with nothing to write still gets its store back to ok)."""
        if "compaction" not in self._failing:
            await self._wakeup.wait()
            return
        with contextlib.suppress(TimeoutError):
            due_in = max(self._compact_at - self._loop_time(), 0.0)
            await asyncio.wait_for(self._wakeup.wait(), due_in)

    async def _write_pending(self) -> None:
        """Write batches until the journal is empty, compacting when the store asks."""
        while True:
            if self._unwritten is None:
                self._unwritten = self.engine.take_journal()
            if self._unwritten is None:
                await self._compact_if_due()
                return
            batch, data = self._unwritten
            await self._write_with_retry(data)
            self._unwritten = None
            self.engine.journal_done(batch)
            self.batches_written += 1
            self._flush_output()
            await self._compact_if_due()

    async def _compact_if_due(self) -> None:
        if self.store.wants_compaction() and self._loop_time() >= self._compact_at:
            await self._compact()

    async def _write_with_retry(self, data: bytes) -> None:
        delay = RETRY_FIRST
        while True:
            started = self._loop_time()
            try:
                await self.store.write(data)
                self.write_seconds.observe(self._loop_time() - started)
                self.batch_bytes.observe(len(data))
                self._succeeded("write")
                return
            except Exception as exc:
                if self._give_up_at is not None and self._loop_time() >= self._give_up_at:
                    raise
                self._failed("write", exc, delay, "acknowledgements wait")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _compact(self) -> None:
        # Everything journaled so far is stored; the snapshot covers it and any record
        # still pending, which replays idempotently after it. A failure leaves the log
        # as it was: writes go on and the compaction is tried again after a backoff.
        try:
            snapshot = self.engine.snapshot()
            await self.store.compact(snapshot)
        except Exception as exc:
            self._failed("compaction", exc, self._compact_delay, "writes go on")
            self._compact_at = self._loop_time() + self._compact_delay
            self._compact_delay = min(self._compact_delay * 2, RETRY_MAX)
            return
        self._compact_delay = RETRY_FIRST
        self._succeeded("compaction")
        log_event(
            logger, logging.INFO, "store compacted", store=self.store.name, bytes=len(snapshot)
        )

    def _failed(self, operation: str, exc: Exception, retry_in: float, effect: str = "") -> None:
        """Log a failed store operation at once and mark the store failing."""
        error = f"{operation}: {exc or type(exc).__name__}"
        self._failing.add(operation)
        self.errors_by_operation[operation] += 1
        self.health = StoreHealth(False, self.health.errors + 1, error)
        fields: dict[str, object] = {"store": self.store.name, "error": error}
        if effect:
            fields["effect"] = effect
        fields["retry_in"] = f"{retry_in:.2f}s"
        # Not an IO error: a bug, whose traceback the log keeps.
        bug = None if isinstance(exc, IO_ERRORS) else exc
        log_error(logger, f"store {operation} failed", bug, **fields)

    def _succeeded(self, operation: str) -> None:
        if operation in self._failing:
            self._failing.discard(operation)
            if not self._failing:
                self.health = StoreHealth(True, self.health.errors, self.health.last_error)
                log_event(
                    logger, logging.WARNING, "store recovered", store=self.store.name,
                    errors=self.health.errors,
                )  # fmt: skip

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def stop(self) -> None:
        """Write what is pending (retrying for ``STOP_RETRIES_FOR`` at most), then close
        the store."""
        self._give_up_at = self._loop_time() + STOP_RETRIES_FOR
        if self._task is not None:
            self._task.cancel()
            # The cancellation can be lost: before Python 3.12, ``asyncio.wait_for``
            # returns the result of a write or wait that finished in the loop turn the
            # cancellation came in (CPython gh-86296). The writer then ends at its
            # loop's test; awaiting the cancellation alone would wait forever.
            await asyncio.wait({self._task})
        try:
            await self._write_pending()
        except Exception as exc:
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
