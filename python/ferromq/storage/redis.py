"""The Redis store: persistent sessions in Redis, TBMQ's layout (seed 000), for DEVICE
clients at scale.

The work is split by what each side is good at:

- Compiled code (``ferromq._core.RedisCodec``, ``rust/ferromq-core/src/store/redis.rs``,
  whose header documents every key and script) turns one journal batch into ONE RESP
  buffer of commands, one Lua ``apply`` call per client, and reads the replies back in
  bulk (``RedisReplies``: counts them, collects errors, spots NOSCRIPT). At load it
  turns Redis's contents back into journal records for ``Engine.restore``.
- redis-py (asyncio, with hiredis) does what a client library is for: the URL, the
  connection, AUTH and SELECT, the pool. A batch is written on a connection from the
  pool with ``send_packed_command`` and its replies are read from that connection's
  stream in chunks and fed to ``RedisReplies``; no Python runs per message or per reply.

Batches (Lettuce-style, as TBMQ ran its 1M msg/s test): the persister writes when
``redis.batch_size`` records are pending or ``redis.flush_interval_ms`` after the first,
whichever comes first, one batch in flight at a time.

Scripts are loaded with SCRIPT LOAD when a connection is made; a batch that meets
NOSCRIPT (Redis restarted or flushed its script cache) is sent again whole with EVAL,
which is safe because every command in a batch sets state rather than adding to it,
and the scripts are loaded again for the next batches.

Failures: a batch Redis did not take raises ``ConnectionError`` naming the server and
the reason; the persister keeps its acknowledgements back and retries with backoff
(each retry reconnects), so nothing acknowledged is lost and the broker carries on
when Redis returns. Redis unreachable at start-up is ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final
from urllib.parse import urlsplit

from redis import RedisError
from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection

from ferromq._core import RedisCodec, RedisReplies
from ferromq.log import log_event
from ferromq.storage import StoreUnavailable

__all__ = ["RedisStore"]

logger = logging.getLogger("ferromq.storage")

READ_CHUNK: Final = 256 * 1024
# Clients read back per round trip at start-up.
LOAD_CHUNK: Final = 1000


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
    ) -> None:
        self.where = redacted(url)
        self._codec = RedisCodec(
            key_prefix=key_prefix, max_messages=max_messages, message_ttl_ms=message_ttl * 1000
        )
        # RESP2: the protocol the compiled reply reader speaks (redis-py 8 asks for RESP3).
        try:
            self._pool = ConnectionPool.from_url(
                url,
                protocol=2,
                socket_connect_timeout=connect_timeout,
                socket_timeout=command_timeout,
            )
        except ValueError as exc:
            raise StoreUnavailable(f"redis store: redis.url {self.where!r}: {exc}") from None
        self._command_timeout = command_timeout
        self._connection: AbstractConnection | None = None

    async def load(self) -> bytes:
        try:
            clients = await self._clients()
            parts = []
            for start in range(0, max(len(clients), 1), LOAD_CHUNK):
                chunk = clients[start : start + LOAD_CHUNK]
                last = start + LOAD_CHUNK >= len(clients)
                data, count = self._codec.load_commands(chunk, last, False)
                replies = await self._exchange(data, count, keep=True)
                parts.append(self._codec.load_records(chunk, replies))
        except ConnectionError as exc:
            raise StoreUnavailable(str(exc)) from None
        except ValueError as exc:
            raise StoreUnavailable(f"redis store at {self.where}: unreadable: {exc}") from None
        return b"".join(parts)

    async def _clients(self) -> list[str]:
        data, count = self._codec.clients_command()
        replies = await self._exchange(data, count, keep=True)
        return replies.strings(0) or []

    def loaded(self, valid_len: int) -> None:
        """Nothing to cut: Redis holds whole commands only."""

    async def write(self, batch: bytes) -> None:
        now = int(time.time() * 1000)
        data, count = self._codec.batch(batch, now, False)
        replies = await self._exchange(data, count)
        if replies.noscript():
            log_event(
                logger,
                logging.WARNING,
                "redis lost its scripts; batch sent again with EVAL",
                store=self.name,
                server=self.where,
            )
            await self._drop_connection()  # the next connection loads them again
            data, count = self._codec.batch(batch, now, True)
            replies = await self._exchange(data, count)
        errors = replies.errors()
        if errors:
            index, message = errors[0]
            raise ConnectionError(
                f"redis store at {self.where}: {len(errors)} of {count} commands failed, "
                f"first (#{index}): {message}"
            )

    def wants_compaction(self) -> bool:
        return False

    async def compact(self, snapshot: bytes) -> None:
        """Redis holds the live state itself; there is no log to compact."""

    async def close(self) -> None:
        self._connection = None
        await self._pool.disconnect()

    async def _connect(self) -> AbstractConnection:
        if self._connection is None:
            connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await self._load_scripts(connection)
            except BaseException:
                await connection.disconnect()
                await self._pool.release(connection)
                raise
            self._connection = connection
        return self._connection

    async def _load_scripts(self, connection: AbstractConnection) -> None:
        for name, source in RedisCodec.scripts():
            await connection.send_command("SCRIPT", "LOAD", source)
            sha = await connection.read_response()
            self._codec.set_sha(name, sha.decode() if isinstance(sha, bytes) else str(sha))

    async def _exchange(self, data: bytes, count: int, *, keep: bool = False) -> RedisReplies:
        """Send one pipelined buffer and read its ``count`` replies."""
        replies = RedisReplies(count, keep=keep)
        if count == 0:  # a batch whose deliveries all completed before it went out
            return replies
        try:
            connection = await self._connect()
            exchange = self._round_trip(connection, data, replies)
            await asyncio.wait_for(exchange, self._command_timeout)
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            await self._drop_connection()
            why = str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                why = f"no reply within {self._command_timeout:g}s"
            raise ConnectionError(f"redis store at {self.where}: {why}") from None
        return replies

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

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()
            await self._pool.release(connection)
