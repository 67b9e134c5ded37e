"""Where the Redis store's buffers go: one server, or every primary of a Redis Cluster.

:class:`Node` is one Redis server: a connection from its redis-py pool (the URL's own
connection settings: authentication, TLS, timeouts), with the store's Lua scripts
loaded when it connects; it writes one pipelined buffer and reads its replies raw into
``RedisReplies`` (no Python per reply). Any failure drops the connection and raises
``ConnectionError`` naming the server and the reason.

:class:`SingleServer` is one node, node 0, reached by ``redis.url`` as given.

:class:`Cluster` (``redis.cluster = true``) asks any node it knows (first ``redis.url``)
for ``CLUSTER SLOTS``, makes a :class:`Node` per primary with the URL's settings and
that primary's host and port (database 0, the only one a cluster has), and hands the
slot → node table to the codec, which routes every command in compiled code. The map is
read again (:meth:`Cluster.refresh`) whenever a batch meets MOVED / ASK / CLUSTERDOWN /
TRYAGAIN or a node fails; the batch itself is then retried whole by the persister.

Every buffer is checked (:class:`SendCheck`) the moment before it leaves: a cluster
member's lease stops the process there once it has run out
(:mod:`ferromq.cluster.lease`), so no write of a member that lost its clients lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from redis import RedisError
from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection

from ferromq._core import RedisCodec, RedisReplies

__all__ = ["Cluster", "Node", "SendCheck", "SingleServer"]

READ_CHUNK: Final = 256 * 1024


def _nothing() -> None:
    pass


class SendCheck:
    """What runs before each buffer the store sends: nothing, until
    :meth:`ferromq.storage.redis.RedisStore.check_sends` sets it."""

    def __init__(self) -> None:
        self.check: Callable[[], None] = _nothing


class Node:
    """One Redis server and the store's connection to it."""

    def __init__(
        self,
        where: str,
        pool: ConnectionPool,
        codec: RedisCodec,
        command_timeout: float,
        sends: SendCheck,
    ) -> None:
        self.where = where
        self._pool = pool
        self._codec = codec
        self._sends = sends
        self._command_timeout = command_timeout
        self._connection: AbstractConnection | None = None
        # One round trip at a time on the one connection: the persister's batches, a
        # claimed session's load and an adoption's can be asked for at once, and
        # their replies must not interleave.
        self._exchanging = asyncio.Lock()

    async def exchange(self, data: bytes, count: int, *, keep: bool = False) -> RedisReplies:
        """Send one pipelined buffer and read its ``count`` replies (after any round
        trip already under way)."""
        replies = RedisReplies(count, keep=keep)
        if count == 0:  # a batch whose deliveries all completed before it went out
            return replies
        try:
            async with self._exchanging:
                connection = await self._connect()
                self._sends.check()
                exchange = self._round_trip(connection, data, replies)
                await asyncio.wait_for(exchange, self._command_timeout)
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            await self.drop()
            raise ConnectionError(f"redis store at {self.where}: {self._why(exc)}") from None
        return replies

    async def connect(self) -> None:
        """Connect now if not connected (loading the scripts), so that commands built
        next carry the scripts' SHAs."""
        try:
            async with self._exchanging:
                await self._connect()
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            await self.drop()
            raise ConnectionError(f"redis store at {self.where}: {self._why(exc)}") from None

    async def call(self, *args: str) -> Any:
        """One command on a connection of its own, its reply parsed by redis-py (for
        the rare commands whose reply Python reads, such as CLUSTER SLOTS)."""
        try:
            connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await connection.send_command(*args)
                return await asyncio.wait_for(connection.read_response(), self._command_timeout)
            finally:
                await self._pool.release(connection)
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            raise ConnectionError(f"redis store at {self.where}: {self._why(exc)}") from None

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"no reply within {self._command_timeout:g}s"
        return str(exc) or type(exc).__name__

    async def _connect(self) -> AbstractConnection:
        if self._connection is None:
            connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                for name, source in RedisCodec.scripts():
                    await connection.send_command("SCRIPT", "LOAD", source)
                    sha = await connection.read_response()
                    self._codec.set_sha(name, sha.decode() if isinstance(sha, bytes) else str(sha))
            except BaseException:
                await connection.disconnect()
                await self._pool.release(connection)
                raise
            self._connection = connection
        return self._connection

    @staticmethod
    async def _round_trip(
        connection: AbstractConnection, data: bytes, replies: RedisReplies
    ) -> None:
        await connection.send_packed_command(data, check_health=False)
        # The connection's stream, read raw: redis-py parses a reply per call, the
        # compiled reader takes the whole pipeline's replies in a few chunks.
        stream = connection._reader
        assert stream is not None, "connected above"
        while not replies.feed(await stream.read(READ_CHUNK)):
            if stream.at_eof():
                raise ConnectionError("connection closed by the server")

    async def drop(self) -> None:
        """Close the connection; the next exchange connects (and loads the scripts)
        again."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()
            await self._pool.release(connection)

    async def close(self) -> None:
        self._connection = None
        await self._pool.disconnect()


def _pool(
    settings: dict[str, Any], connect_timeout: float, command_timeout: float
) -> ConnectionPool:
    # RESP2: the protocol the compiled reply reader speaks (redis-py 8 asks for RESP3).
    return ConnectionPool(
        **settings,
        protocol=2,
        socket_connect_timeout=connect_timeout,
        socket_timeout=command_timeout,
    )


class SingleServer:
    """Everything on the one server ``redis.url`` names: node 0."""

    def __init__(
        self,
        where: str,
        settings: dict[str, Any],
        codec: RedisCodec,
        connect_timeout: float,
        command_timeout: float,
        sends: SendCheck,
    ) -> None:
        pool = _pool(settings, connect_timeout, command_timeout)
        self.nodes = [Node(where, pool, codec, command_timeout, sends)]

    async def start(self) -> None:
        """Nothing to discover: the first exchange connects."""

    async def refresh(self) -> str:
        return ""

    async def close(self) -> None:
        await self.nodes[0].close()


class Cluster:
    """Every primary of the Redis Cluster ``redis.url`` belongs to."""

    def __init__(
        self,
        where: str,
        settings: dict[str, Any],
        codec: RedisCodec,
        connect_timeout: float,
        command_timeout: float,
        sends: SendCheck,
    ) -> None:
        self._where = where
        self._sends = sends
        self._settings = {**settings, "db": 0}
        self._codec = codec
        self._timeouts = (connect_timeout, command_timeout)
        self._seed = self._node(settings.get("host", "localhost"), settings.get("port", 6379))
        # Every node met so far by address, the seed included: a node that returns to
        # the map keeps its pool.
        self._known = {self._seed.where: self._seed}
        self.nodes: list[Node] = []

    def _node(self, host: str, port: int) -> Node:
        settings = {**self._settings, "host": host, "port": port}
        where = f"{host}:{port}"
        pool = _pool(settings, *self._timeouts)
        return Node(where, pool, self._codec, self._timeouts[1], self._sends)

    async def start(self) -> None:
        """Read the slot map from ``redis.url``; ``ConnectionError`` when that server
        cannot be reached, runs without cluster support or leaves a slot without a
        node."""
        await self._read_map([self._seed])

    async def refresh(self) -> str:
        """Read the slot map again from any node that answers; returns a note for the
        error that caused it ("" once refreshed)."""
        try:
            await self._read_map([*self.nodes, self._seed])
        except ConnectionError as exc:
            return f"; slot map not refreshed: {exc}"
        return ""

    async def _read_map(self, candidates: list[Node]) -> None:
        failure: ConnectionError | None = None
        for candidate in candidates:
            try:
                slots = await candidate.call("CLUSTER", "SLOTS")
            except ConnectionError as exc:
                if "cluster support disabled" in str(exc):
                    raise ConnectionError(
                        f"redis store at {self._where}: redis.cluster = true but "
                        f"{candidate.where} is not a cluster node (cluster support disabled)"
                    ) from None
                failure = exc
                continue
            before = self.nodes
            self._use(candidate, slots)
            for gone in set(before) - set(self.nodes):
                await gone.drop()
            return
        assert failure is not None, "at least the seed was asked"
        raise failure

    def _use(self, asked: Node, slots: list[list[Any]]) -> None:
        """Take the CLUSTER SLOTS reply: ``[first, last, [host, port, id, ...],
        replicas...]`` per range."""
        ranges: list[tuple[int, int, int]] = []
        nodes: list[Node] = []
        index: dict[str, int] = {}
        for first, last, primary, *_replicas in slots:
            host = _text(primary[0])
            if host in ("", "?"):  # announced without an address: the one asked
                host = asked.where.rsplit(":", 1)[0]
            where = f"{host}:{int(primary[1])}"
            if where not in index:
                index[where] = len(nodes)
                node = self._known.get(where) or self._node(host, int(primary[1]))
                nodes.append(node)
            ranges.append((int(first), int(last), index[where]))
        try:
            self._codec.set_slots(ranges)
        except ValueError as exc:
            raise ConnectionError(f"redis store at {asked.where}: cluster map: {exc}") from None
        self.nodes = nodes
        self._known.update((node.where, node) for node in nodes)

    async def close(self) -> None:
        for node in self._known.values():
            await node.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
