"""ferromq.crl against CRLs and certificates ``cryptography`` writes: the revoked
serials per issuer, and the refusals of what is not a CRL."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from tests.support.tls_certs import authority

from ferromq.crl import CertificateId, CrlError, certificate_id, revoked_certificates


def _id(cert_pem: Path) -> CertificateId:
    return certificate_id(ssl.PEM_cert_to_DER_cert(cert_pem.read_text()))


def test_a_certificate_is_named_by_its_issuer_and_serial(tmp_path: Path) -> None:
    ca = authority(tmp_path)
    pem = ca.issue("device", "device-7")
    parsed = x509.load_pem_x509_certificate(pem.cert.read_bytes())
    found = _id(pem.cert)
    assert found.serial == parsed.serial_number
    assert found.issuer == parsed.issuer.public_bytes()


def test_the_crl_lists_what_it_revokes_for_its_issuer_only(tmp_path: Path) -> None:
    ca, other = authority(tmp_path, "a"), authority(tmp_path, "b")
    revoked, kept = ca.issue("revoked", "r"), ca.issue("kept", "k")
    stranger = other.issue("stranger", "s")
    listed = revoked_certificates(ca.revoke(revoked, stranger).read_bytes())
    assert _id(revoked.cert) in listed
    assert _id(kept.cert) not in listed
    # Another issuer's certificate, though listed: a CRL speaks for its issuer only.
    assert _id(stranger.cert) not in listed
    assert CertificateId(_id(revoked.cert).issuer, _id(stranger.cert).serial) in listed


def test_several_crls_in_one_file_and_an_empty_one(tmp_path: Path) -> None:
    a, b = authority(tmp_path, "a"), authority(tmp_path, "b")
    from_a, from_b = a.issue("one", "1"), b.issue("two", "2")
    both = a.revoke(from_a).read_bytes() + b.revoke(from_b).read_bytes()
    assert revoked_certificates(both) == {_id(from_a.cert), _id(from_b.cert)}
    assert revoked_certificates(a.revoke().read_bytes()) == frozenset()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "no PEM CRL"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "no PEM CRL"),
        (b"-----BEGIN X509 CRL-----\n!!!!\n-----END X509 CRL-----\n", "not base64"),
        (b"-----BEGIN X509 CRL-----\nMAMCAQE=\n-----END X509 CRL-----\n", "not a CRL"),
        (b"-----BEGIN X509 CRL-----\nMIIB\n-----END X509 CRL-----\n", "bad length"),
        (b"-----BEGIN X509 CRL-----\nMAQwAg==\n-----END X509 CRL-----\n", "truncated"),
    ],
)
def test_what_is_not_a_crl_is_refused_with_its_problem(content: bytes, problem: str) -> None:
    with pytest.raises(CrlError, match=problem):
        revoked_certificates(content)
