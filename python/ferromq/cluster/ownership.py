"""One owner node per client id, and sessions moving between nodes (docs/cluster.md,
"Sessions"). A descriptor cannot cross machines, so the session follows the client:

- **Claim.** Every CONNECT is held (the ``AuthGate``) until this node owns its client
  id: the owner key (``<redis.key_prefix>{client}_owner``, in the client's hash slot)
  is set to this node by a script that returns the previous owner, and the client id
  moves between the nodes' ``owned:<node>`` sets (what a node restores at start).
- **Takeover across nodes.** When the previous owner is alive it is asked, on its
  Redis control channel, to release the client: it closes the client's connection
  with 0x8E (``Engine.evict``), leaves the session's queue and window to the store,
  waits until its store has everything journaled for it and answers; for
  ``MOVE_GRACE`` seconds it keeps a forwarding stub that sends the new owner what
  still reaches it for the session (engine/cluster.rs). This node
  then loads the session from Redis (``RedisStore.load_clients``) into its engine,
  and the CONNECT goes on as a resumption [MQTT-3.1.2-5] or a clean start.
- **A dead owner is adopted.** When the previous owner is dead (no heartbeat), the
  node that first needs one of its clients adopts all of them (``adopted:<node>``, set
  if absent): it moves each of the dead node's owner keys to itself (only while they
  still name the dead node), restores those sessions (a pending will comes back with
  them and is published when due, unless its client returns first), announces their
  filters and tombstones the dead node's keys, then reads the dead node's topic from
  its committed offset (the messages Kafka acknowledged for it; each session skips
  the records it holds already). A claim that finds another node adopting waits for
  it and then asks the adopter to release. The adopter stops reading the dead node's
  topic once it has been quiet for ``ADOPTION_QUIET`` seconds and clears ``adopted:``;
  the dead node, started again, waits for that before it restores. The dead member's
  node's other members that are dead too (a node of shards killed whole) are adopted
  right after it, in the background.

Python runs per CONNECT and per move, never per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from aiokafka.errors import KafkaError
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from ferromq._core import Engine
from ferromq._protocol import IOHub
from ferromq.cluster.bus import KafkaBus
from ferromq.cluster.lease import Lease
from ferromq.cluster.names import (
    adopted_key,
    alive_key,
    cluster_key_prefix,
    last_beat_key,
    members_key,
    node_of,
    owner_key,
    reply_text,
)
from ferromq.log import log_event

__all__ = ["ClaimFailed", "Ownership"]

logger = logging.getLogger("ferromq.cluster")

#: How long a claim waits for the previous owner's release, or for an adoption.
RELEASE_TIMEOUT: Final = 10.0
RELEASE_POLL: Final = 0.5  # how often a wait for a release checks the owner is alive
ADOPTION_WAIT: Final = 30.0
#: An adopted node's topic is read until it has been quiet this long after the
#: adopter tombstoned the node's subscriptions.
ADOPTION_QUIET: Final = 10.0
#: A moved session's forwarding stub lives this long on its old owner: longer than
#: other nodes take to read the new owner's subscription keys.
MOVE_GRACE: Final = 5.0
POLL: Final = 0.005
#: Claims under way at once: each holds one Redis connection at a time, and the client's
#: pool (100 connections) must keep room for membership and the control channel; a burst
#: of CONNECTs waits its turn instead of meeting "Too many connections".
CLAIMS_AT_ONCE: Final = 50
#: How far behind a node's last heartbeat its store may be: what was sent to other
#: nodes from this long before then is read when its sessions are restored.
STORE_LAG: Final = 10.0
#: How long a node handing a session over alive waits for Kafka to confirm the
#: session's QoS 2 routes to other nodes (engine/cluster.rs, "Crossing QoS 2").
CROSSINGS_WAIT: Final = 5.0
#: Owner keys moved per pipelined round trip when a dead node is adopted.
ADOPT_BATCH: Final = 1000

# KEYS[1] the owner key; ARGV[1] the claiming node. Returns the previous owner.
_CLAIM: Final = """
local previous = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return previous
"""
# KEYS[1] the owner key; ARGV[1] the dead node, ARGV[2] the adopter: 1 if moved.
_ADOPT: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

LoadClients = Callable[[list[str]], Awaitable[bytes]]


class ClaimFailed(Exception):
    """The client id could not be made this node's (Redis unreachable, say)."""


