"""The MQTT codec's public Python API, re-exported from the compiled ``_core``.

Packets are dicts with a ``"type"`` key and the specification's field names;
properties are ``(name, value)`` pairs in wire order. Decode errors are
``CodecError`` subclasses carrying ``reason_code`` (the reason code a broker answers
with) and ``detail``.
"""

from ferromq._core import (
    MAX_PACKET_SIZE,
    CodecError,
    EncodeError,
    FrameDecoder,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    TopicFilterInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
    encode,
    encode_many,
    reason_code_name,
)

__all__ = [
    "MAX_PACKET_SIZE",
    "CodecError",
    "EncodeError",
    "FrameDecoder",
    "MalformedPacket",
    "PacketTooLarge",
    "ProtocolError",
    "TopicFilterInvalid",
    "TopicNameInvalid",
    "UnsupportedProtocolVersion",
    "encode",
    "encode_many",
    "reason_code_name",
]
