"""A custom authentication provider for the ``hook`` tests (``[auth] hook =
"tests.support.auth_hook:TicketProvider"``): user names ``ticket-*`` with the password
``hook-pass`` are APPLICATION clients with ACL data; another ``ticket-*`` password is
refused 0x87; every other name is passed to the next provider."""

from __future__ import annotations

from ferromq.auth.provider import (
    NOT_AUTHORIZED,
    PASS,
    Accept,
    AuthRequest,
    Identity,
    Outcome,
    Reject,
)


class TicketProvider:
    async def authenticate(self, request: AuthRequest) -> Outcome:
        if request.username is None or not request.username.startswith("ticket-"):
            return PASS
        if request.password != b"hook-pass":
            return Reject(NOT_AUTHORIZED)
        rules = [{"permission": "allow", "action": "publish", "topic": "tickets/#"}]
        return Accept(Identity(request.username, "application", acl=rules))


NOT_A_PROVIDER = 42
