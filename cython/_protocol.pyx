# cython: language_level=3
"""ferromq._protocol: the IO adapter between asyncio and the Rust engine.

ReceiveBuffer is what a connection's ``asyncio.BufferedProtocol`` delegates
``get_buffer``/``buffer_updated`` to. uvloop and asyncio read one connection at a time
(``get_buffer`` then ``recv_into`` then ``buffer_updated``, with no other connection's
read in between), so every connection can read into one shared ``ReadArena``; only the
bytes of an unfinished frame are kept per connection, which keeps an idle connection
near the transport's own memory floor.

Per ``buffer_updated`` every complete frame in the buffer goes to the Rust decoder in
one call; the tail of an unfinished frame is kept as ``bytes`` and copied back to the
front of the arena at the next ``get_buffer``. A frame larger than half the arena
moves the connection to a private ``bytearray`` that doubles as needed (the decoder has
already refused anything above the maximum packet size from its length header).
Buffers are never resized while lent: the transport may still hold a view of them, so
growing means allocating a new one and copying.
"""

from libc.string cimport memcpy, memmove

DEFAULT_ARENA_SIZE = 256 * 1024
cdef Py_ssize_t MIN_FREE = 4096


cdef class ReadArena:
    """One read buffer shared by every connection of an event loop."""

    cdef bytearray buffer
    cdef readonly Py_ssize_t size

    def __init__(self, Py_ssize_t size=DEFAULT_ARENA_SIZE):
        if size < 2 * MIN_FREE:
            raise ValueError(f"arena size must be at least {2 * MIN_FREE} bytes")
        self.size = size
        self.buffer = bytearray(size)


cdef class ReceiveBuffer:
    """Lends read buffers and hands every complete frame to a decoder in one call.

    ``decoder`` is a ``ferromq._core.FrameDecoder`` (anything with the same
    ``decode_buffer(buffer) -> (packets, consumed, error)`` method works).
    ``buffer_updated`` returns ``(packets, error)``; after an error the connection
    must be closed, and the packets decoded before it are still returned.
    """

    cdef ReadArena _arena
    cdef object _decode_buffer
    cdef bytearray _private
    cdef bytes _pending
    cdef Py_ssize_t _filled
    cdef Py_ssize_t _private_limit

    def __init__(self, decoder, ReadArena arena not None):
        self._arena = arena
        self._decode_buffer = decoder.decode_buffer
        self._private = None
        self._pending = b""
        self._filled = 0
        self._private_limit = arena.size // 2

    @property
    def pending(self):
        """Bytes of an unfinished frame held for this connection."""
        return self._filled if self._private is not None else len(self._pending)

    cpdef object get_buffer(self, Py_ssize_t sizehint):
        cdef Py_ssize_t held = len(self._pending)
        if self._private is not None:
            return self._lend_private(sizehint)
        if held > self._private_limit:
            self._private = bytearray(max(2 * held, self._arena.size))
            self._move_pending_into(self._private)
            return self._lend_private(sizehint)
        if held:
            self._move_pending_into(self._arena.buffer)
        self._filled = held
        return memoryview(self._arena.buffer)[held:]

    cdef object _lend_private(self, Py_ssize_t sizehint):
        cdef Py_ssize_t want = max(sizehint, MIN_FREE)
        cdef bytearray grown
        if len(self._private) - self._filled < want:
            grown = bytearray(max(2 * len(self._private), self._filled + want))
            memcpy(<char*>grown, <char*>self._private, self._filled)
            self._private = grown
        return memoryview(self._private)[self._filled:]

    cdef void _move_pending_into(self, bytearray target):
        cdef Py_ssize_t held = len(self._pending)
        memcpy(<char*>target, <char*>self._pending, held)
        self._pending = b""
        self._filled = held

    cpdef tuple buffer_updated(self, Py_ssize_t nbytes):
        cdef bint private = self._private is not None
        cdef bytearray source = self._private if private else self._arena.buffer
        cdef Py_ssize_t end = self._filled + nbytes
        cdef Py_ssize_t consumed
        packets, consumed, error = self._decode_buffer(memoryview(source)[:end])
        if error is not None:
            self._filled = 0
            self._pending = b""
            self._private = None
            return packets, error
        if private:
            if consumed:
                memmove(<char*>source, <char*>source + consumed, end - consumed)
            self._filled = end - consumed
            if self._filled <= self._private_limit:
                self._pending = bytes(source[:self._filled])
                self._private = None
                self._filled = 0
        else:
            self._pending = bytes(source[consumed:end])
            self._filled = 0
        return packets, None
