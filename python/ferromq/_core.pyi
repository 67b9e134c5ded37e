from typing import Any, Final, TypeAlias, final

from typing_extensions import Buffer

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
    "__version__",
    "encode",
    "encode_many",
    "reason_code_name",
]

__version__: Final[str]
MAX_PACKET_SIZE: Final[int]

_Packet: TypeAlias = dict[str, Any]

class CodecError(ValueError):
    reason_code: int
    detail: str

class MalformedPacket(CodecError): ...
class ProtocolError(CodecError): ...
class UnsupportedProtocolVersion(CodecError): ...
class TopicFilterInvalid(CodecError): ...
class TopicNameInvalid(CodecError): ...
class PacketTooLarge(CodecError): ...
class EncodeError(ValueError): ...

@final
class FrameDecoder:
    def __new__(
        cls, max_packet_size: int = ..., protocol_version: int | None = None
    ) -> FrameDecoder: ...
    @property
    def protocol_version(self) -> int | None: ...
    @property
    def max_packet_size(self) -> int: ...
    def decode_buffer(self, data: Buffer) -> tuple[list[_Packet], int, CodecError | None]: ...

def encode(packet: _Packet, protocol_version: int = 4) -> bytes: ...
def encode_many(packets: list[_Packet], protocol_version: int = 4) -> bytes: ...
def reason_code_name(code: int) -> str: ...
