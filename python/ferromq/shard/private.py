"""A node's private sockets: unix sockets of the abstract namespace, named by the node.

A shard serves what the node asks of it — its admin application
(:func:`ferromq.admin.server.bind_shard_admin`), its ``$SYS`` figures
(:mod:`ferromq.shard.sys_figures`) — on ``@ferromq-node-<supervisor pid>-<what>-<K>``
(:func:`private_address`): nothing on disk to clean up or outlive the node, no
path-length limit, and a shard that restarts binds the same name again. A shard
knows its supervisor as its parent process. An abstract socket has no file mode: any
local process may connect, so what is served there is what the configured listeners
would serve (the admin application checks the same token).
"""

from __future__ import annotations

import socket

from ferromq.sockets import BACKLOG, ListenError

__all__ = ["bind_private", "private_address", "shown"]


def private_address(node: int, what: str, index: int) -> str:
    """The socket shard ``index`` of the node whose supervisor's pid is ``node`` serves
    ``what`` on."""
    return f"\0ferromq-node-{node}-{what}-{index}"


def bind_private(where: str, address: str) -> socket.socket:
    """A listening, non-blocking unix socket at ``address``. Raises
    :class:`~ferromq.sockets.ListenError` naming ``where``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ListenError(f"{where}: cannot listen on {shown(address)}: {exc.strerror}") from None
    return sock


def shown(address: str | bytes) -> str:
    """A unix socket address as ``ss`` shows it (``@name``: abstract)."""
    text = address.decode(errors="replace") if isinstance(address, bytes) else address
    return "@" + text[1:] if text.startswith("\0") else text
