"""Client-id affinity (issue 16, docs/shards.md): a new connection is served by the shard
that owns its client id, so a session only ever lives on its owner shard and takeover,
wills and the offline seam stay the engine's own.

Every shard accepts on every listener (SO_REUSEPORT). In a node of more than one shard
a ``tcp`` listener's socket is routed by the engine's socket set in Rust
(``rust/ferromq-io``); on ``tls``, ``ws`` and ``wss`` listeners the connection's first
protocol after its preamble (PROXY header, TLS handshake, WebSocket upgrade) is a
:class:`Router`. Both collect bytes until :func:`ferromq._core.connect_owner` (one
decision, ``ferromq_core::bus::connect_owner``) names the CONNECT's owner, the
:func:`ferromq._core.shard_of` of its client id. Then one of three ways
(:mod:`ferromq.shard.routing` decides, :mod:`ferromq.listener` serves):

- **Here.** The owner is this shard, the client id is empty (the engine assigns one this
  shard owns), or the bytes are not a well-formed CONNECT (the engine refuses them with
  the reason it gives on one shard): the transport switches to the MQTT protocol, which
  is given the bytes read so far before any other.
- **Socket hand-over** (``tcp`` listeners, with or without PROXY, when the bytes read
  so far fit one message): the socket set gives the socket up and its descriptor goes to
  the owner in one SCM_RIGHTS message on ``handover_send[owner]``
  (:class:`HandoverSender`) with a :class:`Handed` header: the listener, the framing,
  the client's address (the PROXY header's on a proxy listener, which is why those need
  no relay) and the bytes read so far. Its admission slot is given back here. The owner
  (:class:`HandoverReceiver`) takes the slot over without deciding again (the limits
  are the node's, :mod:`ferromq.admission`) and makes the listener's MQTT protocol
  around the socket, fed those bytes first.
- **Relay** (``tls``, ``ws`` and ``wss``, whose TLS or WebSocket state cannot move, and a
  first read too large for one message): one end of a socketpair is handed over as
  above, its header also carrying, on a listener with ``require_certificate``, the
  client certificate's identity; the other end and the client's transport are joined
  here by :func:`relay`, with back-pressure both ways (a side whose write buffer passes
  its high-water mark pauses reading the other) and a close on either side closing the
  other. Relayed WebSocket bytes are the client's frames after the upgrade: the owner's
  framing is ``"websocket"`` and its engine deframes. The admission slot moves to the
  owner, where the connection is served; this shard keeps only the relay.

Bounds, as the engine bounds a connection that has not sent CONNECT: the router holds
the bytes of the first packet, at most ``limits.max_packet_size`` (plus one read), for at
most ``limits.connect_timeout`` from the end of the preamble, then closes the
connection (counted with the engine's ``connect_timeouts``). A first packet
whose fixed header announces more than ``max_packet_size``, or WebSocket bytes past it
with no client id yet, go to the local engine at once, which refuses them as on one
shard (a CONNECT too large to read is closed at its header).

Message size: a ``SOCK_SEQPACKET`` message must fit the sending socket's buffer
(``net.core.wmem_default``, 208 KiB on Linux; more needs ``wmem_max`` or
CAP_NET_ADMIN). The buffers are left as they are and a hand-over message is at most
:data:`MESSAGE_MAX`; more bytes read (a CONNECT with a large will or password) take the
relay instead. An owner that does not
keep up (its unread messages count against the sending socket's buffer) makes a send
wait in the sender's FIFO until the socket is writable, at most :data:`QUEUE_MAX` of them (each
holds a descriptor no admission slot counts any more: an owner that stopped reading
must not exhaust the sender's). Once a FIFO holds half of that, the shard stops
accepting until it is down to an eighth (new connections wait in the kernel's backlog,
as when accepting pauses for descriptors): in a CONNECT storm an owner out of
descriptors made the senders lose connections by the thousand before. A hand-over
beyond the bound (sockets this shard had accepted before it stopped), or whose send
fails otherwise, is lost: the connection is closed, logged, and its client
reconnects. Out of
descriptors, the receiver stops reading for a while (:class:`HandoverReceiver`) and the
routing retries a hand-over it could not make
(:meth:`ferromq.shard.routing.ClientRouting._route`).

Cost: the router runs once per connection, per read until the first packet is whole. A
relay costs Python per read, not per message: each read on either side is one
``data_received`` call with a ``bytes`` object and one ``transport.write`` on the other
(a read carries every packet that arrived, as the engine's feed does), and each byte
crosses two more kernel copies through the socketpair; a relayed connection also holds
two more descriptors (the socketpair's ends, one in each process) and two more
transports' buffers for its life. A handed-over socket costs nothing after the
hand-over: the owner serves it as a socket it accepted.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, cast

from ferromq._core import connect_owner
from ferromq.shard.identity import ShardIdentity

__all__ = [
    "MESSAGE_MAX",
    "Backlogged",
    "Framing",
    "Handed",
    "HandoverReceiver",
    "HandoverSender",
    "Router",
    "relay",
]

Framing: TypeAlias = Literal["mqtt", "websocket"]
"""How a connection's bytes carry MQTT: plain, or WebSocket frames after an upgrade."""

