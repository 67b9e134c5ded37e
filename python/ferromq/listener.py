"""Listeners: the broker's own accept path, the one place a new connection is decided.

The broker binds, listens and accepts itself instead of calling ``loop.create_server``:

- **Bind before anything else.** :meth:`Listeners.bind` binds and listens on every
  configured address before the store opens, so a port in use is a one-line
  :class:`ListenError` with nothing created on disk. Connections that arrive while the
  store restores wait in the kernel's backlog; :meth:`Listeners.serve` starts accepting.
- **Accept until EAGAIN.** Each listening socket is non-blocking and registered with
  ``loop.add_reader``; one readiness accepts up to :data:`ACCEPT_BATCH` sockets (so one
  busy listener cannot hold the loop) with ``SocketSet.accept`` (``accept4`` in Rust:
  a descriptor and the peer's address, no Python socket object).
- **Sockets owned by compiled code.** A plain ``tcp`` listener's connection is given
  to the engine's ``SocketSet`` (``rust/ferromq-io``) at accept, or after its PROXY
  header. The set reads and writes it in Rust behind one epoll descriptor the loop
  watches; no Python object exists for it (``docs/memory.md``). In a node of shards
  the set also routes it: it reads the CONNECT and serves it here or returns it to be
  handed to the owner shard. Its end comes back through
  :meth:`Listeners._sockets_left`. TLS and WebSocket connections, and relayed
  hand-overs carrying a client certificate, get the loop's own transport
  (``loop.connect_accepted_socket``, uvloop's or asyncio's) around an
  :class:`~ferromq._protocol.MqttProtocol`.
- **Admission at accept.** Each accepted socket is put to
  :meth:`~ferromq.admission.Admission.admit` with its listener's name and the peer's
  address: bans, flapping, the listener's connect rate, ``max_connections`` per
  listener and broker-wide, connections per address (:mod:`ferromq.admission`). A
  refused socket is closed before a byte is read, counted by reason
  (``$SYS/broker/clients/refused/<reason>``) and logged at most once per
  :data:`~ferromq.log.LOG_INTERVAL` with the rule and the peer. An admitted one holds
  its slots from accept until ``connection_lost`` (or a failed TLS handshake), and its
  connection's end is reported to :meth:`~ferromq.admission.Admission.closed`.
- **File descriptors exhausted.** ``accept`` failing with EMFILE/ENFILE (or the kernel
  out of buffers) pauses accepting for :data:`ACCEPT_PAUSE`: the listener leaves the
  loop, the waiting connections stay in the backlog and are served once descriptors
  free up, and existing connections go on. Each pause is counted
  (``$SYS/broker/clients/accept_paused/fd_exhausted``) and logged at most once per
  :data:`~ferromq.log.LOG_INTERVAL` with the RLIMIT_NOFILE limit. For comparison, libuv (uvloop's
  ``create_server``) frees a reserved descriptor, accepts the waiting connections and
  closes them at once, logging nothing: clients see a reset; asyncio logs a traceback
  through the loop's exception handler and retries after a second.

Cost: per connection (never per message) one Python call for admission and one to
give the socket to the set; see ``benches/load/RESULTS.md`` for the connection rate.

The preamble, per connection and in this order (each step its own module; a plain
``tcp`` listener without PROXY skips both and pays nothing new):

1. **PROXY header** (``proxy_protocol = true``, :mod:`ferromq.proxy_protocol`): a peer
   outside ``proxy_trusted`` is closed at once; otherwise the header is read off the
   *raw socket* before the loop's transport exists, peeking so that not a byte past it
   is taken, within ``limits.connect_timeout``. This is the one place that works for
   every listener alike: the TLS handshake (``connect_accepted_socket(ssl=...)``) and
   the WebSocket upgrade then start at the first byte after the header, as they would
   without a proxy (``loop.start_tls`` after a plain transport was the alternative; it
   cannot be handed bytes the plain transport already read, and a load balancer may
   send the ClientHello in the header's segment). The header's client address is the
   connection's peer from then on: admission is asked only now, with that address
   (on a proxy listener the socket's own address is the load balancer's, which bans,
   flapping and per-address limits must not see), and it is what the TLS failure log,
   ``IOHub.peer`` (the auth gate, admission at CONNECT, the engine's rejections) report.
   Until its header is in, a connection holds no admission slot: ``proxy_trusted`` and
   the connect timeout bound what a peer can hold that way. A connection without a
   valid header is closed, counted (``$SYS/broker/clients/refused/proxy_header``) and
   logged at most once per :data:`~ferromq.log.LOG_INTERVAL`.
2. **TLS** on ``tls``/``wss`` listeners, below.
3. **WebSocket upgrade** on ``ws``/``wss`` listeners (:mod:`ferromq.websocket_upgrade`):
   the transport's first protocol answers the HTTP request, then hands the transport to
   the MQTT protocol with ``framing = "websocket"``, so the engine deframes in Rust and
   no Python runs per message. Refusals are counted
   (``$SYS/broker/clients/refused/websocket_upgrade``) and logged like the others.

4. **Client-id affinity** in a node of several shards (:meth:`Listeners.serve` given a
   :class:`~ferromq.shard.identity.ShardIdentity`): the listeners ask the shard side,
   :class:`~ferromq.shard.routing.ClientRouting`, where a connection goes. The
   CONNECT's client id decides whether it stays here, its socket is handed to the
   owner shard (``tcp``: the socket set reads the CONNECT, Rust's ``connect_owner``
   decides, and a socket it gives up goes to the routing), or it is relayed to the
   owner (``tls``, ``ws``, ``wss``: the routing's router is the protocol after the
   preamble, and a ``tcp`` CONNECT too large for one hand-over message comes back
   here to take that way). The routing also takes the connections other shards hand
   to this one, their admission slots with them, and gives them to the listener to
   serve (:meth:`Listeners._serve_handed`), which reports the client's address for
   them as for a PROXY header. This module only serves what the routing decides
   (:class:`~ferromq.shard.routing.ListenerHooks`).

The connection's admission slots are given back once (:meth:`_Accepted.release`), by
whichever ends it: the MQTT protocol, the upgrade protocol, the router, or a preamble
or handshake that failed.

TLS (``protocol = "tls"`` or ``"wss"``, :mod:`ferromq.tls`): :meth:`Listeners._hand_over` passes the
listener's ``SSLContext`` to ``connect_accepted_socket``, so the loop's own SSL
protocol runs the handshake and the record layer in front of the same
``MqttProtocol``; the engine sees the connection only once the handshake is done.

- **Handshake bounded like a CONNECT.** ``ssl_handshake_timeout`` is
  ``limits.connect_timeout``: a handshake held open (slowloris) or fed garbage is
  dropped then or at the first bad record, having held one counted slot and the
  socket, as a plain connection that never sends CONNECT does. Each failure is
  counted (``$SYS/broker/clients/tls_handshake_failed``) and logged with the peer's
  address at most once per :data:`~ferromq.log.LOG_INTERVAL`.
- **Client certificates.** With ``require_certificate`` the handshake refuses a
  client without a certificate chained to ``cafile``; once it is done, the
  certificate's identity is kept per connection (:meth:`Listeners.certificate`) for
  :class:`~ferromq.auth.AuthGate` until the connection ends.
- **Certificates reloaded on SIGHUP** (:meth:`Listeners.reload_certificates`, a
  ``Broker.reload_hooks`` entry) and, with the listener's ``watch``, when one of its
  files changes (:mod:`ferromq.file_watch`): a new context is built from the files
  and swapped in for the next handshakes; connections already up keep theirs, except
  those whose client certificate the new ``crlfile`` revokes, which are closed
  (:mod:`ferromq.tls_revocation`; logged, counted in
  ``$SYS/broker/clients/tls_revoked``). A context that fails to build is logged and
  the old one kept.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import resource
import socket
import ssl
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal, TypeAlias, get_args

from ferromq._core import SocketSet
from ferromq._protocol import IOHub, MqttProtocol
from ferromq.admission import Admission, Refusal
from ferromq.auth.certificate import PeerCertificate
from ferromq.config import (
    TLS_PROTOCOLS,
    WEBSOCKET_PROTOCOLS,
    Config,
    ConfigError,
    ListenerConfig,
    listener_path,
)
from ferromq.engine import hand_to_engine
from ferromq.file_watch import FileWatch
from ferromq.log import RateLimitedLog, log_event, peer_text
from ferromq.proxy_protocol import ProxyHeaderError, is_trusted, read_proxy_header
from ferromq.shard.handover import Framing, Handed
from ferromq.shard.identity import ShardIdentity
from ferromq.shard.routing import ClientRouting, ListenerHooks
from ferromq.sockets import EXHAUSTED, ListenError, bind_sockets
from ferromq.tls import certificate_identity, revocations, server_context, watched_files
from ferromq.tls_revocation import Revoked, TlsClients
from ferromq.tls_tickets import TicketKeysUnavailable, share_ticket_keys
from ferromq.websocket_upgrade import UpgradeProtocol

__all__ = ["Listeners"]

logger = logging.getLogger("ferromq.listener")

ACCEPT_BATCH: Final = 128
"""Sockets accepted per readiness of one listening socket."""
ACCEPT_PAUSE: Final = 0.25
"""Seconds accepting pauses after running out of file descriptors."""

_Address: TypeAlias = tuple[Any, ...]
"""What ``accept`` gives for a TCP peer: (host, port) or (host, port, flow, scope)."""
_Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

# accept() failures of one connection that ended before it was taken (accept(2), "Error
# handling"): skip it and go on.
_PEER_GONE: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


@dataclass
class _Listener:
    index: int
    config: ListenerConfig
    sockets: list[socket.socket]
    tls: ssl.SSLContext | None = None
    trusted: tuple[_Network, ...] = ()
    """``proxy_trusted``, parsed."""
    clients: TlsClients | None = None
    """With ``require_certificate``: its connections by client certificate."""

    @property
    def owned(self) -> bool:
        """Whether its connections' sockets are the engine's ``SocketSet``'s once their
        preamble is over (plain MQTT over TCP), rather than loop transports."""
        protocol = self.config.protocol
        return protocol not in TLS_PROTOCOLS and protocol not in WEBSOCKET_PROTOCOLS


_PreambleFailure: TypeAlias = Literal[
    "tls_handshake_failed", "refused_proxy_header", "refused_websocket_upgrade"
]
"""How a connection can end before MQTT, as its stats key."""


@dataclass
class _Counts:
    accept_paused: int = 0
    accept_paused_handovers: int = 0  # times accepting stopped for hand-overs piling up
    tls_revoked: int = 0
    """Connections closed because a reloaded ``crlfile`` revokes their certificate."""
    failures: Counter[_PreambleFailure] = field(default_factory=Counter)
    pending: set[asyncio.Task[object]] = field(default_factory=set)


class _NotAdmitted(Exception):
    """A proxied connection admission refused once its header named the client."""


@dataclass(slots=True)
class _Accepted:
    """One accepted connection until its transport has started."""

    listener: _Listener
    sock: socket.socket
    peer: _Address
    """The client: the socket's peer, or the address its PROXY header named."""
    admitted: bool
    """Holding admission slots (from accept; on a proxy listener, from its header)."""
    admission: Admission
    handed: bool = False
    """Handed over by the shard that accepted it (:mod:`ferromq.shard.handover`)."""

    def release(self) -> None:
        """Give the connection's admission slots back, once (its protocol, its upgrade
        and a failed start may each try), if it holds them. The bound method is the
        ``release`` every protocol of the connection is given: one object per
        connection, where a ``partial`` cost four (``docs/memory.md``)."""
        if self.admitted:
            self.admitted = False
            self.admission.released(self.listener.config.name, self.peer[0])

    @property
    def named_peer(self) -> tuple[str, int] | None:
        """The client's address when the socket's own peer is not the client (a PROXY
        header's, or a relayed hand-over's), for ``IOHub.peer``; else None."""
        if self.listener.config.proxy_protocol or self.handed:
            return (str(self.peer[0]), int(self.peer[1]))
        return None


