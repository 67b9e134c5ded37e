"""Cluster membership: who the nodes are and which of them are alive, kept in Redis.

Every node registers itself at join in the ``<key_prefix>members`` hash (node id -> the
JSON of its :class:`MemberInfo`; the entry stays after the node stops, so a dead node is
still listed) and proves it runs with ``<key_prefix>alive:<node_id>`` (JSON: the
``started`` time of its incarnation and the node's figures of the moment, which the
cluster's totals add up), written with ``PX ttl`` and refreshed every ``heartbeat``
seconds by one task; a clean stop deletes it. After the first, a heartbeat only refreshes
that key while it exists (``SET … XX``): a member whose key expired (frozen or cut off
longer than its lease) may have been adopted already, and loses its
:class:`~ferromq.cluster.lease.Lease` instead of coming back to life; each confirmed
heartbeat renews the lease. Each beat also writes
``<key_prefix>last_beat:<node_id>`` (unix ms, no expiry), from which whoever restores
the node's sessions reads what it sent last (:mod:`ferromq.cluster.ownership`). A member
is **alive** while that key exists, **dead** once it expires (``ttl`` after the last
heartbeat), **adopted** while ``<key_prefix>adopted:<node_id>`` names the survivor that
took over its sessions (:mod:`ferromq.cluster.ownership` sets it). ``key_prefix`` is the
cluster's (``redis.key_prefix + "cluster:"``, see docs/cluster.md).

The same task reads every member after each heartbeat and calls the :meth:`on_change`
callbacks once per transition of another member between alive and dead (the first
read reports each other member once), so a death is seen within ``ttl + heartbeat``.
The hash is written again when a read finds this node missing from it (a Redis that
restarted empty). Only single-key commands are sent, so the client may be a
``redis.asyncio.Redis`` or a ``redis.asyncio.RedisCluster``. A failing Redis makes
:attr:`Membership.healthy` false and is logged once per outage; the task never raises
and reports no transition while it cannot read. Per heartbeat, never per message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from ferromq.cluster.lease import Lease
from ferromq.cluster.names import (
    adopted_key,
    alive_key,
    last_beat_key,
    members_key,
    reply_text,
)
from ferromq.log import log_event

__all__ = ["MemberInfo", "MemberState", "Membership", "State"]

logger = logging.getLogger(__name__)

State = Literal["alive", "dead", "adopted"]


@dataclass(frozen=True)
class MemberInfo:
    """What a node says about itself at join."""

    node_id: str
    started: float
    """Unix time of this incarnation."""
    pid: int
    mqtt: tuple[str, ...]
    """``host:port`` of each MQTT listener."""
    admin: str | None
    """``host:port`` of the admin listener; None when it is off."""
    version: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "node_id": self.node_id,
                "started": self.started,
                "pid": self.pid,
                "mqtt": list(self.mqtt),
                "admin": self.admin,
                "version": self.version,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MemberInfo:
        data = json.loads(text)
        return cls(
            str(data["node_id"]),
            float(data["started"]),
            int(data["pid"]),
            tuple(str(address) for address in data["mqtt"]),
            None if data["admin"] is None else str(data["admin"]),
            str(data["version"]),
        )


@dataclass(frozen=True)
class MemberState:
    info: MemberInfo
    state: State
    adopted_by: str | None
    figures: Mapping[str, int] = field(default_factory=dict)
    """What an alive node's last heartbeat said of its traffic (:data:`NODE_FIGURES`);
    empty for a node that is not alive."""
    """The survivor holding a dead node's sessions (state ``adopted``), else None."""


def _beat_figures(beat: str | bytes) -> dict[str, int]:
    """The figures a heartbeat carries (none from a heartbeat that carries none)."""
    try:
        figures = json.loads(beat).get("figures", {})
    except (ValueError, AttributeError):
        return {}
    return {str(k): int(v) for k, v in figures.items() if isinstance(v, int)}


