"""One TLS session-ticket key for every shard of a node, so a client resumes its TLS
session whichever shard the kernel hands its next connection to.

A TLS 1.3 server gives the client tickets after the handshake: its session's secrets,
encrypted with the server's ticket key. Presenting one on the next connection skips the
certificate exchange and its signature (a resumed handshake). OpenSSL makes that key at
random per ``SSL_CTX``, so in a node of several shards (one process and one context
each, connections spread over them by ``SO_REUSEPORT``) a ticket was good only on the
shard that issued it: at two shards half the reconnects made full handshakes.

The supervisor makes one key of :data:`KEY_BYTES` random bytes at the node's start and
gives every shard a memfd holding it (:class:`~ferromq.shard.identity.ShardIdentity`'s
``ticket_keys_fd``); each shard sets it in its TLS listeners' contexts, at start and
at each certificate reload. The key lives as long as the node, as OpenSSL's own one
lives as long as its context.

Python's ``ssl`` has no call for this, so :func:`share_ticket_keys` calls OpenSSL's
``SSL_CTX_ctrl(SSL_CTRL_SET_TLSEXT_TICKET_KEYS)`` through ctypes on the ``SSL_CTX`` of
the ``ssl.SSLContext``, which CPython keeps as the first field after the object header
(``PySSLContext`` in ``Modules/_ssl.c``, so since Python 3.3), and reads the key back to
check it took. Where that cannot be done (another Python implementation, a debug build,
no ``libssl.so.3``) it raises :class:`TicketKeysUnavailable` and the shard keeps its own
key: resumption then works on the issuing shard only, as before.
"""

from __future__ import annotations

import ctypes
import os
import ssl
import sys
from functools import cache
from typing import Final

__all__ = ["KEY_BYTES", "TicketKeysUnavailable", "new_ticket_keys", "share_ticket_keys"]

KEY_BYTES: Final = 80
"""OpenSSL's ticket keys: a 16-byte name, a 32-byte HMAC key and a 32-byte AES key."""

_SET_KEYS: Final = 59  # SSL_CTRL_SET_TLSEXT_TICKET_KEYS (openssl/ssl.h)
_GET_KEYS: Final = 58  # SSL_CTRL_GET_TLSEXT_TICKET_KEYS


class TicketKeysUnavailable(RuntimeError):
    """This Python's ``ssl`` contexts cannot be given a ticket key."""


def new_ticket_keys() -> bytes:
    """A node's ticket key: :data:`KEY_BYTES` bytes from the kernel's random source."""
    return os.urandom(KEY_BYTES)


@cache
def _ssl_ctx_ctrl() -> ctypes._NamedFuncPointer:
    if sys.implementation.name != "cpython" or hasattr(sys, "gettotalrefcount"):
        raise TicketKeysUnavailable("not a release build of CPython")
    if not ssl.OPENSSL_VERSION.startswith("OpenSSL 3."):
        raise TicketKeysUnavailable(f"{ssl.OPENSSL_VERSION}, not OpenSSL 3")
    try:
        # The library the ssl module is linked with: a second dlopen returns it.
        control = ctypes.CDLL("libssl.so.3").SSL_CTX_ctrl
    except (OSError, AttributeError) as exc:
        raise TicketKeysUnavailable(f"libssl.so.3: {exc}") from None
    control.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p)
    control.restype = ctypes.c_long
    return control


def share_ticket_keys(context: ssl.SSLContext, keys: bytes) -> None:
    """Make ``keys`` (:data:`KEY_BYTES` bytes) the ticket key of ``context``'s
    handshakes from now on. Raises :class:`TicketKeysUnavailable`."""
    if len(keys) != KEY_BYTES:
        raise ValueError(f"a ticket key is {KEY_BYTES} bytes, not {len(keys)}")
    control = _ssl_ctx_ctrl()
    ssl_ctx = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    wanted = ctypes.create_string_buffer(keys, KEY_BYTES)
    taken = ctypes.create_string_buffer(KEY_BYTES)
    if (
        control(ssl_ctx, _SET_KEYS, KEY_BYTES, wanted) != 1
        or control(ssl_ctx, _GET_KEYS, KEY_BYTES, taken) != 1
        or taken.raw != keys
    ):
        raise TicketKeysUnavailable("OpenSSL did not take the key")
