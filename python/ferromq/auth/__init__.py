"""Authentication: who may connect, decided once per CONNECT in Python.

- :mod:`~ferromq.auth.provider`: the provider protocol and its answers.
- :mod:`~ferromq.auth.scram`: SCRAM-SHA-256 credentials and the server exchange.
- :mod:`~ferromq.auth.users`: the users file (TOML) of SCRAM credentials.
- :mod:`~ferromq.auth.mosquitto`: Mosquitto password hashes (``users import-mosquitto``).
- :mod:`~ferromq.auth.password_file`: the provider backed by a users file.
- :mod:`~ferromq.auth.hook`: a custom provider loaded by name.
- :mod:`~ferromq.auth.chain`: the configured providers asked in order.
- :mod:`~ferromq.auth.gate`: engine events → provider → engine answers.
- :mod:`~ferromq.auth.cli`: ``ferromq users add | passwd | delete | list | import-mosquitto``.

:func:`provider_from_config` is what the broker calls: the chain of ``[auth]
providers``, or None when there is none, and then the engine accepts every CONNECT
itself (no Python per CONNECT at all).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from ferromq.auth.chain import ProviderChain
from ferromq.auth.gate import AuthGate
from ferromq.auth.hook import load_hook
from ferromq.auth.password_file import SCRAM_SHA_256, PasswordFileProvider
from ferromq.auth.provider import (
    Accept,
    AuthProvider,
    AuthRequest,
    Challenge,
    Identity,
    Outcome,
    Pass,
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
    "Pass",
    "PasswordFileProvider",
    "ProviderChain",
    "Reject",
    "UserRecord",
    "UsersFileError",
    "load_users",
    "provider_from_config",
]


def _users_file(config: AuthConfig) -> AuthProvider:
    assert config.users_file is not None  # checked with the configuration
    return PasswordFileProvider(load_users(Path(config.users_file)), methods=config.methods)


def _hook(config: AuthConfig) -> AuthProvider:
    assert config.hook is not None  # checked with the configuration
    return load_hook(config.hook)


_PROVIDERS: Final[dict[str, Callable[[AuthConfig], AuthProvider]]] = {
    "users_file": _users_file,
    "hook": _hook,
}


def provider_from_config(config: AuthConfig) -> ProviderChain | None:
    """The provider chain ``[auth]`` describes, or None when authentication is off.
    Raises :class:`~ferromq.config.ConfigError` (one line) for a provider that cannot
    be set up: a users file that cannot be loaded, a hook that cannot be imported."""
    names = config.chain()
    if not names:
        return None
    return ProviderChain(
        [_PROVIDERS[name](config) for name in names],
        allow_anonymous=bool(config.allow_anonymous),
    )
