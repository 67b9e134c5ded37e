"""The PROXY protocol preamble: the client address a load balancer puts before a
connection's first byte, read off the raw socket.

A listener with ``proxy_protocol = true`` sits behind HAProxy or a cloud load balancer
that opens each connection with a PROXY header (v1 text or v2 binary) naming the client
it relays. :func:`read_proxy_header` takes that header off the accepted socket *before*
the loop's transport exists, so on a ``tls``/``wss`` listener the TLS handshake, and on
any listener the WebSocket upgrade or MQTT, start at the first byte after it.

Reading must never go past the header (those bytes belong to the TLS ClientHello, which
``connect_accepted_socket`` reads from the kernel itself), so each readiness *peeks*
(``MSG_PEEK``) and the Rust parser (:func:`ferromq._core.parse_proxy_header`, a fuzzed
sans-IO parser) says where the header ends: then exactly those bytes are received.
While the header is incomplete every peeked byte is part of it (the parser's
guarantee), so they are received too, which keeps a half-sent header from making the
socket readable forever. Per connection: one peek and one receive per readiness,
usually one of each; nothing per message.

The caller bounds the read with ``limits.connect_timeout`` (a header held back is a
slowloris), checks ``proxy_trusted`` before calling, and closes the socket on any
:class:`ProxyHeaderError`. A header naming no client (v1 ``UNKNOWN``, v2 ``LOCAL``
health checks) leaves the socket's own address in place.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Final

from ferromq._core import ProxyHeader, parse_proxy_header

__all__ = ["ProxyHeaderError", "is_trusted", "read_proxy_header"]

PEEK_SIZE: Final = 4096
"""Bytes looked at per readiness: a v1 header is at most 107, a v2 one is 16 plus its
addresses and TLVs (read on over several peeks when longer)."""


class ProxyHeaderError(Exception):
    """A proxy listener's connection that did not start with a valid PROXY header."""


def is_trusted(
    host: str, trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    """Whether a connection from ``host`` may send a PROXY header (empty: any)."""
    if not trusted:
        return True
    address = ipaddress.ip_address(host)
    return any(address in network for network in trusted)


async def read_proxy_header(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> ProxyHeader:
    """Receive the PROXY header at the front of ``sock`` (non-blocking), and not a byte
    more. Raises :class:`ProxyHeaderError` naming what was wrong."""
    held = b""
    while True:
        await _readable(loop, sock)
        try:
            peeked = sock.recv(PEEK_SIZE, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError as exc:
            raise ProxyHeaderError(f"connection failed before its PROXY header: {exc}") from None
        if not peeked:
            raise ProxyHeaderError("connection closed before its PROXY header ended")
        try:
            header = parse_proxy_header(held + peeked)
        except ValueError as exc:
            raise ProxyHeaderError(str(exc)) from None
        # Received bytes are header bytes only: all peeked ones while it is incomplete,
        # then exactly up to its end (the kernel holds them: they were just peeked).
        want = len(peeked) if header is None else header.length - len(held)
        held += sock.recv(want)
        if header is not None:
            return header


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(sock.fileno(), _wake, ready)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
