"""SCRAM-SHA-256 math and the server exchange against RFC 7677's test vector, and
the ways an exchange fails."""

from __future__ import annotations

import base64

import pytest
from tests.support.scram_client import ScramClient

from ferromq.auth.scram import ScramAuthFailed, ScramCredential, ScramError, ScramServer, saslprep

# RFC 7677 §3.
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

PENCIL = ScramCredential.derive("pencil", SALT, 4096)


def server(users: dict[str, ScramCredential], nonce: str | None = None) -> ScramServer:
    return ScramServer(users.get, b"test secret", nonce=nonce)


def test_server_reproduces_rfc_7677_exchange() -> None:
    exchange = server({"user": PENCIL}, nonce=SERVER_NONCE)
    assert exchange.first(CLIENT_FIRST) == SERVER_FIRST
    assert exchange.username == "user"
    assert exchange.final(CLIENT_FINAL) == SERVER_FINAL


def test_test_client_reproduces_rfc_7677_exchange() -> None:
    client = ScramClient("user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    assert client.server_signature_ok(SERVER_FINAL)


def test_credential_checks_plain_passwords() -> None:
    assert PENCIL.verify_password("pencil")
    assert PENCIL.verify_password(b"pencil")
    assert not PENCIL.verify_password("pencil ")
    assert not PENCIL.verify_password(b"\xff\xfe")
    fresh = ScramCredential.derive("pencil")
    assert fresh.salt != PENCIL.salt and fresh.stored_key != PENCIL.stored_key
    assert fresh.verify_password("pencil")


def test_wrong_password_and_unknown_user_fail_only_at_the_proof() -> None:
    for username, password in [("user", "pen"), ("nobody", "pencil")]:
        client = ScramClient(username, password)
        exchange = server({"user": PENCIL})
        final = client.final(exchange.first(client.first()))
        with pytest.raises(ScramAuthFailed):
            exchange.final(final)


def test_unknown_user_gets_a_stable_salt() -> None:
    salts = {server({}).first(b"n,,n=ghost,r=abc").split(b",")[1] for _ in range(2)}
    assert len(salts) == 1  # the same on every try, as a real user's would be


@pytest.mark.parametrize(
    "client_first",
    [
        b"p=tls-unique,,n=user,r=x",
        b"n,a=admin,n=user,r=x",
        b"n,,r=x",
        b"n,,n=,r=x",
        b"n,,n=a=b,r=x",
    ],
)
def test_malformed_client_first_is_refused(client_first: bytes) -> None:
    with pytest.raises(ScramError):
        server({"user": PENCIL}).first(client_first)


def test_client_final_must_repeat_nonce_and_binding() -> None:
    client = ScramClient("user", "pencil")
    exchange = server({"user": PENCIL})
    final = client.final(exchange.first(client.first()))
    for broken in [final.replace(b"c=biws", b"c=eSws"), final.replace(b"r=", b"r=x", 1)]:
        with pytest.raises(ScramError):
            server({"user": PENCIL}).final(broken)
        with pytest.raises(ScramError):
            exchange.final(broken)
    assert client.server_signature_ok(exchange.final(final))


def test_saslprep_maps_and_prohibits() -> None:
    assert saslprep("I\u00adX") == "IX"  # soft hyphen mapped to nothing
    assert saslprep("\u2168") == "IX"  # NFKC
    assert saslprep("a\u00a0b") == "a b"  # non-ASCII space to space
    with pytest.raises(ValueError):
        saslprep("a\u0007b")  # control character