MESSAGE_MAX: Final = 64 * 1024
"""Bytes one hand-over message may take, header included (see the module header)."""
READ_SIZE: Final = 16 * 1024
"""Bytes the router lends the transport per read."""
QUEUE_MAX: Final = 1024
"""Hand-overs one sender holds while its owner's queue is full."""
RECEIVE_BATCH: Final = 64
"""Hand-overs taken per readiness of the receiving socket."""
_LENGTH: Final = struct.Struct("!I")


@dataclass(frozen=True)
class Handed:
    """What comes with a handed-over connection: the index of its listener, its
    framing, the client's address, the client certificate's identity (on a listener
    with ``require_certificate``) and the bytes already read from it."""

    listener: int
    framing: Framing
    peer: tuple[str, int]
    certificate: str | None
    data: bytes

    def encode(self) -> bytes:
        head = json.dumps(
            [self.listener, self.framing, self.peer[0], self.peer[1], self.certificate]
        ).encode()
        return _LENGTH.pack(len(head)) + head + self.data

    @classmethod
    def decode(cls, message: bytes) -> Handed:
        """Raises ValueError naming what is wrong with ``message``."""
        if len(message) < _LENGTH.size:
            raise ValueError(f"hand-over message of {len(message)} bytes has no header")
        (size,) = _LENGTH.unpack_from(message)
        end = _LENGTH.size + size
        try:
            listener, framing, host, port, certificate = json.loads(message[_LENGTH.size : end])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"hand-over header unreadable: {exc}") from None
        if framing not in ("mqtt", "websocket"):
            raise ValueError(f"hand-over header names framing {framing!r}")
        return cls(int(listener), framing, (str(host), int(port)), certificate, message[end:])


Route: TypeAlias = Callable[[asyncio.Transport, bytes, int], None]
"""What the router calls once it knows: (the transport, the bytes read, the owner)."""


