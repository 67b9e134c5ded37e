"""``[[bridges]]``: connections this broker opens to other MQTT brokers (an edge broker
bridged to a central one), each carrying ``out`` topics there and ``in`` topics here.

A bridge is a client of the remote broker only for its first packets: this module dials
(TCP or TLS), sends CONNECT (persistent session; in 3.1.1 with Mosquitto's bridge flag
when ``try_private``) and the SUBSCRIBE of the ``in`` topics (v5: No Local, Retain As
Published), then hands the transport to the engine (``Engine.open_bridge``,
``rust/ferromq-core/src/engine/bridge.rs``), which serves it as a subscriber of the
``out`` topics and a publisher of what arrives, with no Python per message. Bytes the
remote sent after CONNACK (its queued messages) go to the engine in order; the SUBACK
is taken out. Python keeps the client's duties the engine does not have: the PINGREQ
every ``keepalive`` (the engine closes the connection if nothing arrives for 1.5 times
that), and reconnecting with exponential backoff (``reconnect_min`` doubling to
``reconnect_max``, with jitter) whenever the connection ends.

On a node of shards the bridge runs on the shard that owns its client id (where its
session lives). In a cluster one member runs each bridge at a time: the one holding it
in Redis (:meth:`ferromq.cluster.node.ClusterNode.hold`, renewed every third of
``[cluster] lease``), which first claims the bridge's client id (its session moves
there, adopted from a dead holder); a holder that cannot renew closes the connection,
and another member takes the bridge once the lease runs out. Each bridge's state is
logged on change and counted for the metrics (:class:`BridgeState`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
from dataclasses import dataclass, field
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from ferromq._core import BridgeLink, FrameDecoder, encode, shard_of
from ferromq._protocol import IOHub, MqttProtocol
from ferromq.config import BridgeConfig, BridgeTopicConfig, ConfigError, require
from ferromq.engine import hand_to_engine
from ferromq.log import log_event
from ferromq.shard.identity import ShardIdentity
from ferromq.websocket_client import ClientFrames, WebSocketRefused, upgrade_request

__all__ = [
    "BridgeRefused",
    "BridgeState",
    "Bridges",
    "bridge_link",
    "bridge_stats",
    "check_bridges",
]

logger = logging.getLogger("ferromq.bridge")

_HANDSHAKE_SECONDS = 10.0
_PINGREQ = b"\xc0\x00"
_CONNACK, _SUBACK = 2, 9
_TRY_PRIVATE = 0x80  # Mosquitto's bridge flag on the protocol level byte


class ClusterSeat(Protocol):
    """What a cluster member offers a bridge (:class:`ferromq.cluster.node.ClusterNode`)."""

    async def hold(self, resource: str) -> bool: ...

    async def claim(self, client_id: str, may_persist: bool) -> None: ...


class BridgeRefused(Exception):
    """The remote broker refused the CONNECT, or the cluster the bridge's client id;
    the text says which."""


@dataclass
class BridgeState:
    """What a bridge is doing, for the log, the metrics and the admin API."""

    name: str
    connected: bool = False
    connects: int = 0
    failures: int = 0
    last_error: str | None = None
    refused_filters: list[str] = field(default_factory=list)


def bridge_stats(states: list[BridgeState]) -> dict[str, int]:
    """``states`` summed (a node sums its shards'), for the metrics and ``$SYS``; zeros
    without bridges."""
    return {
        "bridges_connected": sum(state.connected for state in states),
        "bridge_connects": sum(state.connects for state in states),
        "bridge_failures": sum(state.failures for state in states),
    }


def bridge_link(config: BridgeConfig) -> BridgeLink:
    """The engine's view of ``config``; raises ValueError naming a bad topic."""
    return BridgeLink(
        config.client_id or f"ferromq-bridge-{config.name}",
        5 if config.version == "5" else 4,
        [(t.pattern, t.qos, t.local_prefix, t.remote_prefix) for t in _topics(config, "out")],
        [(t.pattern, t.qos, t.local_prefix, t.remote_prefix) for t in _topics(config, "in")],
        config.keepalive,
        config.max_queued_bytes,
    )


def check_bridges(configs: tuple[BridgeConfig, ...]) -> None:
    """Raise :class:`ConfigError` naming the first bad ``[[bridges]]`` key."""
    names: dict[str, int] = {}
    for index, config in enumerate(configs):
        where = f"bridges[{index}]"
        require(config, where, "name", "address")
        if config.name in names:
            raise ConfigError(
                f"{where}.name: {config.name!r} is already the name of "
                f"bridges[{names[config.name]}]"
            )
        names[config.name] = index
        try:
            remote = endpoint(config)
        except ValueError as exc:
            raise ConfigError(f"{where}.address: {exc}") from None
        if not config.topics:
            raise ConfigError(f"{where}.topics: at least one [[bridges.topics]] is required")
        for n, topic in enumerate(config.topics):
            require(topic, f"{where}.topics[{n}]", "pattern")
        if config.reconnect_max < config.reconnect_min:
            raise ConfigError(f"{where}.reconnect_max: less than reconnect_min")
        try:
            bridge_link(config)
        except ValueError as exc:
            raise ConfigError(f"{where}.topics: {exc}") from None
        try:
            _tls_context(config, remote)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{where}: TLS files: {exc}") from None


@dataclass(frozen=True)
class Endpoint:
    """Where a bridge connects: ``host:port`` (TCP, or TLS with ``tls``), or a
    ``ws://`` / ``wss://`` URL (MQTT over WebSocket at ``path``; ``wss`` is TLS)."""

    host: str
    port: int
    tls: bool
    path: str | None = None  # the WebSocket path; None: MQTT straight over TCP/TLS


def endpoint(config: BridgeConfig) -> Endpoint:
    """The bridge's endpoint from ``address``; :class:`ValueError` says what is wrong."""
    address = config.address
    scheme, found, _ = address.partition("://")
    if not found:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port or a ws:// or wss:// URL, got {address!r}")
        return Endpoint(host.strip("[]"), int(port), config.tls)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"scheme {scheme!r}: expected ws or wss, got {address!r}")
    parts = urlsplit(address)
    try:
        number = parts.port or (443 if scheme == "wss" else 80)
    except ValueError:
        raise ValueError(f"bad port in {address!r}") from None
    if not parts.hostname:
        raise ValueError(f"no host in {address!r}")
    path = (parts.path or "/mqtt") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(parts.hostname, number, scheme == "wss" or config.tls, path)


