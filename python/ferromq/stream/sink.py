"""The stream's sinks: where the engine's record batches go (``[stream] sink``).

The broker takes one :class:`~ferromq._core.StreamBatch` per loop tick that has
records (the engine's ``StreamReady`` event) and hands it to the sink with
:meth:`StreamSink.submit`, which never blocks the loop. The sink calls ``done(number)``
(the broker's wrapper of ``Engine.stream_done``) once the batch is where its delivery
mode needs it: written to the file for the file sink, acknowledged by Kafka for
``delivery = "after_kafka"``. While the engine holds acknowledgements for the stream
(:func:`holds_acks`) the publishers' PUBACK/PUBREC wait for that call, so a sink must
call it for every batch, in order, and never for a batch it does not have.

Python runs here per batch, never per record: a batch crosses as one object and the
records stay in Rust until a sink's compiled encoder frames them.

Sinks: ``files`` (:mod:`ferromq.stream.files`, the embedded default) and ``kafka``
(:mod:`ferromq.stream.kafka_sink`), which :mod:`ferromq.stream.choice` chooses between.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from ferromq._core import StreamBatch
from ferromq.config import Config, StreamConfig
from ferromq.storage.persister import StoreHealth

__all__ = ["SinkHealth", "StreamSink", "holds_acks", "stream_directory"]

SinkHealth = StoreHealth
"""A sink's state (ok or failing, errors, the last one) for ``/readyz``: the same shape
as the store writer's."""


class StreamSink(Protocol):
    """What the broker drives. ``counters`` holds at least ``records``, ``bytes``
    (record values written), ``batches`` and ``errors``; a sink adds its own (the file
    sink ``files``), each exported as ``ferromq_stream_<name>_total``."""

    async def start(self) -> None:
        """Ready to take batches (recovery, connections); raises ``OSError`` or
        ``ConnectionError`` with one line naming what is unusable."""

    def submit(self, batch: StreamBatch) -> None:
        """Take ``batch`` (numbered after the previous one); never blocks."""

    async def stop(self) -> None:
        """Write what was submitted, then release everything."""

    @property
    def health(self) -> SinkHealth: ...

    def counters(self) -> Mapping[str, int]: ...

    def gauges(self) -> Mapping[str, int]:
        """Levels now (the Kafka sink's queue and spill), each exported as
        ``ferromq_stream_<name>``; empty when a sink has none."""


def holds_acks(stream: StreamConfig) -> bool:
    """Whether publishers' PUBACK/PUBREC wait for the stream's sink: always with the
    file sink (writing a file is local and quick), with Kafka only for
    ``delivery = "after_kafka"``."""
    return stream.sink == "files" or stream.kafka.delivery == "after_kafka"


def gather_seconds(stream: StreamConfig) -> float:
    """How long the broker lets records gather after the first of a batch before it
    takes the batch: ``[stream.kafka] linger_ms`` for Kafka in ``async``, whose cost is
    per send; none where acknowledgements wait for the sink (files, ``after_kafka``,
    whose batches gather anyway while the previous send waits for Kafka)."""
    return 0.0 if holds_acks(stream) else stream.kafka.linger_ms / 1000


def stream_directory(config: Config) -> Path:
    """``[stream.files] directory``, by default ``<storage.path>/stream``."""
    return Path(config.stream.files.directory or Path(config.storage.path) / "stream")
