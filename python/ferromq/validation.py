"""``[[validation.rules]]``: payload schemas checked at ingress. Each rule's schema
file is read here and compiled into :class:`ferromq._core.ValidationRule`; the engine
checks every client PUBLISH whose topic matches a rule's filter
(``rust/ferromq-core/src/engine/validation.rs``, ``rust/ferromq-core/src/schema/``),
with no Python per message. Read at start and on SIGHUP; the preflight refuses a bad
rule or schema with one line naming its key."""

from __future__ import annotations

from pathlib import Path

from ferromq._core import ValidationRule
from ferromq.config import ConfigError, ValidationConfig, require

__all__ = ["validation_rules"]


def validation_rules(config: ValidationConfig) -> list[ValidationRule]:
    """The compiled rules; raises :class:`ConfigError` naming a bad one's key."""
    compiled = []
    for index, rule in enumerate(config.rules):
        where = f"validation.rules[{index}]"
        require(rule, where, "filter", "schema")
        path = Path(rule.schema)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{where}.schema: {path} not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}.schema: {path} cannot be read: {exc}") from None
        try:
            compiled.append(ValidationRule(rule.filter, rule.format, text, rule.on_failure))
        except ValueError as exc:
            key, _, problem = str(exc).partition(": ")
            shown = f"{path}: {problem}" if key == "schema" else problem
            raise ConfigError(f"{where}.{key}: {shown}") from None
    return compiled
