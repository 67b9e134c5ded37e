"""Mosquitto password hashes, so a Mosquitto installation moves over with its passwords.

``mosquitto_passwd`` writes one ``user:hash`` line per user (Mosquitto's
``common/password_mosq.c``), the hash in one of two forms, salt and digest in base64:

- ``$7$<iterations>$<salt>$<digest>``: PBKDF2-HMAC-SHA512 of the password (the default
  since Mosquitto 2.0: 101 iterations, a 12-byte salt, a 64-byte digest);
- ``$6$<salt>$<digest>``: ``SHA512(password || salt)`` (Mosquitto 1.6 and earlier).

A :class:`MosquittoHash` checks a CONNECT password like a SCRAM credential does
(constant-time comparison, the password's bytes as sent, as Mosquitto compares them)
but cannot run a SCRAM exchange: SCRAM needs keys derived from the password itself,
which these hashes do not give. The password-file provider derives them from the
first password that matches (:mod:`ferromq.auth.password_file`); ``ferromq users
passwd`` replaces a hash with a SCRAM credential too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = ["MosquittoHash", "MosquittoHashError", "read_mosquitto_passwd"]

PBKDF2_SHA512: Final = "7"
SALTED_SHA512: Final = "6"


class MosquittoHashError(ValueError):
    """A hash that is not in a form ``mosquitto_passwd`` writes."""


def _b64(text: str, what: str) -> bytes:
    try:
        value = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise MosquittoHashError(f"{what} is not base64") from None
    if not value:
        raise MosquittoHashError(f"empty {what}")
    return value


@dataclass(frozen=True)
class MosquittoHash:
    kind: Literal["7", "6"]
    salt: bytes
    digest: bytes
    iterations: int = 0  # PBKDF2 rounds; 0 for salted SHA512

    @classmethod
    def parse(cls, text: str) -> MosquittoHash:
        """The hash ``text`` (``$7$...`` or ``$6$...``)."""
        parts = text.split("$")
        if len(parts) == 5 and parts[:2] == ["", PBKDF2_SHA512]:
            if not parts[2].isdigit() or int(parts[2]) < 1:
                raise MosquittoHashError(f"iterations {parts[2]!r} is not a positive integer")
            salt, digest = _b64(parts[3], "salt"), _b64(parts[4], "hash")
            return cls(PBKDF2_SHA512, salt, digest, int(parts[2]))
        if len(parts) == 4 and parts[:2] == ["", SALTED_SHA512]:
            return cls(SALTED_SHA512, _b64(parts[2], "salt"), _b64(parts[3], "hash"))
        raise MosquittoHashError("expected $7$iterations$salt$hash or $6$salt$hash")

    def __str__(self) -> str:
        salt = base64.b64encode(self.salt).decode()
        digest = base64.b64encode(self.digest).decode()
        if self.kind == PBKDF2_SHA512:
            return f"${self.kind}${self.iterations}${salt}${digest}"
        return f"${self.kind}${salt}${digest}"

    @property
    def scheme(self) -> str:
        return "mosquitto-pbkdf2-sha512" if self.kind == PBKDF2_SHA512 else "mosquitto-sha512"

    def verify_password(self, password: str | bytes) -> bool:
        """True when ``password`` hashes to this digest."""
        if isinstance(password, str):
            password = password.encode("utf-8")
        if self.kind == PBKDF2_SHA512:
            computed = hashlib.pbkdf2_hmac("sha512", password, self.salt, self.iterations)
        else:
            computed = hashlib.sha512(password + self.salt).digest()
        return hmac.compare_digest(computed, self.digest)


def read_mosquitto_passwd(path: Path) -> dict[str, MosquittoHash]:
    """Every ``user:hash`` line of the ``mosquitto_passwd`` file at ``path`` (blank lines
    and ``#`` comments skipped). Raises :class:`MosquittoHashError` naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MosquittoHashError(f"mosquitto password file {path}: cannot be read: {exc}") from None
    users: dict[str, MosquittoHash] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"mosquitto password file {path}, line {number}"
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, hashed = line.rpartition(":")
        if not sep or not name:
            raise MosquittoHashError(f"{where}: expected user:hash")
        if name in users:
            raise MosquittoHashError(f"{where}: user {name!r} appears twice")
        try:
            users[name] = MosquittoHash.parse(hashed)
        except MosquittoHashError as exc:
            raise MosquittoHashError(f"{where}: {exc}") from None
    return users
