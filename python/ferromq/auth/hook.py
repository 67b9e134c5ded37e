"""The ``hook`` provider: a custom provider written in Python, named by ``[auth] hook``.

``hook`` is ``"package.module:attribute"`` or the name of an entry point in the group
``ferromq.auth_providers`` (a package declares
``[project.entry-points."ferromq.auth_providers"] name = "package.module:attribute"``).
The attribute is a provider object — anything with ``async authenticate(request)``
answering as :mod:`ferromq.auth.provider` says, including :data:`PASS` to let the
next provider of the chain decide — or a class or factory called without arguments
that returns one. It is loaded once at start; errors are one :class:`ConfigError` line
naming ``auth.hook``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Final, cast

from ferromq.auth.provider import AuthProvider
from ferromq.config import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "load_hook", "resolve_hook"]

ENTRY_POINT_GROUP: Final = "ferromq.auth_providers"


def resolve_hook(spec: str) -> object:
    """What ``spec`` names, imported but not called: a provider object, or a class or
    factory to call for one (so ``ferromq check-config`` and a node's supervisor refuse
    anything else before a broker or shard starts)."""
    where = f"auth.hook: {spec!r}"
    if ":" not in spec:
        found = entry_points(group=ENTRY_POINT_GROUP, name=spec)
        if not found:
            raise ConfigError(f"{where}: no entry point of that name in {ENTRY_POINT_GROUP}")
        spec = next(iter(found)).value
    module_name, _, attribute = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name}: {exc}") from None
    except AttributeError:
        raise ConfigError(f"{where}: {module_name} has no attribute {attribute}") from None
    if _is_factory(target) and not callable(target):
        raise ConfigError(f"{where} is neither a provider nor callable")
    return target


def _is_factory(target: object) -> bool:
    return inspect.isclass(target) or not hasattr(target, "authenticate")


def load_hook(spec: str) -> AuthProvider:
    """The provider ``spec`` names (see the module header)."""
    target = resolve_hook(spec)
    if _is_factory(target):
        target = cast(Callable[[], object], target)()  # callable: resolve_hook checked it
    authenticate = getattr(target, "authenticate", None)
    if not inspect.iscoroutinefunction(authenticate):
        raise ConfigError(f"auth.hook: {spec!r} has no async authenticate(request)")
    return cast(AuthProvider, target)  # its authenticate is checked just above
