"""A shard's end of the bus (docs/shards.md, "The bus"): it moves the engine's records
for the other shards into their rings once per loop tick, and the others' records into
the engine when its eventfd says some arrived.

- **Sending** runs at the end of every ``IOHub.flush`` (:mod:`ferromq.after_flush`), so all
  the records a tick produced go in one batch per ring with one release store
  (``Bus.send``, in Rust). A receiving shard that parked is woken with one write to its
  eventfd; one that is busy is not woken at all.
- **Receiving**: the loop watches this shard's eventfd. On a wake-up the pump drains
  every incoming ring into the engine (``Bus.receive``, no Python per record), parks
  (asks to be woken next time) and drains again if records arrived meanwhile, then
  flushes the hub so the deliveries are written in the same tick.
- **A frame this build does not read** (another build's shard: one the supervisor
  restarted after an upgrade; ``FrameVersionError``) stops the shard through
  ``refuse``, and with it the node, with one line (docs/architecture/core.md, "Frames").
- **Start**: once the store is restored, ``Engine.bus_hello`` tells every other shard
  this one is (again) here: they replace what they held of its subscriptions and send
  theirs back. So a restarted shard rejoins with a consistent index on both sides; it
  serves no client before every other shard's subscriptions arrived (``synced``), or a
  PUBLISH from a client that reconnected at once would be acknowledged and matched by
  nobody on the other shards.

Python runs here once per tick and once per wake-up, never per record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from ferromq._core import Bus, Engine, FrameVersionError
from ferromq._protocol import IOHub
from ferromq.after_flush import after_flush
from ferromq.log import log_event
from ferromq.shard.identity import ShardIdentity
from ferromq.storage import StoreUnavailable

logger = logging.getLogger("ferromq.node.bus")

# A started shard looks this often whether every other shard's subscriptions arrived,
# and says it is still waiting every 10 s.
SYNC_POLL_SECONDS = 0.005
SYNC_WARN_POLLS = 2000
#: Bytes per ring: four times the largest packet a shard relays at once, and small
#: enough that count² rings stay modest (2 shards: 2 rings; 16 shards: 240 rings; at
#: the minimum, 56 shards' 3,080 rings are 3 GiB: benches/load/RESULTS.md, item 4).
RING_CAPACITY_MAX = 16 * 1024 * 1024
RING_CAPACITY_MIN = 1024 * 1024


def ring_capacity(count: int) -> int:
    """A power of two between 1 and 16 MiB, smaller as the rings multiply (about
    256 MiB of shared memory in all at most)."""
    budget = (256 * 1024 * 1024) // max(1, count * (count - 1))
    capacity = RING_CAPACITY_MIN
    while capacity * 2 <= min(budget, RING_CAPACITY_MAX):
        capacity *= 2
    return capacity


class BusPump:
    """Joins one shard's engine and hub to the node's bus."""

    def __init__(
        self,
        identity: ShardIdentity,
        engine: Engine,
        hub: IOHub,
        loop: asyncio.AbstractEventLoop,
        *,
        refuse: Callable[[StoreUnavailable], None],
    ) -> None:
        self._bus = Bus(identity.bus_fd, identity.index, identity.count)
        self._refuse = refuse
        self._engine = engine
        self._hub = hub
        self._loop = loop
        self._wake_fds = identity.wake_fds
        self._own_wake = identity.wake_fds[identity.index]
        self._failed_logged = False

    def start(self) -> None:
        """Say hello to the other shards and start moving records both ways."""
        self._engine.bus_hello()
        after_flush(self._hub).join(self.send)
        self._loop.add_reader(self._own_wake, self._woken)
        self.send()
        self._receive()

    async def synced(self) -> None:
        """Until every other shard's subscriptions have arrived (``Engine.bus_synced``):
        a client served before would publish past their subscribers, acknowledged and
        delivered to nobody. A shard that does not answer is being restarted by the
        supervisor, whose new process says hello in turn."""
        polls = 0
        while not self._engine.bus_synced():
            await asyncio.sleep(SYNC_POLL_SECONDS)
            polls += 1
            if polls % SYNC_WARN_POLLS == 0:
                log_event(logger, logging.WARNING, "waiting for the other shards' subscriptions")

    def close(self) -> None:
        after_flush(self._hub).leave(self.send)
        self._loop.remove_reader(self._own_wake)

    def backlog(self) -> int:
        """Bytes waiting for room in the rings."""
        return self._bus.backlog()

    def send(self) -> None:
        for shard in self._bus.send(self._engine):
            os.eventfd_write(self._wake_fds[shard], 1)

    def _woken(self) -> None:
        # A drain since the write may have taken the records it was for.
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._own_wake)
        self._receive()

    def _receive(self) -> None:
        while True:
            try:
                self._bus.receive(self._engine, self._hub.now())
            except FrameVersionError as exc:
                self._refuse(StoreUnavailable(f"bus: {exc}"))
                return
            except ValueError as exc:
                # Whole records only cross the bus: this is a bug; say it once.
                if not self._failed_logged:
                    self._failed_logged = True
                    log_event(logger, logging.ERROR, "bus records refused", error=str(exc))
            if not self._bus.park():
                break
        self._hub.flush()
