"""The ``http`` provider: an HTTP authentication service decides each CONNECT.

The broker POSTs JSON to ``[auth] http_url``::

    {"username": "alice" | null, "password": "..." | null, "client_id": "dev-1",
     "peer": "192.0.2.7:50312" | null, "protocol": 4 | 5}

(the password as UTF-8 text; one that is not UTF-8 is refused 0x86 without asking)
and reads a 200 answer ``{"result": "allow" | "deny" | "ignore", "client_type":
"device" | "application", "acl": ...}``: allow accepts (``client_type`` default
device, ``acl`` a list of ACL rule objects, :mod:`ferromq.acl.rules`, checked
before the rules file), deny refuses 0x86, ignore passes the
client to the next provider. Fail closed: no answer within ``http_timeout``, no
connection, a 5xx, a body that is not such JSON — 0x88 server unavailable (3.1.1:
return code 3), the MQTT 5 code for "the server cannot serve you now"; another status
is a deny. Enhanced-authentication methods are passed on.

Answers are cached for ``http_cache_ttl`` (0: never) by user name, password and client
id — a hash of them, never the password itself — up to :data:`CACHE_ENTRIES` entries,
the oldest evicted first; an unavailable service is never cached, so it is asked again.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Final

from ferromq.auth.provider import (
    BAD_USERNAME_OR_PASSWORD,
    CLIENT_TYPES,
    PASS,
    SERVER_UNAVAILABLE,
    Accept,
    AuthRequest,
    Identity,
    Outcome,
    Reject,
)
from ferromq.auth.web import JsonClient, ServiceUnavailable

__all__ = ["CACHE_ENTRIES", "HttpServiceProvider"]

CACHE_ENTRIES: Final = 10_000
_DENY: Final = Reject(BAD_USERNAME_OR_PASSWORD)


class HttpServiceProvider:
    def __init__(self, url: str, *, timeout: float, cache_ttl: float) -> None:
        self._url = url
        self._client = JsonClient(timeout)
        self._cache_ttl = cache_ttl
        self._cache: dict[bytes, tuple[float, Outcome]] = {}

    async def authenticate(self, request: AuthRequest) -> Outcome:
        if request.method is not None:
            return PASS
        try:
            password = None if request.password is None else request.password.decode("utf-8")
        except UnicodeDecodeError:
            return _DENY
        body = {
            "username": request.username,
            "password": password,
            "client_id": request.client_id,
            "peer": request.peer,
            "protocol": request.protocol,
        }
        key = hashlib.sha256(
            json.dumps([request.username, password, request.client_id]).encode()
        ).digest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            status, answer = await self._client.request("POST", self._url, body)
        except ServiceUnavailable:
            return Reject(SERVER_UNAVAILABLE)
        outcome = _outcome(request, status, answer)
        if self._cache_ttl > 0 and outcome != Reject(SERVER_UNAVAILABLE):
            self._cache.pop(key, None)
            if len(self._cache) >= CACHE_ENTRIES:
                del self._cache[next(iter(self._cache))]
            self._cache[key] = (now + self._cache_ttl, outcome)
        return outcome

    async def aclose(self) -> None:
        await self._client.aclose()


def _outcome(request: AuthRequest, status: int, answer: Any) -> Outcome:
    if status >= 500:
        return Reject(SERVER_UNAVAILABLE)
    if status != 200:
        return _DENY
    result = answer.get("result") if isinstance(answer, dict) else None
    if result == "deny":
        return _DENY
    if result == "ignore":
        return PASS
    client_type = answer.get("client_type", "device") if result == "allow" else None
    if client_type not in CLIENT_TYPES:
        return Reject(SERVER_UNAVAILABLE)  # a service that answers nonsense is broken
    return Accept(Identity(request.username, client_type, acl=answer.get("acl")))
