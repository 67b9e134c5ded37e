"""TLS listeners: the server ``ssl.SSLContext`` a ``protocol = "tls"`` listener hands its
connections to, and the identity a client certificate carries.

The TLS record layer is the event loop's own (``loop.connect_accepted_socket(...,
ssl=context)``: uvloop's Cython SSL protocol or asyncio's ``sslproto``), in front of
the same :class:`~ferromq._protocol.MqttProtocol` as plain TCP; decrypted bytes are
written into the shared read arena and fed to the engine per read, so TLS adds no
Python per message of ferromq's own.

The keys are Mosquitto's (``mosquitto.conf(5)``):

- ``certfile`` / ``keyfile``: the server's PEM certificate (chain) and unencrypted key;
- ``cafile``: the CA certificates a client certificate must chain to;
- ``crlfile``: those CAs' certificate revocation lists (PEM): OpenSSL refuses a revoked
  client certificate at the handshake (``VERIFY_CRL_CHECK_LEAF``; as in Mosquitto, a
  list past its ``nextUpdate`` fails every handshake until a fresh one is in place);
- ``require_certificate``: a client without a valid certificate fails the handshake
  (``CERT_REQUIRED``); without it, client certificates are not asked for;
- ``use_identity_as_username``: the certificate's identity replaces the CONNECT's user
  name and no password is needed (:mod:`ferromq.auth.certificate`);
- ``identity_source``: where the identity is read: ``cn`` (the subject's Common Name,
  Mosquitto's choice) or the first ``san_dns`` / ``san_uri`` / ``san_email`` entry of
  the Subject Alternative Name;
- ``ciphers``: an OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's);
- ``tls_version``: the lowest version accepted, ``"1.2"`` (default) or ``"1.3"``.

:func:`server_context` is the one place a context is built: the preflight
(:mod:`ferromq.preflight`, so ``ferromq check-config`` too), the listeners at start and
the SIGHUP certificate reload all call it, and it fails with one
:class:`~ferromq.config.ConfigError` line naming the key (a missing file, a file that
is not a certificate, a key that does not match the certificate, an encrypted key,
a cipher list OpenSSL selects nothing from).

On SIGHUP (:mod:`ferromq.reload`) a TLS listener takes the :data:`RELOADABLE` keys of
the new configuration when nothing else about it changed
(:func:`reloaded_listeners`), and its files are read again whether or not their paths
changed, so a certificate renewed in place is picked up; with ``watch`` (seconds) the
listener also reloads them when one changes (:mod:`ferromq.file_watch`). A reload
applies to new handshakes; :func:`revocations` gives the certificates ``crlfile``
revokes, so the listeners can close the connections already up with one of them
(:mod:`ferromq.crl`).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Final

from ferromq.config import TLS_PROTOCOLS, ConfigError, ListenerConfig
from ferromq.crl import CertificateId, CrlError, revoked_certificates

__all__ = [
    "RELOADABLE",
    "certificate_identity",
    "reloaded_listeners",
    "revocations",
    "server_context",
    "watched_files",
]

RELOADABLE: Final = ("certfile", "keyfile", "cafile", "crlfile", "ciphers", "tls_version", "watch")
"""The listener keys a SIGHUP applies: they only change the context of new handshakes
(and a new ``crlfile`` the connections it revokes)."""

_VERSIONS: Final = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
_SAN_TYPES: Final = {"san_dns": "DNS", "san_uri": "URI", "san_email": "email"}


def _readable(where: str, name: str) -> str:
    path = Path(name)
    if path.is_dir():
        raise ConfigError(f"{where}: {name}: is a directory")
    if not path.is_file():
        raise ConfigError(f"{where}: {name}: not found")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{where}: {name}: cannot be read: {exc.strerror}") from None
    return name


def _certificates(where: str, name: str) -> None:
    """``name`` holds at least one PEM certificate."""
    try:
        ssl.create_default_context(cafile=name)
    except ssl.SSLError:
        raise ConfigError(f"{where}: {name}: no PEM certificate in it") from None


def server_context(where: str, config: ListenerConfig) -> ssl.SSLContext:
    """The context for the TLS listener ``config`` (named ``where`` in errors, e.g.
    ``listeners[1]``). Reads the files; raises :class:`ConfigError`."""
    certfile = _readable(f"{where}.certfile", config.certfile)
    keyfile = _readable(f"{where}.keyfile", config.keyfile)
    _certificates(f"{where}.certfile", certfile)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[config.tls_version]
    encrypted = False

    def no_password() -> bytes:
        nonlocal encrypted
        encrypted = True
        return b""

    try:
        context.load_cert_chain(certfile, keyfile, password=no_password)
    except ssl.SSLError as exc:
        if encrypted:
            problem = "is encrypted; ferromq needs an unencrypted key"
        elif exc.reason == "KEY_VALUES_MISMATCH":
            problem = f"does not match {where}.certfile ({certfile})"
        else:
            problem = f"not a PEM private key ({exc.reason or exc.strerror})"
        raise ConfigError(f"{where}.keyfile: {keyfile}: {problem}") from None
    if config.cafile:
        cafile = _readable(f"{where}.cafile", config.cafile)
        try:
            context.load_verify_locations(cafile=cafile)
        except ssl.SSLError:
            raise ConfigError(f"{where}.cafile: {cafile}: no PEM certificate in it") from None
    if config.crlfile:
        revocations(where, config)  # a file OpenSSL would read as no list at all
        context.load_verify_locations(cafile=config.crlfile)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if config.require_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
    if config.ciphers:
        try:
            context.set_ciphers(config.ciphers)
        except ssl.SSLError:
            raise ConfigError(
                f"{where}.ciphers: OpenSSL selects no cipher from {config.ciphers!r}"
            ) from None
    return context


def revocations(where: str, config: ListenerConfig) -> frozenset[CertificateId]:
    """The client certificates the listener's ``crlfile`` revokes (none without one).
    Raises :class:`ConfigError` naming ``{where}.crlfile`` and the problem."""
    if not config.crlfile:
        return frozenset()
    crlfile = _readable(f"{where}.crlfile", config.crlfile)
    try:
        return revoked_certificates(Path(crlfile).read_bytes())
    except CrlError as exc:
        raise ConfigError(f"{where}.crlfile: {crlfile}: {exc}") from None


def watched_files(config: ListenerConfig) -> list[str]:
    """The files a TLS listener's ``watch`` looks at."""
    return [p for p in (config.certfile, config.keyfile, config.cafile, config.crlfile) if p]


