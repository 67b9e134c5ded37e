"""The node's admin listener asking its shards: HTTP over each shard's private socket.

Each shard of a node serves its own admin application on a private unix socket
(:mod:`ferromq.node.admin`, :mod:`ferromq.shard.private`); :class:`Shards`
keeps one aiohttp client session per shard on it and sends the node's bearer token
(the shard checks it as its own listener would). A request is sent as it came — the
path with its query, the body — or as the node's handlers build it, and its answer is
kept as bytes with its status; a shard that does not answer (restarting, dead, slow
past ``[admin] shard_timeout``) is :class:`ShardUnreachable`, which the node answers with 503
naming the shard. Per request, never per message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

__all__ = ["ShardAnswer", "ShardUnreachable", "Shards"]


class ShardUnreachable(Exception):
    """A shard that did not answer; the message names it and why."""

    def __init__(self, shard: int, reason: str) -> None:
        super().__init__(f"shard {shard} did not answer: {reason}")
        self.shard = shard


@dataclass(frozen=True)
class ShardAnswer:
    shard: int
    status: int
    body: bytes
    content_type: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The JSON answer; None when empty (204)."""
        return json.loads(self.body) if self.body else None


class Shards:
    """The admin applications of a node's shards, by index."""

    def __init__(self, addresses: Sequence[str], token: str | None, timeout: float) -> None:
        """``timeout``: seconds a shard has to answer one request."""
        self._addresses = tuple(addresses)
        self._timeout = timeout
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._sessions: list[aiohttp.ClientSession] = []

    @property
    def count(self) -> int:
        return len(self._addresses)

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        self._sessions = [
            aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=address),
                timeout=timeout,
                headers=self._headers,
            )
            for address in self._addresses
        ]

    async def close(self) -> None:
        await asyncio.gather(*(session.close() for session in self._sessions))

    async def call(
        self,
        shard: int,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> ShardAnswer:
        """``method path`` (``path`` as it goes on the wire: quoted, with any query)
        on ``shard``. Raises :class:`ShardUnreachable`."""
        url = URL("http://shard" + path, encoded=True)
        if query is not None:
            url = url.update_query(query)
        headers = {} if body is None else {"Content-Type": "application/json"}
        try:
            async with self._sessions[shard].request(
                method, url, data=body, headers=headers
            ) as response:
                return ShardAnswer(
                    shard, response.status, await response.read(), response.content_type
                )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ShardUnreachable(shard, str(exc) or type(exc).__name__) from None

    async def each(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        only: Iterable[int] | None = None,
    ) -> list[ShardAnswer | ShardUnreachable]:
        """``method path`` on every shard (or those in ``only``) at once, the answers in
        that order, a shard that does not answer as its :class:`ShardUnreachable`."""

        async def answer(shard: int) -> ShardAnswer | ShardUnreachable:
            try:
                return await self.call(shard, method, path, query, body)
            except ShardUnreachable as exc:
                return exc

        shards = range(self.count) if only is None else only
        return list(await asyncio.gather(*(answer(shard) for shard in shards)))

    async def every(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> list[ShardAnswer]:
        """:meth:`each`, every shard having answered. Raises :class:`ShardUnreachable`."""
        answers = []
        for answer in await self.each(method, path, query, body):
            if isinstance(answer, ShardUnreachable):
                raise answer
            answers.append(answer)
        return answers
