"""Authentication: who may connect, decided once per CONNECT in Python.

- :mod:`~ferromq.auth.provider`: the provider protocol and its answers.
- :mod:`~ferromq.auth.scram`: SCRAM-SHA-256 credentials and the server exchange.
- :mod:`~ferromq.auth.users`: the users file (TOML) of SCRAM credentials.
- :mod:`~ferromq.auth.mosquitto`: Mosquitto password hashes (``users import-mosquitto``).
- :mod:`~ferromq.auth.password_file`: the provider backed by a users file.
- :mod:`~ferromq.auth.jwt_provider`: JSON Web Tokens as passwords.
- :mod:`~ferromq.auth.http_service`: an HTTP authentication service.
- :mod:`~ferromq.auth.hook`: a custom provider loaded by name.
- :mod:`~ferromq.auth.chain`: the configured providers asked in order.
- :mod:`~ferromq.auth.gate`: engine events → provider → engine answers.
- :mod:`~ferromq.auth.cli`: ``ferromq users add | passwd | delete | list | import-mosquitto``.

:func:`provider_from_config` is what the broker calls: the chain of ``[auth]
providers``, or None when there is none, and then the engine accepts every CONNECT
itself (no Python per CONNECT at all).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ferromq.auth.chain import ProviderChain
from ferromq.auth.gate import AuthGate
from ferromq.auth.hook import load_hook, resolve_hook
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
from ferromq.config import AuthConfig, ConfigError

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
    "check_providers",
    "load_users",
    "provider_from_config",
]


def _users_file(config: AuthConfig) -> AuthProvider:
    assert config.users_file is not None  # checked with the configuration
    path = Path(config.users_file)
    return PasswordFileProvider(load_users(path), methods=config.methods, path=path)


_EXTRAS: Final = {"jwt": ("jwt", "cryptography", "aiohttp"), "http": ("aiohttp",)}


def _require_extra(name: str) -> None:
    """A one-line error when the ``ferromq[name]`` extra is not installed."""
    missing = [module for module in _EXTRAS[name] if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(
            f'auth.providers: "{name}" needs ferromq[{name}] installed '
            f"(missing {', '.join(missing)})"
        )


def _jwt(config: AuthConfig) -> AuthProvider:
    _require_extra("jwt")
    from ferromq.auth import jwt_provider

    settings = jwt_provider.JwtSettings(
        username_claim=config.jwt_username_claim,
        client_type_claim=config.jwt_client_type_claim,
        acl_claim=config.jwt_acl_claim,
        audience=config.jwt_audience,
        issuer=config.jwt_issuer,
    )
    if config.jwt_key_file is not None:
        keys: jwt_provider.VerificationKey | jwt_provider.Jwks = jwt_provider.key_from_file(
            Path(config.jwt_key_file)
        )
    else:
        assert config.jwt_jwks_url is not None  # one of the two, checked with the config
        keys = jwt_provider.Jwks(config.jwt_jwks_url, config.jwt_jwks_refresh)
    return jwt_provider.JwtProvider(keys, settings)


def _http(config: AuthConfig) -> AuthProvider:
    _require_extra("http")
    from ferromq.auth.http_service import HttpServiceProvider

    assert config.http_url is not None  # checked with the configuration
    return HttpServiceProvider(
        config.http_url, timeout=config.http_timeout, cache_ttl=config.http_cache_ttl
    )


def _hook(config: AuthConfig) -> AuthProvider:
    assert config.hook is not None  # checked with the configuration
    return load_hook(config.hook)


_PROVIDERS: Final[dict[str, Callable[[AuthConfig], AuthProvider]]] = {
    "users_file": _users_file,
    "jwt": _jwt,
    "http": _http,
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


def check_providers(config: AuthConfig) -> None:
    """Raise what :func:`provider_from_config` would, without building anything that
    acts (for ``ferromq check-config``): files are read and extras imported, a hook is
    imported but not called."""
    for name in config.chain():
        if name == "hook":
            assert config.hook is not None  # checked with the configuration
            resolve_hook(config.hook)
        else:
            _PROVIDERS[name](config)
