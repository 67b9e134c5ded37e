"""A node refuses what a newer build wrote rather than guess (docs/architecture.md,
"Frames"): a Kafka record of frame format version 2 produced into a running node's topic
makes ``ferromq serve`` stop with exit status 3 and one line naming the frame, its
version and the version this build reads; a subscription key of version 2 does the same
at the next start, before the node serves. Its committed offset stays before the
record, so the newer build it needs reads it."""

from __future__ import annotations

import asyncio
import contextlib
import re

import pytest
from aiokafka import AIOKafkaProducer

from ferromq._core import FRAME_VERSION
from tests.cluster.conftest import ClusterFactory, ClusterNode

EXIT_STORE_UNAVAILABLE = 3
NEWER = FRAME_VERSION + 1


def produce(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, value, key=key)
        finally:
            await producer.stop()

    asyncio.run(send())


def refusal(node: ClusterNode) -> str:
    """The node's exit status is 3; its one ``ferromq: error:`` line."""
    assert node.process.wait(30) == EXIT_STORE_UNAVAILABLE, node.log()
    lines = [line for line in node.log().splitlines() if line.startswith("ferromq: error:")]
    assert len(lines) == 1, node.log()
    return lines[0]


def test_a_node_record_of_a_newer_frame_version_stops_the_node(
    cluster_factory: ClusterFactory, kafka_bootstrap: str
) -> None:
    cluster = cluster_factory(count=1)
    node = cluster.nodes[0]
    topic = f"{cluster.prefix}.node.{node.member_ids[0]}"
    produce(kafka_bootstrap, topic, b"node-z", bytes([NEWER]) + b"records of a newer build")

    line = refusal(node)
    assert line == (
        f"ferromq: error: cluster: {topic}: cluster node record in frame format version "
        f"{NEWER}, but this build reads version {FRAME_VERSION}"
    )
    # Never committed past: started again, the same build stops on it again.
    with contextlib.suppress(RuntimeError):  # it may exit before or after it serves
        node.start()
    assert refusal(node) == line


def test_a_subscription_value_of_a_newer_frame_version_stops_the_node_at_start(
    cluster_factory: ClusterFactory, kafka_bootstrap: str
) -> None:
    cluster = cluster_factory(count=1)
    node = cluster.nodes[0]
    node.stop()
    topic = f"{cluster.prefix}.subscriptions"
    produce(kafka_bootstrap, topic, b"node-z\0newer/#", bytes([NEWER]))

    with pytest.raises(RuntimeError, match="exited while starting"):
        node.start()
    assert re.fullmatch(
        f"ferromq: error: cluster: {re.escape(topic)} offset [0-9]+: cluster subscription "
        f"value in frame format version {NEWER}, but this build reads version {FRAME_VERSION}",
        refusal(node),
    )
