"""``$SYS`` in a node (workers > 1): each shard's tree, and the node's from shard 0.

Each shard serves its :class:`~ferromq.sys_topics.Figures` (counters, uptime, store
health) on its private socket ``@ferromq-node-<supervisor pid>-sys-<K>``
(:mod:`ferromq.shard.private`): a connection reads one JSON document, then end of file.
Every ``[sys] interval`` each shard publishes its own tree under
``$SYS/broker/shard/<K>/``, and shard 0 asks every other shard's socket at once
(:data:`TIMEOUT` each) and publishes the node's tree under ``$SYS/broker/`` from
theirs and its own (:func:`~ferromq.sys_topics.node_figures`); a shard that does not
answer (restarting) counts with the last figures it gave.

The engines route these publishes to subscribers on every shard, so a subscriber
anywhere receives both trees at each interval. Retained ``$SYS`` messages stay on the
shard that published them (the engine neither journals nor replicates ``$SYS/``): a
client that subscribes on another shard than shard 0 gets the node's tree at its next
publication, within one interval, and its own shard's at once. One connection per
shard per interval: never per message. A shard out of file descriptors cannot accept
shard 0's connection: it tries again after :data:`TIMEOUT` (no traceback: the line
of whatever ran out says so), shard 0 counts it with the last figures it gave, and
the shard's own tree still says how its store is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Callable
from typing import Final

from ferromq.shard.identity import ShardIdentity
from ferromq.shard.private import bind_private, private_address
from ferromq.sys_topics import Figures, node_figures, shard_prefix, sys_messages

__all__ = ["TIMEOUT", "ShardSys"]

TIMEOUT: Final = 2.0
"""Seconds shard 0 waits for another shard's figures."""


class ShardSys:
    """One shard's side: its figures served, its tree (and on shard 0 the node's)."""

    def __init__(
        self, shard: ShardIdentity, figures: Callable[[], Figures], node: int | None = None
    ) -> None:
        self._shard = shard
        self._figures = figures
        self._node = os.getppid() if node is None else node
        self._last: dict[int, Figures] = {}
        self._server: asyncio.Task[None] | None = None

    def _address(self, index: int) -> str:
        return private_address(self._node, "sys", index)

    async def start(self) -> None:
        """Serve this shard's figures. Raises :class:`~ferromq.sockets.ListenError`."""
        sock = bind_private("shard $SYS socket", self._address(self._shard.index))
        self._server = asyncio.create_task(self._serve(sock))

    async def close(self) -> None:
        if self._server is not None:
            self._server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._server

    async def _serve(self, sock: socket.socket) -> None:
        """Answer each connection with this shard's figures, one at a time."""
        loop = asyncio.get_running_loop()
        with sock:
            while True:
                try:
                    connection, _ = await loop.sock_accept(sock)
                except OSError:  # out of descriptors: shard 0 counts the last figures
                    await asyncio.sleep(TIMEOUT)
                    continue
                with connection, contextlib.suppress(OSError):  # shard 0 gave up waiting
                    connection.setblocking(False)
                    document = json.dumps(self._figures().to_json()).encode()
                    await loop.sock_sendall(connection, document)

    async def messages(self) -> list[tuple[str, bytes]]:
        """This interval's publications: this shard's tree, on shard 0 the node's too."""
        own = self._figures()
        messages = sys_messages(own, shard_prefix(self._shard.index))
        if self._shard.index == 0:
            others = range(1, self._shard.count)
            answers = await asyncio.gather(*(self._ask(index) for index in others))
            messages += sys_messages(node_figures([own, *filter(None, answers)]))
        return messages

    async def _ask(self, index: int) -> Figures | None:
        """Shard ``index``'s figures, else the last it gave (None: never)."""
        try:
            data = await asyncio.wait_for(self._read(index), TIMEOUT)
            self._last[index] = Figures.from_json(json.loads(data))
        except (OSError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            pass  # restarting: its last figures stand in
        return self._last.get(index)

    async def _read(self, index: int) -> bytes:
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            await loop.sock_connect(sock, self._address(index))
            data = b""
            while chunk := await loop.sock_recv(sock, 65536):
                data += chunk
            return data
