"""What a node reports of its cluster traffic (``ClusterNode.figures()``), for the
admin API, ``/metrics`` and ``$SYS`` (:mod:`ferromq.admin.cluster`). Read per request
or per interval from counters the node keeps per batch, never per message.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClusterFigures"]


@dataclass(frozen=True)
class ClusterFigures:
    """This node's cluster traffic so far."""

    batches_sent: int
    batches_received: int
    bytes_sent: int
    """Bytes of Kafka record values this node sent to other nodes' route topics."""
    bytes_received: int
    """Bytes of Kafka record values this node read from its own route topic."""
    remote_filters: int
    """Filters other nodes hold, in this node's index."""
    subscriptions_sent: int
    """Records this node produced to the compacted subscriptions topic."""
    kafka_healthy: bool
    """False while producing or consuming fails."""
    held_acks: int
    """PUBACK/PUBREC waiting for Kafka right now."""