def certificate_identity(certificate: Mapping[str, Any] | None, source: str) -> str | None:
    """The identity ``source`` names in a verified certificate as
    ``SSLObject.getpeercert()`` returns it: the subject's first Common Name (as
    Mosquitto takes it), or the first Subject Alternative Name of the type."""
    if not certificate:
        return None
    if source == "cn":
        for rdn in certificate.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return None
    wanted = _SAN_TYPES[source]
    for kind, value in certificate.get("subjectAltName", ()):
        if kind == wanted:
            return str(value)
    return None


def reloaded_listeners(
    running: tuple[ListenerConfig, ...], new: tuple[ListenerConfig, ...]
) -> tuple[ListenerConfig, ...]:
    """``running``'s listeners, each TLS one with the :data:`RELOADABLE` keys of its
    counterpart in ``new`` when that is the same listener otherwise; any other change
    keeps the running listener (and is logged as needing a restart)."""
    if len(running) != len(new):
        return running
    fixed = [key.name for key in fields(ListenerConfig) if key.name not in RELOADABLE]
    return tuple(
        replace(old, **{key: getattr(fresh, key) for key in RELOADABLE})
        if old.protocol in TLS_PROTOCOLS
        and all(getattr(old, k) == getattr(fresh, k) for k in fixed)
        else old
        for old, fresh in zip(running, new, strict=True)
    )
