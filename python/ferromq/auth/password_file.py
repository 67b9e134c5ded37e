"""The password-file provider: users from a users file (:mod:`ferromq.auth.users`),
checked by CONNECT user name and password or by a SCRAM-SHA-256 exchange.

- No Authentication Method: a CONNECT with a user name of the file has its password
  checked against the stored credential (one PBKDF2 run, in a worker thread so the
  event loop keeps serving); a wrong or missing password is 0x86. A CONNECT without a
  user name, or with one the file does not hold, is passed to the next provider of
  the chain (:mod:`ferromq.auth.chain`, which refuses it with 0x86 when none takes
  it) — an unknown user costs the same PBKDF2 run, so timing does not tell which
  names exist. A user imported from Mosquitto is checked against its
  Mosquitto hash (:mod:`ferromq.auth.mosquitto`); the first password that matches
  it is turned into a SCRAM-SHA-256 credential, in memory and in the users file
  (unless someone changed the entry meanwhile; a file that cannot be written is
  logged and the credential kept in memory), so SCRAM works for that user from then
  on. A password SASLprep refuses keeps the Mosquitto hash.
- Authentication Method ``SCRAM-SHA-256`` (when listed in ``methods``): client-first
  comes in CONNECT's Authentication Data, server-first goes out in AUTH 0x18,
  client-final comes back, and server-final rides on the CONNACK. A wrong proof is
  0x86, a malformed message 0x87; a user with a Mosquitto hash cannot do SCRAM
  (0x86, like an unknown user). A re-authentication must prove the same user.
- Any other method: passed on (the chain answers 0x8C [MQTT-4.12.0-1] when no
  provider runs it).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Collection, Mapping
from pathlib import Path

from ferromq.auth.mosquitto import MosquittoHash
from ferromq.auth.provider import (
    BAD_USERNAME_OR_PASSWORD,
    NOT_AUTHORIZED,
    PASS,
    Accept,
    AuthRequest,
    Challenge,
    Identity,
    Outcome,
    Reject,
)
from ferromq.auth.scram import ScramAuthFailed, ScramCredential, ScramError, ScramServer
from ferromq.auth.users import UserRecord, UsersFileError, replace_credential
from ferromq.log import log_event

__all__ = ["SCRAM_SHA_256", "PasswordFileProvider"]

logger = logging.getLogger("ferromq.auth")

SCRAM_SHA_256 = "SCRAM-SHA-256"


class PasswordFileProvider:
    def __init__(
        self,
        users: Mapping[str, UserRecord],
        *,
        methods: Collection[str] = (SCRAM_SHA_256,),
        path: Path | None = None,
    ) -> None:
        self._users = dict(users)
        self._path = path  # where upgraded Mosquitto users are written back
        self._methods = frozenset(methods)
        self._secret = secrets.token_bytes(32)
        # Checked against for unknown users, so they cost what known ones do.
        self._decoy = ScramCredential.derive(secrets.token_hex(16))

    async def authenticate(self, request: AuthRequest) -> Outcome:
        if request.method is not None:
            return self._scram(request) if request.method in self._methods else PASS
        if request.username is None:
            return PASS
        record = self._users.get(request.username)
        credential = record.credential if record else self._decoy
        password = request.password or b""
        matches = await asyncio.to_thread(credential.verify_password, password)
        if record is None:
            return PASS
        if request.password is None or not matches:
            return Reject(BAD_USERNAME_OR_PASSWORD)
        if isinstance(record.credential, MosquittoHash):
            await self._upgrade(request.username, record, request.password)
        return Accept(Identity(request.username, record.client_type))

    def _lookup(self, username: str) -> ScramCredential | None:
        """The SCRAM credential of ``username``; None for an unknown user and for an
        imported Mosquitto hash, which cannot run SCRAM (it fails like an unknown user)."""
        record = self._users.get(username)
        credential = record.credential if record else None
        return credential if isinstance(credential, ScramCredential) else None

    def _scram(self, request: AuthRequest) -> Outcome:
        exchange = ScramServer(self._lookup, self._secret)
        try:
            server_first = exchange.first(request.data or b"")
        except ScramError:
            return Reject(NOT_AUTHORIZED)
        previous = request.reauthenticating
        if previous is not None and previous.username != exchange.username:
            return Reject(NOT_AUTHORIZED)

        async def respond(client_final: bytes | None) -> Outcome:
            try:
                server_final = exchange.final(client_final or b"")
            except ScramAuthFailed:
                return Reject(BAD_USERNAME_OR_PASSWORD)
            except ScramError:
                return Reject(NOT_AUTHORIZED)
            username = exchange.username
            assert username is not None  # set by first()
            identity = Identity(username, self._users[username].client_type)
            return Accept(identity, server_final)

        return Challenge(server_first, respond)

    async def _upgrade(self, name: str, record: UserRecord, password: bytes) -> None:
        """Replace ``name``'s Mosquitto hash by a SCRAM credential of ``password``."""
        try:
            credential = await asyncio.to_thread(ScramCredential.derive, password.decode())
        except ValueError:  # not UTF-8, or SASLprep refuses it
            return
        upgraded = UserRecord(credential, record.client_type)
        self._users[name] = upgraded
        if self._path is None:
            return
        try:
            written = await asyncio.to_thread(
                replace_credential, self._path, name, record.credential, upgraded
            )
        except (UsersFileError, OSError) as exc:
            log_event(logger, logging.WARNING, "users file not updated", error=str(exc))
            return
        if written:
            log_event(logger, logging.INFO, "mosquitto user upgraded to scram", username=name)
