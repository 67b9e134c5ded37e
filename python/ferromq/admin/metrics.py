"""Prometheus ``/metrics``: the broker's counters read at scrape time.

:class:`BrokerCollector` is a prometheus-client custom collector: each scrape calls
``Broker.stats()`` once (the engine's counters — one Rust call that walks the sessions
for the gauges — with the accept path's and admission's) and reads the persister's
and the loop-lag probe's histograms. Nothing is counted per message in Python; the
engine's counters are the array increments it keeps anyway.

Names are ``ferromq_<subsystem>_<name>[_<unit>]``, the unit a base unit (``bytes``,
``seconds``) where there is one, counters ending in ``_total``. Every ``$SYS`` counter
has a metric (``tests/unit/test_admin_metrics_names.py`` checks it), plus what
``$SYS`` has no room for: packets and bytes by packet type, connections by listener
and by protocol version, retained bytes, authentication failures, store batch sizes
and write latencies, store errors by operation, event-loop lag. A clustered node adds
the cluster's families (:mod:`ferromq.admin.cluster`), read per scrape. The table of
every metric is in docs/architecture.md ("Admin listener"). Packet types and drop
reasons are the engine's own lists (``_core.PACKET_TYPES``, ``_core.DROP_REASONS``,
made from the Rust enums), so a reason added in Rust gets its label here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from ferromq import __version__
from ferromq._core import DROP_REASONS, PACKET_TYPES
from ferromq.admin.loop_lag import LoopLag
from ferromq.admission import REFUSAL_REASONS
from ferromq.histogram import Histogram

if TYPE_CHECKING:
    from ferromq.admin.routes import AdminRoutes
    from ferromq.broker import Broker

__all__ = ["BrokerCollector", "Families", "register", "stats_keys"]

AUTH_FAILURES: Final = ("bad_credentials", "not_authorized", "bad_method", "unavailable")
PROTOCOLS: Final = {"3.1": "mqtt31", "3.1.1": "mqtt311", "5.0": "mqtt5"}

# name, help, stats key
COUNTERS: Final = (
    ("ferromq_network_received_bytes", "Bytes read from clients.", "bytes_received"),
    ("ferromq_network_sent_bytes", "Bytes written to clients.", "bytes_sent"),
    ("ferromq_packets_protocol_errors", "Packets refused as malformed.", "protocol_errors"),
    ("ferromq_messages_received", "PUBLISH packets received.", "publish_received"),
    ("ferromq_messages_sent", "PUBLISH packets sent.", "publish_sent"),
    (
        "ferromq_messages_rate_exceeded",
        "PUBLISH packets over a publish rate limit.",
        "publish_rate_exceeded",
    ),
    ("ferromq_connections_opened", "Connections opened.", "connections_opened"),
    (
        "ferromq_connections_connect_timeouts",
        "Connections closed without CONNECT in time.",
        "connect_timeouts",
    ),
    (
        "ferromq_connections_tls_handshake_failures",
        "TLS handshakes that failed.",
        "tls_handshake_failed",
    ),
    (
        "ferromq_connections_tls_revoked",
        "Connections closed because a reloaded CRL revokes their client certificate.",
        "tls_revoked",
    ),
    (
        "ferromq_connections_accept_paused",
        "Times accepting paused for want of file descriptors.",
        "accept_paused_fd_exhausted",
    ),
    (
        "ferromq_connections_accept_paused_handovers",
        "Times accepting paused while hand-overs to another shard piled up.",
        "accept_paused_handovers",
    ),
    ("ferromq_sessions_expired", "Sessions expired.", "sessions_expired"),
    (
        "ferromq_subscriptions_refused",
        "SUBSCRIBE filters refused for max_subscriptions_per_client.",
        "subscriptions_refused",
    ),
    ("ferromq_retained_refused", "Retained messages refused by a limit.", "retained_refused"),
    (
        "ferromq_memory_publishers_paused",
        "Times a publisher was held by the memory budget.",
        "publishers_paused",
    ),
    (
        "ferromq_shared_released",
        "Shared-group deliveries returned to their group.",
        "shared_released",
    ),
    ("ferromq_acl_revoked_subscriptions", "Subscriptions removed by new ACL rules.", "acl_revoked"),
    (
        "ferromq_auto_subscriptions_skipped",
        "Auto-subscriptions not made: a placeholder without a value, or refused.",
        "auto_subscribe_skipped",
    ),
    (
        "ferromq_topics_rewritten",
        "Topics of PUBLISHes and wills and filters of subscriptions rewritten.",
        "topics_rewritten",
    ),
    (
        "ferromq_payloads_invalid",
        "Client PUBLISHes whose payload a validation schema refused.",
        "payloads_invalid",
    ),
    (
        "ferromq_plugin_batches",
        "Batches of messages and events plugins took.",
        "plugin_batches",
    ),
    (
        "ferromq_plugin_messages",
        "Messages handed to plugins.",
        "plugin_messages",
    ),
    (
        "ferromq_plugin_dropped",
        "Client PUBLISHes an intercepting plugin dropped or rejected.",
        "plugin_dropped",
    ),
    (
        "ferromq_plugin_failures",
        "Plugin calls that raised, returned no verdict per message or took too long.",
        "plugin_failures",
    ),
    (
        "ferromq_plugin_restarts",
        "Plugins started again after a failure.",
        "plugin_restarts",
    ),
    (
        "ferromq_plugin_skipped",
        "Messages and events not shown to a plugin that was down (restarting).",
        "plugin_skipped",
    ),
    (
        "ferromq_plugin_overflow",
        "Observed messages not kept for plugins that fell behind.",
        "plugin_overflow",
    ),
    (
        "ferromq_acl_withheld",
        "Messages withheld from a subscription reaching topics the ACL denies.",
        "acl_withheld",
    ),
)

# name, help, label, label value -> stats key
LABELLED_COUNTERS: Final = (
    (
        "ferromq_packets_received",
        "MQTT packets received, by type.",
        "type",
        {t: f"packets_received_{t}" for t in PACKET_TYPES},
    ),
    (
        "ferromq_packets_sent",
        "MQTT packets sent, by type.",
        "type",
        {t: f"packets_sent_{t}" for t in PACKET_TYPES},
    ),
    (
        "ferromq_packets_received_bytes",
        "Bytes of MQTT packets received, by type.",
        "type",
        {t: f"bytes_received_{t}" for t in PACKET_TYPES},
    ),
    (
        "ferromq_packets_sent_bytes",
        "Bytes of MQTT packets sent, by type (before WebSocket framing).",
        "type",
        {t: f"bytes_sent_{t}" for t in PACKET_TYPES},
    ),
    (
        "ferromq_messages_dropped",
        "Deliveries dropped, by reason.",
        "reason",
        {r: f"dropped_{r}" for r in DROP_REASONS},
    ),
    (
        "ferromq_acl_denials",
        "ACL denials, by action.",
        "action",
        {a: f"acl_denied_{a}" for a in ("publish", "subscribe", "read")},
    ),
    (
        "ferromq_auth_failures",
        "CONNECTs and re-authentications refused by authentication, by reason.",
        "reason",
        {r: f"auth_failed_{r}" for r in AUTH_FAILURES},
    ),
    (
        "ferromq_connections_refused",
        "Connections refused before or at CONNECT by admission, the PROXY header or the "
        "WebSocket upgrade, by reason.",
        "reason",
        {r: f"refused_{r}" for r in (*REFUSAL_REASONS, "proxy_header", "websocket_upgrade")},
    ),
)

GAUGES: Final = (
    ("ferromq_clients_maximum", "Most clients connected at once.", "clients_maximum"),
    ("ferromq_subscriptions_current", "Subscriptions held.", "subscriptions"),
    ("ferromq_retained_messages", "Retained messages held.", "retained_messages"),
    (
        "ferromq_retained_bytes",
        "Bytes (topic + payload) of clients' retained messages.",
        "retained_bytes",
    ),
    ("ferromq_queue_messages", "Messages queued in sessions.", "messages_queued"),
    ("ferromq_queue_bytes", "Bytes queued in sessions.", "queued_bytes"),
    ("ferromq_queue_inflight_messages", "Deliveries in flight.", "messages_inflight"),
    ("ferromq_shared_queued_messages", "Messages in shared-group queues.", "shared_queued"),
    ("ferromq_memory_used_bytes", "Bytes the memory budget counts.", "memory_used"),
    ("ferromq_memory_held_connections", "Connections whose input is held.", "connections_held"),
    ("ferromq_bridges_connected", "Bridges connected to their remote broker.", "bridges_connected"),
    ("ferromq_plugins_running", "Plugins started and not failed.", "plugins_running"),
    (
        "ferromq_admission_flapping_banned_addresses",
        "Addresses banned for flapping now.",
        "flapping_banned",
    ),
)

LABELLED_GAUGES: Final = (
    (
        "ferromq_sessions_current",
        "Sessions, by state.",
        "state",
        {"online": "clients_connected", "offline": "clients_disconnected"},
    ),
    (
        "ferromq_clients_connected",
        "Clients connected, by protocol version.",
        "protocol",
        {version: f"clients_connected_{key}" for version, key in PROTOCOLS.items()},
    ),
)


def stats_keys() -> set[str]:
    """Every ``Broker.stats()`` key a metric reads."""
    keys = {key for _, _, key in (*COUNTERS, *GAUGES)}
    for _, _, _, by_label in (*LABELLED_COUNTERS, *LABELLED_GAUGES):
        keys.update(by_label.values())
    return keys


def _histogram(name: str, doc: str, histogram: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], histogram.cumulative(), histogram.sum)
    return family


class Families(Collector):
    """A fixed list of families, for :func:`generate_latest`."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class BrokerCollector(Collector):
    """The broker's metrics, read at scrape time."""

    def __init__(self, broker: Broker, loop_lag: LoopLag) -> None:
        self._broker = broker
        self._loop_lag = loop_lag

    def collect(self) -> Iterator[Metric]:
        broker = self._broker
        stats = broker.stats()
        yield from _from_stats(stats)
        listeners = GaugeMetricFamily(
            "ferromq_connections_open", "Connections open, by listener.", labels=["listener"]
        )
        for name, count in broker.admission.open_by_listener().items():
            listeners.add_metric([name], count)
        yield listeners
        yield GaugeMetricFamily(
            "ferromq_broker_uptime_seconds", "Seconds since start.", value=broker.uptime()
        )
        info = GaugeMetricFamily("ferromq_broker_info", "The broker's version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield _histogram(
            "ferromq_eventloop_lag_seconds",
            "How late the event loop ran a due callback.",
            self._loop_lag.histogram,
        )
        yield from _store_metrics(broker)
        yield from _stream_metrics(broker)
        yield from _bridge_metrics(broker)


