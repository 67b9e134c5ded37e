"""The $SYS tree: broker statistics published as retained messages on an interval.

The topic list follows the de-facto tree of Mosquitto and seed 004 (bytes and
messages received/sent, clients active/inactive/maximum/total/expired, messages in
flight and stored, publishes received/sent/dropped, retained count, subscription
count, uptime, version), drops by reason (``messages/dropped/<reason>``: queue_full,
session_bytes, memory_budget, expired, qos0_offline, too_large, group_ended, summing
to ``publish/messages/dropped``), the limits' refusals (publish rate, subscriptions,
retained) and the memory budget (``memory/used`` bytes it counts,
``messages/queued_bytes`` of them in queues, ``clients/held`` connections not read,
``publishers/paused`` times), refused connections by reason
(``clients/refused/<reason>``, :data:`ferromq.admission.REFUSAL_REASONS`), the
addresses banned for flapping, the accept path's pauses for want of file descriptors
(:mod:`ferromq.listener`), and the store writer's health (``store/state`` ok or
failing, ``store/errors``, ``store/last_error``). ``#`` never
matches ``$SYS`` [MQTT-4.7.2-1]; the engine's index enforces that. One publish per
topic per interval: an event, not a per-message cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ferromq import __version__
from ferromq.admission import REFUSAL_REASONS

if TYPE_CHECKING:
    from ferromq.storage.persister import StoreHealth

PREFIX = "$SYS/broker/"

# topic suffix -> engine stats key
COUNTERS: Mapping[str, str] = {
    "bytes/received": "bytes_received",
    "bytes/sent": "bytes_sent",
    "messages/received": "packets_received",
    "publish/messages/received": "publish_received",
    "publish/messages/sent": "publish_sent",
    "publish/messages/dropped": "publish_dropped",
    "messages/dropped/queue_full": "dropped_queue_full",
    "messages/dropped/session_bytes": "dropped_session_bytes",
    "messages/dropped/expired": "dropped_expired",
    "messages/dropped/qos0_offline": "dropped_qos0_offline",
    "messages/dropped/too_large": "dropped_too_large",
    "messages/dropped/group_ended": "dropped_group_ended",
    "messages/dropped/memory_budget": "dropped_memory_budget",
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
    "acl/revoked": "acl_revoked",
    "clients/connect_timeouts": "connect_timeouts",
    # Admission and the accept path (ferromq.admission, ferromq.listener), not the engine.
    **{f"clients/refused/{reason}": f"refused_{reason}" for reason in REFUSAL_REASONS},
    "clients/banned/flapping": "flapping_banned",
    "clients/accept_paused/fd_exhausted": "accept_paused_fd_exhausted",
    "clients/tls_handshake_failed": "tls_handshake_failed",
    "clients/refused/proxy_header": "refused_proxy_header",
    "clients/refused/websocket_upgrade": "refused_websocket_upgrade",
}


def sys_messages(stats: Mapping[str, int], uptime_seconds: int) -> list[tuple[str, bytes]]:
    """Every $SYS topic with its payload for one interval."""
    messages = [(PREFIX + suffix, str(stats[key]).encode()) for suffix, key in COUNTERS.items()]
    total = stats["clients_connected"] + stats["clients_disconnected"]
    messages.append((PREFIX + "clients/total", str(total).encode()))
    messages.append((PREFIX + "uptime", f"{uptime_seconds} seconds".encode()))
    messages.append((PREFIX + "version", f"ferromq {__version__}".encode()))
    return messages


def store_messages(health: StoreHealth) -> list[tuple[str, bytes]]:
    """The store writer's $SYS topics."""
    return [
        (PREFIX + "store/state", health.state.encode()),
        (PREFIX + "store/errors", str(health.errors).encode()),
        (PREFIX + "store/last_error", health.last_error.encode()),
    ]
