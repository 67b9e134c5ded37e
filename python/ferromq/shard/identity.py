"""What a shard process is told about its node: its index among ``count`` shards and
the descriptors it inherits from the supervisor.

- ``bus_fd``: the memfd holding every pair's ring (``ferromq._core.Bus``).
- ``counters_fd``: the memfd holding the node's admission counters
  (``ferromq._core.NodeCounters``, :mod:`ferromq.admission`); -1 when there are none.
- ``wake_fds[k]``: shard *k*'s eventfd; a producer writes it when *k* parked.
- ``handover_receive``: this shard's end of its ``SOCK_SEQPACKET`` pair, on which the
  other shards send the connections whose client id it owns (``handover_send[k]`` is
  the sending end of shard *k*'s pair; this shard's own entry is not used).
- ``supervisor_fd``: this shard's end of a stream socket pair with the supervisor
  (:mod:`ferromq.node.supervisor`): the shard writes one line on it once it serves, or
  why it could not start; end of file on it means the supervisor is gone, and the
  shard stops. -1 when nothing supervises it.
- ``ticket_keys_fd``: the memfd holding the node's TLS session-ticket key
  (:mod:`ferromq.tls_tickets`); -1 when there is none.
- ``supervisor_pid``: the supervisor's process id, which the shard checks is still its
  parent once it asked to be signalled at its parent's death
  (:func:`ferromq.shard.link.stop_with_supervisor`); -1 when nothing supervises it.

The supervisor passes it in the environment (:data:`ENV`), so a shard is the plain
``ferromq serve`` command with one more variable; without it the process is a node of
one shard and nothing here exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ferromq.tls_tickets import KEY_BYTES

ENV = "FERROMQ_SHARD"


def _fds(text: str) -> tuple[int, ...]:
    return tuple(int(fd) for fd in text.split(",")) if text else ()


@dataclass(frozen=True)
class ShardIdentity:
    index: int
    count: int
    bus_fd: int
    wake_fds: tuple[int, ...]
    handover_receive: int
    handover_send: tuple[int, ...]
    supervisor_fd: int = -1
    counters_fd: int = -1
    supervisor_pid: int = -1
    ticket_keys_fd: int = -1

    def to_env(self) -> str:
        return ";".join(
            (
                f"{self.index}/{self.count}",
                str(self.bus_fd),
                ",".join(map(str, self.wake_fds)),
                str(self.handover_receive),
                ",".join(map(str, self.handover_send)),
                str(self.supervisor_fd),
                str(self.counters_fd),
                str(self.supervisor_pid),
                str(self.ticket_keys_fd),
            )
        )

    @classmethod
    def from_env(
        cls, environ: os._Environ[str] | dict[str, str] = os.environ
    ) -> ShardIdentity | None:
        text = environ.get(ENV)
        if not text:
            return None
        where, bus, wake, receive, send, supervisor, counters, supervisor_pid, tickets = text.split(
            ";"
        )
        index, count = (int(part) for part in where.split("/"))
        return cls(
            index,
            count,
            int(bus),
            _fds(wake),
            int(receive),
            _fds(send),
            int(supervisor),
            int(counters),
            int(supervisor_pid),
            int(tickets),
        )

    def ticket_keys(self) -> bytes | None:
        """The node's TLS session-ticket key, None when it has none."""
        if self.ticket_keys_fd < 0:
            return None
        return os.pread(self.ticket_keys_fd, KEY_BYTES, 0)

    def inherited_fds(self) -> tuple[int, ...]:
        """Every descriptor the shard must inherit (for ``pass_fds``)."""
        optional = (self.supervisor_fd, self.counters_fd, self.ticket_keys_fd)
        own = tuple(fd for fd in optional if fd >= 0)
        return (self.bus_fd, *self.wake_fds, self.handover_receive, *self.handover_send, *own)
