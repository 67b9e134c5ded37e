"""Durable stores: where the engine's journal goes, and where a restart reads it back.

The engine journals every durable change as records (``rust/ferromq-core/src/
durability/record.rs``); a :class:`~ferromq.storage.persister.Persister` takes them in batches and
hands each batch to the configured store, then tells the engine the batch is stored so
the acknowledgements waiting for it go out. A store sees bytes per batch, never a
message: no Python per message.

- ``embedded`` (default): a write-ahead log on local disk (:mod:`.embedded`).
- ``memory``: no store; sessions live as long as the process.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Store", "StoreUnavailable"]


class StoreUnavailable(RuntimeError):
    """The store cannot take writes now; the message says which store, where and why."""


class Store(Protocol):
    """One durable copy of the engine's state."""

    name: str

    async def load(self) -> bytes:
        """Journal records that rebuild the stored state (empty when there is none)."""

    def loaded(self, valid_len: int) -> None:
        """The engine read ``valid_len`` bytes of what :meth:`load` returned as whole
        records; a store may cut off a torn tail there."""

    async def write(self, batch: bytes) -> None:
        """Store one batch of records; returns once it is as durable as configured."""

    async def compact(self, snapshot: bytes) -> None:
        """Replace everything stored so far by ``snapshot`` (the engine's whole state)."""

    def wants_compaction(self) -> bool:
        """True when :meth:`compact` would free enough to be worth a snapshot."""

    async def close(self) -> None:
        """Make everything written durable and release the store."""
