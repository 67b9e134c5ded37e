# cython: language_level=3
"""ferromq._protocol: the IO adapter between asyncio and the Rust engine.

- ``MqttProtocol`` (``MqttConnection`` + ``asyncio.BufferedProtocol``) is what a
  listener instantiates per socket. Reads go to the engine; nothing is written here.
- ``IOHub`` joins one engine to its connections and flushes once per loop tick: every
  read of a tick is handed to the engine first, then each dirty connection gets one
  write with all of its output (the lever that beats a syscall per packet), then the
  engine's events are acted on. A connection is either a socket the engine's
  ``SocketSet`` owns (plain TCP: read and written in Rust, one epoll descriptor on
  the loop for all of them, no Python object per connection) or a loop transport
  around an ``MqttProtocol`` (TLS, WebSocket, relayed hand-overs).
- ``ReceiveBuffer`` is what a connection delegates ``get_buffer``/``buffer_updated``
  to. uvloop and asyncio read one connection at a time (``get_buffer`` then
  ``recv_into`` then ``buffer_updated``, with no other connection's read in between),
  so every connection reads into one shared ``ReadArena``; only the bytes of an
  unfinished frame are kept per connection, which keeps an idle connection near the
  transport's own memory floor.

Reading less: the engine's C entry reports after each read whether it now holds the
connection's input (a publish rate spent, or the memory budget exceeded); the
connection then pauses the transport at once, before the loop reads it again, and
``IOHub.flush`` resumes it on the engine's ``ResumeReading`` event. A ``Wake`` event
asks for ``Engine.wake`` at a time (a rate refilled): ``IOHub`` sets a loop timer.
Reading stays paused while either the engine holds the input or the transport's
write buffer is above its high-water mark. Transitions only, never per message.

Per ``buffer_updated`` every complete frame in the buffer goes to the consumer
(``FrameDecoder`` or the engine) in one call; the tail of an unfinished frame is kept
as ``bytes`` and copied back to the front of the arena at the next ``get_buffer``. A
frame larger than half the arena moves the connection to a private ``bytearray`` that
doubles as needed (the decoder has already refused anything above the maximum packet
size from its length header). Buffers are never resized while lent: the transport may
still hold a view of them, so growing means allocating a new one and copying.
"""

import asyncio

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove

from ferromq._core import Close, ResumeReading, Wake

DEFAULT_ARENA_SIZE = 256 * 1024
cdef Py_ssize_t MIN_FREE = 4096


cdef extern from *:
    # The package version, given by setup.py as a C macro, so `ferromq version` can
    # show which build of this module is loaded beside which build of _core.
    """
    #ifndef FERROMQ_VERSION
    #define FERROMQ_VERSION "unknown"
    #endif
    """
    const char *FERROMQ_VERSION

__version__ = (<bytes>FERROMQ_VERSION).decode("ascii")


cdef extern from "ferromq_raw_feed.h":
    # The one declaration is the header (rust/ferromq-py/include); Cython only names
    # what it uses, and the C compiler checks those uses against the header.
    enum: FERROMQ_RAW_FEED_VERSION
    const char *FERROMQ_RAW_FEED_CAPSULE
    ctypedef struct ferromq_raw_feed:
        uint32_t version
        uint32_t size
        void *engine
        size_t (*feed)(void *, uint32_t, const uint8_t *, size_t, uint64_t, uint8_t *) noexcept


cdef ferromq_raw_feed *raw_feed_of(object capsule) except NULL:
    """The engine's C entry from an ``Engine.raw_feed()`` capsule, once its version
    and size are the ones this module was built with (else one RuntimeError naming
    both: ``_core`` and ``_protocol`` come from different builds)."""
    cdef ferromq_raw_feed *raw = <ferromq_raw_feed *>PyCapsule_GetPointer(
        capsule, FERROMQ_RAW_FEED_CAPSULE
    )
    if raw.version != FERROMQ_RAW_FEED_VERSION or raw.size != sizeof(ferromq_raw_feed):
        raise RuntimeError(
            f"ferromq._core's raw feed is version {raw.version} ({raw.size} bytes) but "
            f"ferromq._protocol was built for version {FERROMQ_RAW_FEED_VERSION} "
            f"({sizeof(ferromq_raw_feed)} bytes): rebuild both from one source"
        )
    return raw


