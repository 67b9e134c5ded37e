"""Write the committed seed corpus of the cargo-fuzz `decode` target.

Each seed is a selector byte (protocol version in the low two bits, chunk size in the
rest; see fuzz_targets/decode.rs) followed by a stream of valid packets encoded by
ferromq._core. Run after changing the codec: python scripts/make_fuzz_corpus.py
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ferromq._core import encode_many

CORPUS = Path(__file__).resolve().parent.parent / "rust/ferromq-core/fuzz/corpus/decode"

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


def main() -> None:
    CORPUS.mkdir(parents=True, exist_ok=True)
    for selector_version, version in ((0, 4), (1, 3), (2, 4), (3, 5)):
        for chunk in (1, 7, 63):
            for stream in streams(version):
                wire = encode_many(stream, version)
                seed = bytes([selector_version | (chunk << 2)]) + wire
                name = hashlib.sha1(seed).hexdigest()[:16]
                (CORPUS / name).write_bytes(seed)


if __name__ == "__main__":
    main()
