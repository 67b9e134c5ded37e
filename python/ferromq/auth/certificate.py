"""X.509 client certificates in authentication: what a TLS listener with
``require_certificate`` tells the auth layer about a connection, and what it decides.

The listener (:mod:`ferromq.listener`) files a :class:`PeerCertificate` per connection
once its handshake has verified the client's certificate against ``cafile``;
:class:`~ferromq.auth.AuthGate` looks it up by connection id at CONNECT:

- with ``use_identity_as_username`` (Mosquitto's semantics) the certificate is the
  credential: the identity replaces the CONNECT's user name and the connection is
  accepted as that user without asking a provider or needing a password
  (:func:`certificate_outcome`); a certificate without the configured identity field
  is refused with 0x87 Not authorized (3.1.1: return code 5);
- otherwise the identity is handed to the providers in
  :attr:`~ferromq.auth.AuthRequest.certificate`, to use as they see fit.

When only certificates authenticate (no ``[auth]`` provider) the engine still asks
Python at every CONNECT, so that the identity can be applied (as the user name, or
to ACL rules); connections without a
certificate identity then meet :class:`OpenProvider`, which answers what the engine
answers with authentication off.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferromq.auth.provider import (
    BAD_AUTHENTICATION_METHOD,
    NOT_AUTHORIZED,
    Accept,
    AuthRequest,
    Identity,
    Outcome,
    Reject,
)
from ferromq.config import Config

__all__ = [
    "OpenProvider",
    "PeerCertificate",
    "certificate_identities_needed",
    "certificate_outcome",
]


def certificate_identities_needed(config: Config) -> bool:
    """Some TLS listener makes client certificates' identities user names, or ACL rules
    may name them (``certificate``, ``%C``) on a listener that requires certificates:
    the engine must hand every CONNECT to the :class:`~ferromq.auth.AuthGate`, which
    knows each connection's certificate."""
    return any(
        listener.use_identity_as_username
        or (listener.require_certificate and config.acl.file is not None)
        for listener in config.listeners
    )


@dataclass(frozen=True)
class PeerCertificate:
    """The verified client certificate of one TLS connection: ``identity`` read per the
    listener's ``identity_source`` (None when the certificate has no such field) and
    whether the listener makes it the user name."""

    identity: str | None
    as_username: bool


def certificate_outcome(certificate: PeerCertificate) -> Outcome:
    """The answer for a CONNECT over a listener with ``use_identity_as_username``."""
    if certificate.identity is None:
        return Reject(NOT_AUTHORIZED)
    return Accept(Identity(certificate.identity))


class OpenProvider:
    """Accepts every CONNECT with its own user name, refusing an MQTT 5 authentication
    method (0x8C): the engine's own answers with authentication off."""

    async def authenticate(self, request: AuthRequest) -> Outcome:
        if request.method is not None:
            return Reject(BAD_AUTHENTICATION_METHOD)
        return Accept(Identity(request.username))