cdef class ReadArena:
    """One read buffer shared by every connection of an event loop."""

    cdef bytearray buffer
    cdef readonly Py_ssize_t size

    def __init__(self, Py_ssize_t size=DEFAULT_ARENA_SIZE):
        if size < 2 * MIN_FREE:
            raise ValueError(f"arena size must be at least {2 * MIN_FREE} bytes")
        self.size = size
        self.buffer = bytearray(size)


cdef class ArenaReader:
    """The buffer mechanics: lend the arena (or a private buffer for a huge frame),
    hand ``consume`` the filled bytes, keep what it did not use. Subclasses say what
    consuming means."""

    cdef ReadArena _arena
    cdef bytearray _private
    cdef bytes _pending
    cdef Py_ssize_t _filled
    cdef Py_ssize_t _private_limit

    def __init__(self, ReadArena arena not None):
        self._arena = arena
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
        self._filled = held
        if held == 0:
            # A fresh view each time: a reader may release the view it was lent.
            return memoryview(self._arena.buffer)
        self._move_pending_into(self._arena.buffer)
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

    cdef Py_ssize_t consume(self, bytearray source, Py_ssize_t end) except -1:
        """Use complete frames at the front of ``source[:end]``; return bytes used."""
        raise NotImplementedError

    cdef int received(self, Py_ssize_t nbytes) except -1:
        """``nbytes`` more bytes arrived in the lent buffer: consume, then keep the rest."""
        cdef bint private = self._private is not None
        cdef bytearray source = self._private if private else self._arena.buffer
        cdef Py_ssize_t end = self._filled + nbytes
        cdef Py_ssize_t consumed = self.consume(source, end)
        if private:
            if consumed:
                memmove(<char*>source, <char*>source + consumed, end - consumed)
            self._filled = end - consumed
            if self._filled <= self._private_limit:
                self._pending = bytes(source[:self._filled])
                self._private = None
                self._filled = 0
        else:
            self._pending = bytes(source[consumed:end]) if consumed < end else b""
            self._filled = 0
        return 0


cdef class ReceiveBuffer(ArenaReader):
    """An ``ArenaReader`` whose frames go to a decoder, for tools and tests.

    ``decoder`` is a ``ferromq._core.FrameDecoder`` (anything with the same
    ``decode_buffer(buffer) -> (packets, consumed, error)`` method works).
    ``buffer_updated`` returns ``(packets, error)``; after an error the connection
    must be closed, and the packets decoded before it are still returned.
    """

    cdef object _decode_buffer
    cdef object _packets
    cdef object _error

    def __init__(self, decoder, ReadArena arena not None):
        ArenaReader.__init__(self, arena)
        self._decode_buffer = decoder.decode_buffer

    cdef Py_ssize_t consume(self, bytearray source, Py_ssize_t end) except -1:
        cdef Py_ssize_t consumed
        self._packets, consumed, self._error = self._decode_buffer(memoryview(source)[:end])
        return end if self._error is not None else consumed

    cpdef tuple buffer_updated(self, Py_ssize_t nbytes):
        self.received(nbytes)
        return self._packets, self._error


