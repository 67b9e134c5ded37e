"""The $SYS tree: broker statistics published as retained messages on an interval.

The topic list follows the de-facto tree of Mosquitto and seed 004 (bytes and
messages received/sent, clients active/inactive/maximum/total/expired, messages in
flight and stored, publishes received/sent/dropped, retained count, subscription
count, uptime, version), drops by reason (``messages/dropped/<reason>`` for each of
``_core.DROP_REASONS``, the engine's enum: queue_full, session_bytes, expired,
qos0_offline, too_large, memory_budget, group_ended, session_moved (a cluster node
forwarded a moved session's message to where it no longer was), summing to
``publish/messages/dropped``), the limits' refusals (publish rate, subscriptions,
retained) and the memory budget (``memory/used`` bytes it counts,
``messages/queued_bytes`` of them in queues, ``clients/held`` connections not read,
``publishers/paused`` times), refused connections by reason
(``clients/refused/<reason>``, :data:`ferromq.admission.REFUSAL_REASONS`), the
addresses banned for flapping, the accept path's pauses for want of file descriptors
(:mod:`ferromq.listener`), and the store writer's health (``store/state`` ok or
failing, ``store/errors``, ``store/last_error``). ``#`` never
matches ``$SYS`` [MQTT-4.7.2-1]; the engine's index enforces that. One publish per
topic per interval: an event, not a per-message cost.

In a node of several shards (workers > 1) each shard publishes this tree for its own
engine under ``$SYS/broker/shard/<K>/``, and shard 0 also publishes the node's under
``$SYS/broker/``, made from every shard's :class:`Figures` (gathered by
:mod:`ferromq.shard.sys_figures`; :func:`node_figures`): counters and levels summed
(``clients/maximum``: the sum of the shards' maxima, an upper bound of the node's;
``retained messages/count``, which every shard holds, the largest),
``uptime`` the longest, ``store/state`` failing when a shard's is, ``store/errors``
summed, ``store/last_error`` the first shard's that has one.

A clustered node (``[cluster]``) also publishes ``$SYS/broker/cluster/node_id`` and
``$SYS/broker/cluster/nodes/alive``, ``.../dead``, ``.../adopted`` (members in each
state, read from Redis each interval; :func:`ferromq.cluster.report.sys_messages`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ferromq import __version__
from ferromq._core import DROP_REASONS
from ferromq.admission import REFUSAL_REASONS
from ferromq.storage.persister import StoreHealth

PREFIX = "$SYS/broker/"

# topic suffix -> ``Broker.stats()`` key: the engine's (``EngineStats.as_dict()``), the
# bridges', then admission's and the accept path's (tests/unit/test_admin_metrics_names.py)
COUNTERS: Mapping[str, str] = {
    "bytes/received": "bytes_received",
    "bytes/sent": "bytes_sent",
    "messages/received": "packets_received",
    "publish/messages/received": "publish_received",
    "publish/messages/sent": "publish_sent",
    "publish/messages/dropped": "publish_dropped",
    **{f"messages/dropped/{reason}": f"dropped_{reason}" for reason in DROP_REASONS},
    "publish/messages/rate_exceeded": "publish_rate_exceeded",
    "publishers/paused": "publishers_paused",
    "clients/held": "connections_held",
    "memory/used": "memory_used",
    "messages/queued_bytes": "queued_bytes",
    "subscriptions/refused": "subscriptions_refused",
    "retained messages/refused": "retained_refused",
    "clients/connected": "clients_connected",
    "clients/active": "clients_connected",
    "clients/inactive": "clients_disconnected",
    "clients/disconnected": "clients_disconnected",
    "clients/maximum": "clients_maximum",
    "clients/expired": "sessions_expired",
    "messages/inflight": "messages_inflight",
    "messages/stored": "messages_queued",
    "shared/messages/queued": "shared_queued",
    "shared/messages/released": "shared_released",
    "retained messages/count": "retained_messages",
    "subscriptions/count": "subscriptions",
    "connections/opened": "connections_opened",
    "errors/protocol": "protocol_errors",
    "acl/denied/publish": "acl_denied_publish",
    "acl/denied/subscribe": "acl_denied_subscribe",
    "acl/denied/read": "acl_denied_read",
    "acl/withheld": "acl_withheld",
    "acl/revoked": "acl_revoked",
    "subscriptions/auto_skipped": "auto_subscribe_skipped",
    "messages/rewritten": "topics_rewritten",
    "messages/invalid": "payloads_invalid",
    "bridges/connected": "bridges_connected",
    "bridges/connects": "bridge_connects",
    "bridges/failures": "bridge_failures",
    "clients/connect_timeouts": "connect_timeouts",
    # Admission and the accept path (ferromq.admission, ferromq.listener), not the engine.
    **{f"clients/refused/{reason}": f"refused_{reason}" for reason in REFUSAL_REASONS},
    "clients/banned/flapping": "flapping_banned",
    "clients/accept_paused/fd_exhausted": "accept_paused_fd_exhausted",
    "clients/accept_paused/handovers": "accept_paused_handovers",
    "clients/tls_handshake_failed": "tls_handshake_failed",
    "clients/tls_revoked": "tls_revoked",
    "clients/refused/proxy_header": "refused_proxy_header",
    "clients/refused/websocket_upgrade": "refused_websocket_upgrade",
}


@dataclass(frozen=True)
class Figures:
    """What one broker's $SYS tree says: its counters, uptime and store writer health
    (None without a store)."""

    stats: Mapping[str, int]
    uptime_seconds: int
    store: StoreHealth | None = None

    def to_json(self) -> dict[str, object]:
        store = self.store
        return {
            "stats": dict(self.stats),
            "uptime_seconds": self.uptime_seconds,
            "store": None if store is None else [store.ok, store.errors, store.last_error],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        store = data["store"]
        health = None if store is None else StoreHealth(*store)
        return cls(data["stats"], data["uptime_seconds"], health)


def sys_messages(figures: Figures, prefix: str = PREFIX) -> list[tuple[str, bytes]]:
    """Every $SYS topic with its payload for one interval, under ``prefix``."""
    stats = figures.stats
    messages = [(prefix + suffix, str(stats[key]).encode()) for suffix, key in COUNTERS.items()]
    total = stats["clients_connected"] + stats["clients_disconnected"]
    messages.append((prefix + "clients/total", str(total).encode()))
    messages.append((prefix + "uptime", f"{figures.uptime_seconds} seconds".encode()))
    messages.append((prefix + "version", f"ferromq {__version__}".encode()))
    if figures.store is not None:
        messages += [
            (prefix + "store/state", figures.store.state.encode()),
            (prefix + "store/errors", str(figures.store.errors).encode()),
            (prefix + "store/last_error", figures.store.last_error.encode()),
        ]
    return messages


def shard_prefix(index: int) -> str:
    """Where shard ``index`` of a node publishes its own tree."""
    return f"{PREFIX}shard/{index}/"


REPLICATED: Final = frozenset({"retained_messages", "retained_bytes"})
"""Stats keys of what the engines replicate to every shard (retained messages): each
shard holds the node's figure, so the node's is the largest, not the sum."""


def node_stats(shards: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """The node's counters from every shard's: summed, :data:`REPLICATED` the largest."""
    keys = dict.fromkeys(key for stats in shards for key in stats)
    return {
        key: (max if key in REPLICATED else sum)(stats.get(key, 0) for stats in shards)
        for key in keys
    }


def node_figures(shards: Sequence[Figures]) -> Figures:
    """The node's figures from every shard's."""
    stats = node_stats([figures.stats for figures in shards])
    uptime = max((figures.uptime_seconds for figures in shards), default=0)
    stores = [figures.store for figures in shards if figures.store is not None]
    if not stores:
        return Figures(stats, uptime)
    last_error = next((store.last_error for store in stores if store.last_error), "")
    store = StoreHealth(
        all(store.ok for store in stores), sum(store.errors for store in stores), last_error
    )
    return Figures(stats, uptime, store)
