from typing import Any, Protocol

from typing_extensions import disjoint_base

from ferromq._core import CodecError

DEFAULT_ARENA_SIZE: int

class _Decoder(Protocol):
    def decode_buffer(
        self, data: memoryview, /
    ) -> tuple[list[dict[str, Any]], int, CodecError | None]: ...

@disjoint_base
class ReadArena:
    size: int
    def __init__(self, size: int = ...) -> None: ...

@disjoint_base
class ReceiveBuffer:
    def __init__(self, decoder: _Decoder, arena: ReadArena) -> None: ...
    @property
    def pending(self) -> int: ...
    def get_buffer(self, sizehint: int) -> memoryview: ...
    def buffer_updated(self, nbytes: int) -> tuple[list[dict[str, Any]], CodecError | None]: ...
