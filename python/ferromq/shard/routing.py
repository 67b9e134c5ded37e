"""Client-id routing, a shard's side (issue 16, docs/shards.md): in a node of several
shards, which shard serves each connection a listener admitted, and what becomes of the
connections the other shards hand to this one. The listeners (:mod:`ferromq.listener`)
accept, admit and run each connection's preamble; then they ask :class:`ClientRouting`
where it goes. The mechanics it uses (the :class:`~.handover.Router` protocol, the
hand-over messages, the relay) are :mod:`.handover`'s, whose header has the design.

- **A plain ``tcp`` socket** goes to the engine's socket set, which reads its CONNECT
  and asks ``connect_owner`` in Rust (:class:`ClientRouting` tells the set the shards
  when it starts). A socket another shard owns leaves the set for the listener's
  ``on_sockets_left``, which gives it to :meth:`ClientRouting.hand_socket`: sent to
  its owner with the bytes read, or, past one hand-over message, back to the
  listener (:attr:`ListenerHooks.through_loop`) behind a router, which relays it.
- **Any other connection** (``tls``, ``ws``, ``wss``) gets
  :meth:`ClientRouting.router` as its protocol after the preamble. Once the router
  names the owner, the connection is served here (the listener's ``serve``) or
  relayed to the owner; closed while it waited, its slots are given back.
- **A connection handed here** comes off the :class:`~.handover.HandoverReceiver`:
  its admission slots are taken over without deciding again
  (:meth:`~ferromq.admission.Admission.adopted`; the limits are the node's), then
  the listener serves it (:attr:`ListenerHooks.serve_handed`).

The accepting shard gives a connection's slots back as it hands it over; the owner
counts it from there. While the hand-overs owed to one owner pile up, the listeners
stop accepting (:attr:`ListenerHooks.backlogged`). Out of descriptors for a relay's
socketpair, the connection is not read and tried again after ``pause`` seconds, as
accepting waits then; the receiver pauses likewise.

Cost: Python per connection that is not a plain socket (the router's reads until the
first packet is whole), per plain socket handed over (one message), never per
message; a relay's cost is in :mod:`.handover`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias

from ferromq._core import SocketSet
from ferromq.admission import Admission
from ferromq.log import RateLimitedLog
from ferromq.shard.handover import (
    MESSAGE_MAX,
    Framing,
    Handed,
    HandoverReceiver,
    HandoverSender,
    Router,
    relay,
)
from ferromq.shard.identity import ShardIdentity
from ferromq.sockets import EXHAUSTED

__all__ = ["ClientRouting", "ListenerHooks", "Serve"]

# The listener's logger, as before the routing moved out of it: its lines are what an
# operator's filters name (the bus pump keeps "ferromq.node.bus" likewise).
logger = logging.getLogger("ferromq.listener")

_Peer: TypeAlias = tuple[str, int]

Serve: TypeAlias = Callable[[asyncio.Transport, bytes], None]
"""Serves a routed connection on this shard: the listener's MQTT protocol takes the
transport over, fed the bytes the router read before any other."""


@dataclass(frozen=True, slots=True)
class ListenerHooks:
    """What the routing asks of the listeners, each listener named by its index in the
    configuration (as a :class:`~.handover.Handed` header names it)."""

    serve_handed: Callable[[Handed, socket.socket], None]
    """Serve a connection another shard handed here, its slots taken over already:
    a plain socket in the engine's socket set, not routed again; any other over the
    loop's transport."""
    through_loop: Callable[[int, int, _Peer, bytes], None]
    """(listener, descriptor, client, bytes read): an admitted plain socket the socket
    set gave up, whose first bytes exceed one hand-over message, onto the loop's
    transport behind a :meth:`ClientRouting.router` fed those bytes."""
    certificate: Callable[[int, asyncio.Transport], str | None]
    """The client certificate's identity of a connection on the listener, when that
    has ``require_certificate``; else None."""
    start: Callable[[Coroutine[Any, Any, object], Callable[[asyncio.Task[object]], None]], None]
    """Run a relay as a task the listeners cancel when they close, then call the
    callback with it."""
    backlogged: Callable[[int, bool], None]
    """(owner, True): hand-overs to that owner pile up, stop accepting; (owner,
    False): every owner took its backlog, accept again."""


