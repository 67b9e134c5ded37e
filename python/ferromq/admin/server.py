"""``AdminServer``: an admin application's life in an event loop.

A broker's (:meth:`AdminServer.bind`) follows the MQTT listeners' start-up: it is bound
with ``Listeners.bind``, before the store is opened (the token file is read, the TLS
context built, the sockets bound by :func:`ferromq.sockets.bind_sockets`, so a port in
use is the same one-line :class:`~ferromq.sockets.ListenError` and exit status 4, and
leaves nothing on disk); :meth:`AdminServer.start` serves once the MQTT listeners
accept; :meth:`AdminServer.close` stops it first thing at shutdown. A shard of a node
binds its private unix socket instead (``private``: plain HTTP, the same token;
:mod:`ferromq.shard.private`, :func:`bind_shard_admin`), and a node's supervisor
builds one over its shards (:func:`ferromq.node.admin.bind_node_admin`). The
application is aiohttp's, its routes those of a module table
(:data:`ferromq.admin.routes.MODULES`, :data:`~ferromq.admin.routes.NODE_MODULES`)
behind the bearer-token middleware (:mod:`ferromq.admin.auth`). No access log: one
line per scrape would drown the broker's own.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from ferromq.admin.auth import bearer_auth, load_token
from ferromq.admin.routes import MODULES, AdminRoutes, Routes
from ferromq.config import AdminConfig, ListenerConfig
from ferromq.log import log_event
from ferromq.shard.private import bind_private, private_address, shown
from ferromq.sockets import bind_sockets
from ferromq.tls import server_context

if TYPE_CHECKING:
    from ferromq.broker import Broker

__all__ = ["AdminServer", "AppBuilder", "admin_tls_context", "bind_shard_admin"]

logger = logging.getLogger("ferromq.admin")

AppBuilder = Callable[[web.Application], Routes]
"""Adds an application's routes (a module table's) and returns them."""


def admin_tls_context(config: AdminConfig) -> ssl.SSLContext | None:
    """The HTTPS context of ``certfile``/``keyfile`` (the MQTT listeners' one builder);
    None for plain HTTP. Raises :class:`~ferromq.config.ConfigError` naming the key."""
    if not config.certfile:
        return None
    listener = ListenerConfig(protocol="tls", certfile=config.certfile, keyfile=config.keyfile)
    return server_context("admin", listener)


def _broker_routes(
    broker: Broker, config: AdminConfig, shard: bool, app: web.Application
) -> Routes:
    routes = AdminRoutes(app, broker, config, shard=shard)
    for register in MODULES:
        register(routes)
    return routes


class AdminServer:
    def __init__(
        self,
        build: AppBuilder,
        sockets: list[socket.socket],
        tls: ssl.SSLContext | None,
        token: str | None,
    ) -> None:
        self._build = build
        self._sockets = sockets
        self._tls = tls
        self._token = token
        self._runner: web.AppRunner | None = None

    @classmethod
    def bind(cls, broker: Broker, config: AdminConfig, private: str | None = None) -> AdminServer:
        """Read the token, build the TLS context, bind ``config``'s address, or the
        unix socket ``private`` (a shard's). Raises ``ConfigError`` or ``ListenError``
        (nothing left open)."""
        token = load_token(config)
        build = partial(_broker_routes, broker, config, private is not None)
        if private is not None:
            return cls(build, [bind_private("shard admin socket", private)], None, token)
        tls = admin_tls_context(config)
        sockets = bind_sockets("admin listener", config.host, config.port)
        return cls(build, sockets, tls, token)

    async def start(self) -> None:
        app = web.Application()
        routes = self._build(app)
        app.middlewares.append(bearer_auth(self._token, frozenset(routes.public)))
        # Requests are short: shutdown does not wait for a slow client for long.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        for sock in self._sockets:
            await web.SockSite(self._runner, sock, ssl_context=self._tls).start()
            name = sock.getsockname()
            log_event(
                logger,
                logging.INFO,
                "admin listening",
                address=f"{name[0]}:{name[1]}" if isinstance(name, tuple) else shown(name),
                protocol="https" if self._tls else "http",
                token=self._token is not None,
            )

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        for sock in self._sockets:
            sock.close()


def bind_shard_admin(broker: Broker, index: int, node: int | None = None) -> AdminServer:
    """Shard ``index``'s admin application, bound on its private socket (``node``: the
    supervisor's pid, by default this process's parent). Raises ``ConfigError`` or
    ``ListenError``."""
    node = os.getppid() if node is None else node
    return AdminServer.bind(broker, broker.config.admin, private_address(node, "admin", index))
