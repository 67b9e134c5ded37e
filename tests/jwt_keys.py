"""Keys and tokens for the JWT tests: an HMAC secret, an RSA and an EC (P-256) key
pair per kind, their public halves as the files and JWK sets the broker reads, and a
JWK-set server on a real loopback socket."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@dataclass
class JwksServer:
    keys: list[dict[str, Any]]
    fetches: int = 0
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def jwks_server(keys: list[dict[str, Any]]) -> Iterator[JwksServer]:
    """Serve ``{"keys": keys}`` at /jwks.json on 127.0.0.1, counting the fetches."""
    state = JwksServer(keys)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.fetches += 1
                body = json.dumps({"keys": state.keys}).encode()
            self.send_response(200 if self.path == "/jwks.json" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_port}/jwks.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