class ClientRouting:
    """The client-id routing of one shard of a node of several; see the module header.
    Starting it tells the socket set the shards and starts receiving hand-overs."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        shard: ShardIdentity,
        sockets: SocketSet,
        admission: Admission,
        listeners: tuple[str, ...],
        timeout: float,
        max_packet_size: int,
        pause: float,
        hooks: ListenerHooks,
    ) -> None:
        """``listeners``: their names by index; ``timeout``: how long a connection may
        take to send its first packet (``limits.connect_timeout``); ``max_packet_size``
        bounds what a router holds; ``pause``: seconds to wait when out of
        descriptors."""
        self._loop = loop
        self._shard = shard
        self._sockets = sockets
        self._admission = admission
        self._listeners = listeners
        self._timeout = timeout
        self._max_packet_size = max_packet_size
        self._pause = pause
        self._hooks = hooks
        self._timeouts = 0  # connections a Router closed at the connect timeout
        self._backlogged: set[int] = set()  # owner shards whose hand-overs pile up here
        self._log_lost = RateLimitedLog(logger, logging.WARNING, "connection hand-over lost")
        sockets.set_shards(shard.index, shard.count, max_packet_size, round(timeout * 1000))
        self._senders = {
            owner: HandoverSender(loop, fd, self._lost, partial(self._owner_backlogged, owner))
            for owner, fd in enumerate(shard.handover_send)
            if owner != shard.index
        }
        self._receiver: HandoverReceiver | None = HandoverReceiver(
            loop, shard.handover_receive, self._received, self._lost, pause
        )

    @property
    def backlogged(self) -> bool:
        """Whether hand-overs pile up for an owner (the listeners do not accept)."""
        return bool(self._backlogged)

    @property
    def connect_timeouts(self) -> int:
        """Connections closed at the connect timeout before their owner was known, by
        the socket set's routing or by a :class:`~.handover.Router`."""
        return self._sockets.routing_timeouts + self._timeouts

    def router(
        self,
        listener: int,
        peer: _Peer,
        framing: Framing,
        preread: bytes,
        release: Callable[[], None],
        serve: Serve,
    ) -> Router:
        """The protocol of an admitted connection on ``listener`` from the end of its
        preamble (``preread``: bytes the preamble read past it) to its first packet,
        which names its owner: ``serve`` if that is this shard, else a relay there.
        ``release`` gives its admission slots back (once)."""
        route = partial(self._route, listener, peer, framing, release, serve)
        return Router(
            framing,
            self._shard,
            self._timeout,
            self._max_packet_size,
            preread,
            route,
            release,
            self._router_timed_out,
        )

    def hand_socket(self, listener: int, fd: int, peer: _Peer, data: bytes, owner: int) -> None:
        """Send plain socket ``fd``, which the socket set gave up, and the bytes it sent
        to shard ``owner``; the owner counts it from here. Bytes beyond one hand-over
        message (a CONNECT with a large will) go the loop's way: a router relays them."""
        message = Handed(listener, "mqtt", peer, None, data).encode()
        if len(message) <= MESSAGE_MAX:
            self._senders[owner].send(message, fd)
            self._admission.released(self._listeners[listener], peer[0])
            return
        self._hooks.through_loop(listener, fd, peer, data)

    def close(self) -> None:
        """Stop receiving hand-overs and close the senders (their waiting sockets)."""
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None
        for sender in self._senders.values():
            sender.close()
        self._senders = {}

    def _route(
        self,
        listener: int,
        peer: _Peer,
        framing: Framing,
        release: Callable[[], None],
        serve: Serve,
        transport: asyncio.Transport,
        data: bytes,
        owner: int,
    ) -> None:
        """The router's decision: serve the connection here, or hand it to ``owner``.
        Out of descriptors for the hand-over, the connection is not read and tried
        again after ``pause``, as accepting waits then."""
        if owner == self._shard.index:
            serve(transport, data)
            return
        if transport.is_closing():  # the client left while its hand-over waited
            release()
            return
        try:
            self._hand_to(owner, listener, peer, framing, release, transport, data)
        except OSError as exc:
            if exc.errno not in EXHAUSTED:
                raise
            transport.pause_reading()
            retry = (listener, peer, framing, release, serve, transport, data, owner)
            self._loop.call_later(self._pause, self._route, *retry)

    def _hand_to(
        self,
        owner: int,
        listener: int,
        peer: _Peer,
        framing: Framing,
        release: Callable[[], None],
        transport: asyncio.Transport,
        data: bytes,
    ) -> None:
        """Relay the connection to ``owner`` (its TLS or WebSocket state cannot move,
        or its first bytes exceed one hand-over message: a plain socket that fits one
        is sent by :meth:`hand_socket`); raises OSError, having changed nothing, when
        a descriptor cannot be had."""
        sender = self._senders[owner]
        near, far = socket.socketpair()
        certificate = self._hooks.certificate(listener, transport)
        relayed = Handed(listener, framing, peer, certificate, b"")
        sender.send(relayed.encode(), far.detach())
        release()  # the owner counts it from here
        self._hooks.start(relay(self._loop, transport, near, data), _relay_ended)

    def _received(self, handed: Handed, sock: socket.socket) -> None:
        """A connection another shard admitted and handed over: its slots taken over
        here, then the listener's to serve, fed the bytes that came with it."""
        if handed.listener >= len(self._listeners):
            sock.close()
            self._lost(f"hand-over names listener {handed.listener}, not configured")
            return
        self._admission.adopted(self._listeners[handed.listener], handed.peer[0])
        self._hooks.serve_handed(handed, sock)

    def _lost(self, why: str) -> None:
        self._log_lost(self._loop.time(), why=why)

    def _router_timed_out(self) -> None:
        self._timeouts += 1

    def _owner_backlogged(self, owner: int, backlogged: bool) -> None:
        """Stop accepting while hand-overs to ``owner`` pile up (its descriptors are
        used up, or it is behind), and start again once every owner took its backlog
        (:class:`~.handover.HandoverSender`)."""
        was_accepting = not self._backlogged
        if backlogged:
            self._backlogged.add(owner)
        else:
            self._backlogged.discard(owner)
        if was_accepting and self._backlogged:
            self._hooks.backlogged(owner, True)
        elif not was_accepting and not self._backlogged:
            self._hooks.backlogged(owner, False)


def _relay_ended(task: asyncio.Task[object]) -> None:
    """A relay that could not start has closed both its sides already."""
    if not task.cancelled():
        task.exception()
