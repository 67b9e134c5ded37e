"""The cluster bus's producer (cluster/producer.py) holds a bounded amount while Kafka
is away: past twice its largest record librdkafka takes no more, and the bus waits for
room instead of piling records into it (the cluster suite runs it against real Kafka)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from tests.support.services import free_ports

from ferromq.cluster.producer import Producer, QueueFull

RECORD = 4096


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _threads_fall_to(count: int) -> bool:
    """Whether this process's threads are ``count`` or fewer within a second: a thread
    Python has joined may stay listed in /proc a moment longer, until its OS thread
    exits (asyncio.run's executor shutdown thread, say)."""
    deadline = time.monotonic() + 1
    while _threads() > count and time.monotonic() < deadline:
        time.sleep(0.01)
    return _threads() <= count


def test_a_producer_whose_kafka_is_away_holds_twice_its_largest_record_at_most() -> None:
    async def fill() -> int:
        (port,) = free_ports(1)  # nothing listens: Kafka is away
        unreachable: list[str] = []
        producer = Producer(
            f"127.0.0.1:{port}",
            request_timeout_ms=1000,
            max_record=RECORD,
            on_unreachable=unreachable.append,
        )
        producer.start()
        taken = 0
        try:
            with pytest.raises(QueueFull):
                for _ in range(100):
                    producer.send("t", bytes(RECORD // 2), key=b"k")
                    taken += 1
            with pytest.raises(TimeoutError):  # nothing is confirmed while Kafka is away
                await asyncio.wait_for(producer.room(), 0.5)
        finally:
            await producer.stop(timeout=0.1)
        return taken

    threads = _threads()
    taken = asyncio.run(fill())
    assert 1 <= taken <= 4, taken
    # Stopped, librdkafka no longer dials the absent Kafka (opening and closing
    # sockets under whatever runs next in this process).
    assert _threads_fall_to(threads)


# 2 * RECORD bytes of half-record values
