"""The ``[stream]`` configuration the tests give a broker that streams to Kafka: records
keyed by the topic's first level, into ``<prefix>messages`` and ``<prefix>events``.
Each test adds its own keys to either table (``stream_keys``, ``kafka_keys``)."""

from __future__ import annotations


def kafka_stream_config(
    bootstrap: str,
    prefix: str,
    *,
    partitions: int,
    delivery: str = "after_kafka",
    sink: str = "kafka",
    stream_keys: str = "",
    kafka_keys: str = "",
) -> str:
    return f"""
[stream]
enabled = true
sink = "{sink}"
key = "level:1"
{stream_keys}
[stream.kafka]
bootstrap_servers = "{bootstrap}"
messages_topic = "{prefix}messages"
events_topic = "{prefix}events"
partitions = {partitions}
delivery = "{delivery}"
{kafka_keys}
"""