cdef class IOHub:
    """Joins one engine to its connections: each dirty connection is written once per
    loop tick, after every read of that tick has been handed to the engine.

    ``sockets`` is the engine's ``SocketSet``: its epoll descriptor is watched on the
    loop from ``start`` to ``close_all``. ``on_event`` receives the engine events
    Python decides (``Authenticate``, ...); ``Close``, ``ResumeReading`` and ``Wake``
    events are handled here, after the output they follow. ``on_sockets_left``, when
    set, is given the owned sockets that left the set since the last call: those
    that ended and those routed to another shard (``SocketSet.take_closed`` and
    ``take_handovers``; the listeners give slots back and send hand-overs). ``after_flush``, when set,
    runs once at the end of each flush: a shard's bus pump sends the tick's records to
    the other shards there.
    """

    cdef readonly object engine
    cdef readonly object raw_feed
    cdef ferromq_raw_feed *_raw
    cdef readonly ReadArena arena
    cdef object _loop
    cdef object _on_event
    cdef dict _transports
    cdef dict _connections
    cdef dict _peers
    cdef bint _flush_scheduled
    cdef readonly Py_ssize_t write_high_water
    cdef readonly object sockets
    cdef bint _watching
    cdef public object after_flush
    cdef public object on_sockets_left

    def __init__(
        self, engine, loop, ReadArena arena not None, on_event, Py_ssize_t write_high_water,
        sockets not None,
    ):
        self.engine = engine
        self.sockets = sockets
        self._watching = False
        self.on_sockets_left = None
        self.raw_feed = engine.raw_feed()
        self._raw = raw_feed_of(self.raw_feed)
        self.arena = arena
        self._loop = loop
        self._on_event = on_event
        self._transports = {}
        self._connections = {}
        self._peers = {}
        self._flush_scheduled = False
        self.write_high_water = write_high_water
        self.after_flush = None

    cpdef long long now(self):
        """Engine time: the loop's monotonic clock in milliseconds."""
        return <long long>(self._loop.time() * 1000.0)

    @property
    def connections(self):
        return len(self._transports) + self.sockets.connections

    def start(self):
        """Watch the owned sockets on the loop."""
        self._loop.add_reader(self.sockets.fileno(), self._poll)
        self._watching = True

    def _poll(self):
        self.sockets.poll(self.now())
        self._sockets_left()
        self.schedule_flush()

    cdef int _sockets_left(self) except -1:
        closed = self.sockets.take_closed()
        handovers = self.sockets.take_handovers()
        if (closed or handovers) and self.on_sockets_left is not None:
            self.on_sockets_left(closed, handovers)
        return 0

    cpdef void schedule_flush(self):
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self):
        """Write every dirty connection once, then act on the engine's events."""
        cdef object transport
        cdef long long now = self.now()
        self._flush_scheduled = False
        for conn, data in self.sockets.flush(now):
            transport = self._transports.get(conn)
            if transport is not None:
                transport.write(data)
        cdef MqttConnection connection
        for event in self.engine.take_events():
            kind = type(event)
            if kind is Close:
                transport = self._transports.get(event.conn)
                if transport is not None:
                    transport.close()
                else:
                    self.sockets.close(event.conn, now)
            elif kind is ResumeReading:
                connection = self._connections.get(event.conn)
                if connection is not None:
                    connection.set_input_held(False)
                else:
                    self.sockets.resume_reading(event.conn, now)
            elif kind is Wake:
                self._loop.call_at(event.at / 1000.0, self._wake)
            else:
                self._on_event(event)
        self._sockets_left()
        if self.after_flush is not None:
            self.after_flush()
        if self.engine.has_output():
            self.schedule_flush()

    def _wake(self):
        self.engine.wake(self.now())
        self.flush()

    def peer(self, conn):
        """The client's address of a connection: the one its PROXY header named, else
        the socket's peer; None once it is gone."""
        transport = self._transports.get(conn)
        if transport is None:
            return self.sockets.peer(conn)
        peer = self._peers.get(conn)
        return transport.get_extra_info("peername") if peer is None else peer

    def close_all(self):
        """Close every connection and stop watching the owned sockets."""
        for transport in list(self._transports.values()):
            transport.close()
        if self._watching:
            self._loop.remove_reader(self.sockets.fileno())
            self._watching = False
        self.sockets.close_all(self.now())
        self._sockets_left()