def _from_stats(stats: Mapping[str, int]) -> Iterator[Metric]:
    for name, doc, key in COUNTERS:
        yield CounterMetricFamily(name, doc, value=stats[key])
    for name, doc, key in GAUGES:
        yield GaugeMetricFamily(name, doc, value=stats[key])
    for name, doc, label, by_label in LABELLED_COUNTERS:
        counter = CounterMetricFamily(name, doc, labels=[label])
        for value, key in by_label.items():
            counter.add_metric([value], stats[key])
        yield counter
    for name, doc, label, by_label in LABELLED_GAUGES:
        gauge = GaugeMetricFamily(name, doc, labels=[label])
        for value, key in by_label.items():
            gauge.add_metric([value], stats[key])
        yield gauge


def _bridge_metrics(broker: Broker) -> Iterator[Metric]:
    """Each ``[[bridges]]`` entry this broker runs, by name (``sum`` for the node's:
    ``$SYS/broker/bridges/...`` has those)."""
    states = [] if broker.bridges is None else broker.bridges.states()
    up = GaugeMetricFamily(
        "ferromq_bridge_up",
        "1 while the bridge is connected to its remote broker.",
        labels=["bridge"],
    )
    connects = CounterMetricFamily(
        "ferromq_bridge_connects",
        "Connections the bridge made to its remote broker.",
        labels=["bridge"],
    )
    failures = CounterMetricFamily(
        "ferromq_bridge_failures",
        "Connection attempts of the bridge that failed, and connections that ended in an error.",
        labels=["bridge"],
    )
    for state in states:
        up.add_metric([state.name], int(state.connected))
        connects.add_metric([state.name], state.connects)
        failures.add_metric([state.name], state.failures)
    yield from (up, connects, failures)


