"""Certificates the TLS tests make for themselves with ``cryptography``: one CA, a
server certificate for 127.0.0.1 / localhost, client certificates with a chosen Common
Name and SANs, all written as PEM files; ``Pki``, the set most tests use (the ``pki``
fixture of tests/conftest.py), a TLS listener's config keys and a client's context."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA that signs certificates into ``directory``."""

    directory: Path
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def cafile(self) -> Path:
        return self.directory / f"{self.name}-ca.pem"

    def issue(
        self,
        stem: str,
        common_name: str | None,
        *,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        uris: tuple[str, ...] = (),
        server: bool = False,
    ) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ferromq tests")]
        if common_name is not None:
            subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        names += [x509.UniformResourceIdentifier(uri) for uri in uris]
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = _builder(x509.Name(subject), self.certificate.subject, key).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return _write(self.directory, stem, key, certificate)

    def server(self, stem: str = "server") -> Pem:
        return self.issue(stem, "localhost", dns=("localhost",), ips=("127.0.0.1",), server=True)

    @property
    def crlfile(self) -> Path:
        return self.directory / f"{self.name}-crl.pem"

    def revoke(self, *revoked: Pem) -> Path:
        """Write ``crlfile``: a CRL, valid for a day, revoking ``revoked`` (none: an
        empty one). Written to a new file then renamed, as a CA's tooling does."""
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(self.certificate.subject)
            .last_update(now - datetime.timedelta(minutes=5))
            .next_update(now + datetime.timedelta(days=1))
        )
        for pem in revoked:
            entry = (
                x509.RevokedCertificateBuilder()
                .serial_number(x509_serial(pem))
                .revocation_date(now - datetime.timedelta(minutes=1))
                .build()
            )
            builder = builder.add_revoked_certificate(entry)
        crl = builder.sign(self.key, hashes.SHA256())
        fresh = self.crlfile.with_suffix(".new")
        fresh.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
        fresh.replace(self.crlfile)
        return self.crlfile


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _write(
    directory: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> Pem:
    pem = Pem(directory / f"{stem}-cert.pem", directory / f"{stem}-key.pem")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem


def authority(directory: Path, name: str = "test") -> Authority:
    """A new self-signed CA whose certificate is written to ``<name>-ca.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ferromq {name} CA")])
    certificate = (
        _builder(subject, subject, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca = Authority(directory, name, key, certificate)
    ca.cafile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return ca


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Pem
    client: Pem  # CN "device-7", SAN URI "urn:dev:7"


def tls_keys(pki: Pki, extra: str = "") -> str:
    return (
        'protocol = "tls"\n'
        f'certfile = "{pki.server.cert}"\nkeyfile = "{pki.server.key}"\n'
        f'cafile = "{pki.ca.cafile}"\n{extra}'
    )


def x509_serial(pem: Pem) -> int:
    return x509.load_pem_x509_certificate(pem.cert.read_bytes()).serial_number


def client_context(cafile: Path, cert: Pem | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cafile))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return context
