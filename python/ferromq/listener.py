"""Listeners: the broker's own accept path, the one place a new connection is decided.

The broker binds, listens and accepts itself instead of calling ``loop.create_server``:

- **Bind before anything else.** :meth:`Listeners.bind` binds and listens on every
  configured address before the store opens, so a port in use is a one-line
  :class:`ListenError` with nothing created on disk. Connections that arrive while the
  store restores wait in the kernel's backlog; :meth:`Listeners.serve` starts accepting.
- **Accept until EAGAIN.** Each listening socket is non-blocking and registered with
  ``loop.add_reader``; one readiness accepts up to :data:`ACCEPT_BATCH` sockets (so one
  busy listener cannot hold the loop) and hands each to
  ``loop.connect_accepted_socket``, which makes the loop's own transport (uvloop's or
  asyncio's) around an :class:`~ferromq._protocol.MqttProtocol`.
- **max_connections at accept.** A connection counts from accept until
  ``connection_lost``, against its listener's ``max_connections`` and the broker's
  ``limits.max_connections`` (0: no limit). Over either, the socket is closed before a
  byte is read, counted by reason (``$SYS/broker/clients/refused/...``) and logged at
  most once per :data:`LOG_INTERVAL`.
- **File descriptors exhausted.** ``accept`` failing with EMFILE/ENFILE (or the kernel
  out of buffers) pauses accepting for :data:`ACCEPT_PAUSE`: the listener leaves the
  loop, the waiting connections stay in the backlog and are served once descriptors
  free up, and existing connections go on. Each pause is counted
  (``$SYS/broker/clients/accept_paused/fd_exhausted``) and logged at most once per
  :data:`LOG_INTERVAL` with the RLIMIT_NOFILE limit. For comparison, libuv (uvloop's
  ``create_server``) frees a reserved descriptor, accepts the waiting connections and
  closes them at once, logging nothing: clients see a reset; asyncio logs a traceback
  through the loop's exception handler and retries after a second.

Cost: per connection (never per message) one Python call, a socket object and a
``connect_accepted_socket`` task. Checked locally (2-core VM shared with other jobs;
9,000 connect + CONNECT + CONNACK + close from 3 client threads, broker CPU time per
connection): asyncio unchanged against ``create_server`` (60-75 µs either way); uvloop
from about 20-35 µs (libuv accepts in C) to 35-50 µs, 10-16k connects/s against
15-26k. Starting the coroutine eagerly instead of as a task measured no better. PROXY
protocol and TLS handshakes will hang off :meth:`Listeners._hand_over`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from ferromq._protocol import IOHub, MqttProtocol
from ferromq.config import ListenerConfig
from ferromq.log import log_event

__all__ = ["ListenError", "Listeners"]

logger = logging.getLogger("ferromq.listener")

ACCEPT_BATCH: Final = 128
"""Sockets accepted per readiness of one listening socket."""
ACCEPT_PAUSE: Final = 0.25
"""Seconds accepting pauses after running out of file descriptors."""
LOG_INTERVAL: Final = 10.0
"""Seconds between two log lines about the same accept-path condition."""
BACKLOG: Final = 4096

# accept() failures that mean "no descriptor or memory for one more socket now".
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# accept() failures of one connection that ended before it was taken (accept(2), "Error
# handling"): skip it and go on.
_PEER_GONE: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


class ListenError(Exception):
    """A listener that cannot be opened; the message names it, its address and why."""


class _RateLimitedLog:
    """One log line per :data:`LOG_INTERVAL` at most; the next line says how many were
    held back."""

    def __init__(self, level: int, message: str) -> None:
        self._level = level
        self._message = message
        self._next_at = 0.0
        self._held_back = 0

    def __call__(self, now: float, **fields: object) -> None:
        if now < self._next_at:
            self._held_back += 1
            return
        log_event(logger, self._level, self._message, **fields, since_last=self._held_back)
        self._next_at = now + LOG_INTERVAL
        self._held_back = 0


@dataclass
class _Listener:
    index: int
    config: ListenerConfig
    sockets: list[socket.socket]
    open: int = 0

    @property
    def where(self) -> str:
        return _where(self.index, self.config)


@dataclass
class _Counts:
    open: int = 0
    refused_listener: int = 0
    refused_broker: int = 0
    accept_paused: int = 0
    pending: set[asyncio.Task[object]] = field(default_factory=set)


class _CountedProtocol(MqttProtocol):
    """An ``MqttProtocol`` that gives its slot back once, when its connection ends."""

    def __init__(self, hub: IOHub, release: Callable[[], None]) -> None:
        super().__init__(hub)
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self.release()


def _where(index: int, config: ListenerConfig) -> str:
    """How errors and logs name a listener: its key path and its name."""
    return f"listeners[{index}] ({config.name})"


def _bind(index: int, config: ListenerConfig) -> list[socket.socket]:
    where = _where(index, config)
    try:
        infos = socket.getaddrinfo(
            config.host, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(f"{where}: cannot resolve host {config.host!r}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    for family, kind, proto, _, address in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        sockets.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            for opened in sockets:
                opened.close()
            shown = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
            raise ListenError(
                f"{where}: cannot listen on {shown}:{config.port}: {exc.strerror}"
            ) from None
    return sockets


class Listeners:
    """Every listener of one broker and the broker-wide connection count."""

    def __init__(self, listeners: list[_Listener], max_connections: int) -> None:
        self._listeners = listeners
        self._max_connections = max_connections
        self._counts = _Counts()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hub: IOHub | None = None
        self._log_refused = _RateLimitedLog(logging.WARNING, "connection refused at accept")
        self._log_exhausted = _RateLimitedLog(
            logging.ERROR, "accept paused: out of file descriptors"
        )

    @classmethod
    def bind(cls, configs: tuple[ListenerConfig, ...], max_connections: int) -> Listeners:
        """Bind and listen on every address (not accepting yet). Raises
        :class:`ListenError`, having closed what it opened."""
        listeners: list[_Listener] = []
        try:
            for index, config in enumerate(configs):
                listeners.append(_Listener(index, config, _bind(index, config)))
        except ListenError:
            for listener in listeners:
                for sock in listener.sockets:
                    sock.close()
            raise
        return cls(listeners, max_connections)

    def stats(self) -> dict[str, int]:
        counts = self._counts
        return {
            "connections_open": counts.open,
            "refused_listener_max_connections": counts.refused_listener,
            "refused_max_connections": counts.refused_broker,
            "accept_paused_fd_exhausted": counts.accept_paused,
        }

    def serve(self, loop: asyncio.AbstractEventLoop, hub: IOHub) -> None:
        """Start accepting on every listener."""
        self._loop, self._hub = loop, hub
        for listener in self._listeners:
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

    def close(self) -> None:
        """Stop accepting and close the listening sockets; accepted connections stay."""
        for listener in self._listeners:
            for sock in listener.sockets:
                if self._loop is not None:
                    self._loop.remove_reader(sock.fileno())
                sock.close()
        for task in self._counts.pending:
            task.cancel()

    def _resume(self, listener: _Listener) -> None:
        assert self._loop is not None
        for sock in listener.sockets:
            if sock.fileno() >= 0:  # not closed by close() during a pause
                self._loop.add_reader(sock.fileno(), self._accept, listener, sock)

    def _pause(self, listener: _Listener) -> None:
        assert self._loop is not None
        for sock in listener.sockets:
            self._loop.remove_reader(sock.fileno())
        self._loop.call_later(ACCEPT_PAUSE, self._resume, listener)

    def _accept(self, listener: _Listener, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _PEER_GONE:
                    continue
                if exc.errno in _EXHAUSTED:
                    self._out_of_descriptors(listener, exc)
                    return
                raise
            refused = self._refusal(listener)
            if refused is None:
                self._hand_over(listener, conn)
            else:
                conn.close()
                self._refused(listener, refused)

    def _refusal(self, listener: _Listener) -> str | None:
        """Why the connection just accepted on ``listener`` must be closed, if it must."""
        limit = listener.config.max_connections
        if limit and listener.open >= limit:
            return "listener"
        if self._max_connections and self._counts.open >= self._max_connections:
            return "broker"
        return None

    def _refused(self, listener: _Listener, reason: str) -> None:
        assert self._loop is not None
        counts = self._counts
        if reason == "listener":
            counts.refused_listener += 1
            key, limit = f"{listener.where}.max_connections", listener.config.max_connections
        else:
            counts.refused_broker += 1
            key, limit = "limits.max_connections", self._max_connections
        self._log_refused(
            self._loop.time(),
            listener=listener.config.name,
            limit=f"{key} = {limit}",
            refused=counts.refused_listener + counts.refused_broker,
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
            connections=self._counts.open,
            pause=f"{ACCEPT_PAUSE}s",
            paused=self._counts.accept_paused,
        )

    def _hand_over(self, listener: _Listener, conn: socket.socket) -> None:
        # Both loops make the socket non-blocking and set TCP_NODELAY (asyncio because
        # the listening socket's protocol, and so the accepted one's, is IPPROTO_TCP).
        assert self._loop is not None and self._hub is not None
        listener.open += 1
        self._counts.open += 1
        protocol = _CountedProtocol(self._hub, partial(self._release, listener))
        task: asyncio.Task[object] = self._loop.create_task(
            self._loop.connect_accepted_socket(lambda: protocol, conn)
        )
        self._counts.pending.add(task)
        task.add_done_callback(partial(self._handed_over, protocol, conn))

    def _handed_over(
        self, protocol: _CountedProtocol, conn: socket.socket, task: asyncio.Task[object]
    ) -> None:
        self._counts.pending.discard(task)
        if task.cancelled() or task.exception() is not None:
            # The transport never started (the peer left at once, or the broker stops).
            protocol.release()
            conn.close()

    def _release(self, listener: _Listener) -> None:
        listener.open -= 1
        self._counts.open -= 1
