"""The bridge between the engine's authentication events and a provider.

The engine hands Python one ``Authenticate`` event per CONNECT and one ``Auth`` per
client AUTH packet (never anything per message). Each becomes a task that awaits the
provider and answers the engine with ``continue_auth`` (a :class:`Challenge`) or
``complete_auth`` (:class:`Accept` / :class:`Reject`), then flushes, so the answer
leaves in the same loop iteration.

Every event carries the connection's token and every answer brings it back: the
engine ignores an answer whose socket has gone, even when its connection id now
belongs to a new socket. The gate keeps per connection id the token with what it
knows — the open :class:`Challenge` while an exchange runs, the identity once
accepted (``identity(conn)``: user name and client type). Entries of closed
connections are replaced when the id is reused, so they are bounded by the peak
number of connections.

A connection over a TLS listener with ``require_certificate`` has a
:class:`~ferromq.auth.certificate.PeerCertificate` (``certificates(conn)``, given by the
listeners): with ``use_identity_as_username`` its identity is the user and no provider
is asked; otherwise providers see it in ``AuthRequest.certificate``.
On acceptance the engine gets the identity's ACL binding (:func:`ferromq.acl.binding_for`:
user name, certificate identity, claims, the answer's own rules); rules that do not
parse refuse the client with 0x87 (fail closed).
An identity with ``expires_at`` (a JWT's ``exp``) gets a timer: at that time the
engine closes the connection, v5 clients first getting DISCONNECT 0xA0 Maximum connect
time, unless a re-authentication brought a new expiry. A timer left by a closed
connection finds another token and does nothing.

Admission at CONNECT (:meth:`~ferromq.admission.Admission.admit_connect`): an accepted
CONNECT (not a re-authentication) is put to admission with the authenticated user
name, the client id and the peer's address before the CONNACK; a ban or the user's
connection limit turns the acceptance into CONNACK 0x8A Banned or 0x97 Quota exceeded,
logged at most once per :data:`~ferromq.log.LOG_INTERVAL` with the rule.
:meth:`AuthGate.disconnect` closes connected clients from outside (a ban added at run
time: DISCONNECT 0x98 Administrative action for v5 clients).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferromq._core import Auth, Authenticate, Engine
from ferromq._protocol import IOHub
from ferromq.acl import binding_for
from ferromq.admission import Admission
from ferromq.auth.certificate import PeerCertificate, certificate_outcome
from ferromq.auth.provider import (
    MAXIMUM_CONNECT_TIME,
    NOT_AUTHORIZED,
    SERVER_UNAVAILABLE,
    UNSPECIFIED_ERROR,
    Accept,
    AuthProvider,
    AuthRequest,
    Challenge,
    Identity,
    Outcome,
    Pass,
    Reject,
)
from ferromq.log import RateLimitedLog, log_event, peer_text

__all__ = ["AuthGate"]

logger = logging.getLogger("ferromq.auth")


@dataclass
class _Connection:
    token: int
    client_id: str
    method: str | None
    certificate: str | None = None
    identity: Identity | None = None
    challenge: Challenge | None = None
    expiry: asyncio.TimerHandle | None = None
    # The session may outlive the connection: not a 3.x clean session (a v5 one's
    # Session Expiry is the engine's to apply).
    may_persist: bool = True


class AuthGate:
    def __init__(
        self,
        engine: Engine,
        hub: IOHub,
        provider: AuthProvider,
        admission: Admission,
        certificates: Callable[[int], PeerCertificate | None] = lambda conn: None,
    ) -> None:
        self._engine = engine
        self._hub = hub
        self._provider = provider
        self._admission = admission
        self._certificates = certificates
        self._connections: dict[int, _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._log_refused = RateLimitedLog(logger, logging.WARNING, "connection refused at CONNECT")
        self.claim: Callable[[str, bool], Awaitable[None]] | None = None
        """Set on a clustered node: makes an accepted CONNECT's client id this node's
        (:meth:`ferromq.cluster.ownership.Ownership.claim`) before the answer."""

    def use_provider(self, provider: AuthProvider) -> None:
        """Decide every later CONNECT and re-authentication with ``provider`` (a SIGHUP
        reload); an exchange under way finishes with the provider that began it."""
        self._provider = provider

    async def settled(self) -> None:
        """Return once the answers under way have been given."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def identity(self, conn: int) -> Identity | None:
        """Who the connection ``conn`` authenticated as, once accepted."""
        state = self._connections.get(conn)
        return state.identity if state else None

    def on_event(self, event: Authenticate | Auth) -> None:
        """Handle an ``Authenticate`` or ``Auth`` event from ``Engine.take_events``."""
        conn, token, data = event.conn, event.token, event.data
        if isinstance(event, Authenticate):
            certificate = self._certificates(conn)
            self._connections[conn] = _Connection(
                token,
                event.client_id,
                event.method,
                certificate.identity if certificate is not None else None,
                # A clean 3.1.1 session ends with its connection, but a cluster
                # keeps its will for the node that adopts this one's clients.
                may_persist=not event.clean_start or event.protocol >= 5 or event.has_will,
            )
            if certificate is not None and certificate.as_username:
                self._run(conn, token, _ready(certificate_outcome(certificate)))
                return
            request = AuthRequest(
                event.client_id,
                event.username,
                event.password,
                event.protocol,
                event.method,
                data,
                certificate=certificate.identity if certificate is not None else None,
                peer=self._peer(conn),
            )
            if request.peer is not None:
                self._engine.set_peer(conn, token, request.peer)  # for [stream] records
            self._run(conn, token, self._provider.authenticate(request))
            return
        state = self._connections.get(conn)
        if state is None or state.token != token:
            return  # the engine checks methods and turns; this cannot be ours
        if event.reauthenticate:
            request = AuthRequest(
                state.client_id,
                None,
                None,
                5,
                state.method,
                data,
                reauthenticating=state.identity,
            )
            self._run(conn, token, self._provider.authenticate(request))
        elif state.challenge is not None:
            challenge, state.challenge = state.challenge, None
            self._run(conn, token, challenge.respond(data))

    def _run(self, conn: int, token: int, outcome: Awaitable[Outcome]) -> None:
        task = asyncio.ensure_future(self._answer(conn, token, outcome))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, conn: int, token: int, pending: Awaitable[Outcome]) -> None:
        try:
            outcome = await pending
        except Exception:
            logger.exception("authentication provider failed (conn %d)", conn)
            outcome = Reject(UNSPECIFIED_ERROR)
        if isinstance(outcome, Pass):  # a Challenge's answer is its provider's to give
            outcome = Reject(NOT_AUTHORIZED)
        outcome = await self._claimed(conn, token, outcome)
        state = self._connections.get(conn)
        if state is None or state.token != token:
            return
        now = self._hub.now()
        if isinstance(outcome, Challenge):
            state.challenge = outcome
            self._engine.continue_auth(conn, token, outcome.data, now)
        elif isinstance(outcome, Accept):
            self._accept(conn, state, outcome)
        else:
            self._engine.complete_auth(conn, token, outcome.reason, now)
        self._hub.flush()

    async def _claimed(
        self, conn: int, token: int, outcome: Accept | Reject | Challenge
    ) -> Accept | Reject | Challenge:
        """A first CONNECT accepted on a clustered node: its client id claimed (an empty
        one is assigned by this node, unique to it)."""
        state = self._connections.get(conn)
        if (
            self.claim is None
            or not isinstance(outcome, Accept)
            or state is None
            or state.token != token
            or state.identity is not None
            or not state.client_id
        ):
            return outcome
        try:
            await self.claim(state.client_id, state.may_persist)
        except Exception as exc:  # a Redis outage, or a bug: refuse this one CONNECT
            log_event(
                logger,
                logging.WARNING,
                "client id not claimed in the cluster; CONNECT refused",
                conn=conn,
                client_id=state.client_id,
                error=str(exc),
            )
            return Reject(SERVER_UNAVAILABLE)
        return outcome

    def _accept(self, conn: int, state: _Connection, outcome: Accept) -> None:
        previous = state.identity
        if previous is not None and previous != outcome.identity:
            # A re-authentication may not turn a connection into another user.
            self._engine.complete_auth(conn, state.token, NOT_AUTHORIZED, self._hub.now())
            return
        try:
            acl = binding_for(outcome.identity, state.certificate) if previous is None else None
        except ValueError as exc:
            # Rules the client cannot be held to: fail closed.
            log_event(
                logger,
                logging.WARNING,
                "authentication answer's ACL refused",
                conn=conn,
                client_id=state.client_id,
                error=str(exc),
            )
            self._engine.complete_auth(conn, state.token, NOT_AUTHORIZED, self._hub.now())
            return
        if previous is None and not self._admitted(conn, state, outcome.identity):
            return
        state.identity = outcome.identity
        self._engine.complete_auth(
            conn,
            state.token,
            0,
            self._hub.now(),
            outcome.data,
            client_type=outcome.identity.client_type,
            acl=acl,
        )
        self._schedule_expiry(conn, state)
        log_event(
            logger,
            logging.INFO,
            "reauthenticated" if previous else "authenticated",
            conn=conn,
            client_id=state.client_id,
            username=outcome.identity.username,
            client_type=outcome.identity.client_type,
            method=state.method,
        )

    def _admitted(self, conn: int, state: _Connection, identity: Identity) -> bool:
        """Put an accepted CONNECT to admission; refused, answer the refusal."""
        peer = self._hub.peer(conn)
        if peer is None:
            return False  # the connection is gone: the engine would ignore any answer
        username = identity.username
        refusal = self._admission.admit_connect(
            conn, state.token, state.client_id, username, peer[0]
        )
        if refusal is None:
            return True
        self._engine.complete_auth(conn, state.token, refusal.reason_code, self._hub.now())
        self._log_refused(
            time.monotonic(),
            peer=peer_text(peer),
            client_id=state.client_id,
            username=username,
            reason=refusal.reason,
            rule=refusal.rule,
        )
        return False

    def disconnect(self, connections: list[tuple[int, int]], reason_code: int, why: str) -> None:
        """Close the connected clients ``connections`` (connection id, token) from
        outside the protocol (v5: DISCONNECT ``reason_code``), logging each with
        ``why``."""
        now = self._hub.now()
        for conn, token in connections:
            self._engine.disconnect(conn, token, reason_code, now)
            state = self._connections.get(conn)
            log_event(
                logger,
                logging.INFO,
                "connection closed",
                conn=conn,
                client_id=state.client_id if state else None,
                reason=why,
            )
        self._hub.flush()

    def _schedule_expiry(self, conn: int, state: _Connection) -> None:
        if state.expiry is not None:
            state.expiry.cancel()
        expires_at = state.identity.expires_at if state.identity else None
        if expires_at is not None:
            delay = max(0.0, expires_at - time.time())
            loop = asyncio.get_running_loop()
            state.expiry = loop.call_later(delay, self._expire, conn, state.token)

    def _expire(self, conn: int, token: int) -> None:
        state = self._connections.get(conn)
        if state is None or state.token != token:
            return
        self._engine.disconnect(conn, token, MAXIMUM_CONNECT_TIME, self._hub.now())
        self._hub.flush()
        username = state.identity.username if state.identity else None
        log_event(logger, logging.INFO, "credentials expired", conn=conn, username=username)

    def _peer(self, conn: int) -> str | None:
        address = self._hub.peer(conn)
        return peer_text(address) if address else None


async def _ready(outcome: Outcome) -> Outcome:
    return outcome