class Ownership:
    def __init__(
        self,
        redis: Redis | RedisCluster,
        key_prefix: str,
        node_id: str,
        engine: Engine,
        hub: IOHub,
        bus: KafkaBus,
        load_clients: LoadClients,
        lease: Lease,
    ) -> None:
        self._redis = redis
        self._lease = lease
        # A live owner is waited for longer than its lease: one that was cut off or
        # frozen is dead by then, and adopted instead.
        self._release_timeout = max(RELEASE_TIMEOUT, lease.seconds * 2)
        self._key_prefix = key_prefix
        self._kp = cluster_key_prefix(key_prefix)
        self.node_id = node_id
        self._engine = engine
        self._hub = hub
        self._bus = bus
        self._load_clients = load_clients
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._adopting: dict[str, asyncio.Task[None]] = {}
        self._releasing: set[asyncio.Task[None]] = set()
        self._sibling_adoptions: set[asyncio.Task[None]] = set()
        self._pubsub = redis.pubsub()
        self._claims = asyncio.Semaphore(CLAIMS_AT_ONCE)
        self._adoption = asyncio.Lock()

    def _owned(self, node: str) -> str:
        return f"{self._kp}owned:{node}"

    def _adopted(self, node: str) -> str:
        return adopted_key(self._kp, node)

    def _alive(self, node: str) -> str:
        return alive_key(self._kp, node)

    def _channel(self, node: str) -> str:
        return f"{self._kp}control:{node}"

    # -- start ----------------------------------------------------------------------

    async def wait_not_adopted(self) -> None:
        """Before this node restores: if a survivor adopted it while it was away, wait
        until the survivor is done with its topic."""
        logged = False
        while (adopter := await self._redis.get(self._adopted(self.node_id))) is not None:
            if not logged:
                logged = True
                log_event(
                    logger,
                    logging.INFO,
                    "cluster: waiting for the node that adopted this one to finish",
                    adopter=adopter,
                )
            await asyncio.sleep(0.5)

    async def owned_clients(self) -> list[str]:
        """The client ids this node owns (what it restores at start)."""
        owned = await self._redis.smembers(self._owned(self.node_id))
        return sorted(map(reply_text, owned))

    async def start(self) -> None:
        await self._pubsub.subscribe(self._channel(self.node_id))
        self._listener = asyncio.create_task(self._listen())

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        for task in (*self._adopting.values(), *self._sibling_adoptions):
            task.cancel()
        with contextlib.suppress(Exception):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]

    # -- claims ---------------------------------------------------------------------

    async def claim(self, client_id: str, may_persist: bool = True) -> None:
        """Make ``client_id`` this node's, moving its session here if another node
        had it; a session that cannot outlive its connection (``may_persist`` false)
        is not listed among what this node restores. Raises :class:`ClaimFailed`."""
        try:
            async with self._claims:
                await self._claim(client_id, may_persist)
        except (RedisError, OSError) as exc:
            raise ClaimFailed(f"cluster: Redis: {exc}") from None

    async def _claim(self, client_id: str, may_persist: bool) -> None:
        key = owner_key(self._key_prefix, client_id)
        await self._settle_previous_owner(client_id, key)
        self._lease.check()
        claimed = await self._redis.eval(_CLAIM, 1, key, self.node_id)
        previous = None if claimed is None else reply_text(claimed)
        if may_persist:
            await self._redis.sadd(self._owned(self.node_id), client_id)
        if previous is None or previous == self.node_id:
            return
        await self._redis.srem(self._owned(previous), client_id)
        data = await self._load_clients([client_id])
        if data:
            self._engine.restore(data, self._hub.now())
            await self.settle_crossings(previous)

    async def _settle_previous_owner(self, client_id: str, key: str) -> None:
        """Before claiming: a live owner releases the session (its store then has it
        all); a dead one is adopted first (its topic holds what Kafka acknowledged for
        the session), after which its adopter is asked. An owner that stays alive and
        does not answer (its lease outlasts the wait) keeps the client: the claim
        fails rather than let two nodes serve it."""
        for _ in range(3):
            owner = reply_text(await self._redis.get(key) or "")
            if owner in ("", self.node_id):
                return
            if not await self._is_alive(owner):
                await self._adopt_or_wait(owner, key)
                continue
            if await self._request_release(owner, client_id):
                return
            if await self._is_alive(owner):
                raise ClaimFailed(
                    f"cluster: {owner} holds the client and did not release it in "
                    f"{self._release_timeout:g} s"
                )
            # It died while asked: adopt it on the next round.

    async def _is_alive(self, node: str) -> bool:
        return bool(await self._redis.exists(self._alive(node)))

    async def _request_release(self, node: str, client_id: str) -> bool:
        """Ask ``node`` to release ``client_id``; True once it answered, False when it
        died meanwhile or did not answer in time (logged)."""
        request = uuid.uuid4().hex
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[request] = done
        message = {"op": "release", "client": client_id, "from": self.node_id, "id": request}
        deadline = time.monotonic() + self._release_timeout
        try:
            await self._redis.publish(self._channel(node), json.dumps(message))
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(done), RELEASE_POLL)
                    return True
                if not await self._is_alive(node):
                    return False
        finally:
            self._waiting.pop(request, None)
        log_event(
            logger,
            logging.WARNING,
            "cluster: previous owner did not release the client in time",
            client_id=client_id,
            owner=node,
        )
        return False

    # -- the control channel --------------------------------------------------------

    async def _listen(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=1.0
                )
            except (RedisError, OSError) as exc:
                log_event(logger, logging.WARNING, "cluster: control channel", error=str(exc))
                await asyncio.sleep(0.5)
                continue
            if message is None:
                continue
            try:
                body = json.loads(message["data"])
            except (ValueError, TypeError):
                continue
            if body.get("op") == "release":
                task = asyncio.create_task(self._release(body["client"], body["from"], body["id"]))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)
            elif body.get("op") == "released":
                waiter = self._waiting.get(body.get("id", ""))
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    async def _release(self, client_id: str, to: str, request: str) -> None:
        """Another node claimed ``client_id``: hand the session over through the store."""
        self._lease.check()
        batch = self._engine.evict(
            client_id, self._bus.slot_of(to), round(MOVE_GRACE * 1000), self._hub.now()
        )
        self._hub.flush()
        # Its QoS 2 routes to other nodes confirmed by Kafka and dropped from the
        # store, so the new owner has none to settle.
        deadline = time.monotonic() + CROSSINGS_WAIT
        while self._bus.crossings_pending(client_id) and time.monotonic() < deadline:
            await asyncio.sleep(POLL)
        if self._bus.crossings_pending(client_id):
            log_event(
                logger,
                logging.WARNING,
                "cluster: session handed over with QoS 2 routes Kafka has not confirmed",
                client_id=client_id,
                to=to,
            )
        batch = self._engine.journal_mark() if batch is not None else None
        if batch:
            self._hub.flush()
            while not self._engine.journal_confirmed(batch):
                await asyncio.sleep(POLL)
        log_event(logger, logging.INFO, "cluster: session moved", client_id=client_id, to=to)
        answer = {"op": "released", "id": request}
        with contextlib.suppress(RedisError, OSError):
            await self._redis.publish(self._channel(to), json.dumps(answer))

    # -- adoption -------------------------------------------------------------------

    async def _adopt_or_wait(self, dead: str, key: str) -> None:
        """``dead`` owned a client this node needs: adopt it, or wait while another
        node does (until the client's owner key no longer names it)."""
        if await self.try_adopt(dead):
            siblings = asyncio.create_task(self._adopt_dead_siblings(dead))
            self._sibling_adoptions.add(siblings)
            siblings.add_done_callback(self._sibling_adoptions.discard)
            return
        deadline = time.monotonic() + ADOPTION_WAIT
        while reply_text(await self._redis.get(key) or "") == dead and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _adopt_dead_siblings(self, dead: str) -> None:
        """The other members of ``dead``'s node that are dead too, adopted one after
        the other: a node killed takes all its shards, and its clients' wills and
        queues should not wait ``ADOPT_AFTER`` for a client of each shard."""
        node = node_of(dead)
        with contextlib.suppress(RedisError, OSError):
            for member in sorted(map(reply_text, await self._redis.hkeys(members_key(self._kp)))):
                if member != dead and node_of(member) == node:
                    await self.try_adopt(member)

    async def try_adopt(self, dead: str) -> bool:
        """Adopt the dead node ``dead`` unless another node does, it is back, or it
        left nothing to adopt (no session, no filter: adopted before, say)."""
        self._lease.check()
        if await self._is_alive(dead):
            return False
        owned = await self._redis.scard(self._owned(dead))
        if not owned and not self._bus.node_filters(dead):
            return False
        if not await self._redis.set(self._adopted(dead), self.node_id, nx=True):
            return False
        await self.adopt(dead)
        return True

    async def adopt(self, dead: str) -> None:
        """Take over every session of the dead node ``dead`` (docs/cluster.md,
        "Adoption"): its owner keys, its sessions (with their wills and the offsets of
        the node topics they hold), its subscription keys (its filters dropped here,
        this node's sent for its sessions, then tombstones for its own), and its topic,
        read to its end before this node's own topic goes on and before the claim that
        led here does; then read on in the background until quiet. One adoption at a
        time: each holds this node's own topic back while it sets its marker."""
        async with self._adoption:
            await self._adopt(dead)

    async def _adopt(self, dead: str) -> None:
        clients = sorted(map(reply_text, await self._redis.smembers(self._owned(dead))))
        moved = []
        for start in range(0, len(clients), ADOPT_BATCH):
            batch = clients[start : start + ADOPT_BATCH]
            pipeline = self._redis.pipeline(transaction=False)
            for client_id in batch:
                key = owner_key(self._key_prefix, client_id)
                pipeline.eval(_ADOPT, 1, key, dead, self.node_id)
            answers = await pipeline.execute()
            moved += [client for client, taken in zip(batch, answers, strict=True) if taken]
        # This node's own topic waits: its records must meet the sessions marked.
        self._bus.pause()
        try:
            self._bus.drop_node(dead)
            if moved:
                await self._redis.sadd(self._owned(self.node_id), *moved)
                await self._redis.srem(self._owned(dead), *moved)
                data = await self._load_clients(moved)
                if data:
                    self._engine.restore(data, self._hub.now())
                await self.settle_crossings(dead)
            marker = await self._bus.adoption_marker(dead)
            self._bus.adopt_sessions(moved, dead, marker)
            self._hub.flush()
            log_event(
                logger,
                logging.WARNING,
                "cluster: adopted a dead node",
                node=dead,
                sessions=len(moved),
            )
            # Older than anything this node's topic brings them from now on.
            await self._bus.drain(dead)
        finally:
            self._bus.resume()
        self._adopting[dead] = asyncio.create_task(self._drain_adopted(dead))

    async def settle_crossings(self, node: str) -> None:
        """Sessions just restored from ``node``'s store (adopted, this node's own at
        start, or a claimed one) may keep QoS 2 routes to other nodes that Kafka did
        not confirm before ``node`` stopped: each is looked for in its destination's
        topic and sent again where it is missing (engine/cluster.rs, "Crossing QoS 2").
        What was written from ``STORE_LAG`` before ``node``'s last heartbeat on is
        read (it beat every second while it routed)."""
        last = await self._redis.get(last_beat_key(self._kp, node))
        since = (int(last) if last is not None else round(time.time() * 1000)) - round(
            STORE_LAG * 1000
        )
        try:
            found, sent = await self._bus.settle_crossings(since)
        except (KafkaError, OSError) as exc:
            # Kept in the store: settled at the session's next restore.
            log_event(
                logger,
                logging.WARNING,
                "cluster: QoS 2 routes of restored sessions not settled",
                node=node,
                error=str(exc),
            )
            return
        if found or sent:
            log_event(
                logger,
                logging.WARNING,
                "cluster: QoS 2 routes of restored sessions settled",
                node=node,
                in_kafka=found,
                sent_again=sent,
            )

    async def _drain_adopted(self, dead: str) -> None:
        """Read the dead node's topic on until it is quiet (its own records only: this
        node's topic may be busy for ever); then the node may return."""
        quiet_since = time.monotonic()
        seen = self._bus.records_applied(dead)
        while time.monotonic() - quiet_since < ADOPTION_QUIET:
            await asyncio.sleep(1.0)
            now_seen = self._bus.records_applied(dead)
            if now_seen != seen:
                seen, quiet_since = now_seen, time.monotonic()
        await self._bus.stop_draining(dead)
        self._bus.adoption_done(dead)
        with contextlib.suppress(RedisError, OSError):
            await self._redis.delete(self._adopted(dead))
        self._adopting.pop(dead, None)
        log_event(logger, logging.INFO, "cluster: adoption finished", node=dead)
