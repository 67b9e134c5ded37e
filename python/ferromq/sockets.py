"""Listening sockets: bound, listening and non-blocking, or one :class:`ListenError`
naming the listener, its address and why. Low in the package: the MQTT listeners
(:mod:`ferromq.listener`), the admin API's (:mod:`ferromq.admin.server`), a node's
supervisor (:mod:`ferromq.node`) and a shard's private sockets (:mod:`ferromq.shard`)
all open theirs here; the listeners and a shard's hand-overs
(:mod:`ferromq.shard.routing`) both wait when :data:`EXHAUSTED` says a socket cannot
be had now.
"""

from __future__ import annotations

import errno
import resource
import socket
from typing import Final

__all__ = ["BACKLOG", "EXHAUSTED", "ListenError", "bind_sockets", "raise_descriptor_limit"]

BACKLOG: Final = 4096

EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""``accept`` or ``socketpair`` failures that mean "no descriptor or memory for one
more socket now": the caller waits and tries again rather than failing."""


class ListenError(Exception):
    """A listener that cannot be opened; the message names it, its address and why."""


def bind_sockets(where: str, host: str, port: int, reuse_port: bool = False) -> list[socket.socket]:
    """Listening, non-blocking sockets for every address ``host`` resolves to (also the
    admin listener's); with ``reuse_port``, ``SO_REUSEPORT``: the shards of a node all
    listen on the address and the kernel spreads new connections over them. Raises
    :class:`ListenError` naming ``where``, having closed what it opened."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"{where}: cannot resolve host {host!r}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    for family, kind, proto, _, address in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        sockets.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            for opened in sockets:
                opened.close()
            shown = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
            raise ListenError(f"{where}: cannot listen on {shown}:{port}: {exc.strerror}") from None
    return sockets


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit of open descriptors to its hard limit (each
    connection is one; a shell's soft default of 1,024 would refuse the 1,025th while
    the hard limit, which systemd's ``LimitNOFILE`` or ``ulimit -Hn`` sets, allows
    far more), as nginx and HAProxy do; returns the limit now. The shards of a node
    inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # kept as it was: accepting pauses when it runs out (listener.py)
    return soft
