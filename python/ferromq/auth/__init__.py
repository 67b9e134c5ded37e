"""Authentication: who may connect, decided once per CONNECT in Python.

- :mod:`~ferromq.auth.provider`: the provider protocol and its answers.
- :mod:`~ferromq.auth.scram`: SCRAM-SHA-256 credentials and the server exchange.
- :mod:`~ferromq.auth.users`: the users file (TOML) of SCRAM credentials.
- :mod:`~ferromq.auth.password_file`: the provider backed by a users file.
- :mod:`~ferromq.auth.gate`: engine events → provider → engine answers.
- :mod:`~ferromq.auth.cli`: ``ferromq users add``.

:func:`provider_from_config` is what the broker calls: None when ``[auth]`` names no
users file, and then the engine accepts every CONNECT itself (no Python per
CONNECT at all).
"""

from __future__ import annotations

from pathlib import Path

from ferromq.auth.gate import AuthGate
from ferromq.auth.password_file import SCRAM_SHA_256, PasswordFileProvider
from ferromq.auth.provider import (
    Accept,
    AuthProvider,
    AuthRequest,
    Challenge,
    Identity,
    Outcome,
    Reject,
)
from ferromq.auth.users import UserRecord, UsersFileError, load_users
from ferromq.config import AuthConfig

__all__ = [
    "SCRAM_SHA_256",
    "Accept",
    "AuthGate",
    "AuthProvider",
    "AuthRequest",
    "Challenge",
    "Identity",
    "Outcome",
    "PasswordFileProvider",
    "Reject",
    "UserRecord",
    "UsersFileError",
    "load_users",
    "provider_from_config",
]


def provider_from_config(config: AuthConfig) -> AuthProvider | None:
    """The provider ``[auth]`` describes, or None when authentication is off.
    Raises :class:`UsersFileError` for a users file that cannot be loaded."""
    if config.users_file is None:
        return None
    return PasswordFileProvider(
        load_users(Path(config.users_file)),
        allow_anonymous=bool(config.allow_anonymous),
        methods=config.methods,
    )