def _topics(config: BridgeConfig, direction: str) -> list[BridgeTopicConfig]:
    return [t for t in config.topics if t.direction in (direction, "both")]


def _fixed_header(buffer: bytes | bytearray) -> tuple[int, int] | None:
    """The length of the first MQTT frame's fixed header in ``buffer`` and its
    remaining length, or None when the header is not whole."""
    length, shift = 0, 0
    for at in range(1, min(len(buffer), 5)):
        byte = buffer[at]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return at + 1, length
        shift += 7
    return None


def _frame_end(buffer: bytes | bytearray) -> int | None:
    """Where the first MQTT frame in ``buffer`` ends, or None when it is not whole."""
    header = _fixed_header(buffer)
    end = None if header is None else sum(header)
    return end if end is not None and end <= len(buffer) else None


class _Handshake(asyncio.Protocol):
    """The bridge's first packets: CONNACK, then SUBACK when it subscribed. Frames
    other than those (the remote's queued PUBLISHes) are kept, in order, for the
    engine."""

    def __init__(self, version: int, frames: ClientFrames | None) -> None:
        self._decoder = FrameDecoder(protocol_version=version)
        self._frames = frames
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.kept = bytearray()
        self._waiting: asyncio.Future[dict[str, Any]] | None = None
        self._wanted = _CONNACK
        self._got: dict[str, Any] | None = None
        self._lost: Exception | None = None
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if frames is None:
            self.upgraded.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, and create_connection
        # may return before this runs: send() takes the transport too.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, transport: asyncio.Transport, packet: bytes) -> None:
        """Write an MQTT packet (in a masked frame over WebSocket)."""
        self._transport = transport
        transport.write(self._frames.frame(packet) if self._frames else packet)

    def data_received(self, data: bytes) -> None:
        if self._frames is not None:
            try:
                data = self._frames.feed(data)
            except WebSocketRefused as exc:
                self._fail(BridgeRefused(str(exc)))
                return
            if self._frames.upgraded and not self.upgraded.done():
                self.upgraded.set_result(None)
            if self._frames.replies and self._transport is not None:
                self._transport.write(bytes(self._frames.replies))
                self._frames.replies.clear()
        self._buffer += data
        while (end := _frame_end(self._buffer)) is not None:
            frame, self._buffer = bytes(self._buffer[:end]), self._buffer[end:]
            if self._got is None and frame[0] >> 4 == self._wanted:
                packets, _, error = self._decoder.decode_buffer(frame)
                if error is not None:
                    self._fail(BridgeRefused(f"the remote broker sent a bad packet: {error}"))
                    return
                self._got = packets[0]
                if self._waiting is not None and not self._waiting.done():
                    self._waiting.set_result(self._got)
            else:
                self.kept += frame
        # Whatever is left is the start of a frame: the engine reads the rest.

    def leftover(self) -> bytes:
        """What the engine reads first: the bytes read past the handshake's packets
        (as WebSocket bytes over WebSocket)."""
        mqtt = bytes(self.kept + self._buffer)
        return self._frames.rest(mqtt) if self._frames is not None else mqtt

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError("the remote broker closed the connection"))

    def _fail(self, error: Exception) -> None:
        self._lost = error
        for waiting in (self._waiting, self.upgraded):
            if waiting is not None and not waiting.done():
                waiting.set_exception(error)

    async def packet(self, kind: int) -> dict[str, Any]:
        """The next packet of type ``kind`` (CONNACK, SUBACK)."""
        if self._lost is not None:
            raise self._lost
        self._wanted, self._got = kind, None
        self._waiting = asyncio.get_running_loop().create_future()
        self.data_received(b"")  # a frame of that kind may be buffered already
        return await asyncio.wait_for(self._waiting, _HANDSHAKE_SECONDS)