class _CountedProtocol(MqttProtocol):
    """An ``MqttProtocol`` that gives its slots back once, when its connection ends, and
    tells admission the connection is gone. While open, its connection id names its
    listener in ``names`` (for the connect log line); the engine is told the name too,
    for the stream's records. ``preread`` (bytes a protocol before it read: the
    WebSocket upgrade's, the router's) goes to the engine first.

    Slots, no ``__dict__``: an idle connection keeps this object for its whole life,
    and a dict of its six attributes cost 336 bytes (``docs/memory.md``)."""

    __slots__ = ("_closed", "_engine", "_listener", "_names", "_preread", "_release")

    def __init__(
        self,
        hub: IOHub,
        release: Callable[[], None],
        closed: Callable[[int], None],
        framing: Framing,
        peer: tuple[str, int] | None,
        listener: str,
        names: dict[int, str],
        preread: bytes,
    ) -> None:
        super().__init__(hub, framing, peer)
        self._engine = hub.engine
        self._release: Callable[[], None] | None = release
        self._closed = closed
        self._listener = listener
        self._names = names
        self._preread = preread

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._names[self.conn] = self._listener
        self._engine.set_listener(self.conn, self._listener)
        hand_to_engine(self, self._preread)
        self._preread = b""

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._names.pop(self.conn, None)
            self._closed(self.conn)
            self.release()


