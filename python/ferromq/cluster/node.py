"""A broker as one member of a cluster (``[cluster] node_id``; docs/cluster.md): the node
itself when it runs one shard, else each shard of it (``<node>.<shard>``,
:func:`~ferromq.cluster.names.member_id`), with the node's rings between its shards and
Kafka between members. The Kafka bus (:mod:`.bus`), ownership of client ids
(:mod:`.ownership`) and membership (:mod:`.membership`) are the member's, started around
the store's restore in this order:

1. :meth:`ClusterNode.prepare`: Kafka reachable and the subscription topic read to its
   end (every other node's filters in the index); if a survivor adopted this node while
   it was away, wait for it to finish; the client ids this node owns, which are all the
   Redis store restores.
2. The broker restores them.
3. :meth:`ClusterNode.start`: this node's subscription keys corrected, its topic read
   from its committed offset, the control channel listened to, and membership joined
   (from now on other nodes see it alive). Every CONNECT then claims its client id
   (``AuthGate.claim``).

From joining on, the member holds a :class:`~ferromq.cluster.lease.Lease`
(``[cluster] lease``): each confirmed heartbeat renews it; the store's writes, the
bus's records, claims, adoptions and releases check it first; a member whose lease ran
out (cut off from Redis, frozen) stops before another may adopt its clients.

Death of another node is noticed by membership; its sessions are adopted by the first
node one of its clients reaches (:meth:`Ownership.claim`), or by this node when the
dead node stays away ``ADOPT_AFTER`` seconds and nobody has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Final

from redis.exceptions import RedisError

from ferromq import __version__
from ferromq._core import Engine
from ferromq._protocol import IOHub
from ferromq.cluster.bus import KafkaBus
from ferromq.cluster.figures import NODE_FIGURES, ClusterFigures
from ferromq.cluster.lease import Lease
from ferromq.cluster.membership import MemberInfo, Membership
from ferromq.cluster.names import cluster_key_prefix, redis_client
from ferromq.cluster.ownership import Ownership
from ferromq.config import Config
from ferromq.log import log_event
from ferromq.storage import StoreUnavailable
from ferromq.storage.redis import RedisStore
from ferromq.storage.split import SplitStore

__all__ = ["ClusterNode"]

logger = logging.getLogger("ferromq.cluster")

#: Seconds a dead node's sessions wait for one of its clients before a survivor adopts
#: them anyway (its wills and queues then live again).
ADOPT_AFTER: Final = 30.0

# Take a free resource, or renew one this member holds, for ARGV[2] ms; 1 if it is ours.
_HOLD: Final = """
local holder = redis.call('GET', KEYS[1])
if holder == false then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
"""


class ClusterNode:
    def __init__(
        self,
        config: Config,
        engine: Engine,
        hub: IOHub,
        store: RedisStore | SplitStore,
        *,
        member: str,
        refuse: Callable[[StoreUnavailable], None],
    ) -> None:
        cluster = config.cluster
        self.node_id = member
        self._config = config
        self._engine = engine
        self._hub = hub
        primary = store.primary if isinstance(store, SplitStore) else store
        assert isinstance(primary, RedisStore), "a clustered node's store is Redis"
        self._store = primary
        self._redis = redis_client(config)
        self.lease = Lease(member, cluster.lease)
        primary.check_sends(self.lease.check)
        self.bus = KafkaBus(
            engine,
            hub,
            member,
            cluster.kafka,
            cluster.topic_prefix,
            refuse=refuse,
            before_send=self.lease.check,
        )
        self.ownership = Ownership(
            self._redis,
            config.redis.key_prefix,
            member,
            engine,
            hub,
            self.bus,
            store.load_clients,
            self.lease,
        )
        admin = config.admin
        self.membership = Membership(
            self._redis,
            cluster_key_prefix(config.redis.key_prefix),
            MemberInfo(
                node_id=member,
                started=time.time(),
                pid=os.getpid(),
                mqtt=tuple(f"{lst.host}:{lst.port}" for lst in config.listeners),
                admin=f"{admin.host}:{admin.port}" if admin.enabled else None,
                version=__version__,
            ),
            self.lease,
            figures=self._node_figures,
        )
        self._watch: dict[str, asyncio.Task[None]] = {}
        engine.set_assigned_id_prefix(f"ferromq-{member}-")

    def _node_figures(self) -> dict[str, int]:
        stats = self._engine.stats().as_dict()
        return {name: stats[name] for name in NODE_FIGURES}

    async def prepare(self) -> None:
        """Before the store restores. Raises :class:`StoreUnavailable` naming Kafka or
        Redis."""
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            await self.bus.close()
            raise StoreUnavailable(
                f"cluster: Redis at {self._store.where} unreachable: {exc}"
            ) from None
        await self.bus.start()
        await self.ownership.wait_not_adopted()
        self._store.only_clients(await self.ownership.owned_clients())

    async def start(self) -> None:
        """Once restored: serve as a node of the cluster."""
        await self.ownership.settle_crossings(self.node_id)
        await self.bus.serve()
        await self.ownership.start()
        self.membership.on_change(self._member_changed)
        await self.membership.join()
        self.lease.start()
        log_event(logger, logging.INFO, "cluster: joined", node=self.node_id)

    async def claim(self, client_id: str, may_persist: bool) -> None:
        await self.ownership.claim(client_id, may_persist)

    async def hold(self, resource: str) -> bool:
        """Hold ``resource`` (a bridge: one member runs it at a time) for one
        ``[cluster] lease``: True when it is this member's (taken or renewed), False
        while another member holds it or Redis does not answer. A holder that dies lets
        it go when the lease runs out."""
        prefix = cluster_key_prefix(self._config.redis.key_prefix)
        milliseconds = self._config.cluster.lease * 1000
        try:
            self.lease.check()
            held = await self._redis.eval(
                _HOLD, 1, f"{prefix}held:{resource}", self.node_id, milliseconds
            )
        except (RedisError, OSError):
            return False
        return bool(held)

    def figures(self) -> ClusterFigures:
        return self.bus.figures()

    async def close(self) -> None:
        self.lease.stop()
        for task in self._watch.values():
            task.cancel()
        with contextlib.suppress(RedisError, OSError):
            await self.membership.leave()
        await self.ownership.close()
        await self.bus.close()
        with contextlib.suppress(RedisError, OSError):
            await self._redis.aclose()

    def _member_changed(self, node_id: str, state: str) -> None:
        log_event(logger, logging.INFO, "cluster: node " + state, node=node_id)
        watch = self._watch.pop(node_id, None)
        if watch is not None:
            watch.cancel()
        if state == "dead":
            self._watch[node_id] = asyncio.create_task(self._adopt_later(node_id))

    async def _adopt_later(self, node_id: str) -> None:
        await asyncio.sleep(ADOPT_AFTER)
        with contextlib.suppress(RedisError, OSError):
            await self.ownership.try_adopt(node_id)