class Router(asyncio.BufferedProtocol):
    """A connection's protocol from the end of its preamble to its first packet; see
    the module header. ``preread`` are bytes the preamble read past its end;
    ``route`` takes the transport once the owner is known (this shard's index for
    "here"); ``release`` gives the admission slot back if the connection ends first;
    ``timed_out`` is told when the connect timeout closes it."""

    def __init__(
        self,
        framing: Framing,
        shard: ShardIdentity,
        timeout: float,
        max_packet_size: int,
        preread: bytes,
        route: Route,
        release: Callable[[], None],
        timed_out: Callable[[], None],
    ) -> None:
        self._framing = framing
        self._shard = shard
        self._timeout = timeout
        self._max_packet_size = max_packet_size
        self._data = bytearray(preread)
        self._route = route
        self._release = release
        self._timed_out = timed_out
        self._read = bytearray(READ_SIZE)
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement it.
        self._transport = cast(asyncio.Transport, transport)
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expired)
        if self._data:
            self._decide()

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._read)

    def buffer_updated(self, nbytes: int) -> None:
        if self._transport is None:
            return  # routed already
        self._data += self._read[:nbytes]
        self._decide()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._finish()
            self._release()

    def _decide(self) -> None:
        shard, data = self._shard, bytes(self._data)
        owner = connect_owner(data, self._framing, self._max_packet_size, shard.index, shard.count)
        if owner is None and len(data) > self._max_packet_size:
            owner = shard.index  # WebSocket bytes past the limit and no CONNECT yet
        if owner is not None:
            self._done(owner)

    def _done(self, owner: int) -> None:
        transport = self._finish()
        self._route(transport, bytes(self._data), owner)

    def _finish(self) -> asyncio.Transport:
        transport = self._transport
        assert transport is not None
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return transport

    def _expired(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._timed_out()
            self._transport.close()  # connection_lost releases


class _RelayEnd(asyncio.Protocol):
    """One side of a relay: what it reads goes to the other side's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _RelayEnd = self
        self.waiting = b""
        """Bytes for this side's transport before it exists."""
        self.gone = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.waiting:
            self.transport.write(self.waiting)
            self.waiting = b""
        other = self.other.transport
        if self.other.gone:
            self.transport.close()
        elif other is not None:
            other.resume_reading()

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other.transport is None:
            other.waiting += data
        else:
            other.transport.write(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.gone = True
        other = self.other.transport
        if other is not None:
            other.close()  # after what it still has to write

    def pause_writing(self) -> None:
        other = self.other.transport
        if other is not None:
            other.pause_reading()

    def resume_writing(self) -> None:
        other = self.other.transport
        if other is not None:
            other.resume_reading()


async def relay(
    loop: asyncio.AbstractEventLoop, client: asyncio.Transport, near: socket.socket, data: bytes
) -> None:
    """Join ``client`` to ``near``, this shard's end of a socketpair whose other end went
    to the owner, until either closes; ``data`` (already read from the client) goes to
    the owner first. The client is not read until ``near``'s transport is made."""
    client_end, near_end = _RelayEnd(), _RelayEnd()
    client_end.other, near_end.other = near_end, client_end
    client.pause_reading()
    client.set_protocol(client_end)
    client_end.transport = client
    near_end.waiting = data
    try:
        await loop.connect_accepted_socket(lambda: near_end, near)
    except BaseException:
        near.close()
        client.close()
        raise


Failed: TypeAlias = Callable[[str], None]
"""Told why a hand-over was lost (for a rate-limited log line)."""


Backlogged: TypeAlias = Callable[[bool], None]
"""Told when a sender's FIFO reaches half of its bound (True) and when it is down to an
eighth again (False): the listener stops accepting meanwhile."""


class HandoverSender:
    """Sends hand-overs to one owner shard, in order, over its ``SOCK_SEQPACKET``
    socket; see the module header. Owns each descriptor given to :meth:`send`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        failed: Failed,
        backlogged: Backlogged,
        most: int = QUEUE_MAX,
    ) -> None:
        self._loop = loop
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)
        self._failed = failed
        self._backlogged = backlogged
        self._most = most
        self._queue: deque[tuple[bytes, int]] = deque()
        self._backlog = False  # the FIFO passed half of most and has not drained yet

    def send(self, message: bytes, fd: int) -> None:
        """Hand ``fd`` over with ``message`` (an encoded :class:`Handed`), now or once
        the socket is writable."""
        if len(message) > MESSAGE_MAX:
            raise ValueError(f"hand-over message of {len(message)} bytes > {MESSAGE_MAX}")
        if not self._queue and self._sent(message, fd):
            return
        if len(self._queue) >= self._most:
            os.close(fd)
            self._failed(f"the owner shard is not taking hand-overs: {self._most} waiting")
            return
        if not self._queue:
            self._loop.add_writer(self._sock.fileno(), self._writable)
        self._queue.append((message, fd))
        if not self._backlog and len(self._queue) >= max(self._most // 2, 1):
            self._backlog = True
            self._backlogged(True)

    def _sent(self, message: bytes, fd: int) -> bool:
        """Whether the message left (or was lost): False when the queue is full."""
        try:
            socket.send_fds(self._sock, [message], [fd])
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._failed(f"cannot send to the owner shard: {exc.strerror}")
        os.close(fd)
        return True

    def _writable(self) -> None:
        while self._queue:
            if not self._sent(*self._queue[0]):
                break
            self._queue.popleft()
        else:
            self._loop.remove_writer(self._sock.fileno())
        if self._backlog and len(self._queue) <= self._most // 8:
            self._backlog = False
            self._backlogged(False)

    def close(self) -> None:
        if self._queue:
            self._loop.remove_writer(self._sock.fileno())
        for _, fd in self._queue:
            os.close(fd)
        self._queue.clear()
        self._sock.close()


Received: TypeAlias = Callable[[Handed, socket.socket], None]
"""Given each connection handed to this shard, with its header."""


class HandoverReceiver:
    """Takes the connections other shards hand to this one from its ``SOCK_SEQPACKET``
    socket (``handover_receive``), up to :data:`RECEIVE_BATCH` per readiness. With no
    descriptor free for the next one (the kernel would drop it), it stops reading for
    ``pause`` seconds: the hand-overs wait in the socket and the senders' FIFOs, as
    connections wait in the backlog while accepting pauses."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        received: Received,
        failed: Failed,
        pause: float,
    ) -> None:
        self._loop = loop
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)
        self._received = received
        self._failed = failed
        self._pause = pause
        self._resume()

    def _resume(self) -> None:
        if self._sock.fileno() >= 0:  # not closed during a pause
            self._loop.add_reader(self._sock.fileno(), self._ready)

    def _ready(self) -> None:
        for _ in range(RECEIVE_BATCH):
            try:
                # One descriptor free for the one a message brings (nothing else runs
                # between this probe and the receive).
                os.close(os.dup(self._sock.fileno()))
            except OSError as exc:
                if exc.errno != errno.EMFILE:  # dup(2)'s one error on an open descriptor
                    raise
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(self._pause, self._resume)
                return
            try:
                message, fds, flags, _ = socket.recv_fds(self._sock, MESSAGE_MAX, 1)
            except (BlockingIOError, InterruptedError):
                return
            if not message and not fds:
                self._loop.remove_reader(self._sock.fileno())  # every sender closed
                return
            sockets = [socket.socket(fileno=fd) for fd in fds]
            if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(sockets) != 1:
                for sock in sockets:
                    sock.close()
                # MSG_CTRUNC: no descriptor left for it here (RLIMIT_NOFILE).
                self._failed(f"hand-over message cut short (flags {flags:#x}, {len(fds)} fds)")
                continue
            try:
                handed = Handed.decode(message)
            except ValueError as exc:
                sockets[0].close()
                self._failed(str(exc))
                continue
            self._received(handed, sockets[0])

    def close(self) -> None:
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
