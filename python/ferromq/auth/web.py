"""JSON over HTTP for the providers that ask a web service (the JWKS of
:mod:`~ferromq.auth.jwt_provider`, the service of :mod:`~ferromq.auth.http_service`).

One ``aiohttp`` session per provider, opened on first use in the broker's running loop
(uvloop or asyncio) and closed by :meth:`JsonClient.aclose` when the broker stops; every
request has the provider's total timeout. No answer — no connection, a timeout — is
:class:`ServiceUnavailable`, so providers fail closed; an answer whose body is not JSON
comes back with the body None, for the provider to judge by its status. ``aiohttp``
comes with the ``jwt`` and ``http`` extras.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

__all__ = ["JsonClient", "ServiceUnavailable"]


class ServiceUnavailable(Exception):
    """The service did not give a JSON answer; the message says why, in one line."""


class JsonClient:
    def __init__(self, timeout: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def request(self, method: str, url: str, body: object = None) -> tuple[int, Any]:
        """The status and decoded JSON body (None when it is not JSON) of ``method url``
        (``body`` sent as JSON)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.request(method, url, json=body) as response:
                status, data = response.status, await response.read()
        except asyncio.TimeoutError:
            raise ServiceUnavailable(f"{url}: no answer within {self._timeout.total} s") from None
        except aiohttp.ClientError as exc:
            raise ServiceUnavailable(f"{url}: {type(exc).__name__}: {exc}") from None
        try:
            return status, json.loads(data)
        except ValueError:
            return status, None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
