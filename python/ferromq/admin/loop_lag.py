"""Event-loop lag: how late the loop runs a callback that was due.

A task sleeps :data:`INTERVAL` and, on waking, observes how much later than due it
woke into a histogram (``ferromq_eventloop_lag_seconds``). Every connection's reads,
flushes and timers share this loop, so this delay is what a read or a keep-alive
timer waits on top of its own work when the broker is saturated. One observation
per interval, whatever the traffic.
"""

from __future__ import annotations

import asyncio
import contextlib

from ferromq.histogram import LATENCY_SECONDS, Histogram

__all__ = ["INTERVAL", "LoopLag"]

INTERVAL = 0.25
"""Seconds between two probes."""


class LoopLag:
    def __init__(self) -> None:
        self.histogram = Histogram(LATENCY_SECONDS)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + INTERVAL
            await asyncio.sleep(INTERVAL)
            self.histogram.observe(max(0.0, loop.time() - due))
