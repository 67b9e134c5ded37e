"""Bounded shutdown: a process stops gracefully within ``[server] shutdown_timeout``, or
exits hard.

The first request (SIGTERM or SIGINT; for a shard also its supervisor's ``stop`` or
the end of its link, :mod:`ferromq.shard.link`) sets :attr:`Shutdown.requested`, and
:func:`ferromq.broker.serve` stops the broker: it stops accepting, disconnects the
clients, writes what the journal still holds and closes the store, the stream and the
cluster. Those last steps wait on other processes, which may not answer (a stopped
Redis is silent until the command timeout, then the write is retried), or on a task
that lost its cancellation. So the request also starts a deadline on a timer thread of
its own, which runs whatever the event loop does: a process still alive after the
timeout logs one line naming the step it is waiting for (the ``waiting_for``
callback: ``Broker.waiting_for``) and leaves with ``os._exit``
(:data:`EXIT_STOP_CUT_SHORT`). A second SIGTERM or SIGINT during the stop does the
same at once. Only signals count twice: a shard whose supervisor relays the
operator's stop over the link also gets the operator's signal itself (Ctrl-C reaches
the process group, systemd signals the whole cgroup), and that is one request.

Exiting hard loses nothing acknowledged, by design: a PUBACK or PUBREC (or, in a node,
the acknowledgement of a message routed to another shard) goes out only once the store
(every store concerned) confirmed what it acknowledges. What a hard exit drops was not
acknowledged, and its publisher sends it again; what it skips is courtesy (the last
unacknowledged batch, a clean close of the store's and Kafka's connections).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Final, NoReturn

from ferromq.log import log_event

__all__ = ["EXIT_STOP_CUT_SHORT", "Shutdown"]

logger = logging.getLogger("ferromq.shutdown")

EXIT_STOP_CUT_SHORT: Final = 1
"""The exit status of a process whose stop did not finish."""


class Shutdown:
    """One process's stop: requested once, finished within ``timeout`` seconds or cut
    short."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.requested = asyncio.Event()
        self.waiting_for: Callable[[], str] = lambda: "the start to finish"
        self._signalled = False
        self._deadline_starter: asyncio.Task[None] | None = None

    def handle_signals(self) -> None:
        """From now on SIGTERM and SIGINT request the stop, a second one cuts it short;
        the deadline starts when the stop is requested, by whatever sets
        :attr:`requested`."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._signal, signal.Signals(signum))
        self._deadline_starter = asyncio.create_task(self._start_deadline())

    def _signal(self, signum: signal.Signals) -> None:
        if self._signalled:
            self._exit(f"second {signum.name}")
        self._signalled = True
        self.requested.set()

    async def _start_deadline(self) -> None:
        await self.requested.wait()
        # A thread, not the loop's timer: a loop stuck in a call, or done and waiting
        # for the executor's threads at exit, still ends.
        timer = threading.Timer(
            self.timeout, self._exit, (f"not stopped within {self.timeout:g}s",)
        )
        timer.daemon = True
        timer.start()

    def _exit(self, reason: str) -> NoReturn:
        log_event(
            logger,
            logging.ERROR,
            "stop cut short, exiting now",
            reason=reason,
            waiting_for=self.waiting_for(),
            status=EXIT_STOP_CUT_SHORT,
        )
        os._exit(EXIT_STOP_CUT_SHORT)
