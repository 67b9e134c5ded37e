"""A minimal blocking MQTT client over a real socket, built on ferromq's own codec,
for conformance tests that must send exact (and wrong) bytes."""

from __future__ import annotations

import select
import socket
import ssl
import time
from typing import Any, Protocol

from ferromq._core import FrameDecoder, encode


class RawClient:
    def __init__(
        self,
        host: str,
        port: int,
        version: int = 4,
        timeout: float = 5.0,
        tls: ssl.SSLContext | None = None,
        source: str | None = None,
        preamble: bytes = b"",
    ) -> None:
        """``source``: the local address to connect from (any 127.x.y.z on loopback);
        ``preamble`` goes first, before TLS (a PROXY protocol header)."""
        self.version = version
        self.sock = socket.create_connection(
            (host, port), timeout=timeout, source_address=None if source is None else (source, 0)
        )
        self.sock.sendall(preamble)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.decoder = FrameDecoder(protocol_version=version)
        self.buffer = b""
        self.pending: list[dict[str, Any]] = []

    def send(self, packet: dict[str, Any]) -> None:
        self.sock.sendall(encode(packet, self.version))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(
        self, client_id: str, clean: bool = True, connack_timeout: float = 5.0, **fields: Any
    ) -> dict[str, Any]:
        """CONNECT and return the CONNACK, waiting ``connack_timeout`` seconds for it."""
        self.send(
            {
                "type": "connect",
                "protocol_version": self.version,
                "client_id": client_id,
                "clean_start": clean,
                **fields,
            }
        )
        connack = self.recv(connack_timeout)
        assert connack["type"] == "connack", connack
        return connack

    def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next packet; raises TimeoutError or ConnectionError."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no packet")
            self.sock.settimeout(remaining)
            self._read()
        return self.pending.pop(0)

    def poll(self) -> list[dict[str, Any]]:
        """Every packet that has arrived, without waiting for more; raises
        ConnectionError once the broker is gone."""
        while select.select([self.sock], [], [], 0)[0]:
            self._read()
        got, self.pending = self.pending, []
        return got

    def _read(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("closed by broker")
        self.buffer += data
        packets, consumed, error = self.decoder.decode_buffer(self.buffer)
        self.buffer = self.buffer[consumed:]
        if error is not None:
            raise error
        self.pending.extend(packets)

    def expect_closed(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Read until the broker closes the socket; returns what came before."""
        got = []
        while True:
            try:
                got.append(self.recv(timeout))
            except ConnectionError:
                return got

    def close(self) -> None:
        self.sock.close()


class _Client(Protocol):
    def send(self, packet: dict[str, Any]) -> None: ...
    def recv(self, timeout: float = 5.0) -> dict[str, Any]: ...


def sys_value_reaches(client: _Client, topic: str, at_least: int) -> None:
    """Subscribe the connected ``client`` to the $SYS ``topic`` and wait until its value
    reaches ``at_least`` (within 10 of the broker's $SYS intervals)."""
    client.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": topic, "qos": 0}]})
    assert client.recv()["type"] == "suback"
    values = [int(bytes(client.recv()["payload"]))]
    while values[-1] < at_least:
        assert len(values) < 10, f"{topic}: {values}"
        values.append(int(bytes(client.recv()["payload"])))
