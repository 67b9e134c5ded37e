"""The client side of MQTT over WebSocket for a bridge's first packets (RFC 6455).

A bridge to ``ws://`` or ``wss://`` runs the HTTP upgrade here (:func:`upgrade_request`,
:class:`ClientFrames` reading the response), then its CONNECT and SUBSCRIBE go out in
masked binary frames (:meth:`ClientFrames.frame`) and the remote broker's frames,
unmasked, are read back into the MQTT byte stream (:meth:`ClientFrames.feed`). Once the
handshake is over the engine takes the connection as the client side of WebSocket
(``Engine.open_bridge(..., websocket_seed=...)``, ``transport/websocket.rs``): what was
read past the handshake is handed on as WebSocket bytes (:meth:`ClientFrames.rest`).
Only the handshake runs here, never a message.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Final

__all__ = ["ClientFrames", "WebSocketRefused", "upgrade_request"]

_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_BINARY, _CONTINUATION, _CLOSE, _PING, _PONG = 0x2, 0x0, 0x8, 0x9, 0xA
_FIN: Final = 0x80
_MAX_RESPONSE: Final = 16 * 1024


class WebSocketRefused(Exception):
    """The remote did not upgrade, or broke the protocol; the text says how."""


def upgrade_request(host: str, port: int, path: str) -> tuple[bytes, bytes]:
    """The HTTP upgrade request for ``path`` (subprotocol ``mqtt``) and the
    ``Sec-WebSocket-Accept`` value a server must answer it with."""
    key = base64.b64encode(os.urandom(16))
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
    request = (
        f"GET {path} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key.decode()}\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: mqtt\r\n\r\n"
    ).encode()
    return request, accept


class ClientFrames:
    """One connection's WebSocket client state until the engine takes it: the
    upgrade's response, then the server's frames."""

    def __init__(self, accept: bytes) -> None:
        self._accept = accept
        self.upgraded = False
        """The server answered the upgrade (101, the right accept value)."""
        self._raw = bytearray()
        self.replies = bytearray()
        """Frames to send back (pongs) before anything else."""

    def feed(self, data: bytes) -> bytes:
        """The MQTT bytes in ``data`` (after the upgrade's response): every whole
        frame's payload. Raises :class:`WebSocketRefused`."""
        self._raw += data
        if not self.upgraded:
            end = self._raw.find(b"\r\n\r\n")
            if end < 0:
                if len(self._raw) > _MAX_RESPONSE:
                    raise WebSocketRefused("the upgrade's response has no end")
                return b""
            self._check_response(bytes(self._raw[:end]).decode("latin-1"))
            del self._raw[: end + 4]
            self.upgraded = True
        mqtt = bytearray()
        while (frame := self._next_frame()) is not None:
            opcode, payload = frame
            if opcode in (_BINARY, _CONTINUATION):
                mqtt += payload
            elif opcode == _PING:
                self.replies += self.frame(payload, _PONG)
            elif opcode == _CLOSE:
                raise WebSocketRefused("the remote closed the WebSocket")
            elif opcode != _PONG:
                raise WebSocketRefused(f"unexpected WebSocket frame, opcode {opcode}")
        return bytes(mqtt)

    def rest(self, mqtt: bytes) -> bytes:
        """What the engine reads next, as WebSocket bytes: ``mqtt`` (read past the
        handshake's packets) in one unmasked frame, then the unfinished frame."""
        framed = _header(_BINARY, len(mqtt)) + mqtt if mqtt else b""
        return framed + bytes(self._raw)

    @staticmethod
    def frame(payload: bytes, opcode: int = _BINARY) -> bytes:
        """A client's frame: final, masked with a fresh key."""
        key = os.urandom(4)
        masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
        return _header(opcode, len(payload), masked=True) + key + masked

    def _check_response(self, head: str) -> None:
        status, *lines = head.split("\r\n")
        parts = status.split(" ", 2)
        if len(parts) < 2 or parts[1] != "101":
            raise WebSocketRefused(f"the upgrade was refused: {status!r}")
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines)
        }
        if fields.get("sec-websocket-accept", "").encode() != self._accept:
            raise WebSocketRefused("the upgrade's Sec-WebSocket-Accept is wrong")
        protocol = fields.get("sec-websocket-protocol")
        if protocol is not None and protocol != "mqtt":
            raise WebSocketRefused(f"the remote chose subprotocol {protocol!r}, not mqtt")

    def _next_frame(self) -> tuple[int, bytes] | None:
        """The first whole frame of ``_raw`` (taken out of it), or None."""
        raw = self._raw
        if len(raw) < 2:
            return None
        opcode, second = raw[0] & 0x0F, raw[1]
        if second & 0x80:
            raise WebSocketRefused("a masked frame from the server")
        length, at = second & 0x7F, 2
        if length == 126:
            if len(raw) < 4:
                return None
            (length,), at = struct.unpack("!H", raw[2:4]), 4
        elif length == 127:
            if len(raw) < 10:
                return None
            (length,), at = struct.unpack("!Q", raw[2:10]), 10
        if len(raw) < at + length:
            return None
        payload = bytes(raw[at : at + length])
        del raw[: at + length]
        return opcode, payload


def _header(opcode: int, length: int, masked: bool = False) -> bytes:
    mask = 0x80 if masked else 0
    if length < 126:
        return bytes((_FIN | opcode, mask | length))
    if length < 1 << 16:
        return bytes((_FIN | opcode, mask | 126)) + struct.pack("!H", length)
    return bytes((_FIN | opcode, mask | 127)) + struct.pack("!Q", length)
