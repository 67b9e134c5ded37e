"""The authentication provider protocol: what the broker asks per CONNECT (and per
re-authentication) and the answers a provider gives.

A provider is asked once per CONNECT, never per message (docs/architecture.md, "The
one rule"). ``authenticate`` is async, so a provider may look users up in a file, a
database or a remote service. Its answer is one of:

- :class:`Accept`: the client is in. ``identity`` says who it is — the user name, its
  ``client_type`` (``"device"``, the default, or ``"application"``) and the ACL
  rules the provider returned (:mod:`ferromq.acl`) — and ``data`` is the final
  Authentication Data for the CONNACK (or the AUTH 0x00 that ends a
  re-authentication) when an enhanced method is in use.
- :class:`Reject`: the MQTT 5 reason code to refuse with; the engine maps it to a
  3.1.1 return code for older clients (0x86 → 4, 0x87 → 5).
- :class:`Challenge`: enhanced authentication continues. ``data`` goes to the client in
  AUTH 0x18; the client's answer is handed to ``respond``, which gives the next answer.
  A multi-step method keeps its state in that closure.
- :data:`PASS`: not this provider's client (an unknown user name, a method it does not
  run); the next provider of the chain is asked (:mod:`ferromq.auth.chain`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeAlias

__all__ = [
    "BAD_AUTHENTICATION_METHOD",
    "BAD_USERNAME_OR_PASSWORD",
    "CLIENT_TYPES",
    "MAXIMUM_CONNECT_TIME",
    "NOT_AUTHORIZED",
    "PASS",
    "SERVER_UNAVAILABLE",
    "UNSPECIFIED_ERROR",
    "Accept",
    "AuthProvider",
    "AuthRequest",
    "Challenge",
    "ClientType",
    "Identity",
    "Outcome",
    "Pass",
    "Reject",
]

# MQTT 5 reason codes a provider refuses with (§2.4).
UNSPECIFIED_ERROR: Final = 0x80
BAD_USERNAME_OR_PASSWORD: Final = 0x86
NOT_AUTHORIZED: Final = 0x87
SERVER_UNAVAILABLE: Final = 0x88
MAXIMUM_CONNECT_TIME: Final = 0xA0
BAD_AUTHENTICATION_METHOD: Final = 0x8C

ClientType: TypeAlias = Literal["device", "application"]
CLIENT_TYPES: Final[tuple[ClientType, ...]] = ("device", "application")


@dataclass(frozen=True)
class Identity:
    """Who an accepted connection is. ``username`` is None for an anonymous client.
    ``acl`` is the rules the provider gave the client, as it gave them (a list of
    rule objects, :mod:`ferromq.acl.rules`), ``claims`` the token's claims for
    ``%{name}`` placeholders, and ``expires_at`` (Unix time) when the credentials
    end and the connection is closed; none is compared: a re-authentication may
    renew them for the same user."""

    username: str | None
    client_type: ClientType = "device"
    acl: object = field(default=None, compare=False)
    expires_at: float | None = field(default=None, compare=False)
    claims: Mapping[str, object] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AuthRequest:
    """One CONNECT, or the start of a re-authentication (``reauthenticating`` holds
    the identity established at CONNECT; ``method`` is the one from CONNECT).
    ``peer`` is the client's address as ``host:port``, when known."""

    client_id: str
    username: str | None
    password: bytes | None
    protocol: int
    method: str | None = None
    data: bytes | None = None
    reauthenticating: Identity | None = None
    certificate: str | None = None
    """The identity of the client's verified TLS certificate, when its listener
    requires one (:mod:`ferromq.auth.certificate`)."""
    peer: str | None = None


@dataclass(frozen=True)
class Accept:
    identity: Identity
    data: bytes | None = None


@dataclass(frozen=True)
class Reject:
    reason: int


@dataclass(frozen=True)
class Pass:
    """Not this provider's client: ask the next one."""


PASS: Final = Pass()


@dataclass(frozen=True)
class Challenge:
    data: bytes
    respond: Callable[[bytes | None], Awaitable[Outcome]]


Outcome: TypeAlias = Accept | Reject | Challenge | Pass


class AuthProvider(Protocol):
    async def authenticate(self, request: AuthRequest) -> Outcome:
        """Decide ``request``; called once per CONNECT and per re-authentication."""
