"""Keys and tokens for the JWT tests: an HMAC secret, an RSA and an EC (P-256) key
pair per kind, their public halves as the files and JWK sets the broker reads."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ALGORITHMS = ("HS256", "RS256", "ES256")


@dataclass(frozen=True)
class SigningKey:
    algorithm: str
    private: Any  # the secret (bytes) or a private key

    @classmethod
    def generate(cls, algorithm: str) -> SigningKey:
        if algorithm == "HS256":
            return cls(algorithm, secrets.token_hex(32).encode())
        if algorithm == "RS256":
            return cls(algorithm, rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return cls(algorithm, ec.generate_private_key(ec.SECP256R1()))

    def sign(self, claims: dict[str, Any], kid: str | None = None) -> str:
        headers = {"kid": kid} if kid else None
        return jwt.encode(claims, self.private, algorithm=self.algorithm, headers=headers)

    def key_file(self, path: Path) -> Path:
        """The broker's half: the secret, or the public key in PEM."""
        if isinstance(self.private, bytes):
            path.write_bytes(self.private + b"\n")
        else:
            path.write_bytes(
                self.private.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )
        return path

    def jwk(self, kid: str) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.algorithm)
        jwk: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": kid, "alg": self.algorithm, "use": "sig"}