def _store_metrics(broker: Broker) -> Iterator[Metric]:
    persister = broker.persister
    if persister is None:
        return
    store = persister.store.name
    yield GaugeMetricFamily(
        "ferromq_store_up",
        "1 while the store takes writes, 0 while it is failing.",
        value=int(persister.health.ok),
    )
    yield CounterMetricFamily(
        "ferromq_store_batches", "Journal batches stored.", value=persister.batches_written
    )
    errors = CounterMetricFamily(
        "ferromq_store_errors",
        "Failed store operations (Redis, Kafka, the embedded log), by operation.",
        labels=["store", "operation"],
    )
    for operation in ("write", "compaction", "persist"):
        errors.add_metric([store, operation], persister.errors_by_operation[operation])
    yield errors
    yield _histogram(
        "ferromq_store_batch_size_bytes", "Bytes of each stored batch.", persister.batch_bytes
    )
    yield _histogram(
        "ferromq_store_write_duration_seconds",
        "Time each stored batch took to write.",
        persister.write_seconds,
    )


def _stream_metrics(broker: Broker) -> Iterator[Metric]:
    """The ``[stream]`` sink's counters (records, bytes, batches, files, errors, and
    any its sink adds) as ``ferromq_stream_<name>_total``, its levels (the Kafka sink's
    queue and spill) as ``ferromq_stream_<name>``."""
    sink = broker.stream_sink
    if sink is None:
        return
    yield GaugeMetricFamily(
        "ferromq_stream_up",
        "1 while the stream's sink takes batches, 0 while it is failing.",
        value=int(sink.health.ok),
    )
    for name, value in sink.counters().items():
        help_text = STREAM_COUNTERS.get(name, f"Stream sink counter {name}.")
        yield CounterMetricFamily(f"ferromq_stream_{name}", help_text, value=value)
    for name, value in sink.gauges().items():
        help_text = STREAM_GAUGES.get(name, f"Stream sink level {name}.")
        yield GaugeMetricFamily(f"ferromq_stream_{name}", help_text, value=value)


