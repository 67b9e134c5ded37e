"""systemd's service notification protocol (sd_notify(3)), for ``Type=notify`` units.

Under ``Type=notify`` systemd counts the broker as started only when it says
``READY=1``, so ``systemctl start ferromq`` returns, and units ordered after it start,
once clients can connect: :func:`ferromq.broker.serve` sends it after
:meth:`~ferromq.broker.Broker.start` has bound every listener, opened and restored the
store and started accepting. ``STOPPING=1`` is sent when a graceful shutdown begins.

The protocol is one datagram of ``KEY=VALUE`` lines to the unix socket named by the
``NOTIFY_SOCKET`` environment variable: a path, or ``@name`` for the abstract
namespace. Without the variable (not started by systemd) nothing is sent, so the call is
harmless anywhere. Sent once per state change, never per message or connection; a
socket that refuses the datagram is logged, and the broker keeps serving (systemd then
reports the start as timed out, which names the problem better than a dead broker).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Final

from ferromq.log import log_event

__all__ = ["READY", "STOPPING", "notify"]

READY: Final = "READY=1"
STOPPING: Final = "STOPPING=1"

logger = logging.getLogger("ferromq.sd_notify")


def notify(state: str) -> None:
    """Send ``state`` (:data:`READY` or :data:`STOPPING`) to systemd, if it asked."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):  # the abstract namespace, spelt with a leading NUL
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log_event(
            logger,
            logging.WARNING,
            "systemd notification not sent",
            state=state,
            socket=os.environ["NOTIFY_SOCKET"],
            error=exc.strerror or str(exc),
        )
