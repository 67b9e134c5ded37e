"""Where the broker and the load generator run: the cores each may use.

The broker gets the last ``broker_cores`` cores of the harness's affinity mask (it is
started under ``taskset -c``); the generator (Rust threads in the harness process,
one per core it may use) gets the cores left over. When none are left (two broker
cores on a two-core machine) the generator shares the broker's cores: its CPU time
then competes with the broker's, which the wall-clock figures (msg/s, latency) show
and the per-broker-core-second figure does not (it divides by the broker's own CPU
time). One broker core on two is the layout of every earlier result: broker on core 1,
generator on core 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    broker: tuple[int, ...]
    generator: tuple[int, ...]

    @property
    def shared(self) -> bool:
        """The generator runs on the broker's cores."""
        return bool(set(self.broker) & set(self.generator))

    @property
    def taskset(self) -> str:
        """The broker's cores as ``taskset -c`` takes them."""
        return ",".join(map(str, self.broker))

    def describe(self) -> str:
        generator = ",".join(map(str, self.generator))
        where = (
            f"the generator is not pinned to a core of its own: it shares cores {generator} "
            "with the broker, so recv msg/s and latency include its competition for them "
            "(per broker-core-second does not)"
            if self.shared
            else f"generator on core{'s' if len(self.generator) > 1 else ''} {generator}"
        )
        return (
            f"Broker on core{'s' if len(self.broker) > 1 else ''} {self.taskset} "
            f"(taskset), {where}."
        )


def place(broker_cores: int) -> Placement:
    """The layout for a broker given ``broker_cores`` of the cores this process may use."""
    available = sorted(os.sched_getaffinity(0))
    if not 1 <= broker_cores <= len(available):
        raise ValueError(
            f"--broker-cores {broker_cores}: this process may use {len(available)} cores"
        )
    broker = tuple(available[-broker_cores:])
    rest = tuple(available[:-broker_cores])
    return Placement(broker, rest or broker)
