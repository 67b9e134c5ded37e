"""Prometheus ``/metrics`` of a node (workers > 1): every shard's, summed and by shard.

Each scrape asks every shard's ``/metrics`` at once (their own
:class:`~ferromq.admin.metrics.BrokerCollector`, process and runtime collectors),
parses the texts with prometheus-client's parser and answers one exposition in which
every family appears once:

- every sample of shard *K* with the label ``shard="K"`` (per-shard detail);
- for the broker's own families (``ferromq_*``), the node's figure, without a
  ``shard`` label: the shards' samples of the same name and labels added up — counters
  and histograms add exactly; gauges of levels (sessions, queues, memory) add to the
  node's level, and ``ferromq_clients_maximum`` to the sum of each shard's maximum, an
  upper bound of the node's — except the retained messages every shard holds
  (:data:`~ferromq.sys_topics.REPLICATED`: the largest) and the ``_up`` gauges of the
  store and the stream (the smallest: 1 when every shard's is up);
- the supervisor's own samples without a label: its process and runtime collectors,
  ``ferromq_broker_uptime_seconds`` and ``ferromq_broker_info`` (which are not summed),
  ``ferromq_node_shards`` and ``ferromq_node_shard_up{shard}`` (0 for a shard that did
  not answer this scrape; its series are then absent from the totals).

So ``sum without (shard)`` is not needed for a node total, and a query that sums over
every series must select ``shard=""`` or the ``shard`` label, not both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from ferromq import __version__
from ferromq.admin.metrics import GAUGES, Families
from ferromq.admin.shards import ShardAnswer, ShardUnreachable
from ferromq.sys_topics import REPLICATED

if TYPE_CHECKING:
    from ferromq.admin.routes import NodeRoutes

__all__ = ["COMBINE", "NOT_SUMMED", "node_metrics", "register"]

NOT_SUMMED: Final = frozenset({"ferromq_broker_uptime_seconds", "ferromq_broker_info"})
"""Broker families the node does not add up: the supervisor reports its own."""

COMBINE: Final[dict[str, Callable[[Iterable[float]], float]]] = {
    **{name: max for name, _, key in GAUGES if key in REPLICATED},
    "ferromq_store_up": min,
    "ferromq_stream_up": min,
}
"""How the node combines the shards' samples of a family other than by adding them."""

Labels = tuple[tuple[str, str], ...]


class _Merged:
    """Families by name, each with its samples in arrival order."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def family(self, like: Metric) -> Metric:
        family = self.families.get(like.name)
        if family is None:
            family = Metric(like.name, like.documentation, like.type, like.unit)
            self.families[like.name] = family
        return family

    def add(self, metrics: Iterable[Metric]) -> None:
        for metric in metrics:
            family = self.family(metric)
            for sample in metric.samples:
                family.add_sample(sample.name, sample.labels, sample.value)


def node_metrics(
    answers: list[ShardAnswer | ShardUnreachable], own: Iterable[Metric]
) -> list[Metric]:
    """The node's families: ``own`` (the supervisor's), the shards' totals, each
    shard's samples with its ``shard`` label."""
    merged = _Merged()
    merged.add(own)
    totals: dict[tuple[str, str, Labels], list[float]] = {}
    by_shard: list[tuple[Metric, Sample]] = []
    up = GaugeMetricFamily(
        "ferromq_node_shard_up",
        "1 when the shard answered this scrape, 0 when it did not.",
        labels=["shard"],
    )
    for answer in answers:
        answered = isinstance(answer, ShardAnswer) and answer.ok
        up.add_metric([str(answer.shard)], int(answered))
        if not isinstance(answer, ShardAnswer) or not answered:
            continue
        shard = {"shard": str(answer.shard)}
        for metric in text_string_to_metric_families(answer.body.decode()):
            summed = metric.name.startswith("ferromq_") and metric.name not in NOT_SUMMED
            if summed:
                merged.family(metric)  # the totals come first in their family
            for sample in metric.samples:
                by_shard.append((metric, sample._replace(labels={**sample.labels, **shard})))
                if summed:
                    key = (metric.name, sample.name, tuple(sample.labels.items()))
                    totals.setdefault(key, []).append(sample.value)
    for (name, sample_name, labels), values in totals.items():
        total = COMBINE.get(name, sum)(values)
        merged.families[name].add_sample(sample_name, dict(labels), total)
    for metric, sample in by_shard:
        merged.family(metric).add_sample(sample.name, sample.labels, sample.value)
    shards = GaugeMetricFamily("ferromq_node_shards", "Shard processes of the node.", len(answers))
    merged.add([up, shards])
    return list(merged.families.values())


def _own_registry() -> CollectorRegistry:
    """The supervisor's process and runtime collectors."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def _own(registry: CollectorRegistry, started: float) -> Iterator[Metric]:
    """The supervisor's own families."""
    yield GaugeMetricFamily(
        "ferromq_broker_uptime_seconds",
        "Seconds since start.",
        value=int(time.monotonic() - started),
    )
    info = GaugeMetricFamily("ferromq_broker_info", "The broker's version.", labels=["version"])
    info.add_metric([__version__], 1)
    yield info
    yield from registry.collect()


def register(routes: NodeRoutes) -> None:
    shards = routes.shards
    started = time.monotonic()
    registry = _own_registry()

    async def metrics(request: web.Request) -> web.Response:
        answers = await shards.each("GET", "/metrics")
        families = node_metrics(answers, _own(registry, started))
        response = web.Response(body=generate_latest(Families(families)))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    routes.add("GET", "/metrics", metrics, public=True)
