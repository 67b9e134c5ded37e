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

Supervisor to shard, read from the shard's start: ``serve``, and ``stop`` (the node
stops: the shard stops as on SIGTERM, :mod:`ferromq.shutdown`). A line, not a signal:
a shard also gets the operator's own signal (Ctrl-C reaches the process group,
systemd signals the cgroup), and a second signal would cut its stop short. End of
file means the supervisor is gone (``kill -9``): the shard stops likewise, so a node
never leaves shards behind. The kernel backs that up: a shard asks for SIGTERM when
its supervisor dies (:func:`stop_with_supervisor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
from typing import Final

from ferromq.fileio import write_all

__all__ = [
    "RESTORED",
    "SERVE",
    "SERVING",
    "STOP",
    "ShardLink",
    "failed_line",
    "parse_failed",
    "stop_with_supervisor",
]

RESTORED: Final = "restored"
SERVING: Final = "serving"
SERVE: Final = "serve"
STOP: Final = "stop"
_FAILED: Final = "failed"
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def failed_line(status: int, message: str) -> str:
    return f"{_FAILED} {status} {' '.join(message.split())}"


def parse_failed(line: str) -> tuple[int, str] | None:
    """``(status, message)`` of a ``failed`` line; None for any other line."""
    word, _, rest = line.partition(" ")
    status, _, message = rest.partition(" ")
    if word != _FAILED or not status.isdigit():
        return None
    return int(status), message


def stop_with_supervisor(supervisor_pid: int) -> None:
    """Have the kernel send this shard SIGTERM when its supervisor dies (prctl
    ``PR_SET_PDEATHSIG``; the supervisor forks its shards from its main thread, whose
    end is the process's). A supervisor that died before the request is seen here:
    this process's parent is another one then, and it stops itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != supervisor_pid:
        os.kill(os.getpid(), signal.SIGTERM)


class ShardLink:
    """The shard's end: tell the supervisor how the start goes, learn when to serve
    and when to stop (told so, or the supervisor is gone)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._serve = asyncio.Event()
        self._reading: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None  # kept: it owns the transport

    def send(self, line: str) -> None:
        """One line to the supervisor; nothing if it is gone (the read sees that)."""
        with contextlib.suppress(OSError):
            write_all(self._fd, f"{line}\n".encode())

    def fail(self, status: int, error: Exception) -> None:
        self.send(failed_line(status, str(error)))

    def watch(self, stop: asyncio.Event) -> None:
        """Read the supervisor's lines from now on: ``serve`` lets :meth:`restored`
        return; ``stop``, or the end of the link, sets ``stop``."""
        self._reading = asyncio.create_task(self._read(stop))

    async def _read(self, stop: asyncio.Event) -> None:
        sock = socket.socket(fileno=os.dup(self._fd))
        reader, self._writer = await asyncio.open_connection(sock=sock)
        # A reset ends the link as its end of file does: a supervisor that died with
        # lines of ours unread.
        with contextlib.suppress(ConnectionError):
            async for raw in reader:  # line by line, to the end of the link
                line = raw.decode(errors="replace").strip()
                if line == SERVE:
                    self._serve.set()
                elif line == STOP:
                    break
        stop.set()

    async def restored(self, stop: asyncio.Event) -> None:
        """Say ``restored`` and wait for ``serve`` (or for ``stop``: a node stopped while
        starting)."""
        self.send(RESTORED)
        serve = asyncio.ensure_future(self._serve.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((serve, stopped), return_when=asyncio.FIRST_COMPLETED)
        serve.cancel()
        stopped.cancel()

    def serving(self) -> None:
        self.send(SERVING)
