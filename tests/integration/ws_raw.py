"""A minimal blocking WebSocket client over a real socket, for tests that must choose
exactly how MQTT is cut into frames, and send wrong frames: the opening handshake by
hand (RFC 6455 §4.1), masked frames built here (§5.2), server frames read back."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import time
from typing import Any

from ferromq._core import FrameDecoder, encode

__all__ = ["WsRawClient", "client_frame", "upgrade_request"]


def upgrade_request(
    host: str, path: str = "/mqtt", protocol: str | None = "mqtt", origin: str | None = None
) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if protocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    if origin is not None:
        lines.append(f"Origin: {origin}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def client_frame(
    payload: bytes, opcode: int = 0x2, fin: bool = True, mask: bool = True, first: int = 0
) -> bytes:
    """One client frame; ``first`` ORs extra bits into the first byte (reserved bits)."""
    head = bytes([(0x80 if fin else 0) | first | opcode])
    mask_bit = 0x80 if mask else 0
    n = len(payload)
    if n < 126:
        head += bytes([mask_bit | n])
    elif n <= 0xFFFF:
        head += bytes([mask_bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class WsRawClient:
    """Connects and upgrades (raising AssertionError with the answer if refused)."""

    def __init__(
        self,
        host: str,
        port: int,
        version: int = 4,
        tls: ssl.SSLContext | None = None,
        preamble: bytes = b"",
        early: bytes = b"",
        **upgrade: Any,
    ) -> None:
        """``preamble`` goes before TLS (a PROXY header), ``early`` right behind the
        upgrade request, in the same write (frames sent before the 101 came back)."""
        self.version = version
        self.sock = socket.create_connection((host, port), timeout=5.0)
        self.sock.sendall(preamble)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.sock.sendall(upgrade_request(host, **upgrade) + early)
        self.buffer = b""
        head = self._read_until(b"\r\n\r\n")
        self.response = head.decode("latin-1")
        assert self.response.startswith("HTTP/1.1 101 "), self.response
        self.decoder = FrameDecoder(protocol_version=version)
        self.stream = b""
        self.pending: list[dict[str, Any]] = []

    def _read_until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed by broker after {self.buffer!r}")
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(end)
        return head + end

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *packets: dict[str, Any]) -> None:
        """``packets`` encoded, in one binary frame."""
        self.send_raw(client_frame(b"".join(encode(p, self.version) for p in packets)))

    def connect(self, client_id: str) -> dict[str, Any]:
        self.send({"type": "connect", "protocol_version": self.version, "client_id": client_id})
        connack = self.recv()
        assert connack["type"] == "connack", connack
        return connack

    def recv_frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        """The next server frame as (opcode, payload); checks it is final and unmasked."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self._parse_frame()
            if frame is not None:
                return frame
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by broker")
            self.buffer += data

    def _parse_frame(self) -> tuple[int, bytes] | None:
        if len(self.buffer) < 2:
            return None
        first, second = self.buffer[0], self.buffer[1]
        assert first & 0xF0 == 0x80 and second & 0x80 == 0, self.buffer[:2]
        length, at = second & 0x7F, 2
        if length == 126:
            if len(self.buffer) < 4:
                return None
            (length,), at = struct.unpack("!H", self.buffer[2:4]), 4
        elif length == 127:
            if len(self.buffer) < 10:
                return None
            (length,), at = struct.unpack("!Q", self.buffer[2:10]), 10
        if len(self.buffer) < at + length:
            return None
        payload = self.buffer[at : at + length]
        self.buffer = self.buffer[at + length :]
        return first & 0x0F, payload

    def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next MQTT packet from the broker's binary frames."""
        while not self.pending:
            opcode, payload = self.recv_frame(timeout)
            assert opcode == 0x2, (opcode, payload)
            self.stream += payload
            packets, consumed, error = self.decoder.decode_buffer(self.stream)
            self.stream = self.stream[consumed:]
            if error is not None:
                raise error
            self.pending.extend(packets)
        return self.pending.pop(0)

    def close_status(self, timeout: float = 5.0) -> int:
        """Read to the broker's close frame, skipping data frames; its status."""
        while True:
            opcode, payload = self.recv_frame(timeout)
            if opcode == 0x8:
                (status,) = struct.unpack("!H", payload[:2])
                return int(status)

    def wait_closed(self, timeout: float = 5.0) -> None:
        """Return once the broker has closed the socket (after anything it sent);
        TimeoutError if it does not."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, ssl.SSLEOFError):
            pass
