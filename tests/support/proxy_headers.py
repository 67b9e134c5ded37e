"""PROXY protocol headers built by hand, as a load balancer in front of a
``proxy_protocol = true`` listener sends them: v1 (text) and v2 (binary, with a TLV)."""

from __future__ import annotations

import socket
import struct

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(source: str, port: int) -> bytes:
    family = "TCP6" if ":" in source else "TCP4"
    destination = "::1" if family == "TCP6" else "127.0.0.1"
    return f"PROXY {family} {source} {destination} {port} 1883\r\n".encode()


def v2(source: str, port: int, command: int = 0x1) -> bytes:
    """A v2 PROXY (or LOCAL) header over TCP, with a TLV after the addresses."""
    ip = socket.inet_pton(socket.AF_INET6 if ":" in source else socket.AF_INET, source)
    family = 0x21 if len(ip) == 16 else 0x11
    body = ip + bytes(len(ip)) + struct.pack("!HH", port, 1883) + b"\x04\x00\x01\x00"
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body
