"""What runs at the end of each ``IOHub.flush`` (the hub's one ``after_flush`` call):
the node's bus pump sends the tick's records to the other shards
(:mod:`ferromq.shard.bus_pump`), and a cluster member's Kafka bus queues the tick's
records for other members (:mod:`ferromq.cluster.bus`). A shard of a clustered node
runs both, so the hub calls one :class:`AfterFlush` and it calls each part that joined,
in the order they joined. Per tick, never per message."""

from __future__ import annotations

from collections.abc import Callable

from ferromq._protocol import IOHub

__all__ = ["AfterFlush", "after_flush"]


class AfterFlush:
    def __init__(self) -> None:
        self._calls: list[Callable[[], None]] = []

    def __call__(self) -> None:
        for call in self._calls:
            call()

    def join(self, call: Callable[[], None]) -> None:
        self._calls.append(call)

    def leave(self, call: Callable[[], None]) -> None:
        if call in self._calls:
            self._calls.remove(call)


def after_flush(hub: IOHub) -> AfterFlush:
    """``hub``'s :class:`AfterFlush`, set on it the first time it is asked for."""
    hooks = hub.after_flush
    if not isinstance(hooks, AfterFlush):
        hooks = AfterFlush()
        hub.after_flush = hooks
    return hooks
