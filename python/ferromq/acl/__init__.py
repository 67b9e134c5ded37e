"""Access control lists: compiled here, checked per message in the engine.

Python reads the rules (the ``[acl] file``, and the rules an authentication answer
carries) and hands the engine compiled :class:`~ferromq._core.AclRules`; the engine
checks every PUBLISH, SUBSCRIBE filter, will and retained message against them
without calling back (docs/architecture.md, "The one rule"; docs/acl.md for the
format and the behaviour a client sees).

- :mod:`~ferromq.acl.rules`: one rule object (TOML table or JSON object) → rules.
- :mod:`~ferromq.acl.mosquitto`: Mosquitto's ``acl_file``.

:func:`load_rules` builds the configured table (start, SIGHUP, a watched file
changing); :func:`binding_for` turns an accepted identity into the
:class:`~ferromq._core.AclBinding` the engine binds placeholders with.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ferromq._core import AclBinding, AclRule, AclRules
from ferromq.acl.mosquitto import parse_acl_file
from ferromq.acl.rules import rules_from_object
from ferromq.config import AclConfig, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:  # ferromq.auth's gate imports this package
    from ferromq.auth.provider import Identity

__all__ = ["binding_for", "load_rules", "rules_from_answer"]

_RULES_HEADER: Final = re.compile(r"^[ \t]*\[\[[ \t]*rules[ \t]*\]\]", re.MULTILINE)


def load_rules(config: AclConfig) -> AclRules | None:
    """The rules of ``[acl] file``, or None without one. Raises
    :class:`ConfigError` naming the file, the line and the problem."""
    if config.file is None:
        return None
    path = Path(config.file)
    where = f"acl.file: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read: {exc}") from None
    try:
        if config.format == "mosquitto":
            rules = parse_acl_file(text, path)
        else:
            rules = _parse_toml(text, path)
    except ValueError as exc:
        raise ConfigError(f"acl.file: {exc}") from None
    return AclRules(rules)


def _parse_toml(text: str, path: Path) -> list[AclRule]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from None
    unknown = [key for key in document if key != "rules"]
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r} (rules go in [[rules]] tables)")
    tables = document.get("rules", [])
    if not isinstance(tables, list):
        raise ValueError(f"{path}: rules: expected [[rules]] tables")
    lines = [text.count("\n", 0, m.start()) + 1 for m in _RULES_HEADER.finditer(text)]
    rules: list[AclRule] = []
    for index, table in enumerate(tables):
        where = f"{path}:{lines[index]}" if index < len(lines) else f"{path}: rules[{index}]"
        try:
            rules += rules_from_object(table, subjects=True)
        except ValueError as exc:
            raise ValueError(f"{where}: rules[{index}].{exc}") from None
    return rules


def rules_from_answer(acl: object) -> AclRules | None:
    """The rules an authentication answer carried (a JWT claim, the HTTP service's
    ``acl``): a list of rule objects, or None/absent for none. ``ValueError`` for
    anything else; the gate then refuses the client (fail closed)."""
    if acl is None:
        return None
    if not isinstance(acl, list):
        raise ValueError(f"expected a list of rule objects, got {type(acl).__name__}")
    rules: list[AclRule] = []
    for index, item in enumerate(acl):
        try:
            rules += rules_from_object(item, subjects=False)
        except ValueError as exc:
            raise ValueError(f"acl[{index}].{exc}") from None
    return AclRules(rules)


def _string_claims(claims: Mapping[str, object] | None) -> dict[str, str]:
    if not claims:
        return {}
    return {
        name: str(value)
        for name, value in claims.items()
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    }


def binding_for(identity: Identity, certificate: str | None) -> AclBinding:
    """What the engine binds ``%u``, ``%C`` and ``%{claim}`` with, and the answer's
    own rules. ``ValueError`` when the answer's rules are malformed."""
    return AclBinding(
        identity.username,
        certificate,
        _string_claims(identity.claims),
        rules_from_answer(identity.acl),
    )
