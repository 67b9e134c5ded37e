"""The Prometheus metrics, the ``$SYS`` tree and the statistics they read agree: every
``$SYS`` counter has a metric (or is the sum of a labelled one), every key a metric or
a ``$SYS`` topic reads is one the engine, admission, the accept path, the bridges or
the plugins report, and every figure the engine reports is published — a renamed key
fails here, not as a 500 at the first scrape in production. The engine's figures are
``EngineStats``; its flat ``as_dict()`` says the same as its attributes."""

from __future__ import annotations

import pytest

from ferromq._core import DROP_REASONS, PACKET_TYPES, Engine, EngineStats
from ferromq.admin.metrics import LABELLED_COUNTERS, stats_keys
from ferromq.admission import Admission, load_bans
from ferromq.bridge import bridge_stats
from ferromq.cluster.figures import NODE_FIGURES
from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.listener import Listeners
from ferromq.plugin_host import plugin_stats
from ferromq.sys_topics import COUNTERS, REPLICATED

# $SYS totals Prometheus users get by summing a labelled metric.
SUMMED = {
    "packets_received": "sum(ferromq_packets_received_total)",
    "publish_dropped": "sum(ferromq_messages_dropped_total)",
    "bridge_connects": "sum(ferromq_bridge_connects_total)",  # by bridge
    "bridge_failures": "sum(ferromq_bridge_failures_total)",
}

# What sys_messages reads besides COUNTERS (clients/total).
SYS_TOTAL = {"clients_connected", "clients_disconnected"}


@pytest.fixture
def engine() -> Engine:
    engine = engine_from_config(Config())
    engine.publish("a/b", b"payload", retain=True)  # a figure that is not 0
    return engine


def reported(engine: Engine) -> set[str]:
    """Every key ``Broker.stats()`` has."""
    config = Config()
    admission = Admission(config, load_bans(config.bans))
    return {
        *engine.stats().as_dict(),
        *admission.stats(),
        *Listeners([], admission, 1.0).stats(),
        *bridge_stats([]),
        *plugin_stats(),
    }


def test_every_sys_counter_has_a_metric() -> None:
    assert set(COUNTERS.values()) - stats_keys() - set(SUMMED) == set()


def test_every_key_a_metric_or_sys_topic_reads_is_reported(engine: Engine) -> None:
    read = stats_keys() | set(COUNTERS.values()) | SYS_TOTAL | REPLICATED
    assert read - reported(engine) == set()


def test_every_engine_figure_is_published(engine: Engine) -> None:
    published = stats_keys() | set(COUNTERS.values())
    assert set(engine.stats().as_dict()) - published == set()


def test_node_figures_are_engine_attributes(engine: Engine) -> None:
    stats = engine.stats()
    figures = stats.as_dict()
    for name in NODE_FIGURES:
        assert name in dir(EngineStats), name
        assert getattr(stats, name) == figures[name], name


def test_the_dict_says_what_the_attributes_say(engine: Engine) -> None:
    stats = engine.stats()
    figures = stats.as_dict()
    attributes = {
        name: value
        for name in dir(EngineStats)
        if not name.startswith("_") and isinstance(value := getattr(stats, name), int)
    }
    assert attributes["retained_messages"] == 1
    by_name = {
        **attributes,
        **{f"dropped_{reason}": count for reason, count in stats.dropped.items()},
        **{
            f"{unit}_{direction}_{kind}": count
            for direction, counts in (("received", stats.received), ("sent", stats.sent))
            for unit, by_type in (("packets", counts.packets), ("bytes", counts.bytes))
            for kind, count in by_type.items()
        },
    }
    assert figures == by_name


def test_drop_reasons_and_packet_types_come_from_the_engine(engine: Engine) -> None:
    stats = engine.stats()
    assert tuple(stats.dropped) == DROP_REASONS
    assert sum(stats.dropped.values()) == stats.publish_dropped
    assert len(PACKET_TYPES) == 15 and PACKET_TYPES[2] == "publish"  # wire value 3
    for counts in (stats.received, stats.sent):
        assert tuple(counts.packets) == tuple(counts.bytes) == PACKET_TYPES
    labels = {name: set(by_label) for name, _, _, by_label in LABELLED_COUNTERS}
    assert labels["ferromq_messages_dropped"] == set(DROP_REASONS)
    assert labels["ferromq_packets_received"] == set(PACKET_TYPES)
    assert {f"messages/dropped/{reason}" for reason in DROP_REASONS} <= set(COUNTERS)


def test_packets_are_counted_for_every_type(engine: Engine) -> None:
    figures = engine.stats().as_dict()
    for kind in PACKET_TYPES:
        for direction in ("received", "sent"):
            assert figures[f"packets_{direction}_{kind}"] == 0
            assert figures[f"bytes_{direction}_{kind}"] == 0
