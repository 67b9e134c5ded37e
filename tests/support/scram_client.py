"""A small SCRAM-SHA-256 client (RFC 5802) for tests: the client side the broker's
server exchange is checked against. Not part of the package."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


class ScramClient:
    def __init__(self, username: str, password: str, nonce: str | None = None) -> None:
        self.username = username
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(18)
        self._first_bare = ""
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        name = self.username.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={self.nonce}"
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(part.split("=", 1) for part in text.split(","))
        assert fields["r"].startswith(self.nonce), "the server nonce extends ours"
        self._salted = hashlib.pbkdf2_hmac(
            "sha256", self.password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        without_proof = f"c=biws,r={fields['r']}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._salted, b"Client Key")
        signature = _hmac(hashlib.sha256(client_key).digest(), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def server_signature_ok(self, server_final: bytes) -> bool:
        expected = _hmac(_hmac(self._salted, b"Server Key"), self._auth_message)
        return server_final == b"v=" + base64.b64encode(expected)
