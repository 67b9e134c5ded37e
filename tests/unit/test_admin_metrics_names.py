"""The Prometheus metrics and the statistics they read agree: every ``$SYS`` counter
has a metric (or is the sum of a labelled one), and every key a metric reads is one
the engine, admission, the accept path, the bridges or the plugins report — a renamed key fails here, not as
a 500 at the first scrape in production."""

from __future__ import annotations

from ferromq.admin.metrics import PACKET_TYPES, stats_keys
from ferromq.admission import Admission, load_bans
from ferromq.bridge import bridge_stats
from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.listener import Listeners
from ferromq.plugin_host import plugin_stats
from ferromq.sys_topics import COUNTERS

# $SYS totals Prometheus users get by summing a labelled metric.
SUMMED = {
    "packets_received": "sum(ferromq_packets_received_total)",
    "publish_dropped": "sum(ferromq_messages_dropped_total)",
}


def test_every_sys_counter_has_a_metric() -> None:
    assert set(COUNTERS.values()) - stats_keys() - set(SUMMED) == set()


def test_every_key_a_metric_reads_is_reported() -> None:
    config = Config()
    admission = Admission(config, load_bans(config.bans))
    reported = {
        *engine_from_config(config).stats(),
        *admission.stats(),
        *Listeners([], admission, 1.0).stats(),
        *bridge_stats([]),
        *plugin_stats(),
    }
    assert stats_keys() - reported == set()


def test_packets_are_counted_for_every_type() -> None:
    stats = engine_from_config(Config()).stats()
    for kind in PACKET_TYPES:
        for direction in ("received", "sent"):
            assert stats[f"packets_{direction}_{kind}"] == 0
            assert stats[f"bytes_{direction}_{kind}"] == 0
