"""Write the committed seed corpora of the cargo-fuzz targets.

- ``decode``: a selector byte (protocol version in the low two bits, chunk size in the
  rest; see fuzz_targets/decode.rs) followed by a stream of valid packets encoded by
  ferromq._core.
- ``websocket``: a chunk-size byte, then client frames (masked) carrying those
  streams cut into frames of several sizes, fragmented messages, ping, pong and close
  frames, and a few refused frames (fuzz_targets/websocket.rs).
- ``proxy_header``: PROXY protocol v1 and v2 headers of every family and command,
  followed by the start of a client's stream (fuzz_targets/proxy_header.rs).

Run after changing the codec or the transports: python scripts/make_fuzz_corpus.py
"""

from __future__ import annotations

import hashlib
import socket
import struct
from pathlib import Path
from typing import Any

from ferromq._core import encode_many

CORPORA = Path(__file__).resolve().parent.parent / "rust/ferromq-core/fuzz/corpus"
CORPUS = CORPORA / "decode"
MASK = b"\x5a\x01\xc3\x7e"

CONNECT = {
    "type": "connect",
    "client_id": "fuzz",
    "keep_alive": 30,
    "username": "u",
    "password": b"p",
    "will": {"topic": "w/t", "payload": b"bye", "qos": 1, "retain": True},
}


def streams(version: int) -> list[list[dict[str, Any]]]:
    v5 = version == 5
    props = [("user_property", ("k", "v")), ("message_expiry_interval", 60)] if v5 else []
    publish = {
        "type": "publish",
        "topic": "site/42/device/1234/telemetry",
        "payload": bytes(range(64)),
        "qos": 1,
        "packet_id": 7,
        "properties": props,
    }
    ack_props = [("reason_string", "why")] if v5 else []
    packets: list[dict[str, Any]] = [
        {**CONNECT, "protocol_version": version},
        {"type": "connack", "session_present": True},
        publish,
        {**publish, "qos": 2, "retain": True, "dup": True},
        {"type": "puback", "packet_id": 7, "properties": ack_props},
        {"type": "pubrec", "packet_id": 8},
        {"type": "pubrel", "packet_id": 8},
        {"type": "pubcomp", "packet_id": 8},
        {
            "type": "subscribe",
            "packet_id": 3,
            "filters": [{"filter": "a/+/#", "qos": 2}, {"filter": "$share/g/b", "qos": 1}],
        },
        {"type": "suback", "packet_id": 3, "reason_codes": [0, 1, 2]},
        {"type": "unsubscribe", "packet_id": 4, "filters": ["a/+/#"]},
        {"type": "unsuback", "packet_id": 4, "reason_codes": [0] if v5 else []},
        {"type": "pingreq"},
        {"type": "pingresp"},
        {"type": "disconnect"},
    ]
    if v5:
        packets.append(
            {"type": "auth", "reason_code": 0x18, "properties": [("authentication_method", "X")]}
        )
    return [packets[:1], packets] + [[packet] * 3 for packet in packets[1:]]


def write_seed(target: str, seed: bytes) -> None:
    directory = CORPORA / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(seed).hexdigest()[:16]).write_bytes(seed)


def ws_frame(payload: bytes, opcode: int = 0x2, fin: bool = True) -> bytes:
    """A masked client frame (RFC 6455 §5.2), the length in its minimal form."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n <= 0xFFFF:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


def ws_streams() -> list[bytes]:
    wire = encode_many(streams(4)[1], 4)
    cut = [ws_frame(wire[i : i + 40]) for i in range(0, len(wire), 40)]
    fragmented = (
        ws_frame(wire[:10], fin=False)
        + ws_frame(b"hi", opcode=0x9)
        + ws_frame(wire[10:20], opcode=0x0, fin=False)
        + ws_frame(wire[20:], opcode=0x0)
    )
    return [
        ws_frame(wire),
        b"".join(cut),
        fragmented,
        ws_frame(wire * 60),  # a 16-bit length
        ws_frame(b"") + ws_frame(b"x", opcode=0xA) + ws_frame(b"\x03\xe8bye", opcode=0x8),
        ws_frame(wire[:5]) + ws_frame(b"text", opcode=0x1),
        ws_frame(wire[:5]) + bytes([0x82, 0x05]) + b"plain",  # unmasked
        bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 33) + MASK,  # too large
    ]


def proxy_headers() -> list[bytes]:
    def v2(command: int, family: int, body: bytes) -> bytes:
        signature = b"\r\n\r\n\x00\r\nQUIT\n"
        return signature + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body

    ip4 = socket.inet_pton(socket.AF_INET, "192.0.2.7") + bytes(4) + struct.pack("!HH", 1, 2)
    ip6 = socket.inet_pton(socket.AF_INET6, "2001:db8::7") + bytes(16) + struct.pack("!HH", 1, 2)
    return [
        b"PROXY TCP4 192.0.2.7 10.0.0.1 50312 1883\r\n",
        b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 1883\r\n",
        b"PROXY UNKNOWN\r\n",
        b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n",
        v2(1, 0x11, ip4),
        v2(1, 0x21, ip6 + b"\x04\x00\x01\x00"),
        v2(1, 0x31, bytes(216)),
        v2(0, 0x00, b""),
        v2(1, 0x12, ip4),
    ]


def main() -> None:
    for selector_version, version in ((0, 4), (1, 3), (2, 4), (3, 5)):
        for chunk in (1, 7, 63):
            for stream in streams(version):
                wire = encode_many(stream, version)
                write_seed("decode", bytes([selector_version | (chunk << 2)]) + wire)
    for chunk in (1, 5, 200):
        for stream in ws_streams():
            write_seed("websocket", bytes([chunk]) + stream)
    connect = encode_many(streams(4)[0], 4)
    for header in proxy_headers():
        write_seed("proxy_header", header + connect)


if __name__ == "__main__":
    main()
