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

In a node of several shards (workers > 1) each shard publishes the same tree for its
own engine under ``$SYS/broker/shard/<K>/``, and shard 0 also publishes the node's
under ``$SYS/broker/``: each interval it reads the shards' trees back from its own
retained messages (the engines replicate every retained message to every shard) and
adds them up — counters and levels summed (``clients/maximum``: the sum of the
shards' maxima), ``uptime`` the longest, ``store/state`` failing when a shard's is,
``store/errors`` summed, ``store/last_error`` the first shard's that has one
(:class:`SysTree`). So a subscriber on any shard reads the node under
``$SYS/broker/`` and each shard under ``$SYS/broker/shard/+/``; the node's figures are
those the shards last published, at most one interval old.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ferromq import __version__
from ferromq._core import ADMIN_MAX_PAGE
from ferromq.admission import REFUSAL_REASONS

if TYPE_CHECKING:
    from ferromq._core import Engine
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


def sys_messages(
    stats: Mapping[str, int], uptime_seconds: int, prefix: str = PREFIX
) -> list[tuple[str, bytes]]:
    """Every $SYS topic with its payload for one interval."""
    messages = [(prefix + suffix, str(stats[key]).encode()) for suffix, key in COUNTERS.items()]
    total = stats["clients_connected"] + stats["clients_disconnected"]
    messages.append((prefix + "clients/total", str(total).encode()))
    messages.append((prefix + "uptime", f"{uptime_seconds} seconds".encode()))
    messages.append((prefix + "version", f"ferromq {__version__}".encode()))
    return messages


def store_messages(health: StoreHealth, prefix: str = PREFIX) -> list[tuple[str, bytes]]:
    """The store writer's $SYS topics."""
    return _store(prefix, health.state, health.errors, health.last_error)


def _store(prefix: str, state: str, errors: int, last_error: str) -> list[tuple[str, bytes]]:
    return [
        (prefix + "store/state", state.encode()),
        (prefix + "store/errors", str(errors).encode()),
        (prefix + "store/last_error", last_error.encode()),
    ]


def shard_prefix(index: int) -> str:
    return f"{PREFIX}shard/{index}/"


class SysTree:
    """What one broker publishes each interval: its own tree (``shard`` None: a node of
    one shard), or the tree of shard ``shard`` of ``count``, and on shard 0 the node's."""

    def __init__(self, shard: int | None = None, count: int = 1) -> None:
        self._shard = shard
        self._count = count

    def messages(
        self,
        engine: Engine,
        now: int,
        stats: Mapping[str, int],
        uptime_seconds: int,
        store: StoreHealth | None,
    ) -> list[tuple[str, bytes]]:
        prefix = PREFIX if self._shard is None else shard_prefix(self._shard)
        messages = sys_messages(stats, uptime_seconds, prefix)
        if store is not None:
            messages += store_messages(store, prefix)
        if self._shard == 0:
            # The node's figures include this shard's, read back with the others'.
            mine = {topic: payload for topic, payload in messages}
            messages += node_messages(self._shard_trees(engine, now, mine))
        return messages

    def _shard_trees(
        self, engine: Engine, now: int, mine: Mapping[str, bytes]
    ) -> list[Mapping[str, bytes]]:
        """Each shard's last published tree (suffix -> payload): this shard's as just
        made (``mine``), the others' from the retained messages the bus replicated
        here. The trees of shards a node of more workers left are cleared."""
        trees: list[dict[str, bytes]] = [{} for _ in range(self._count)]
        cursor: int | None = 0
        while cursor is not None:
            page = engine.retained_messages(f"{PREFIX}shard/+/#", now, cursor, ADMIN_MAX_PAGE)
            for message in page.items:
                shard, _, suffix = message.topic.removeprefix(f"{PREFIX}shard/").partition("/")
                if shard.isdigit() and int(shard) < self._count:
                    trees[int(shard)][suffix] = message.payload
                else:
                    engine.clear_retained(message.topic)
            cursor = page.next
        own = shard_prefix(0)
        trees[0] = {topic.removeprefix(own): payload for topic, payload in mine.items()}
        return [tree for tree in trees if tree]


def _number(payload: bytes | None) -> int:
    """A $SYS figure (``uptime``'s ``N seconds`` too); 0 when absent or not one."""
    try:
        return int((payload or b"0").split()[0])
    except (ValueError, IndexError):
        return 0


_SUFFIX_OF: Mapping[str, str] = {key: suffix for suffix, key in reversed(list(COUNTERS.items()))}
"""Each stats key's first topic suffix (some keys have two, e.g. clients/active)."""


def node_messages(trees: Iterable[Mapping[str, bytes]]) -> list[tuple[str, bytes]]:
    """The node's tree under :data:`PREFIX` from every shard's."""
    stats = dict.fromkeys(_SUFFIX_OF, 0)
    uptime = errors = 0
    states: list[bytes] = []
    last_errors: list[str] = []
    for tree in trees:
        for key, suffix in _SUFFIX_OF.items():
            stats[key] += _number(tree.get(suffix))
        uptime = max(uptime, _number(tree.get("uptime")))
        if "store/state" in tree:
            states.append(tree["store/state"])
            errors += _number(tree.get("store/errors"))
            last_errors.append(tree.get("store/last_error", b"").decode(errors="replace"))
    messages = sys_messages(stats, uptime)
    if states:
        state = "failing" if b"failing" in states else "ok"
        messages += _store(PREFIX, state, errors, next((e for e in last_errors if e), ""))
    return messages
