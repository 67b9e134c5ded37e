"""A fixed-bucket histogram for per-event measurements (a store batch, a loop tick).

Kept here rather than as a prometheus-client object so the code that observes (the
persister, the loop-lag probe) does not need the ``admin`` extra: an observation is a
``bisect`` and two additions, and :mod:`ferromq.admin.metrics` reads the counts at
scrape time. Buckets follow Prometheus: ``counts[i]`` holds observations at most
``bounds[i]`` and above ``bounds[i - 1]``; the last slot holds those above every bound.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

__all__ = ["LATENCY_SECONDS", "SIZE_BYTES", "Histogram"]

LATENCY_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Bucket bounds for durations: half a millisecond to seconds."""
SIZE_BYTES = tuple(float(4**n * 64) for n in range(10))
"""Bucket bounds for batch sizes: 64 B to 16 MiB in powers of four."""


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus exposes them, ``+Inf`` last."""
        pairs, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs
