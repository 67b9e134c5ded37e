"""The seam route modules register on.

Each module of the admin listener exposes ``register(routes: AdminRoutes) -> None``
and is listed once in :data:`MODULES`; :class:`~ferromq.admin.server.AdminServer`
calls every one while it builds the application. A module adds its handlers with
:meth:`AdminRoutes.add` (``public=True``: answered without the token when
``admin.metrics_public`` is on; ``anonymous=True``: always answered without it, for
the dashboard's static files, which hold no data) and reaches the broker through
:attr:`AdminRoutes.broker`; state it needs for the server's lifetime (a background
task) hangs on the application's ``on_startup`` / ``on_cleanup`` through
:attr:`AdminRoutes.app`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from ferromq.admin import api, dashboard, health, metrics

if TYPE_CHECKING:
    from ferromq.broker import Broker

__all__ = ["MODULES", "AdminRoutes", "RequestHandler", "RouteModule"]

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AdminRoutes:
    """The application being built, the broker it serves, the public paths."""

    def __init__(self, app: web.Application, broker: Broker, public_allowed: bool) -> None:
        self.app = app
        self.broker = broker
        self._public_allowed = public_allowed
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
        if anonymous or (public and self._public_allowed):
            self.public.add(path)


RouteModule = Callable[[AdminRoutes], None]

MODULES: tuple[RouteModule, ...] = (
    health.register,
    metrics.register,
    api.register,
    dashboard.register,
)
"""Every route module, in registration order."""
