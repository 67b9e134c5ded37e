"""A store made of two: APPLICATION clients' queues in Kafka, everything else in the
primary store (``storage.application_store = "kafka"``).

Each journal batch is split in Rust (``ferromq._core.JournalSplitter``): the primary
store gets its bytes as one buffer, the Kafka store the application clients' deliveries,
acknowledgements and session ends. The primary write comes first and decides whether the
batch happened: it holds the batch's new application deliveries too (with the publisher's
inbound QoS 2 id, a shard's bus cursor), so a crash before Kafka has them loses nothing,
and Kafka never holds a delivery of a batch the primary store does not. Then Kafka stores
the deliveries and commits the cursors the batch's acknowledgements moved; the batch is
stored when both are (a PUBREL waits for it, so a completed QoS 2 delivery is past the
stored cursor before its client can forget it). The next split drops from the primary the
deliveries Kafka confirmed (``engine/split.rs``). A retry of a failed batch redoes only
the failed half (the split and the records Kafka already has are kept for it), so
nothing is split or produced twice.

Restart: the primary store loads first; the splitter learns from it which sessions belong
to application clients and which of their deliveries it holds; the Kafka store reads each
one's records after its cursor. The engine restores from the primary bytes followed by
those records (behind a version 0 journal header, which switches the reader from the
embedded store's stored log framing back to batch framing), so each session exists before
its deliveries are replayed; a delivery in both is restored once (by its sequence).
Compaction keeps the primary part of the snapshot: all but the deliveries Kafka confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferromq._core import ApplicationOp, JournalSplitter, journal_header
from ferromq.storage import Store
from ferromq.storage.kafka import KafkaStore, Progress

__all__ = ["SplitStore"]


@dataclass
class _Batch:
    data: bytes
    primary: bytes | None  # None once stored
    ops: list[ApplicationOp] | None  # None once stored
    progress: Progress = field(default_factory=Progress)


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
        self._splitter.observe_application(application)
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
        deliveries = await self.application.load(application)
        self._splitter.observe_application(deliveries)
        return data + journal_header(0) + deliveries

    def loaded(self, valid_len: int) -> None:
        self.primary.loaded(min(valid_len, self._primary_len))

    async def write(self, batch: bytes) -> None:
        if self._batch is None or self._batch.data is not batch:
            primary, ops = self._splitter.split(batch)
            self._batch = _Batch(batch, primary, ops)
        current = self._batch
        if current.primary is not None:
            if current.primary:
                await self.primary.write(current.primary)
            current.primary = None
        if current.ops is not None:
            if current.ops:
                await self.application.write(current.ops, current.progress)
            current.ops = None
        self._splitter.application_stored()
        self._batch = None

    async def compact(self, snapshot: bytes) -> None:
        await self.primary.compact(self._splitter.primary_part(snapshot))

    def wants_compaction(self) -> bool:
        return self.primary.wants_compaction()

    async def close(self) -> None:
        try:
            await self.primary.close()
        finally:
            await self.application.close()