class _BridgeProtocol(MqttProtocol):
    """The engine's side of a bridge connection: opened as a bridge, then fed what the
    handshake read past its packets."""

    __slots__ = ("_bridge_hub", "_closed", "_link", "_preread", "_websocket_seed")

    def __init__(
        self,
        hub: IOHub,
        link: BridgeLink,
        preread: bytes,
        closed: asyncio.Future[None],
        websocket: bool,
    ) -> None:
        super().__init__(hub, "mqtt", None)
        self._bridge_hub = hub
        self._link = link
        self._preread = preread
        self._closed = closed
        # Over WebSocket the engine masks our frames with keys from this seed.
        self._websocket_seed = int.from_bytes(os.urandom(8), "big") if websocket else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        hub = self._bridge_hub
        hub.engine.open_bridge(self.conn, self._link, hub.now(), self._websocket_seed)
        hand_to_engine(self, self._preread)
        self._preread = b""
        hub.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            if not self._closed.done():
                self._closed.set_result(None)


class Bridge:
    """One ``[[bridges]]`` entry: connected, served by the engine, reconnected; in a
    cluster, only while this member holds it (``seat``, renewed every ``renew_every``
    seconds)."""

    def __init__(
        self,
        config: BridgeConfig,
        hub: IOHub,
        seat: ClusterSeat | None = None,
        renew_every: float = 0.0,
    ) -> None:
        self.config = config
        self.state = BridgeState(config.name)
        self._hub = hub
        self._link = bridge_link(config)
        self._endpoint = endpoint(config)
        self._tls = _tls_context(config, self._endpoint)
        self._pingreq = _PINGREQ
        self._seat = seat
        self._renew_every = renew_every

    async def run(self) -> None:
        config = self.config
        delay = config.reconnect_min
        while True:
            try:
                await self._seated()
                await self._serve_once()
                delay = config.reconnect_min  # it was up: start over from the shortest
            except Exception as exc:  # a bridge retries whatever ended it
                if not isinstance(exc, (OSError, BridgeRefused, TimeoutError)):
                    logger.exception("bridge failed", extra={"bridge": config.name})
                self.state.failures += 1
                self.state.last_error = str(exc) or type(exc).__name__
                log_event(
                    logger,
                    logging.WARNING,
                    "bridge could not connect",
                    bridge=config.name,
                    address=config.address,
                    error=self.state.last_error,
                    retry_in=f"{delay:g}s",
                )
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, config.reconnect_max)

    async def _seated(self) -> None:
        """In a cluster: once this member holds the bridge and its client id (the
        session moved here); at once otherwise."""
        if self._seat is None:
            return
        waited = False
        while not await self._seat.hold(f"bridge:{self.config.name}"):
            if not waited:
                log_event(
                    logger, logging.INFO, "bridge held by another member", bridge=self.config.name
                )
                waited = True
            await asyncio.sleep(self._renew_every)
        try:
            await self._seat.claim(self._link.client_id, True)
        except Exception as exc:  # ClaimFailed (not imported: the cluster is an extra)
            raise BridgeRefused(
                f"the cluster did not give this member the bridge's client id: {exc}"
            ) from None

    async def _serve_once(self) -> None:
        config, where = self.config, self._endpoint
        loop = asyncio.get_running_loop()
        frames: ClientFrames | None = None
        request = b""
        if where.path is not None:
            request, accept = upgrade_request(where.host, where.port, where.path)
            frames = ClientFrames(accept)
        transport, handshake = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Handshake(int(self._link.version), frames),
                where.host,
                where.port,
                ssl=self._tls,
                server_hostname=where.host if self._tls else None,
            ),
            _HANDSHAKE_SECONDS,
        )
        try:
            transport.write(request)
            await asyncio.wait_for(handshake.upgraded, _HANDSHAKE_SECONDS)
            await self._handshake(transport, handshake)
        except BaseException:
            transport.abort()
            raise
        self._pingreq = ClientFrames.frame(_PINGREQ) if frames else _PINGREQ
        closed: asyncio.Future[None] = loop.create_future()
        protocol = _BridgeProtocol(
            self._hub, self._link, handshake.leftover(), closed, frames is not None
        )
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        self.state.connected = True
        self.state.connects += 1
        log_event(
            logger, logging.INFO, "bridge connected", bridge=config.name, address=config.address
        )
        try:
            await self._keep(transport, closed)
        finally:
            self.state.connected = False
            if not transport.is_closing():
                transport.close()
        log_event(logger, logging.WARNING, "bridge disconnected", bridge=config.name)

    async def _keep(self, transport: asyncio.Transport, closed: asyncio.Future[None]) -> None:
        """Until the connection ends: a PINGREQ every ``keepalive``; in a cluster the
        hold renewed, and the connection closed once it cannot be."""
        loop = asyncio.get_running_loop()
        keepalive = self.config.keepalive
        next_ping = loop.time() + keepalive
        next_renewal = loop.time() + self._renew_every if self._seat else float("inf")
        while not closed.done():
            wake = min(next_ping, next_renewal)
            await asyncio.wait({closed}, timeout=max(wake - loop.time(), 0))
            if closed.done() or transport.is_closing():
                return
            now = loop.time()
            if now >= next_ping:
                transport.write(self._pingreq)
                next_ping = now + keepalive
            if self._seat is not None and now >= next_renewal:
                if not await self._seat.hold(f"bridge:{self.config.name}"):
                    log_event(
                        logger,
                        logging.WARNING,
                        "bridge no longer held here",
                        bridge=self.config.name,
                    )
                    return
                next_renewal = now + self._renew_every

    async def _handshake(self, transport: asyncio.Transport, handshake: _Handshake) -> None:
        config, link = self.config, self._link
        version = int(link.version)
        connect: dict[str, Any] = {
            "type": "connect",
            "protocol_version": version,
            "client_id": link.client_id,
            "clean_start": False,
            "keep_alive": config.keepalive,
        }
        if config.username:
            connect["username"] = config.username
        if config.password:
            connect["password"] = config.password.encode()
        if version == 5:
            connect["properties"] = [("session_expiry_interval", config.remote_session_expiry)]
        packet = bytearray(encode(connect, version))
        if version == 4 and config.try_private:
            header = _fixed_header(packet)
            assert header is not None, "encode made a whole CONNECT"
            packet[header[0] + 6] |= _TRY_PRIVATE  # after "\0\4MQTT"
        handshake.send(transport, bytes(packet))
        connack = await handshake.packet(_CONNACK)
        code = connack["reason_code"]
        if code:
            raise BridgeRefused(f"CONNECT refused by the remote broker: code 0x{code:02X}")
        inbound = _topics(config, "in")
        if not inbound:
            return
        filters = [
            {
                "filter": f"{t.remote_prefix}{t.pattern}",
                "qos": t.qos,
                "no_local": version == 5,
                "retain_as_published": version == 5,
            }
            for t in inbound
        ]
        subscribe = {"type": "subscribe", "packet_id": 1, "filters": filters}
        handshake.send(transport, encode(subscribe, version))
        suback = await handshake.packet(_SUBACK)
        codes = suback["reason_codes"]
        self.state.refused_filters = [
            str(f["filter"]) for f, code in zip(filters, codes, strict=False) if code >= 0x80
        ]
        if self.state.refused_filters:
            log_event(
                logger,
                logging.WARNING,
                "bridge subscription refused by the remote broker",
                bridge=config.name,
                filters=",".join(self.state.refused_filters),
            )


