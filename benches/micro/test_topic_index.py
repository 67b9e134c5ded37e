"""Topic matching from Python on 10,000 subscriptions: ferromq's index against
amqtt's matcher (a linear scan of every filter through ``Broker._matches``, as
amqtt's broadcast loop does) and the brute-force reference scan.

The workload mirrors ``rust/ferromq-core/benches/support/workload.rs``: 1,000
clients with 10 filters each on ``tenant/{t}/site/{s}/device/{d}/{metric}``, 70 %
exact, 20 % with '+', 10 % with '#'.

Run: ``pytest benches/micro/test_topic_index.py --benchmark-enable -o addopts=""``
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
from amqtt.broker import Broker

from ferromq.topic import SubscriptionIndex, filter_matches

METRICS = ["temp", "hum", "pres", "volt", "amp", "rssi", "batt", "co2", "lux", "wind"]
CLIENTS = 1_000


def filters(client: int) -> list[str]:
    t, s = client // 10_000, (client // 100) % 100
    device = f"tenant/{t}/site/{s}/device/{client}"
    return [
        *(f"{device}/{m}" for m in METRICS[:7]),
        f"tenant/{t}/site/+/device/{client}/{METRICS[7]}",
        f"{device}/+",
        f"{device}/#",
    ]


SUBSCRIPTIONS = [(c, f) for c in range(CLIENTS) for f in filters(c)]
_rng = random.Random(7)
TOPICS = [
    f"tenant/0/site/{d // 100}/device/{d}/{_rng.choice(METRICS)}"
    for d in (_rng.randrange(CLIENTS) for _ in range(1_024))
]


class _AmqttStub:
    """What ``Broker._matches`` reads from ``self``."""

    logger = logging.getLogger("amqtt-stub")


def amqtt_router() -> Callable[[str], list[int]]:
    table: dict[str, list[int]] = {}
    for client, topic_filter in SUBSCRIPTIONS:
        table.setdefault(topic_filter, []).append(client)
    stub = _AmqttStub()
    matches = Broker._matches

    def route(topic: str) -> list[int]:
        return [c for f, subs in table.items() if matches(stub, topic, f) for c in subs]

    return route


def brute_force_router() -> Callable[[str], list[int]]:
    def route(topic: str) -> list[int]:
        return [c for c, f in SUBSCRIPTIONS if filter_matches(f, topic)]

    return route


def ferromq_router() -> Callable[[str], list[int]]:
    index = SubscriptionIndex()
    for client, topic_filter in SUBSCRIPTIONS:
        index.subscribe(client, topic_filter, 1)

    def route(topic: str) -> list[int]:
        return index.match(topic)[0]

    return route


@pytest.mark.parametrize(
    "router", [ferromq_router, amqtt_router, brute_force_router], ids=lambda r: r.__name__
)
def test_match_10k_subscriptions(
    benchmark: Any, router: Callable[[], Callable[[str], list[int]]]
) -> None:
    route = router()
    topics = itertools.cycle(TOPICS)
    # Every router agrees on who receives the first topics.
    reference = brute_force_router()
    for topic in TOPICS[:20]:
        assert sorted(set(route(topic))) == sorted(set(reference(topic)))
    benchmark(lambda: route(next(topics)))
