"""The ``jwt`` provider: a JSON Web Token (RFC 7519) in CONNECT's password field.

Keys, one source (``[auth]``):

- ``jwt_key_file``: a PEM public key — RSA (RS*/PS* tokens), EC (the ES* of its
  curve) or Ed25519/Ed448 (EdDSA) — or, for any other file, an HMAC secret (HS*
  tokens; the file's bytes without a final newline). The algorithms follow from the
  key, so a public key can never be used as an HMAC secret (the "alg confusion"
  attack) and a token of another key type is refused like a wrong signature;
- ``jwt_jwks_url``: a JSON Web Key Set fetched over HTTP(S), cached and fetched again
  every ``jwt_jwks_refresh``; a token whose ``kid`` is not in the set fetches it again
  at most every 10 s (key rotation without a flood of fetches). Keys chosen by ``kid``
  (or the set's only key), each with its own algorithm. With no set at hand (the URL
  unreachable before a first fetch) a token is refused 0x88 server unavailable. The
  cache is the process's: each shard of a node (docs/shards.md) fetches and refreshes
  its own when it first authenticates a token, so the issuer sees at most one fetch per
  shard per ``jwt_jwks_refresh`` (as from as many brokers; a shared cache would cost a
  round trip between shards on the CONNECT path to save a few requests per interval).

A password that is not a compact JWS (three dot-separated parts), a CONNECT without a
password and an enhanced-authentication method are passed to the next provider. A
token whose signature, ``exp``, ``nbf``, ``aud`` (``jwt_audience``) or ``iss``
(``jwt_issuer``) does not hold is refused 0x86, as is one whose ``jwt_username_claim``
(default ``sub``) differs from the CONNECT user name; without a user name the claim
names the client. The ``jwt_client_type_claim`` (``"device"`` or ``"application"``,
default device), ``jwt_acl_claim`` (a list of ACL rule objects, :mod:`ferromq.acl`)
and the claims themselves (for ``%{name}`` placeholders) ride on the
:class:`Identity`; ``exp`` becomes ``Identity.expires_at``, at which the gate closes the
connection (v5 DISCONNECT 0xA0 Maximum connect time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from ferromq.auth.provider import (
    BAD_USERNAME_OR_PASSWORD,
    CLIENT_TYPES,
    NOT_AUTHORIZED,
    PASS,
    SERVER_UNAVAILABLE,
    Accept,
    AuthRequest,
    Identity,
    Outcome,
    Reject,
)
from ferromq.auth.web import JsonClient, ServiceUnavailable
from ferromq.config import ConfigError

__all__ = ["Jwks", "JwtProvider", "JwtSettings", "VerificationKey", "key_from_file"]

HMAC_ALGORITHMS: Final = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
UNKNOWN_KID_REFETCH: Final = 10.0  # seconds between fetches caused by an unknown kid
JWKS_TIMEOUT: Final = 10.0


@dataclass(frozen=True)
class JwtSettings:
    username_claim: str = "sub"
    client_type_claim: str = "client_type"
    acl_claim: str = "acl"
    audience: str | None = None
    issuer: str | None = None


@dataclass(frozen=True)
class VerificationKey:
    key: Any  # an HMAC secret (bytes) or a cryptography public key
    algorithms: tuple[str, ...]


def key_from_file(path: Path) -> VerificationKey:
    """The verification key in ``path`` (see the module header)."""
    where = f"auth.jwt_key_file: {path}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror}") from None
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = load_pem_public_key(data)
        except ValueError as exc:
            raise ConfigError(f"{where}: not a PEM public key: {exc}") from None
        if isinstance(key, rsa.RSAPublicKey):
            return VerificationKey(key, RSA_ALGORITHMS)
        if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in EC_ALGORITHMS:
            return VerificationKey(key, (EC_ALGORITHMS[key.curve.name],))
        if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
            return VerificationKey(key, ("EdDSA",))
        raise ConfigError(f"{where}: a {type(key).__name__} cannot verify JWTs")
    secret = data.removesuffix(b"\n")
    if not secret:
        raise ConfigError(f"{where}: empty HMAC secret")
    return VerificationKey(secret, HMAC_ALGORITHMS)


class Jwks:
    """A JSON Web Key Set fetched from ``url``, by ``kid``."""

    def __init__(self, url: str, refresh: float) -> None:
        self._url = url
        self._refresh = refresh
        self._client = JsonClient(JWKS_TIMEOUT)
        self._keys: dict[str | None, VerificationKey] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()  # CONNECTs arriving during a fetch wait for it

    async def key(self, kid: str | None) -> VerificationKey | None:
        """The key for ``kid``; None when the set has none. Raises
        :class:`ServiceUnavailable` when no set could ever be fetched."""
        async with self._lock:
            now = time.monotonic()
            age = None if self._fetched_at is None else now - self._fetched_at
            stale = age is None or age >= self._refresh
            unknown = kid not in self._keys and (age is None or age >= UNKNOWN_KID_REFETCH)
            if stale or unknown:
                try:
                    await self._fetch()
                except ServiceUnavailable:
                    if self._fetched_at is None:
                        raise
                self._fetched_at = now  # a failed fetch is retried at the same pace
        found = self._keys.get(kid)
        if found is None and kid is None and len(self._keys) == 1:
            found = next(iter(self._keys.values()))
        return found

    async def _fetch(self) -> None:
        status, document = await self._client.request("GET", self._url)
        if status != 200 or not isinstance(document, dict):
            raise ServiceUnavailable(f"{self._url}: HTTP {status}, not a JWK set")
        try:
            key_set = jwt.PyJWKSet.from_dict(document)
        except (jwt.PyJWKSetError, jwt.PyJWKError) as exc:
            raise ServiceUnavailable(f"{self._url}: not a JWK set: {exc}") from None
        self._keys = {k.key_id: VerificationKey(k.key, (k.algorithm_name,)) for k in key_set.keys}

    async def aclose(self) -> None:
        await self._client.aclose()


def _looks_like_jws(password: bytes) -> bool:
    parts = password.split(b".")
    return len(parts) == 3 and all(parts)


class JwtProvider:
    def __init__(self, keys: VerificationKey | Jwks, settings: JwtSettings) -> None:
        self._keys = keys
        self._settings = settings

    async def authenticate(self, request: AuthRequest) -> Outcome:
        password = request.password
        if request.method is not None or password is None or not _looks_like_jws(password):
            return PASS
        try:
            key = await self._key(password)
        except ServiceUnavailable:
            return Reject(SERVER_UNAVAILABLE)
        except jwt.PyJWTError:  # a bad token, or a key that cannot check it
            return Reject(BAD_USERNAME_OR_PASSWORD)
        if key is None:
            return Reject(BAD_USERNAME_OR_PASSWORD)
        settings = self._settings
        try:
            claims = jwt.decode(
                password,
                key.key,
                algorithms=list(key.algorithms),
                audience=settings.audience,
                issuer=settings.issuer,
                options={"verify_aud": settings.audience is not None},
            )
        except jwt.PyJWTError:  # a bad token, or a key that cannot check it
            return Reject(BAD_USERNAME_OR_PASSWORD)
        return self._identity(request, claims)

    async def _key(self, token: bytes) -> VerificationKey | None:
        if isinstance(self._keys, VerificationKey):
            return self._keys
        kid = jwt.get_unverified_header(token).get("kid")
        return await self._keys.key(kid if isinstance(kid, str) else None)

    def _identity(self, request: AuthRequest, claims: Mapping[str, Any]) -> Outcome:
        settings = self._settings
        name = claims.get(settings.username_claim)
        if not isinstance(name, str) or request.username not in (None, name):
            return Reject(BAD_USERNAME_OR_PASSWORD)
        client_type = claims.get(settings.client_type_claim, "device")
        if client_type not in CLIENT_TYPES:
            return Reject(NOT_AUTHORIZED)
        expires = claims.get("exp")
        return Accept(
            Identity(
                name,
                client_type,
                acl=claims.get(settings.acl_claim),
                expires_at=float(expires) if isinstance(expires, int | float) else None,
                claims=claims,
            )
        )

    async def aclose(self) -> None:
        if isinstance(self._keys, Jwks):
            await self._keys.aclose()
