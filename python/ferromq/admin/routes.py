"""The seam route modules register on.

Each module of the admin listener exposes ``register(routes) -> None`` and is listed
once in a module table: :data:`MODULES` for a broker's application
(:class:`AdminRoutes`), :data:`NODE_MODULES` for a node's supervisor
(:class:`NodeRoutes`, :mod:`ferromq.node.admin`).
:class:`~ferromq.admin.server.AdminServer` calls every one while it builds the
application. A module adds its handlers with :meth:`Routes.add` (``public=True``:
answered without the token when ``admin.metrics_public`` is on; ``anonymous=True``:
always answered without it, for the dashboard's static files, which hold no data) and
reaches the broker through :attr:`AdminRoutes.broker`, or the node's shards through
:attr:`NodeRoutes.shards`; state it needs for the server's lifetime (a background
task, client sessions) hangs on the application's ``on_startup`` / ``on_cleanup``
through :attr:`Routes.app`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from ferromq.admin import api, dashboard, health, metrics, node_api, node_health, node_metrics
from ferromq.admin.shards import Shards
from ferromq.config import AdminConfig

if TYPE_CHECKING:
    from ferromq.broker import Broker

__all__ = ["MODULES", "NODE_MODULES", "AdminRoutes", "NodeRoutes", "RequestHandler", "Routes"]

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Routes:
    """An application being built, its ``[admin]`` settings, its public paths."""

    def __init__(self, app: web.Application, admin: AdminConfig) -> None:
        self.app = app
        self.admin = admin
        self.public: set[str] = set()
        """Paths answered without the token (:func:`ferromq.admin.auth.bearer_auth`)."""

    def add(
        self,
        method: str,
        path: str,
        handler: RequestHandler,
        *,
        public: bool = False,
        anonymous: bool = False,
    ) -> None:
        """Route ``method path`` to ``handler``; ``public`` routes skip the token when
        ``admin.metrics_public`` is on, ``anonymous`` ones always."""
        self.app.router.add_route(method, path, handler)
        if anonymous or (public and self.admin.metrics_public):
            self.public.add(path)


class AdminRoutes(Routes):
    """A broker's application: the broker it serves; ``shard``: it is a shard's, served
    to its node's supervisor on the shard's private socket (:mod:`ferromq.node.admin`)."""

    def __init__(
        self, app: web.Application, broker: Broker, admin: AdminConfig, *, shard: bool = False
    ) -> None:
        super().__init__(app, admin)
        self.broker = broker
        self.shard = shard


class NodeRoutes(Routes):
    """A node's application, in its supervisor: the shards it asks."""

    def __init__(self, app: web.Application, shards: Shards, admin: AdminConfig) -> None:
        super().__init__(app, admin)
        self.shards = shards


MODULES: tuple[Callable[[AdminRoutes], None], ...] = (
    health.register,
    metrics.register,
    api.register,
    dashboard.register,
)
"""Every route module of a broker's application, in registration order."""

NODE_MODULES: tuple[Callable[[NodeRoutes], None], ...] = (
    node_health.register,
    node_metrics.register,
    node_api.register,
    dashboard.register,
)
"""Every route module of a node's application (workers > 1), in registration order."""
