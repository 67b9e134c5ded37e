"""Bearer-token authentication of admin requests.

With a token (``admin.token`` or ``admin.token_file``) every request must carry
``Authorization: Bearer <token>``, except the routes registered ``public`` while
``admin.metrics_public`` is on (probes and Prometheus). Without one — allowed only on a
loopback host, :func:`ferromq.config.load_config` refuses otherwise — nothing is asked.
The comparison is of SHA-256 digests with :func:`hmac.compare_digest`, so its time
depends neither on where the tokens differ nor on their lengths. A refusal is 401 with
``WWW-Authenticate: Bearer`` and a JSON body; an unknown path is refused the same way,
so the API's shape is not shown to strangers.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ferromq.config import AdminConfig, ConfigError

__all__ = ["bearer_auth", "load_token"]


def load_token(config: AdminConfig) -> str | None:
    """The configured token, reading ``token_file``. Raises :class:`ConfigError`."""
    if config.token_file is None:
        return config.token
    where = f"admin.token_file: {config.token_file}"
    try:
        token = Path(config.token_file).read_text(encoding="utf-8").rstrip("\r\n")
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read: {exc}") from None
    if not token.strip() or "\n" in token:
        raise ConfigError(f"{where}: must hold the token on one non-empty line")
    return token


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def bearer_auth(token: str | None, public: Collection[str]) -> Middleware:
    """The middleware asking for ``token``; the routes whose resource's canonical path
    is in ``public`` pass without it."""
    expected = None if token is None else _digest(token)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if expected is None or (resource is not None and resource.canonical in public):
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(_digest(given.strip()), expected):
            return await handler(request)
        return web.json_response(
            {"error": "a valid bearer token is required (Authorization: Bearer <token>)"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="ferromq"'},
        )

    return authenticate
