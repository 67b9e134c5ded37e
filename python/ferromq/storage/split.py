"""A store made of two: APPLICATION clients' queues in Kafka, everything else in the
primary store (``storage.application_store = "kafka"``).

Each journal batch is split in Rust (``ferromq._core.JournalSplitter``): the primary
store gets its bytes as one buffer, the Kafka store the application clients' deliveries,
acknowledgements and session ends. Both writes run together and the batch is stored when
both are; a retry of a failed batch redoes only the failed half (the split and the records
Kafka already has are kept for it), so nothing is split or produced twice.

Restart: the primary store loads first; the splitter learns from it which sessions belong
to application clients; the Kafka store reads each one's records after its cursor. The
engine restores from the primary bytes followed by those records (behind a version 0
journal header, which switches the reader from the embedded store's stored log framing
back to batch framing), so each session exists before its deliveries are replayed.
Compaction keeps the primary part of the snapshot (Kafka holds the rest).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ferromq._core import ApplicationOp, JournalSplitter, journal_header
from ferromq.storage import Store
from ferromq.storage.kafka import KafkaStore

__all__ = ["SplitStore"]


@dataclass
class _Batch:
    data: bytes
    primary: bytes | None  # None once stored
    ops: list[ApplicationOp] | None  # None once stored
    produced: dict[int, int] = field(default_factory=dict)  # op index -> offset


class SplitStore:
    def __init__(self, primary: Store, application: KafkaStore) -> None:
        self.primary = primary
        self.application = application
        self.name = f"{primary.name}+{application.name}"
        self._splitter = JournalSplitter()
        self._batch: _Batch | None = None
        self._primary_len = 0

    async def load(self) -> bytes:
        data = await self.primary.load()
        self._primary_len = len(data)
        self._splitter.observe(data)
        await self.application.start()
        application = await self.application.load(self._splitter.application_clients())
        return data + journal_header(0) + application

    async def load_clients(self, clients: list[str]) -> bytes:
        """While running, these clients' sessions (one moving to this cluster node): the
        primary's ``load_clients``, then the application clients' queued deliveries
        from their topics, after their cursors."""
        load_clients = getattr(self.primary, "load_clients", None)
        if load_clients is None:
            raise TypeError(f"the {self.primary.name} store cannot load single clients")
        data: bytes = await load_clients(clients)
        self._splitter.observe(data)
        wanted = set(clients)
        application = [c for c in self._splitter.application_clients() if c in wanted]
        if not application:
            return data
        return data + journal_header(0) + await self.application.load(application)

    def loaded(self, valid_len: int) -> None:
        self.primary.loaded(min(valid_len, self._primary_len))

    async def write(self, batch: bytes) -> None:
        if self._batch is None or self._batch.data is not batch:
            primary, ops = self._splitter.split(batch)
            self._batch = _Batch(batch, primary, ops)
        current = self._batch
        writes = []
        if current.ops is not None:
            writes.append(self._write_application(current))
        if current.primary is not None:
            writes.append(self._write_primary(current))
        results = await asyncio.gather(*writes, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        self._batch = None

    async def _write_application(self, current: _Batch) -> None:
        if current.ops:
            await self.application.write(current.ops, current.produced)
        current.ops = None

    async def _write_primary(self, current: _Batch) -> None:
        if current.primary:
            await self.primary.write(current.primary)
        current.primary = None

    async def compact(self, snapshot: bytes) -> None:
        await self.primary.compact(JournalSplitter.primary_part(snapshot))

    def wants_compaction(self) -> bool:
        return self.primary.wants_compaction()

    async def close(self) -> None:
        try:
            await self.primary.close()
        finally:
            await self.application.close()
