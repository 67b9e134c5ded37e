"""SCRAM-SHA-256 (RFC 5802, RFC 7677): the stored credential and the server side of
the exchange, with no knowledge of MQTT.

A credential keeps what RFC 5802 §3 lets a server keep — salt, iteration count,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` — never the password. The same
credential checks a plain password (derive both keys again and compare) and runs the
exchange::

    client-first   n,,n=user,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<ClientProof>
    server-final   v=<ServerSignature>

The server recovers ``ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage)`` and
accepts when ``H(ClientKey) == StoredKey``. Comparisons of secrets are constant time
(``hmac.compare_digest``). An unknown user gets a made-up salt derived from a
per-server secret, so the exchange fails only at the proof and does not tell which
user names exist. Channel binding is not offered (``n`` or ``y`` GS2 flag only).

Passwords are prepared with SASLprep (RFC 4013) before hashing: mapping, NFKC and the
prohibited-character tables; the bidirectional check is left out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stringprep
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_ITERATIONS",
    "ScramAuthFailed",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "saslprep",
]

DEFAULT_ITERATIONS: Final = 4096  # RFC 7677 §4: at least 4096
SALT_BYTES: Final = 16
_GS2_HEADERS: Final = ("n,,", "y,,")  # no channel binding, no authorization identity


class ScramError(ValueError):
    """A SCRAM message that cannot be parsed or does not follow the exchange."""


class ScramAuthFailed(ScramError):
    """A well-formed exchange whose proof is wrong (wrong password or unknown user)."""


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


_PROHIBITED: Final = (
    stringprep.in_table_c12,
    stringprep.in_table_c21_c22,
    stringprep.in_table_c3,
    stringprep.in_table_c4,
    stringprep.in_table_c5,
    stringprep.in_table_c6,
    stringprep.in_table_c7,
    stringprep.in_table_c8,
    stringprep.in_table_c9,
)


def saslprep(text: str) -> str:
    """``text`` prepared per RFC 4013 (without the bidi check); ``ValueError`` for a
    prohibited character."""
    mapped = "".join(
        " " if stringprep.in_table_c12(ch) else ch for ch in text if not stringprep.in_table_b1(ch)
    )
    prepared = unicodedata.normalize("NFKC", mapped)
    for ch in prepared:
        if any(table(ch) for table in _PROHIBITED):
            raise ValueError(f"prohibited character U+{ord(ch):04X} in password")
    return prepared


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user (RFC 5802 §3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(
        cls, password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
    ) -> ScramCredential:
        """A new credential for ``password`` (a random salt unless given)."""
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        client_key, server_key = _keys(password, salt, iterations)
        return cls(salt, iterations, _sha256(client_key), server_key)

    def verify_password(self, password: str | bytes) -> bool:
        """True when ``password`` is the one this credential was made from. Costs one
        PBKDF2 run (``iterations`` rounds); bytes that are not UTF-8 never match."""
        if isinstance(password, bytes):
            try:
                password = password.decode("utf-8")
            except UnicodeDecodeError:
                return False
        try:
            client_key, server_key = _keys(password, self.salt, self.iterations)
        except ValueError:
            return False
        stored_ok = hmac.compare_digest(_sha256(client_key), self.stored_key)
        return hmac.compare_digest(server_key, self.server_key) & stored_ok


def _keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(ClientKey, ServerKey) for ``password``."""
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password).encode("utf-8"), salt, iterations)
    return _hmac(salted, b"Client Key"), _hmac(salted, b"Server Key")


def _attributes(message: str, names: str) -> list[str]:
    """The values of ``message``'s leading ``x=value`` attributes, which must be named
    ``names`` in order (RFC 5802 §5.1); later attributes (extensions) are ignored."""
    parts = message.split(",")
    if len(parts) < len(names):
        raise ScramError(f"expected attributes {','.join(names)}, got {message!r}")
    values = []
    for name, part in zip(names, parts, strict=False):
        if not part.startswith(name + "="):
            raise ScramError(f"expected attribute {name!r}, got {part[:2]!r}")
        values.append(part[2:])
    return values


def _decode_saslname(name: str) -> str:
    if "," in name or "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("user name with an invalid '=' escape")
    return name.replace("=2C", ",").replace("=3D", "=")


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError(f"{what} is not base64") from None


class ScramServer:
    """One server-side exchange: ``first`` takes client-first and returns
    server-first, ``final`` takes client-final and returns server-final.

    ``lookup`` gives the credential of a user name, or None for an unknown user.
    ``nonce`` is for tests (RFC 7677's vector); otherwise 18 random bytes.
    """

    def __init__(
        self,
        lookup: Callable[[str], ScramCredential | None],
        secret: bytes,
        nonce: str | None = None,
    ) -> None:
        self._lookup = lookup
        self._secret = secret
        self._server_nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, client_first: bytes) -> bytes:
        message = _text(client_first)
        header = next((h for h in _GS2_HEADERS if message.startswith(h)), None)
        if header is None:
            raise ScramError("unsupported GS2 header (no channel binding or authzid)")
        bare = message[len(header) :]
        name, client_nonce = _attributes(bare, "nr")
        if not client_nonce or not name:
            raise ScramError("empty user name or nonce")
        self.username = _decode_saslname(name)
        credential = self._lookup(self.username)
        self._known = credential is not None
        self._credential = credential or self._decoy(self.username)
        self._gs2_header = header
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._credential is None:
            raise ScramError("client-final before client-first")
        message = _text(client_final)
        channel_binding, nonce = _attributes(message, "cr")
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise ScramError("client-final without a proof")
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if channel_binding != expected_binding:
            raise ScramError("channel binding does not repeat the GS2 header")
        if not hmac.compare_digest(nonce.encode(), self._nonce.encode()):
            raise ScramError("nonce does not match the exchange")
        proof = _b64decode(proof_text, "proof")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        signature = _hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramAuthFailed("proof has the wrong length")
        matches = hmac.compare_digest(_sha256(_xor(proof, signature)), credential.stored_key)
        if not (matches and self._known):
            raise ScramAuthFailed("wrong proof")
        server_signature = _hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

    def _decoy(self, username: str) -> ScramCredential:
        """A stable made-up credential for an unknown user (same salt every time)."""
        seed = _hmac(self._secret, username.encode())
        return ScramCredential(seed[:SALT_BYTES], DEFAULT_ITERATIONS, _sha256(seed), seed)


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("message is not UTF-8") from None
