"""The line protocol between the supervisor and one shard, over a stream socket pair
(``ShardIdentity.supervisor_fd`` is the shard's end).

Shard to supervisor, one line each, in this order:

- ``restored``: the store is read back (and a previous layout taken over, compacted);
  the shard then waits for ``serve`` before it accepts a connection, so that a layout
  no shard serves from yet is never written to by a client (:mod:`ferromq.storage.layout`);
- ``serving``: every listener accepts;
- ``failed <status> <message>``: the shard could not start, or (serving) met what it
  cannot read (a bus frame of a newer build); it exits with ``status``
  (2 configuration, 3 store unavailable, 4 cannot listen) and prints nothing itself,
  so the supervisor prints the one line (``ferromq: error: <message>``).

Supervisor to shard: ``serve``. End of file on the shard's side means the supervisor
is gone (``kill -9``): the shard stops as on SIGTERM, so a node never leaves shards
behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Final

from ferromq.storage.embedded import write_all

__all__ = ["RESTORED", "SERVE", "SERVING", "ShardLink", "failed_line", "parse_failed"]

RESTORED: Final = "restored"
SERVING: Final = "serving"
SERVE: Final = "serve"
_FAILED: Final = "failed"


def failed_line(status: int, message: str) -> str:
    return f"{_FAILED} {status} {' '.join(message.split())}"


def parse_failed(line: str) -> tuple[int, str] | None:
    """``(status, message)`` of a ``failed`` line; None for any other line."""
    word, _, rest = line.partition(" ")
    status, _, message = rest.partition(" ")
    if word != _FAILED or not status.isdigit():
        return None
    return int(status), message


class ShardLink:
    """The shard's end: tell the supervisor how the start goes, learn when to serve
    and when the supervisor is gone."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._watch: asyncio.Task[None] | None = None

    def send(self, line: str) -> None:
        """One line to the supervisor; nothing if it is gone (the read sees that)."""
        with contextlib.suppress(OSError):
            write_all(self._fd, f"{line}\n".encode())

    def fail(self, status: int, error: Exception) -> None:
        self.send(failed_line(status, str(error)))

    async def restored(self, stop: asyncio.Event) -> None:
        """Say ``restored`` and wait for ``serve`` (or for ``stop``: a node stopped while
        starting); from then on set ``stop`` when the supervisor is gone."""
        self.send(RESTORED)
        self._stream = await asyncio.open_connection(sock=socket.socket(fileno=os.dup(self._fd)))
        serve = asyncio.ensure_future(self._stream[0].readline())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((serve, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not serve.done():
            serve.cancel()
        elif serve.result():
            self._watch = asyncio.create_task(self._until_gone(stop))
        else:
            stop.set()  # the supervisor is gone

    def serving(self) -> None:
        self.send(SERVING)

    async def _until_gone(self, stop: asyncio.Event) -> None:
        assert self._stream is not None
        while await self._stream[0].readline():
            pass
        stop.set()
