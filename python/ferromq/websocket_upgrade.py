"""The WebSocket opening handshake (RFC 6455 §4) of a ``ws``/``wss`` listener.

Per connection, before MQTT: :class:`UpgradeProtocol` is the transport's first protocol
(over TCP, or over TLS once its handshake is done). It collects the HTTP request, at
most :data:`MAX_REQUEST` bytes and within ``limits.connect_timeout`` (a request held
open is a slowloris), and :func:`answer` decides it. On ``101 Switching Protocols`` the
transport is handed to the protocol made for it, given the bytes that came after the
request: the MQTT protocol with ``framing = "websocket"`` (the engine deframes in Rust
from then on, :mod:`ferromq._protocol` feeds it one C call per read as for TCP), in a
node of several shards the router first (:mod:`ferromq.shard.handover`); on anything else the
HTTP error is written and the connection closed. Python runs here once per connection,
never per message.

What is answered (the reason in a one-line ``text/plain`` body):

- not ``GET ... HTTP/1.1``, or a malformed request line or header: 400; another
  method: 405;
- a path other than the listener's ``path`` (the query string is ignored): 404;
- no ``Upgrade: websocket`` / ``Connection: Upgrade``: 426 with ``Upgrade: websocket``;
  ``Sec-WebSocket-Version`` not 13: 426 with ``Sec-WebSocket-Version: 13`` (§4.4);
  a ``Sec-WebSocket-Key`` that is not 16 bytes in base64: 400;
- ``origins`` set and the ``Origin`` header not among them (or absent): 403;
- ``Sec-WebSocket-Protocol`` offered without ``mqtt`` or ``mqttv3.1``: 400, as EMQX
  answers (``fail_if_no_subprotocol`` aside). The first of those two in the client's
  order is echoed [MQTT-6.0.0-3 (5.0: 6.0.0-4)]. A client that offers no subprotocol
  at all is accepted without the header, as Mosquitto and EMQX (by default) accept
  it: some WebSocket libraries cannot send one;
- a request larger than :data:`MAX_REQUEST`: 431; none complete in time: 408; a first
  line with bytes HTTP never has (an MQTT client on the WebSocket port): 400 at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

__all__ = ["MAX_REQUEST", "SUBPROTOCOLS", "Answer", "UpgradeProtocol", "answer"]

MAX_REQUEST: Final = 8192
"""Bytes an upgrade request may take, headers included."""
SUBPROTOCOLS: Final = ("mqtt", "mqttv3.1")
"""MQTT's WebSocket subprotocols: ``mqtt`` (3.1.1, 5.0) and ``mqttv3.1`` (3.1)."""
_PRINTABLE: Final = re.compile(rb"[\x20-\x7e]*")
_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
}


@dataclass(frozen=True)
class Answer:
    """The HTTP response to an upgrade request; ``refusal`` is None when it upgrades,
    else why not (for the log)."""

    response: bytes
    refusal: str | None


def _refuse(status: int, why: str, *headers: str) -> Answer:
    body = f"{why}\n".encode()
    head = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return Answer(("\r\n".join(head) + "\r\n\r\n").encode() + body, f"{status} {why}")


def answer(request: bytes, path: str, origins: tuple[str, ...]) -> Answer:
    """Decide one complete upgrade request (the bytes up to and with its blank line)."""
    lines = request.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] != "HTTP/1.1":
        return _refuse(400, "expected an HTTP/1.1 request line")
    method, target, _ = parts
    if method != "GET":
        return _refuse(405, f"method {method} not allowed, only GET", "Allow: GET")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return _refuse(400, "malformed header line")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    if urlsplit(target).path != path:
        return _refuse(404, f"no WebSocket endpoint at {urlsplit(target).path}; use {path}")
    if "websocket" not in _tokens(headers.get("upgrade")) or "upgrade" not in _tokens(
        headers.get("connection")
    ):
        return _refuse(426, "a WebSocket upgrade is required", "Upgrade: websocket")
    if headers.get("sec-websocket-version") != "13":
        return _refuse(426, "WebSocket version 13 is required", "Sec-WebSocket-Version: 13")
    key = headers.get("sec-websocket-key", "")
    try:
        valid_key = len(base64.b64decode(key, validate=True)) == 16
    except binascii.Error:
        valid_key = False
    if not valid_key:
        return _refuse(400, "Sec-WebSocket-Key must be 16 bytes in base64")
    if origins and headers.get("origin") not in origins:
        return _refuse(403, f"origin {headers.get('origin')} not allowed")
    head = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Accept: "
        + base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode(),
    ]
    if "sec-websocket-protocol" in headers:
        offered = [item.strip() for item in headers["sec-websocket-protocol"].split(",")]
        chosen = next((item for item in offered if item in SUBPROTOCOLS), None)
        if chosen is None:
            return _refuse(400, "Sec-WebSocket-Protocol must offer mqtt or mqttv3.1")
        head.append(f"Sec-WebSocket-Protocol: {chosen}")
    return Answer(("\r\n".join(head) + "\r\n\r\n").encode(), None)


def _tokens(value: str | None) -> set[str]:
    return {token.strip().lower() for token in (value or "").split(",")}


class UpgradeProtocol(asyncio.Protocol):
    """A connection's protocol until its upgrade is answered; see the module header.

    ``upgraded(rest)`` makes the next protocol (which takes over the connection's slot
    and is given ``rest``, the bytes read past the request, at ``connection_made``);
    ``refused(why)`` reports a refusal for the log and the counts; ``release``
    gives the connection's slot back when it ends before the upgrade.
    """

    def __init__(
        self,
        path: str,
        origins: tuple[str, ...],
        timeout: float,
        upgraded: Callable[[bytes], asyncio.BufferedProtocol],
        refused: Callable[[str], None],
        release: Callable[[], None],
    ) -> None:
        self._path = path
        self._origins = origins
        self._timeout = timeout
        self._upgraded = upgraded
        self._refused = refused
        self._release: Callable[[], None] | None = release
        self._request = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement it.
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._timeout, self._expired)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return  # answered already; the transport is closing
        # Search only the new bytes (and the three before them) for the blank line.
        start = max(0, len(self._request) - 3)
        self._request += data
        end = self._request.find(b"\r\n\r\n", start)
        if end < 0:
            line = self._request.partition(b"\r\n")[0].removesuffix(b"\r")
            if not _PRINTABLE.fullmatch(line):
                # Not HTTP (an MQTT client on the wrong port): no need to wait.
                self._finish(_refuse(400, "expected an HTTP/1.1 request line"))
            elif len(self._request) > MAX_REQUEST:
                self._finish(_refuse(431, f"request larger than {MAX_REQUEST} bytes"))
            return
        if end + 4 > MAX_REQUEST:
            self._finish(_refuse(431, f"request larger than {MAX_REQUEST} bytes"))
            return
        self._finish(answer(self._request[: end + 4], self._path, self._origins), end + 4)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._transport = None
        self.release()

    def _expired(self) -> None:
        self._finish(_refuse(408, "no complete upgrade request in time"))

    def _finish(self, outcome: Answer, end: int = 0) -> None:
        transport = self._transport
        assert transport is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport.write(outcome.response)
        if outcome.refusal is not None:
            self._transport = None
            self._refused(outcome.refusal)
            transport.close()
            return
        # The next protocol owns the slot from here; this one is done.
        self._release = None
        self._transport = None
        upgraded = self._upgraded(self._request[end:])
        transport.set_protocol(upgraded)
        upgraded.connection_made(transport)
