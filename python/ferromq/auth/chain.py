"""The provider chain: ``[auth] providers`` asked in order, once per CONNECT.

Each provider answers :class:`Accept`, :class:`Reject` or :class:`Challenge`, which
ends the chain, or :data:`PASS` (not its client), which asks the next one. A
:class:`Challenge` keeps the exchange with the provider that started it (its
``respond`` closure). When every provider passes:

- a CONNECT with an Authentication Method: 0x8C bad authentication method
  [MQTT-4.12.0-1];
- without a user name and password: accepted as anonymous when ``allow_anonymous``,
  else 0x87 not authorized;
- otherwise 0x86 bad user name or password (3.1.1: return code 4).

A provider holding resources (an HTTP session) has ``async aclose()``, called when
the broker stops.
"""

from __future__ import annotations

from collections.abc import Sequence

from ferromq.auth.provider import (
    BAD_AUTHENTICATION_METHOD,
    BAD_USERNAME_OR_PASSWORD,
    NOT_AUTHORIZED,
    Accept,
    AuthProvider,
    AuthRequest,
    Identity,
    Outcome,
    Pass,
    Reject,
)

__all__ = ["ProviderChain"]


class ProviderChain:
    def __init__(self, providers: Sequence[AuthProvider], *, allow_anonymous: bool) -> None:
        self.providers = tuple(providers)
        self._allow_anonymous = allow_anonymous

    async def authenticate(self, request: AuthRequest) -> Outcome:
        for provider in self.providers:
            outcome = await provider.authenticate(request)
            if not isinstance(outcome, Pass):
                return outcome
        if request.method is not None:
            return Reject(BAD_AUTHENTICATION_METHOD)
        if request.username is None and request.password is None:
            return Accept(Identity(None)) if self._allow_anonymous else Reject(NOT_AUTHORIZED)
        return Reject(BAD_USERNAME_OR_PASSWORD)

    async def aclose(self) -> None:
        """Release what the providers hold (HTTP sessions); when the broker stops."""
        for provider in self.providers:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
