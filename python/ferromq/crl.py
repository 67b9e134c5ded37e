"""Certificate revocation lists, read just far enough to say which certificates they
revoke, so a TLS listener can close the connections of clients whose certificate a
reloaded ``crlfile`` revokes (:mod:`ferromq.tls`, :mod:`ferromq.listener`).

OpenSSL checks new handshakes against the CRL itself (its signature, its dates, the
chain); it has no way to ask about a handshake already done. For those this module
reads the DER of a CRL (RFC 5280 §5.1) and of a client certificate (§4.1) and names
each by :class:`CertificateId`, the issuer's Name as encoded and the serial number: a
certificate is revoked when a CRL from its issuer lists its serial. The issuer's
encoding is compared byte for byte, as a CA copies its own subject into both.

Only what that needs is parsed: no signature is checked here (the file is the
operator's, and OpenSSL has checked the client's chain at its handshake).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

__all__ = ["CertificateId", "CrlError", "certificate_id", "revoked_certificates"]

_SEQUENCE = 0x30
_INTEGER = 0x02
_EXPLICIT_0 = 0xA0  # [0] EXPLICIT: a certificate's version, a CRL's extensions
_PEM_CRL = re.compile(rb"-----BEGIN X509 CRL-----(.+?)-----END X509 CRL-----", re.DOTALL)


class CrlError(ValueError):
    """The bytes are not a certificate or a CRL as RFC 5280 encodes them."""


@dataclass(frozen=True)
class CertificateId:
    """A certificate as a CRL names it: its issuer's Name (DER) and serial number."""

    issuer: bytes
    serial: int


def _element(data: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: its tag, where its content starts and where it ends."""
    if at + 2 > len(data):
        raise CrlError("truncated")
    tag, length = data[at], data[at + 1]
    start = at + 2
    if length & 0x80:
        size = length & 0x7F
        if size == 0 or size > 4 or start + size > len(data):
            raise CrlError("bad length")
        length = int.from_bytes(data[start : start + size], "big")
        start += size
    end = start + length
    if end > len(data):
        raise CrlError("truncated")
    return tag, start, end


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements from ``start`` to ``end``: (tag, element start, content start, end)."""
    found = []
    at = start
    while at < end:
        tag, content, after = _element(data, at)
        found.append((tag, at, content, after))
        at = after
    return found


def _sequence(data: bytes, at: int) -> list[tuple[int, int, int, int]]:
    tag, start, end = _element(data, at)
    if tag != _SEQUENCE:
        raise CrlError("not a SEQUENCE")
    return _children(data, start, end)


def _signed_fields(der: bytes, what: str, version_tag: int) -> list[tuple[int, int, int, int]]:
    """The fields of the signed part of a certificate or a CRL (both ``SEQUENCE {
    tbs SEQUENCE, algorithm, signature }``), without its optional version (tagged
    ``version_tag``); raises :class:`CrlError` naming ``what`` it is not."""
    outer = _sequence(der, 0)
    if not outer or outer[0][0] != _SEQUENCE:
        raise CrlError(f"not a {what}")
    fields = _sequence(der, outer[0][1])
    if fields and fields[0][0] == version_tag:
        fields = fields[1:]
    return fields


def certificate_id(der: bytes) -> CertificateId:
    """The issuer and serial number of an X.509 certificate in DER (as
    ``SSLObject.getpeercert(binary_form=True)`` gives it)."""
    fields = _signed_fields(der, "certificate", _EXPLICIT_0)
    if len(fields) < 3 or fields[0][0] != _INTEGER or fields[2][0] != _SEQUENCE:
        raise CrlError("not a certificate")
    _, _, serial_start, serial_end = fields[0]
    _, issuer_start, _, issuer_end = fields[2]
    return CertificateId(
        der[issuer_start:issuer_end], int.from_bytes(der[serial_start:serial_end], "big")
    )


def _revoked_in(der: bytes) -> set[CertificateId]:
    """The certificates one DER CRL revokes."""
    fields = _signed_fields(der, "CRL", _INTEGER)
    # signature AlgorithmIdentifier, issuer Name, thisUpdate, nextUpdate?, revoked?, [0]?
    if len(fields) < 3 or fields[1][0] != _SEQUENCE:
        raise CrlError("not a CRL")
    _, issuer_start, _, issuer_end = fields[1]
    issuer = der[issuer_start:issuer_end]
    revoked: set[CertificateId] = set()
    for tag, at, _, _ in fields[3:]:
        if tag != _SEQUENCE:
            continue  # nextUpdate (a time) or the extensions ([0])
        for entry_tag, entry_at, _, _ in _sequence(der, at):
            if entry_tag != _SEQUENCE:
                raise CrlError("bad revoked certificate entry")
            entry = _sequence(der, entry_at)
            if not entry or entry[0][0] != _INTEGER:
                raise CrlError("bad revoked certificate entry")
            _, _, start, end = entry[0]
            revoked.add(CertificateId(issuer, int.from_bytes(der[start:end], "big")))
    return revoked


def revoked_certificates(pem: bytes) -> frozenset[CertificateId]:
    """Every certificate the CRLs of a PEM file revoke. Raises :class:`CrlError` when
    it holds no CRL or one that does not parse."""
    blocks = _PEM_CRL.findall(pem)
    if not blocks:
        raise CrlError("no PEM CRL (-----BEGIN X509 CRL-----) in it")
    revoked: set[CertificateId] = set()
    for block in blocks:
        try:
            der = base64.b64decode(b"".join(block.split()), validate=True)
        except ValueError:
            raise CrlError("a CRL block is not base64") from None
        revoked |= _revoked_in(der)
    return frozenset(revoked)