def _tls_context(config: BridgeConfig, where: Endpoint) -> ssl.SSLContext | None:
    if not where.tls:
        return None
    context = ssl.create_default_context(cafile=config.cafile or None)
    if config.certfile:
        context.load_cert_chain(config.certfile, config.keyfile or None)
    return context


class Bridges:
    """The bridges this shard runs: on a node of shards, those whose client id it
    owns; in a cluster, each while this member holds it (``seat``, renewed every third
    of ``lease`` seconds)."""

    def __init__(
        self,
        configs: tuple[BridgeConfig, ...],
        hub: IOHub,
        shard: ShardIdentity | None,
        seat: ClusterSeat | None = None,
        lease: int = 0,
    ) -> None:
        def mine(config: BridgeConfig) -> bool:
            owner = shard_of(bridge_link(config).client_id, shard.count) if shard else 0
            return shard is None or owner == shard.index

        renew_every = lease / 3
        self.bridges = [
            Bridge(config, hub, seat, renew_every) for config in configs if mine(config)
        ]

    def start(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(bridge.run()) for bridge in self.bridges]

    def states(self) -> list[BridgeState]:
        return [bridge.state for bridge in self.bridges]

    def describe(self) -> list[dict[str, object]]:
        """Each bridge this shard runs as the admin API shows it (``GET /bridges``)."""
        return [
            {
                "name": bridge.state.name,
                "address": bridge.config.address,
                "connected": bridge.state.connected,
                "connects": bridge.state.connects,
                "failures": bridge.state.failures,
                "last_error": bridge.state.last_error,
                "refused_filters": list(bridge.state.refused_filters),
            }
            for bridge in self.bridges
        ]