cdef class EngineReader(ArenaReader):
    """An ``ArenaReader`` that feeds one engine connection through the engine's C
    entry (``Engine.raw_feed``): per read, one C call and no Python object."""

    cdef ferromq_raw_feed *_raw
    cdef unsigned int _conn
    cdef IOHub _hub
    cdef uint8_t held

    def __init__(self, IOHub hub not None, unsigned int conn):
        ArenaReader.__init__(self, hub.arena)
        self._hub = hub
        # The hub holds the capsule (and so the engine) for as long as this reader,
        # and checked its version when it took it.
        self._raw = hub._raw
        self._conn = conn
        self.held = 0

    cdef Py_ssize_t consume(self, bytearray source, Py_ssize_t end) except -1:
        return <Py_ssize_t>self._raw.feed(
            self._raw.engine, self._conn, <const uint8_t *><char *>source,
            <size_t>end, <uint64_t>self._hub.now(), &self.held
        )

    cpdef buffer_updated(self, Py_ssize_t nbytes):
        self.received(nbytes)


cdef class MqttConnection:
    """The protocol core of one MQTT connection: reads go to the engine through a
    ``ReceiveBuffer`` on the hub's shared arena; writes happen in ``IOHub.flush``.
    Backpressure: while the transport's write buffer is above the high-water mark the
    engine queues this connection's deliveries and reading from it pauses; reading
    also pauses while the engine holds the connection's input (see the module).

    ``framing`` is how the bytes carry MQTT (``"mqtt"``, or ``"websocket"`` after an
    upgrade: the engine deframes, this class does not change); ``peer`` is the client's
    address when a PROXY header named it, which ``IOHub.peer`` then reports."""

    cdef IOHub _hub
    cdef object _transport
    cdef EngineReader _receive
    cdef unsigned int _conn
    cdef bint _write_paused
    cdef bint _input_held
    cdef str _framing
    cdef object _peer

    def __init__(self, IOHub hub not None, str framing="mqtt", peer=None):
        self._hub = hub
        self._write_paused = False
        self._input_held = False
        self._framing = framing
        self._peer = peer

    @property
    def conn(self):
        """The engine's id for this connection (valid from ``connection_made``)."""
        return self._conn

    def connection_made(self, transport):
        hub = self._hub
        self._transport = transport
        self._conn = hub.engine.open(hub.now(), self._framing)
        # One int object keys every dict of the hub (each conversion makes a new one).
        key = self._conn
        hub._transports[key] = transport
        hub._connections[key] = self
        if self._peer is not None:
            hub._peers[key] = self._peer
        transport.set_write_buffer_limits(high=hub.write_high_water)
        self._receive = EngineReader(hub, self._conn)

    def get_buffer(self, Py_ssize_t sizehint):
        return self._receive.get_buffer(sizehint)

    def buffer_updated(self, Py_ssize_t nbytes):
        self._receive.buffer_updated(nbytes)
        if self._receive.held and not self._input_held:
            self.set_input_held(True)
        self._hub.schedule_flush()

    cdef int set_input_held(self, bint held) except -1:
        self._input_held = held
        return self._update_reading()

    cdef int _update_reading(self) except -1:
        if self._transport is None or self._transport.is_closing():
            return 0
        if self._write_paused or self._input_held:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()
        return 0

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        hub = self._hub
        hub.engine.connection_lost(self._conn, hub.now())
        if hub._transports.get(self._conn) is self._transport:
            del hub._transports[self._conn]
            hub._peers.pop(self._conn, None)
        if hub._connections.get(self._conn) is self:
            del hub._connections[self._conn]
        hub.schedule_flush()

    def pause_writing(self):
        self._hub.engine.set_writable(self._conn, False, self._hub.now())
        self._write_paused = True
        self._update_reading()

    def resume_writing(self):
        self._hub.engine.set_writable(self._conn, True, self._hub.now())
        self._write_paused = False
        self._update_reading()
        self._hub.schedule_flush()


class MqttProtocol(MqttConnection, asyncio.BufferedProtocol):
    """What ``loop.create_server`` instantiates: the Cython core plus the asyncio
    protocol interface, so uvloop and asyncio both treat it as buffered.

    No ``__dict__`` (asyncio's protocol classes have empty slots too): a subclass that
    keeps attributes declares its own ``__slots__``, as an idle connection keeps its
    protocol for its whole life (``docs/memory.md``)."""

    __slots__ = ()
