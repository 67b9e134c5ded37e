"""The Redis store: persistent sessions in Redis, TBMQ's layout (seed 000), for DEVICE
clients at scale, on one server or on a Redis Cluster (``redis.cluster``).

The work is split by what each side is good at:

- Compiled code (``ferromq._core.RedisCodec``, ``rust/ferromq-core/src/store/redis.rs``,
  whose header documents every key and script) turns one journal batch into one RESP
  buffer of commands per Redis node (one Lua ``apply`` call per client; on a cluster
  each command goes to the node serving its key's hash slot), and reads the replies
  back in bulk (``RedisReplies``: counts them, collects errors, spots NOSCRIPT). At load
  it turns Redis's contents back into journal records for ``Engine.restore``, merging
  the nodes' replies back into command order.
- redis-py (asyncio, with hiredis) does what a client library is for: the URL, the
  connections, AUTH and SELECT, TLS, the cluster slot map (:mod:`.redis_nodes`). Each
  node's buffer is written with ``send_packed_command`` and its replies are read from
  that connection's stream in chunks and fed to ``RedisReplies``; the nodes of a
  cluster are written at once. No Python runs per message or per reply.

Batches (Lettuce-style, as TBMQ ran its 1M msg/s test): the persister writes when
``redis.batch_size`` records are pending or ``redis.flush_interval_ms`` after the first,
whichever comes first, one batch in flight at a time.

Scripts are loaded with SCRIPT LOAD when a connection is made; a node whose buffer
meets NOSCRIPT (Redis restarted or flushed its script cache) gets that buffer again
whole with EVAL, which is safe because every command in a batch sets state rather than
adding to it, and the scripts are loaded again for the next batches.

Failures: a batch Redis did not take raises ``ConnectionError`` naming the server
(host:port on a cluster) and the reason; on a cluster, a node failing or answering
MOVED / ASK / CLUSTERDOWN / TRYAGAIN also makes the store read the slot map again. The
persister keeps its acknowledgements back and retries the whole batch with backoff
(each retry reconnects), so nothing acknowledged is lost and the broker carries on when
Redis returns. Redis unreachable at start-up is ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

from redis.asyncio.connection import parse_url

from ferromq._core import RedisCodec, RedisReplies
from ferromq.log import log_event
from ferromq.storage import StoreUnavailable
from ferromq.storage.redis_nodes import Cluster, SendCheck, SingleServer

__all__ = ["RedisStore"]

logger = logging.getLogger("ferromq.storage")

# Clients read back per round trip at start-up.
LOAD_CHUNK: Final = 1000
# Replies that mean the slot map changed or the cluster is not serving right now.
CLUSTER_REDIRECTS: Final = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")

Buffers = list[tuple[int, bytes, int]]


def redacted(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}:***@" if parts.username else "***@"
    return parts._replace(netloc=f"{user}{host}{port}").geturl()


class RedisStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str,
        max_messages: int,
        message_ttl: int,
        connect_timeout: float,
        command_timeout: float,
        cluster: bool = False,
    ) -> None:
        self.where = redacted(url)
        self._codec = RedisCodec(
            key_prefix=key_prefix, max_messages=max_messages, message_ttl_ms=message_ttl * 1000
        )
        try:
            settings = dict(parse_url(url))
        except ValueError as exc:
            raise StoreUnavailable(f"redis store: redis.url {self.where!r}: {exc}") from None
        if cluster and ("path" in settings or settings.get("db", 0) != 0):
            raise StoreUnavailable(
                f"redis store: redis.url {self.where!r}: a Redis Cluster is reached over "
                "TCP and has database 0 only (redis.cluster = true)"
            )
        if cluster and ("{" in key_prefix or "}" in key_prefix):
            raise StoreUnavailable(
                f"redis store: redis.key_prefix {key_prefix!r} holds a brace, which would "
                "change the hash tag that keeps a client's keys in one cluster slot"
            )
        self._only: list[str] | None = None
        transport = Cluster if cluster else SingleServer
        self._sends = SendCheck()
        self._nodes = transport(
            self.where, settings, self._codec, connect_timeout, command_timeout, self._sends
        )

    def check_sends(self, check: Callable[[], None]) -> None:
        """Call ``check`` before each buffer leaves for Redis (a cluster member's lease,
        which ends the process when it has run out)."""
        self._sends.check = check

    def only_clients(self, clients: list[str]) -> None:
        """Load restores these clients' sessions only (a cluster node's own, not every
        session in Redis), and every retained message."""
        self._only = clients

    async def load(self) -> bytes:
        try:
            await self._nodes.start()
            clients = self._only if self._only is not None else await self._clients()
            return await self._read(clients, retained=True)
        except ConnectionError as exc:
            raise StoreUnavailable(str(exc)) from None
        except ValueError as exc:
            raise StoreUnavailable(f"redis store at {self.where}: unreadable: {exc}") from None

    async def load_clients(self, clients: list[str]) -> bytes:
        """These clients' sessions as journal records, while running (a session moving
        to this node). Raises ``ConnectionError`` naming Redis."""
        try:
            return await self._read(clients, retained=False)
        except ValueError as exc:
            raise ConnectionError(f"redis store at {self.where}: unreadable: {exc}") from None

    async def _read(self, clients: list[str], *, retained: bool) -> bytes:
        # The fetch script goes by SHA, known once a connection loaded the scripts.
        await asyncio.gather(*(node.connect() for node in self._nodes.nodes))
        parts = []
        for start in range(0, max(len(clients), 1), LOAD_CHUNK):
            chunk = clients[start : start + LOAD_CHUNK]
            last = retained and start + LOAD_CHUNK >= len(clients)
            buffers = self._codec.load_commands(chunk, last, False)
            replies = await self._send(buffers, keep=True)
            parts.append(self._codec.load_records(chunk, replies))
        return b"".join(parts)

    async def _clients(self) -> list[str]:
        node, data, count = self._codec.clients_command()
        [(_, replies)] = await self._send([(node, data, count)], keep=True)
        return replies.strings(0) or []

    def loaded(self, valid_len: int) -> None:
        """Nothing to cut: Redis holds whole commands only."""

    async def write(self, batch: bytes) -> None:
        now = int(time.time() * 1000)
        sent = await self._send(self._codec.batch(batch, now, False))
        lost = [node for node, replies in sent if replies.noscript()]
        if lost:
            nodes = self._nodes.nodes
            log_event(
                logger,
                logging.WARNING,
                "redis lost its scripts; batch sent again with EVAL",
                store=self.name,
                server=",".join(nodes[node].where for node in lost),
            )
            for node in lost:
                await nodes[node].drop()  # the next connection loads them again
            again = [b for b in self._codec.batch(batch, now, True) if b[0] in lost]
            sent = [s for s in sent if s[0] not in lost] + await self._send(again)
        for node, replies in sent:
            await self._check(node, replies)

    async def _check(self, node: int, replies: RedisReplies) -> None:
        errors = replies.errors()
        if not errors:
            return
        index, message = errors[0]
        # Named before a refresh renumbers the nodes.
        where = self._nodes.nodes[node].where
        why = f"{len(errors)} commands failed, first (#{index}): {message}"
        if message.startswith(CLUSTER_REDIRECTS):
            why += await self._nodes.refresh() or "; slot map read again"
        raise ConnectionError(f"redis store at {where}: {why}")

    async def _send(
        self, buffers: Buffers, *, keep: bool = False
    ) -> list[tuple[int, RedisReplies]]:
        """Each node's buffer to its node, all at once; its replies by node."""
        nodes = self._nodes.nodes
        if len(buffers) == 1:  # a single server, or a batch that touches one node
            [(node, data, count)] = buffers
            try:
                return [(node, await nodes[node].exchange(data, count, keep=keep))]
            except ConnectionError as exc:
                raise ConnectionError(f"{exc}{await self._nodes.refresh()}") from None
        results = await asyncio.gather(
            *(nodes[node].exchange(data, count, keep=keep) for node, data, count in buffers),
            return_exceptions=True,
        )
        replies = [
            (node, r)
            for (node, _, _), r in zip(buffers, results, strict=True)
            if isinstance(r, RedisReplies)
        ]
        if len(replies) < len(buffers):
            failures = [r for r in results if isinstance(r, BaseException)]
            for failure in failures:
                if not isinstance(failure, ConnectionError):
                    raise failure
            note = await self._nodes.refresh()
            raise ConnectionError("; ".join(map(str, failures)) + note)
        return replies

    def wants_compaction(self) -> bool:
        return False

    async def compact(self, snapshot: bytes) -> None:
        """Redis holds the live state itself; there is no log to compact."""

    async def close(self) -> None:
        await self._nodes.close()
