"""What a node of a cluster reports about its traffic with the others (the admin API,
``/metrics``, ``$SYS``): counted per Kafka record and per batch, never per message."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NODE_FIGURES", "ClusterFigures"]

#: The engine counters each node's heartbeat carries, which the cluster's totals add up
#: (``$SYS/broker/cluster/totals/<name>``, ``GET /api/v1/cluster``): ``EngineStats``
#: attributes (tests/unit/test_admin_metrics_names.py checks they are).
NODE_FIGURES = (
    "clients_connected",
    "clients_disconnected",
    "subscriptions",
    "messages_queued",
    "publish_received",
    "publish_sent",
    "publish_dropped",
)


@dataclass(frozen=True)
class ClusterFigures:
    batches_sent: int
    batches_received: int
    bytes_sent: int
    """Kafka record values produced to other nodes' topics."""
    bytes_received: int
    """Kafka record values consumed from this node's topic (and adopted nodes')."""
    remote_filters: int
    """Filters other nodes hold, in this node's index."""
    subscriptions_sent: int
    """Subscription topic records this node produced."""
    kafka_healthy: bool
    """False while producing or consuming fails."""
    held_acks: int
    """Kafka records whose PUBACK/PUBREC (or SUBACK) wait for Kafka right now."""