class Membership:
    """This node's registration, its heartbeat and its view of the other nodes."""

    def __init__(
        self,
        redis: Redis | RedisCluster,
        key_prefix: str,
        me: MemberInfo,
        lease: Lease,
        *,
        figures: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = key_prefix
        self._me = me
        self._lease = lease
        self._heartbeat = lease.heartbeat
        self._ttl_ms = round(lease.seconds * 1000)
        self._joined = False
        self._figures = figures
        self._callbacks: list[Callable[[str, str], None]] = []
        self._seen: dict[str, str] = {}  # other node id -> "alive" | "dead" last reported
        self._task: asyncio.Task[None] | None = None
        self._healthy = True

    @property
    def healthy(self) -> bool:
        """False while heartbeats fail (Redis unreachable)."""
        return self._healthy

    def on_change(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(node_id, "alive" | "dead")`` when another member changes."""
        self._callbacks.append(callback)

    async def join(self) -> None:
        """Register, write the first heartbeat and start the heartbeat task. Raises
        :class:`redis.exceptions.RedisError` when Redis does not take them."""
        await self._register()
        await self._beat()
        self._joined = True
        self._task = asyncio.create_task(self._run(), name=f"membership {self._me.node_id}")

    async def leave(self) -> None:
        """Stop the heartbeat and delete the alive key (a clean stop: others see this
        node dead at once); a Redis that does not answer is logged, the key expires."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            await asyncio.wait_for(self._redis.delete(alive_key(self._prefix, self._me.node_id)), 5)
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            log_event(logger, logging.WARNING, "cluster leave not written", error=repr(exc))

    async def members(self) -> list[MemberState]:
        """Every registered node (this one included) with its state, by node id."""
        registered = await self._redis.hgetall(members_key(self._prefix))
        infos = sorted(
            (MemberInfo.from_json(value) for value in registered.values()),
            key=lambda info: info.node_id,
        )
        alive = await asyncio.gather(
            *(self._redis.get(alive_key(self._prefix, info.node_id)) for info in infos)
        )
        adopted = await asyncio.gather(
            *(self._redis.get(adopted_key(self._prefix, info.node_id)) for info in infos)
        )
        states = []
        for info, beat, adopter in zip(infos, alive, adopted, strict=True):
            if beat is not None:
                states.append(MemberState(info, "alive", None, _beat_figures(beat)))
            elif adopter is not None:
                states.append(MemberState(info, "adopted", reply_text(adopter)))
            else:
                states.append(MemberState(info, "dead", None))
        return states

    async def _register(self) -> None:
        await self._redis.hset(members_key(self._prefix), self._me.node_id, self._me.to_json())

    async def _beat(self) -> None:
        key = alive_key(self._prefix, self._me.node_id)
        figures = dict(self._figures()) if self._figures is not None else {}
        beat = json.dumps({"started": self._me.started, "figures": figures})
        sent = time.monotonic()
        if not await self._redis.set(key, beat, px=self._ttl_ms, xx=self._joined):
            self._lease.lose("Redis no longer lists this member alive: its lease expired")
        self._lease.renewed(sent)
        last = last_beat_key(self._prefix, self._me.node_id)
        await self._redis.set(last, round(time.time() * 1000))

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._round(), self._ttl_ms / 1000)
            except (RedisError, OSError, asyncio.TimeoutError) as exc:
                if self._healthy:
                    log_event(logger, logging.WARNING, "cluster heartbeat failing", error=repr(exc))
                self._healthy = False
            else:
                if not self._healthy:
                    log_event(logger, logging.INFO, "cluster heartbeat recovered")
                self._healthy = True
            await asyncio.sleep(self._heartbeat)

    async def _round(self) -> None:
        """One heartbeat, then one read of every member."""
        await self._beat()
        members = await self.members()
        if all(member.info.node_id != self._me.node_id for member in members):
            await self._register()
        for member in members:
            node_id = member.info.node_id
            state = "alive" if member.state == "alive" else "dead"
            if node_id == self._me.node_id or self._seen.get(node_id) == state:
                continue
            self._seen[node_id] = state
            for callback in self._callbacks:
                try:
                    callback(node_id, state)
                except Exception as exc:  # a callback's fault must not stop the heartbeat
                    log_event(
                        logger, logging.ERROR, "cluster change callback failed", error=repr(exc)
                    )
