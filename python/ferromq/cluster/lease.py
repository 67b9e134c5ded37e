"""A member's lease on its client ids (docs/cluster.md, "Partitions"): no client id is
served by two members at once, whatever is cut off or frozen.

Other members take a member's sessions (adoption) only once its alive key has expired
in Redis, ``[cluster] lease`` seconds after the last heartbeat Redis took. So the member
holds its lease until :data:`HOLD` of that time has passed since it *sent* the last
heartbeat Redis confirmed (Redis set the expiry later than that, never earlier), and
then gives its clients up before anyone may adopt them:

- **Renewed** by each confirmed heartbeat (:meth:`Lease.renewed`, from
  :mod:`ferromq.cluster.membership`). A heartbeat that finds its alive key gone (it
  expired: the member was frozen or cut off longer than the lease) loses the lease at
  once (:meth:`Lease.lose`): another member may hold its clients already.
- **Checked** before anything that would act for those clients leaves the process:
  the store's pipelined writes, the Kafka bus's records, a claim, an adoption, a
  release (:meth:`Lease.check`, a clock comparison). A process that was frozen
  (SIGSTOP, a paused VM) and continues past its lease stops there, before it writes.
- **Watched** by a thread (:meth:`Lease.start`) that loses the lease at its end even
  while the event loop is blocked or waiting on a Redis that does not answer.

Losing the lease is the member's end: one ``ERROR`` line naming the member and how long
its heartbeat went unconfirmed, every TCP connection of the process reset (``SO_LINGER``
0: what the kernel still holds for Redis, Kafka or a client is discarded, not sent after
the partition heals) and exit status 3, as ``kill -9`` would leave it plus the line. A
shard of a node is started again by its supervisor, a node by systemd
(``Restart=on-failure``); either rejoins through the adoption that a dead member gets.
Per heartbeat and per batch, never per message.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Final, NoReturn

from ferromq.exits import EXIT_STORE_UNAVAILABLE
from ferromq.log import log_event

__all__ = ["HOLD", "Lease"]

logger = logging.getLogger("ferromq.cluster")

#: The part of the lease a member holds its clients after sending its last confirmed
#: heartbeat; the rest is the margin for giving them up before its alive key expires.
HOLD: Final = 0.8
#: How often the watchdog thread looks at the clock.
WATCH_EVERY: Final = 0.05
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class Lease:
    """The right of ``member`` to serve its client ids, ``seconds`` long per heartbeat;
    ``end`` is what losing it does (the process's end, unless a test says otherwise)."""

    def __init__(
        self, member: str, seconds: float, end: Callable[[], NoReturn] | None = None
    ) -> None:
        self.member = member
        self._end = end or _end_process
        self.seconds = seconds
        self._hold = seconds * HOLD
        self._expires = math.inf  # monotonic; held without end until the first heartbeat
        self._renewed_at = math.inf
        self._watching = threading.Event()
        self._thread: threading.Thread | None = None
        self._losing = threading.Lock()

    @property
    def heartbeat(self) -> float:
        """Seconds between heartbeats: five of them per lease."""
        return self.seconds / 5

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (``time.monotonic()``) was confirmed."""
        self._renewed_at = sent_at
        self._expires = sent_at + self._hold

    def check(self) -> None:
        """Before acting for this member's clients: lose the lease if it has run out."""
        if time.monotonic() >= self._expires:
            self.lose("no heartbeat confirmed in time")

    def start(self) -> None:
        """Watch the lease from a thread of its own (once the member has joined)."""
        if self._thread is None:
            self._watching.set()
            self._thread = threading.Thread(
                target=self._watch, name=f"lease {self.member}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """A clean stop: the member leaves, the lease no longer ends it."""
        self._expires = math.inf
        self._watching.clear()

    def lose(self, why: str) -> NoReturn:
        """End the member: its clients are another member's from now on."""
        with self._losing:
            unconfirmed = time.monotonic() - self._renewed_at
            log_event(
                logger,
                logging.ERROR,
                "cluster: lease lost; this member stops so that another can take its clients",
                member=self.member,
                why=why,
                unconfirmed_s=round(unconfirmed, 3) if math.isfinite(unconfirmed) else None,
                lease_s=self.seconds,
            )
            self._end()

    def _watch(self) -> None:
        while self._watching.is_set():
            self.check()
            time.sleep(max(0.0, min(self._expires - time.monotonic(), WATCH_EVERY)))


def _end_process() -> NoReturn:
    for handler in logging.getLogger().handlers:
        handler.flush()
    _reset_connections()
    os._exit(EXIT_STORE_UNAVAILABLE)


def _reset_connections() -> None:
    """Make every TCP socket of the process close with RST, its unsent bytes dropped."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        except OSError:
            pass
        finally:
            sock.detach()