STREAM_COUNTERS: Final = {
    "records": "Stream records the sink has stored.",
    "bytes": "Bytes of stream record values the sink has stored.",
    "batches": "Stream batches the sink has stored.",
    "files": "Stream files closed and put in place (the file sink).",
    "errors": "Failed stream sink writes (the Kafka sink: failed sends, each retried).",
    "spilled_records": "Stream records the Kafka sink wrote to its spill (async delivery).",
    "spilled_bytes": "Bytes of Kafka record batches the Kafka sink wrote to its spill.",
    "dropped_spill_full": "Stream records dropped: the Kafka sink's spill was full.",
    "dropped_spill_error": "Stream records dropped: the Kafka sink's spill could not be written.",
    "dropped_rejected": "Stream records dropped: Kafka refused their batch for good.",
}

STREAM_GAUGES: Final = {
    "queue_records": "Stream records the Kafka sink holds in memory, not yet in Kafka.",
    "queue_bytes": "Bytes of stream record values waiting in the Kafka sink's memory queue.",
    "spill_bytes": "Bytes in the Kafka sink's spill directory (async delivery).",
}


def register(routes: AdminRoutes) -> None:
    loop_lag = LoopLag()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(routes.broker, loop_lag))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)

    async def start_probe(app: web.Application) -> None:
        loop_lag.start()

    async def stop_probe(app: web.Application) -> None:
        await loop_lag.stop()

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        cluster = routes.broker.cluster
        if cluster is not None:
            from ferromq.admin.cluster import cluster_families  # a clustered node has redis
            from ferromq.cluster.report import cluster_report

            report = await cluster_report(cluster)
            families = cluster_families(report, cluster.membership.healthy)
            body += generate_latest(Families(list(families)))
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    routes.app.on_startup.append(start_probe)
    routes.app.on_cleanup.append(stop_probe)
    routes.add("GET", "/metrics", metrics, public=True)
