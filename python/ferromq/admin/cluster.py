"""The cluster's ``/metrics`` families on a clustered node (``[cluster]``), from one
:class:`~ferromq.cluster.report.ClusterReport` read per scrape:

- ``ferromq_cluster_nodes{state="alive|dead|adopted"}``: members in each state (absent
  while Redis cannot be read, when ``ferromq_cluster_redis_up`` is 0: the heartbeat's
  health, :attr:`~ferromq.cluster.membership.Membership.healthy`);
- this node's traffic (:class:`~ferromq.cluster.figures.ClusterFigures`):
  ``ferromq_cluster_batches_sent_total`` / ``_received_total``,
  ``ferromq_cluster_bytes_sent_total`` / ``_received_total`` (Kafka record values),
  ``ferromq_cluster_subscriptions_sent_total``, ``ferromq_cluster_remote_filters``,
  ``ferromq_cluster_kafka_up`` (0/1) and ``ferromq_cluster_held_acks``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ferromq.cluster.report import ClusterReport

__all__ = ["COUNTERS", "GAUGES", "cluster_families"]

# name, help, ClusterFigures field
COUNTERS: Final = (
    ("ferromq_cluster_batches_sent", "Bus batches sent to other nodes.", "batches_sent"),
    (
        "ferromq_cluster_batches_received",
        "Bus batches received from other nodes.",
        "batches_received",
    ),
    (
        "ferromq_cluster_bytes_sent",
        "Bytes of Kafka record values sent to other nodes' route topics.",
        "bytes_sent",
    ),
    (
        "ferromq_cluster_bytes_received",
        "Bytes of Kafka record values read from this node's route topic.",
        "bytes_received",
    ),
    (
        "ferromq_cluster_subscriptions_sent",
        "Records this node produced to the compacted subscriptions topic.",
        "subscriptions_sent",
    ),
)
GAUGES: Final = (
    (
        "ferromq_cluster_remote_filters",
        "Filters other nodes hold, in this node's index.",
        "remote_filters",
    ),
    ("ferromq_cluster_held_acks", "PUBACK/PUBREC waiting for Kafka now.", "held_acks"),
    (
        "ferromq_cluster_kafka_up",
        "1 while producing to and consuming from Kafka work, 0 while they fail.",
        "kafka_healthy",
    ),
)


def cluster_families(report: ClusterReport, redis_up: bool) -> Iterator[Metric]:
    """The families of one scrape; ``redis_up``: the heartbeat's health."""
    figures = report.figures
    for name, doc, field in COUNTERS:
        yield CounterMetricFamily(name, doc, value=getattr(figures, field))
    for name, doc, field in GAUGES:
        yield GaugeMetricFamily(name, doc, value=int(getattr(figures, field)))
    yield GaugeMetricFamily(
        "ferromq_cluster_redis_up",
        "1 while this node's heartbeat reaches Redis, 0 while it fails.",
        value=int(redis_up and report.members is not None),
    )
    if report.members is None:
        return
    nodes = GaugeMetricFamily(
        "ferromq_cluster_nodes", "Nodes of the cluster, by state.", labels=["state"]
    )
    for state, count in report.counts().items():
        nodes.add_metric([state], count)
    yield nodes