def _identity(config: ListenerConfig, transport: asyncio.BaseTransport) -> str | None:
    """The identity of the verified client certificate of a TLS transport."""
    certificate = transport.get_extra_info("ssl_object").getpeercert()
    return certificate_identity(certificate, config.identity_source)


class _CertifiedProtocol(_CountedProtocol):
    """A ``_CountedProtocol`` of a listener with ``require_certificate``: it files the
    verified client certificate's identity under its connection id while it lives.
    ``identity`` reads it from the transport (the TLS one, or a relayed hand-over's
    header)."""

    __slots__ = ("_certificates", "_config", "_identity")

    def __init__(
        self,
        hub: IOHub,
        release: Callable[[], None],
        closed: Callable[[int], None],
        framing: Framing,
        peer: tuple[str, int] | None,
        names: dict[int, str],
        preread: bytes,
        config: ListenerConfig,
        certificates: dict[int, PeerCertificate],
        identity: Callable[[asyncio.BaseTransport], str | None],
    ) -> None:
        super().__init__(hub, release, closed, framing, peer, config.name, names, preread)
        self._config = config
        self._certificates = certificates
        self._identity = identity

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The gate reads it at the CONNECT's event, which IOHub.flush hands out on a
        # later turn of the loop, also for a preread CONNECT.
        super().connection_made(transport)
        self._certificates[self.conn] = PeerCertificate(
            self._identity(transport), self._config.use_identity_as_username
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._certificates.pop(self.conn, None)
        super().connection_lost(exc)


def _tls_context(index: int, config: ListenerConfig) -> ssl.SSLContext | None:
    if config.protocol not in TLS_PROTOCOLS:
        return None
    return server_context(f"listeners[{index}]", config)


def _tls_clients(index: int, config: ListenerConfig) -> TlsClients | None:
    """The registry a ``require_certificate`` listener closes revoked clients from."""
    if config.protocol not in TLS_PROTOCOLS or not config.require_certificate:
        return None
    return TlsClients(revocations(f"listeners[{index}]", config))


class Listeners:
    """Every listener of one broker."""

    def __init__(
        self, listeners: list[_Listener], admission: Admission, handshake_timeout: float
    ) -> None:
        self._listeners = listeners
        self._admission = admission
        self._handshake_timeout = handshake_timeout
        # How long a TLS close waits for the peer's close_notify (default 30 s); the
        # keyword is new in Python 3.11's asyncio.
        self._shutdown_timeout: dict[str, float] = (
            {"ssl_shutdown_timeout": handshake_timeout} if sys.version_info >= (3, 11) else {}
        )
        self._counts = _Counts()
        self._certificates: dict[int, PeerCertificate] = {}
        self._names: dict[int, str] = {}  # open connections' listeners
        # One bound method for every connection's protocol, not one each.
        self._admission_closed = admission.closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hub: IOHub | None = None
        self._routing: ClientRouting | None = None  # in a node of several shards
        self._ticket_keys: bytes | None = None  # the node's, in a node of several shards
        self._log_backlogged = RateLimitedLog(
            logger, logging.WARNING, "accepting paused: hand-overs wait for their owner shard"
        )
        self._log_refused = RateLimitedLog(logger, logging.WARNING, "connection refused at accept")
        self._log_exhausted = RateLimitedLog(
            logger, logging.ERROR, "accept paused: out of file descriptors"
        )
        self._log_handshake = RateLimitedLog(logger, logging.WARNING, "TLS handshake failed")
        self._log_proxy = RateLimitedLog(
            logger, logging.WARNING, "connection refused: no valid PROXY header"
        )
        self._log_upgrade = RateLimitedLog(logger, logging.WARNING, "WebSocket upgrade refused")

    @classmethod
    def bind(
        cls,
        configs: tuple[ListenerConfig, ...],
        admission: Admission,
        handshake_timeout: float,
        reuse_port: bool = False,
    ) -> Listeners:
        """Load every TLS listener's certificates, then bind and listen on every address
        (not accepting yet; ``reuse_port``: beside the node's other shards). Raises
        :class:`~ferromq.config.ConfigError` (nothing bound) or :class:`ListenError`,
        having closed what it opened."""
        contexts = [_tls_context(index, config) for index, config in enumerate(configs)]
        clients = [_tls_clients(index, config) for index, config in enumerate(configs)]
        listeners: list[_Listener] = []
        try:
            for index, config in enumerate(configs):
                trusted = tuple(ipaddress.ip_network(net) for net in config.proxy_trusted)
                sockets = bind_sockets(
                    listener_path(index, config), config.host, config.port, reuse_port
                )
                listeners.append(
                    _Listener(index, config, sockets, contexts[index], trusted, clients[index])
                )
        except ListenError:
            for listener in listeners:
                for sock in listener.sockets:
                    sock.close()
            raise
        return cls(listeners, admission, handshake_timeout)

    def stats(self) -> dict[str, int]:
        """The accept path's counters; in a node of shards also ``connect_timeouts``, the
        engine's with the router's (a connection without CONNECT is closed by whichever
        holds it), which the broker's stats take over the engine's."""
        counts = self._counts
        stats = {
            "accept_paused_fd_exhausted": counts.accept_paused,
            "accept_paused_handovers": counts.accept_paused_handovers,
            **{kind: counts.failures[kind] for kind in get_args(_PreambleFailure)},
            "tls_revoked": counts.tls_revoked,
        }
        if self._routing is not None and self._hub is not None:
            engine = self._hub.engine.stats().connect_timeouts
            stats["connect_timeouts"] = engine + self._routing.connect_timeouts
        return stats

    def listener_of(self, conn: int) -> str | None:
        """The name of the listener open connection ``conn`` came in on."""
        name = self._names.get(conn)
        if name is None and self._hub is not None:
            index = self._hub.sockets.listener(conn)
            if index is not None:
                name = self._listeners[index].config.name
        return name

    def open_by_name(self) -> dict[str, bool]:
        """Each listener (by name): whether its sockets are open (for readiness)."""
        return {
            listener.config.name: all(sock.fileno() >= 0 for sock in listener.sockets)
            for listener in self._listeners
        }

    def certificate(self, conn: int) -> PeerCertificate | None:
        """The verified client certificate of connection ``conn``, when it came over a
        listener with ``require_certificate``."""
        return self._certificates.get(conn)

    def reload_certificates(self, running: Config, applied: Config) -> None:
        """A ``Broker.reload_hooks`` entry: read every TLS listener's files again (at the
        paths ``applied`` gives, :func:`ferromq.tls.reloaded_listeners`); the next
        handshakes use the new context, connections already up keep theirs unless the
        new ``crlfile`` revokes their certificate."""
        for listener in self._listeners:
            if listener.tls is not None:
                self._reload_certificates(listener, applied.listeners[listener.index])

    def _reload_certificates(self, listener: _Listener, config: ListenerConfig) -> None:
        try:
            context = _tls_context(listener.index, config)
            revoked = revocations(f"listeners[{listener.index}]", config)
        except ConfigError as exc:
            log_event(
                logger,
                logging.ERROR,
                "TLS certificates not reloaded, old ones kept",
                listener=listener.config.name,
                error=str(exc),
            )
            return
        listener.tls, listener.config = context, config
        self._share_ticket_keys(listener)
        log_event(logger, logging.INFO, "TLS certificates reloaded", listener=listener.config.name)
        if listener.clients is not None:
            for closed in listener.clients.revoke(revoked):
                self._revoked(listener, closed)

    def _revoked(self, listener: _Listener, closed: Revoked) -> None:
        self._counts.tls_revoked += 1
        log_event(
            logger,
            logging.WARNING,
            "client certificate revoked: connection closed",
            listener=listener.config.name,
            peer=closed.peer,
            serial=f"{closed.serial:x}",
        )

    def serve(
        self,
        loop: asyncio.AbstractEventLoop,
        hub: IOHub,
        shard: ShardIdentity | None,
        max_packet_size: int,
    ) -> None:
        """Start accepting on every listener; as ``shard`` of a node of several, ask
        the client-id routing (:mod:`ferromq.shard.routing`) where each connection goes
        (``max_packet_size`` bounds what its router holds), which also takes the
        connections other shards hand over."""
        self._loop, self._hub = loop, hub
        hub.on_sockets_left = self._sockets_left
        names = tuple(listener.config.name for listener in self._listeners)
        hub.sockets.set_listener_names(list(names))
        if shard is not None and shard.count > 1:
            hooks = ListenerHooks(
                serve_handed=self._serve_handed,
                through_loop=self._through_loop,
                certificate=self._certificate,
                start=self._start,
                backlogged=self._handovers_backlogged,
            )
            self._routing = ClientRouting(
                loop,
                shard,
                hub.sockets,
                self._admission,
                names,
                self._handshake_timeout,
                max_packet_size,
                ACCEPT_PAUSE,
                hooks,
            )
            self._ticket_keys = shard.ticket_keys()
            for listener in self._listeners:
                self._share_ticket_keys(listener)
        for listener in self._listeners:
            if listener.tls is not None:
                self._watch(listener)
            self._resume(listener)
            for sock in listener.sockets:
                host, port = sock.getsockname()[:2]
                log_event(
                    logger,
                    logging.INFO,
                    "listening",
                    listener=listener.config.name,
                    address=f"{host}:{port}",
                    protocol=listener.config.protocol,
                    max_connections=listener.config.max_connections,
                )

    def _watch(self, listener: _Listener) -> None:
        """Reload ``listener``'s certificates when one of its files changes (its
        ``watch``), as the listeners' pending tasks, cancelled when they close."""
        assert self._loop is not None
        watch = FileWatch(
            lambda: watched_files(listener.config),
            lambda: listener.config.watch,
            lambda: self._reload_certificates(listener, listener.config),
        )
        task: asyncio.Task[object] = self._loop.create_task(watch.run())
        self._counts.pending.add(task)
        task.add_done_callback(self._counts.pending.discard)

    def _share_ticket_keys(self, listener: _Listener) -> None:
        """Give ``listener``'s TLS context the node's session-ticket key (in a node of
        several shards), so a ticket one shard issued resumes on every other."""
        if listener.tls is None or self._ticket_keys is None:
            return
        try:
            share_ticket_keys(listener.tls, self._ticket_keys)
        except TicketKeysUnavailable as exc:
            log_event(
                logger,
                logging.WARNING,
                "TLS sessions resume only on the shard that began them",
                listener=listener.config.name,
                reason=str(exc),
            )

    def close(self) -> None:
        """Stop accepting and close the listening sockets; accepted connections stay."""
        for listener in self._listeners:
            for sock in listener.sockets:
                if self._loop is not None:
                    self._loop.remove_reader(sock.fileno())
                sock.close()
        if self._routing is not None:
            self._routing.close()
        for task in self._counts.pending:
            task.cancel()

    def _handovers_backlogged(self, owner: int, backlogged: bool) -> None:
        """Stop accepting while hand-overs to ``owner`` pile up, and start again once
        every owner took its backlog (the routing says when,
        :attr:`~ferromq.shard.routing.ListenerHooks.backlogged`)."""
        assert self._loop is not None
        if backlogged:
            self._counts.accept_paused_handovers += 1
            self._log_backlogged(self._loop.time(), owner=owner)
            for listener in self._listeners:
                self._stop_accepting(listener)
        else:
            for listener in self._listeners:
                self._resume(listener)

    def _resume(self, listener: _Listener) -> None:
        assert self._loop is not None
        if self._routing is not None and self._routing.backlogged:
            return  # started again when the hand-overs are taken (_handovers_backlogged)
        for sock in listener.sockets:
            if sock.fileno() >= 0:  # not closed by close() during a pause
                self._loop.add_reader(sock.fileno(), self._accept, listener, sock)

    def _stop_accepting(self, listener: _Listener) -> None:
        assert self._loop is not None
        for sock in listener.sockets:
            if sock.fileno() >= 0:  # not closed by close()
                self._loop.remove_reader(sock.fileno())

    def _pause(self, listener: _Listener) -> None:
        assert self._loop is not None
        self._stop_accepting(listener)
        self._loop.call_later(ACCEPT_PAUSE, self._resume, listener)

    def _accept(self, listener: _Listener, sock: socket.socket) -> None:
        listening = sock.fileno()
        for _ in range(ACCEPT_BATCH):
            try:
                accepted = SocketSet.accept(listening)
            except OSError as exc:
                if exc.errno in _PEER_GONE:
                    continue
                if exc.errno in EXHAUSTED:
                    self._out_of_descriptors(listener, exc)
                    return
                raise
            if accepted is None:
                return
            fd, host, port = accepted
            if listener.config.proxy_protocol:
                # Admitted once its header names the client (_proxied).
                self._hand_over(listener, fd, (host, port), admitted=False)
                continue
            refusal = self._admission.admit(listener.config.name, host)
            if refusal is None:
                self._hand_over(listener, fd, (host, port), admitted=True)
            else:
                os.close(fd)
                self._refused(listener, refusal, (host, port))

    def _refused(self, listener: _Listener, refusal: Refusal, peer: _Address) -> None:
        assert self._loop is not None
        self._log_refused(
            self._loop.time(),
            listener=listener.config.name,
            peer=peer_text(peer),
            reason=refusal.reason,
            rule=refusal.rule,
        )

    def _out_of_descriptors(self, listener: _Listener, exc: OSError) -> None:
        assert self._loop is not None
        self._counts.accept_paused += 1
        self._pause(listener)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._log_exhausted(
            self._loop.time(),
            listener=listener.config.name,
            error=exc.strerror,
            nofile_limit=soft,
            connections=self._admission.stats()["connections_open"],
            pause=f"{ACCEPT_PAUSE}s",
            paused=self._counts.accept_paused,
        )

    def _hand_over(self, listener: _Listener, fd: int, peer: _Address, admitted: bool) -> None:
        """Start accepted socket ``fd``: the engine's socket set's at once on an owned
        listener without a PROXY header (the set routes it in a node of shards), else
        through the loop (the PROXY header first, TLS, WebSocket). Both loops make a
        transport's socket non-blocking and set TCP_NODELAY (asyncio because the
        listening socket's protocol, and so the accepted one's, is IPPROTO_TCP); the
        socket set does the same for its own."""
        if listener.owned and not listener.config.proxy_protocol:
            self._own(listener, fd, peer, b"", route=True)
            return
        conn = socket.socket(fileno=fd)
        accepted = _Accepted(listener, conn, peer, admitted, self._admission)
        release = accepted.release
        if listener.config.proxy_protocol:
            started = self._proxied(accepted, release)
        else:
            started = self._connect(listener, conn, self._protocol(accepted, release))
        self._start(started, partial(self._handed_over, accepted, release))

    def _start(
        self,
        started: Coroutine[Any, Any, object],
        done: Callable[[asyncio.Task[object]], None],
    ) -> None:
        """Run ``started`` (a transport being made) as a task the listeners cancel when
        they close; ``done`` is given the task when it ends."""
        assert self._loop is not None
        task: asyncio.Task[object] = self._loop.create_task(started)
        self._counts.pending.add(task)
        task.add_done_callback(self._counts.pending.discard)
        task.add_done_callback(done)

    def _connect(
        self, listener: _Listener, conn: socket.socket, protocol: asyncio.BaseProtocol
    ) -> Coroutine[Any, Any, object]:
        """The loop's transport around ``conn`` (with TLS on a tls/wss listener)."""
        assert self._loop is not None
        if listener.tls is None:
            return self._loop.connect_accepted_socket(lambda: protocol, conn)
        return self._loop.connect_accepted_socket(
            lambda: protocol,
            conn,
            ssl=listener.tls,
            ssl_handshake_timeout=self._handshake_timeout,
            **self._shutdown_timeout,
        )

    async def _proxied(self, accepted: _Accepted, release: Callable[[], None]) -> object:
        """A proxy listener's connection: its PROXY header first (the client's address
        from here on), then the transport as on any listener."""
        assert self._loop is not None
        listener = accepted.listener
        if not is_trusted(accepted.peer[0], listener.trusted):
            where = listener_path(listener.index, listener.config)
            raise ProxyHeaderError(
                f"not among {where}.proxy_trusted, so no PROXY header is taken from it"
            )
        accepted.sock.setblocking(False)
        try:
            header = await asyncio.wait_for(
                read_proxy_header(self._loop, accepted.sock), self._handshake_timeout
            )
        except asyncio.TimeoutError:
            raise ProxyHeaderError(
                "no complete PROXY header within limits.connect_timeout"
            ) from None
        if header.source is not None:
            accepted.peer = header.source
        refusal = self._admission.admit(listener.config.name, accepted.peer[0])
        if refusal is not None:
            self._refused(listener, refusal, accepted.peer)
            raise _NotAdmitted
        accepted.admitted = True
        if listener.owned:
            self._own(listener, accepted.sock.detach(), accepted.peer, b"", route=True)
            return None
        return await self._connect(listener, accepted.sock, self._protocol(accepted, release))

    def _own(self, listener: _Listener, fd: int, peer: _Address, data: bytes, route: bool) -> None:
        """Give socket ``fd`` (admitted, or adopted from another shard) to the engine's
        socket set, fed ``data`` (bytes another shard read) first; with ``route``, in
        a node of shards, the set reads its CONNECT first and may give it up to be
        handed over (:meth:`_sockets_left`). Its admission slots are given back when
        the set reports its end; if it cannot be watched (out of memory), at once."""
        assert self._hub is not None and self._loop is not None
        hub = self._hub
        host, port = str(peer[0]), int(peer[1])
        try:
            hub.sockets.adopt(fd, listener.index, host, port, route, data, hub.now())
        except OSError as exc:
            self._admission.released(listener.config.name, host)
            self._log_refused(
                self._loop.time(),
                listener=listener.config.name,
                peer=peer_text(peer),
                reason=str(exc),
                rule="-",
            )
            return
        hub.schedule_flush()

    def _sockets_left(
        self,
        closed: list[tuple[int | None, int, str]],
        handovers: list[tuple[int, int, str, int, bytes, int]],
    ) -> None:
        """Sockets that left the engine's socket set: those that ended give their slots
        back; those whose CONNECT named another shard go there (the routing's)."""
        for conn, index, host in closed:
            self._admission.released(self._listeners[index].config.name, host)
            if conn is not None:
                self._admission_closed(conn)
        if handovers:
            routing = self._routing
            assert routing is not None  # the set hands over only in a node of shards
            for fd, index, host, port, data, owner in handovers:
                routing.hand_socket(index, fd, (host, port), data, owner)

    def _through_loop(self, index: int, fd: int, peer: tuple[str, int], data: bytes) -> None:
        """A hook of the routing: admitted plain socket ``fd``, which the socket set gave
        up with ``data`` too large for one hand-over message, onto the loop's
        transport behind a router fed ``data``, which relays it to its owner."""
        listener = self._listeners[index]
        accepted = _Accepted(listener, socket.socket(fileno=fd), peer, True, self._admission)
        release = accepted.release
        protocol = self._after_preamble(accepted, release, "mqtt", data)
        self._start(
            self._connect(listener, accepted.sock, protocol),
            partial(self._handed_over, accepted, release),
        )

    def _protocol(self, accepted: _Accepted, release: Callable[[], None]) -> asyncio.BaseProtocol:
        """The connection's first protocol: the WebSocket upgrade on a ws/wss listener
        (which makes the next one once it upgrades), else the one after the preamble."""
        config = accepted.listener.config
        if config.protocol not in WEBSOCKET_PROTOCOLS:
            return self._after_preamble(accepted, release, "mqtt", b"")
        return UpgradeProtocol(
            config.path,
            config.origins,
            self._handshake_timeout,
            partial(self._after_preamble, accepted, release, "websocket"),
            partial(self._upgrade_refused, accepted),
            release,
        )

    def _after_preamble(
        self, accepted: _Accepted, release: Callable[[], None], framing: Framing, preread: bytes
    ) -> asyncio.BufferedProtocol:
        """The protocol that follows the preamble: in a node of several shards the
        routing's router, which finds the client id's owner, else MQTT. ``preread``:
        bytes the preamble read."""
        if self._routing is None:
            return self._mqtt_protocol(accepted, release, framing, preread)
        peer = (str(accepted.peer[0]), int(accepted.peer[1]))
        serve = partial(self._serve_routed, accepted, release, framing)
        return self._routing.router(accepted.listener.index, peer, framing, preread, release, serve)

    def _serve_routed(
        self,
        accepted: _Accepted,
        release: Callable[[], None],
        framing: Framing,
        transport: asyncio.Transport,
        data: bytes,
    ) -> None:
        """A routed connection this shard owns: the MQTT protocol takes its transport
        over from the router, fed the bytes the router read."""
        protocol = self._mqtt_protocol(accepted, release, framing, data)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def _mqtt_protocol(
        self,
        accepted: _Accepted,
        release: Callable[[], None],
        framing: Framing,
        preread: bytes,
        certificate: str | None = None,
    ) -> _CountedProtocol:
        """The MQTT protocol; ``certificate`` is a relayed hand-over's client identity."""
        assert self._hub is not None
        config = accepted.listener.config
        closed = self._admission_closed
        peer = accepted.named_peer  # for IOHub.peer (else the hub asks the transport)
        if config.require_certificate:
            identity: Callable[[asyncio.BaseTransport], str | None] = (
                (lambda _: certificate) if accepted.handed else partial(_identity, config)
            )
            return _CertifiedProtocol(
                self._hub,
                release,
                closed,
                framing,
                peer,
                self._names,
                preread,
                config,
                self._certificates,
                identity,
            )
        return _CountedProtocol(
            self._hub, release, closed, framing, peer, config.name, self._names, preread
        )

    def _certificate(self, index: int, transport: asyncio.BaseTransport) -> str | None:
        """A hook of the routing: the identity a relayed hand-over carries, that of the
        client certificate on a listener with ``require_certificate``."""
        config = self._listeners[index].config
        return _identity(config, transport) if config.require_certificate else None

    def _serve_handed(self, handed: Handed, sock: socket.socket) -> None:
        """A hook of the routing: a connection another shard handed over (its slots
        taken over already), served with the listener's MQTT protocol, fed the bytes
        that came with it: a plain socket in the engine's socket set, not routed again,
        any other over the loop's transport."""
        listener = self._listeners[handed.listener]
        if listener.owned and handed.framing == "mqtt" and handed.certificate is None:
            self._own(listener, sock.detach(), handed.peer, handed.data, route=False)
            return
        assert self._loop is not None
        accepted = _Accepted(
            listener, sock, handed.peer, admitted=True, admission=self._admission, handed=True
        )
        release = accepted.release
        protocol = self._mqtt_protocol(
            accepted, release, handed.framing, handed.data, handed.certificate
        )
        started = self._loop.connect_accepted_socket(lambda: protocol, sock)
        self._start(started, partial(self._handed_over, accepted, release))

    def _handed_over(
        self, accepted: _Accepted, release: Callable[[], None], task: asyncio.Task[object]
    ) -> None:
        if task.cancelled():
            release()  # the broker stops
            accepted.sock.close()
            return
        error = task.exception()
        clients = accepted.listener.clients
        if error is None:
            started = task.result()  # (transport, protocol), or None: given to the engine
            if clients is not None and isinstance(started, tuple):
                revoked = clients.add(started[0])
                if revoked is not None:
                    self._revoked(accepted.listener, revoked)
            return
        # The transport never started: the peer left at once, its PROXY header was
        # missing or bad, or its TLS handshake failed or timed out.
        release()
        accepted.sock.close()
        if isinstance(error, ProxyHeaderError):
            self._closed_before_mqtt(accepted, "refused_proxy_header", self._log_proxy, str(error))
        elif isinstance(error, _NotAdmitted):
            pass  # logged and counted by admission's refusal
        elif accepted.listener.tls is not None and not accepted.handed:
            why = str(error) or type(error).__name__
            self._closed_before_mqtt(accepted, "tls_handshake_failed", self._log_handshake, why)

    def _upgrade_refused(self, accepted: _Accepted, why: str) -> None:
        self._closed_before_mqtt(accepted, "refused_websocket_upgrade", self._log_upgrade, why)

    def _closed_before_mqtt(
        self, accepted: _Accepted, kind: _PreambleFailure, log: RateLimitedLog, why: str
    ) -> None:
        """A connection closed in its preamble (PROXY header, TLS handshake, WebSocket
        upgrade): counted under ``kind`` (its stats key) and logged, rate-limited."""
        assert self._loop is not None
        failures = self._counts.failures
        failures[kind] += 1
        log(
            self._loop.time(),
            listener=accepted.listener.config.name,
            peer=peer_text(accepted.peer),
            why=why,
            total=failures[kind],
        )
