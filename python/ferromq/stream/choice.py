"""The choice of the stream's sink (``[stream] sink``): :func:`make_sink`, above the
sinks it makes (:mod:`ferromq.stream.files`, :mod:`ferromq.stream.kafka_sink`), which
take their vocabulary from :mod:`ferromq.stream.sink`. The Kafka sink is imported only
when chosen: it needs the ``kafka`` extra."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ferromq.config import Config, ConfigError
from ferromq.shard.identity import ShardIdentity
from ferromq.stream.sink import StreamSink

__all__ = ["make_sink"]


def make_sink(
    config: Config, node: str, done: Callable[[int], None], shard: ShardIdentity | None = None
) -> StreamSink:
    """The sink ``[stream] sink`` names, reporting stored batches to ``done``; ``shard``
    (a shard of a node) keeps its files and spill apart from the other shards'. Raises
    :class:`~ferromq.config.ConfigError` (one line) for a sink this build lacks."""
    if config.stream.sink == "files":
        from ferromq.stream.files import FileSink

        return FileSink(config, node, done, shard)
    try:
        module = importlib.import_module("ferromq.stream.kafka_sink")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f'stream.sink: "kafka" is not available in this build ({exc}); use "files"'
        ) from None
    sink: StreamSink = module.KafkaStreamSink(config, node, done, shard)
    return sink
