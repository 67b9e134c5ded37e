"""The end of a flush runs every part that joined (python/ferromq/after_flush.py): a
shard of a clustered node has both its bus pump and its Kafka bus there, and one taking
the hub's call from the other held a tick's records for other members until a timer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ferromq.after_flush import AfterFlush, after_flush


def test_each_part_that_joined_runs_in_order_until_it_leaves() -> None:
    hub: Any = SimpleNamespace(after_flush=None)
    calls: list[str] = []

    def pump() -> None:
        calls.append("pump")

    def bus() -> None:
        calls.append("bus")

    after_flush(hub).join(pump)
    after_flush(hub).join(bus)
    assert isinstance(hub.after_flush, AfterFlush)
    hub.after_flush()
    after_flush(hub).leave(pump)
    after_flush(hub).leave(pump)  # leaving twice is harmless
    hub.after_flush()
    assert calls == ["pump", "bus", "bus"]
