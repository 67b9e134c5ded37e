"""A node's TLS session-ticket key (ferromq.tls_tickets): a session begun with one
shard's context resumes with another's once both hold the node's key, and not before.
Real OpenSSL handshakes between Python's ssl objects over memory buffers."""

from __future__ import annotations

import contextlib
import ssl

import pytest
from tests.support.tls_certs import Pki, client_context

from ferromq.tls_tickets import KEY_BYTES, new_ticket_keys, share_ticket_keys


def _server_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server.cert, pki.server.key)
    return context


def _handshake(
    client: ssl.SSLContext, server: ssl.SSLContext, session: ssl.SSLSession | None
) -> ssl.SSLObject:
    """A full TLS exchange between ``client`` and ``server`` (offering ``session``),
    including the tickets the server sends after it: the client's end."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    near = client.wrap_bio(to_client, to_server, server_hostname="localhost", session=session)
    far = server.wrap_bio(from_client, from_server, server_side=True)
    for _ in range(10):
        for end in (near, far):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        from_client.write(to_server.read())
        to_client.write(from_server.read())
    far.write(b"x")  # the tickets arrive with the first data after the handshake
    to_client.write(from_server.read())
    assert near.read(1) == b"x"
    return near


def test_a_session_resumes_on_another_context_holding_the_same_key(pki: Pki) -> None:
    client = client_context(pki.ca.cafile)
    first, second = _server_context(pki), _server_context(pki)
    started = _handshake(client, first, None)
    assert not started.session_reused
    session = started.session
    assert session is not None and session.has_ticket

    # Each context's own random key: the other shard cannot read the ticket.
    assert not _handshake(client, second, session).session_reused

    keys = new_ticket_keys()
    share_ticket_keys(first, keys)
    share_ticket_keys(second, keys)
    issued = _handshake(client, first, None).session
    assert issued is not None
    assert _handshake(client, second, issued).session_reused


def test_a_key_of_the_wrong_size_is_refused(pki: Pki) -> None:
    with pytest.raises(ValueError, match=f"{KEY_BYTES} bytes"):
        share_ticket_keys(_server_context(pki), b"short")
