"""The connections of one TLS listener with ``require_certificate``, each filed under its
client certificate (:class:`~ferromq.crl.CertificateId`), so that a reloaded
``crlfile`` closes those it revokes. OpenSSL refuses a revoked certificate at the
handshake; a connection whose handshake was done before the list arrived is the one
this module is for.

A transport is filed when its handshake is done (also one a reload raced with: it is
closed at once if the list in force revokes it) and forgotten lazily: closed ones are
swept when the registry has doubled since the last sweep, so it stays within twice the
live connections without a hook on every close. Closing is an abort, not a TLS close: a
revoked peer is owed no close_notify, and waiting for its answer would hold the
connection (and its will) for the shutdown timeout. The MQTT connection ends as any
connection the peer lost (a will is published at once).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from ferromq.crl import CertificateId, CrlError, certificate_id

__all__ = ["Revoked", "TlsClients"]

_SWEEP_FLOOR = 64


@dataclass(frozen=True)
class Revoked:
    """A connection closed for its revoked certificate, for the log."""

    peer: str
    serial: int


def _peer(transport: asyncio.Transport) -> str:
    address = transport.get_extra_info("peername")
    return f"{address[0]}:{address[1]}" if address else "?"


class TlsClients:
    def __init__(self, revoked: frozenset[CertificateId] = frozenset()) -> None:
        self._transports: dict[asyncio.Transport, CertificateId] = {}
        self._revoked = revoked
        self._swept_size = 0

    def add(self, transport: asyncio.Transport) -> Revoked | None:
        """File a transport whose handshake is done; one whose certificate the list in
        force revokes is closed instead (returned, for the log)."""
        ssl_object: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
        der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
        if der is None:
            return None
        try:
            certificate = certificate_id(der)
        except CrlError:
            return None  # OpenSSL verified it; nothing a CRL could name
        if certificate in self._revoked:
            transport.abort()
            return Revoked(_peer(transport), certificate.serial)
        if len(self._transports) >= max(2 * self._swept_size, _SWEEP_FLOOR):
            self._transports = {t: c for t, c in self._transports.items() if not t.is_closing()}
            self._swept_size = len(self._transports)
        self._transports[transport] = certificate
        return None

    def revoke(self, revoked: frozenset[CertificateId]) -> list[Revoked]:
        """Put ``revoked`` in force and close every open connection whose certificate it
        names."""
        self._revoked = revoked
        closed: list[Revoked] = []
        for transport, certificate in list(self._transports.items()):
            if transport.is_closing():
                del self._transports[transport]
            elif certificate in revoked:
                closed.append(Revoked(_peer(transport), certificate.serial))
                transport.abort()
                del self._transports[transport]
        self._swept_size = len(self._transports)
        return closed
