"""``AdminServer``: the admin listener's life in the broker's event loop.

Start-up follows the MQTT listeners': :meth:`AdminServer.bind` runs with
``Listeners.bind``, before the store is opened (the token file is read, the TLS
context built, the sockets bound by :func:`ferromq.listener.bind_sockets`, so a port in
use is the same one-line :class:`~ferromq.listener.ListenError` and exit status 4, and
leaves nothing on disk); :meth:`AdminServer.start` serves once the MQTT listeners
accept; :meth:`AdminServer.close` stops it first thing at shutdown. The application
is aiohttp's, its routes those of :data:`ferromq.admin.routes.MODULES` behind the
bearer-token middleware (:mod:`ferromq.admin.auth`). No access log: one line per
scrape would drown the broker's own.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import TYPE_CHECKING

from aiohttp import web

from ferromq.admin.auth import bearer_auth, load_token
from ferromq.admin.routes import MODULES, AdminRoutes
from ferromq.config import AdminConfig, ListenerConfig
from ferromq.listener import bind_sockets
from ferromq.log import log_event
from ferromq.tls import server_context

if TYPE_CHECKING:
    from ferromq.broker import Broker

__all__ = ["AdminServer", "admin_tls_context"]

logger = logging.getLogger("ferromq.admin")


def admin_tls_context(config: AdminConfig) -> ssl.SSLContext | None:
    """The HTTPS context of ``certfile``/``keyfile`` (the MQTT listeners' one builder);
    None for plain HTTP. Raises :class:`~ferromq.config.ConfigError` naming the key."""
    if not config.certfile:
        return None
    listener = ListenerConfig(protocol="tls", certfile=config.certfile, keyfile=config.keyfile)
    return server_context("admin", listener)


class AdminServer:
    def __init__(
        self,
        broker: Broker,
        config: AdminConfig,
        sockets: list[socket.socket],
        tls: ssl.SSLContext | None,
        token: str | None,
    ) -> None:
        self._broker = broker
        self._config = config
        self._sockets = sockets
        self._tls = tls
        self._token = token
        self._runner: web.AppRunner | None = None

    @classmethod
    def bind(cls, broker: Broker, config: AdminConfig) -> AdminServer:
        """Read the token, build the TLS context, bind. Raises ``ConfigError`` or
        ``ListenError`` (nothing left open)."""
        token = load_token(config)
        tls = admin_tls_context(config)
        sockets = bind_sockets("admin listener", config.host, config.port)
        return cls(broker, config, sockets, tls, token)

    async def start(self) -> None:
        app = web.Application()
        routes = AdminRoutes(app, self._broker, self._config.metrics_public)
        for register in MODULES:
            register(routes)
        app.middlewares.append(bearer_auth(self._token, frozenset(routes.public)))
        # Requests are short: shutdown does not wait for a slow client for long.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        for sock in self._sockets:
            await web.SockSite(self._runner, sock, ssl_context=self._tls).start()
            host, port = sock.getsockname()[:2]
            log_event(
                logger,
                logging.INFO,
                "admin listening",
                address=f"{host}:{port}",
                protocol="https" if self._tls else "http",
                token=self._token is not None,
            )

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        for sock in self._sockets:
            sock.close()
