"""The broker: one engine, its listeners, its timers and graceful shutdown.

Python's part is per event: it builds the engine from the config, opens the
listeners (each socket gets a Cython ``MqttProtocol`` that feeds the engine),
ticks the engine's clock, publishes $SYS on its interval and stops cleanly. It
never touches a message on the way through (docs/architecture.md).

Shutdown (SIGTERM/SIGINT in ``ferromq serve``): stop accepting, tell v5 clients
DISCONNECT 0x8B (Server shutting down), flush, close every connection. Sessions
live in memory until the persistence issue stores them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ferromq._core import Engine
from ferromq._protocol import IOHub, MqttProtocol, ReadArena
from ferromq.config import Config
from ferromq.log import log_event
from ferromq.sys_topics import sys_messages

logger = logging.getLogger("ferromq.broker")

TICK_SECONDS = 0.5
NEVER_EXPIRES = 0xFFFF_FFFF


def engine_from_config(config: Config) -> Engine:
    limits, session, mqtt5 = config.limits, config.session, config.mqtt5
    return Engine(
        max_packet_size=limits.max_packet_size,
        max_inflight=limits.max_inflight,
        receive_maximum=limits.receive_maximum,
        max_topic_alias=limits.max_topic_alias,
        max_keepalive=limits.max_keepalive,
        connect_timeout_ms=limits.connect_timeout * 1000,
        queue_limit=session.queue_limit,
        drop_policy=session.drop_policy,
        queue_qos0_offline=session.queue_qos0_offline,
        max_session_expiry=session.max_session_expiry or NEVER_EXPIRES,
        persistent_session_expiry=session.default_session_expiry_v311 or NEVER_EXPIRES,
        max_client_id_length=limits.max_client_id_length,
        write_high_water=limits.write_buffer_high_water,
        max_publish_rate=limits.max_publish_rate,
        maximum_qos=mqtt5.maximum_qos,
        retain_available=mqtt5.retain_available,
        wildcard_subscription_available=mqtt5.wildcard_subscription_available,
        subscription_identifiers_available=mqtt5.subscription_identifiers_available,
        shared_subscription_available=mqtt5.shared_subscription_available,
        assign_client_id=mqtt5.assign_client_id,
        response_information_prefix=mqtt5.response_information_prefix,
        outbound_topic_aliases=mqtt5.outbound_topic_aliases,
        validate_utf8_payload=mqtt5.validate_utf8_payload,
        redirect_server_reference=config.redirect.server_reference,
        redirect_permanent=config.redirect.permanent,
    )


class Broker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.engine = engine_from_config(config)
        self._servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._hub: IOHub | None = None
        self._started_at = time.monotonic()
        self.addresses: list[tuple[str, int]] = []

    @property
    def hub(self) -> IOHub:
        assert self._hub is not None, "broker not started"
        return self._hub

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._hub = IOHub(
            self.engine,
            loop,
            ReadArena(),
            self._on_event,
            self.config.limits.write_buffer_high_water,
        )
        hub = self._hub
        for listener in self.config.listeners:
            server = await loop.create_server(
                lambda: MqttProtocol(hub),
                listener.host,
                listener.port,
                reuse_address=True,
                backlog=4096,
            )
            self._servers.append(server)
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                self.addresses.append((host, port))
                log_event(
                    logger,
                    logging.INFO,
                    "listening",
                    listener=listener.name,
                    address=f"{host}:{port}",
                    protocol=listener.protocol,
                )
        self._tasks.append(asyncio.create_task(self._tick_forever()))
        if self.config.sys.interval > 0:
            self._tasks.append(asyncio.create_task(self._publish_sys_forever()))

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        hub = self.hub
        self.engine.shutdown(hub.now())
        hub.flush()
        hub.close_all()
        for server in self._servers:
            await server.wait_closed()
        log_event(logger, logging.INFO, "stopped", **self.engine.stats())

    def _on_event(self, event: tuple[Any, ...]) -> None:
        kind, conn = event[0], event[1]
        if kind == "rejected":
            # Once per refused or aborted connection, never per message.
            _, _, code, name, detail = event
            log_event(
                logger,
                logging.WARNING,
                "connection rejected",
                conn=conn,
                peer=self.hub.peer(conn),
                reason=f"0x{code:02X} {name}",
                detail=detail,
            )
        elif kind == "authenticate":
            # The engine asks Python only when configured to; with no authentication
            # provider configured every CONNECT is accepted in Rust.
            self.engine.complete_connect(conn, 0, self.hub.now())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.engine.tick(self.hub.now())
            self.hub.flush()

    async def _publish_sys_forever(self) -> None:
        while True:
            uptime = int(time.monotonic() - self._started_at)
            now = self.hub.now()
            for topic, payload in sys_messages(self.engine.stats(), uptime):
                self.engine.publish(topic, payload, 0, True, now)
            self.hub.flush()
            await asyncio.sleep(self.config.sys.interval)


async def serve(config: Config, stop: asyncio.Event) -> None:
    """Run a broker until ``stop`` is set."""
    broker = Broker(config)
    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()
