"""The web dashboard: static files the admin listener serves at ``/`` and ``/dashboard/``.

The page is plain HTML, CSS and JavaScript modules in ``admin/static/`` (package data of
the wheel: no CDN, no build step), read into memory once when the listener starts and
served as they are. Its data comes from the browser, through the same REST API and
probes any client uses (``/api/v1/...``, ``/readyz``) with the operator's token, and
from the broker's own WebSocket listener for its MQTT panel; so the server side is only
this file list and one setting the page needs before it has a token,
``/dashboard/settings.json`` (``{"token_required": bool}``), which lets it ask for the
token instead of meeting a 401 first.

The files and that setting are answered without the token (``anonymous``): they hold no
data about the broker. Every answer carries a Content-Security-Policy allowing scripts,
styles and fetches from this origin only, plus WebSocket connections (to the MQTT
listener's port).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web

if TYPE_CHECKING:
    from ferromq.admin.routes import RequestHandler, Routes

__all__ = ["STATIC", "register"]

STATIC: Final = Path(__file__).with_name("static")
"""The dashboard's files (``index.html`` and what it loads)."""

_TYPES: Final = {
    ".html": "text/html",
    ".css": "text/css",
    ".js": "text/javascript",
}
_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; connect-src 'self' ws: wss:; "
    "img-src 'self' data:; frame-ancestors 'none'",
}


def _asset(body: bytes, content_type: str) -> RequestHandler:
    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, charset="utf-8", headers=_HEADERS)

    return serve


def register(routes: Routes) -> None:
    admin = routes.admin
    token_required = admin.token is not None or admin.token_file is not None

    async def settings(request: web.Request) -> web.Response:
        return web.json_response({"token_required": token_required}, headers=_HEADERS)

    async def to_dashboard(request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect("/dashboard/")

    for path in sorted(STATIC.iterdir()):
        serve = _asset(path.read_bytes(), _TYPES[path.suffix])
        routes.add("GET", f"/dashboard/{path.name}", serve, anonymous=True)
        if path.name == "index.html":
            routes.add("GET", "/", serve, anonymous=True)
            routes.add("GET", "/dashboard/", serve, anonymous=True)
    routes.add("GET", "/dashboard", to_dashboard, anonymous=True)
    routes.add("GET", "/dashboard/settings.json", settings, anonymous=True)
