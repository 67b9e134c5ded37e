"""``[[rewrite.rules]]``: topic rewrite rules, compiled here into
:class:`ferromq._core.RewriteRule` and applied by the engine to every PUBLISH, will,
SUBSCRIBE and UNSUBSCRIBE as it arrives (``rust/ferromq-core/src/engine/rewrite.rs``:
the first rule whose ``source`` matches decides, before the ACL and routing see the
topic). Read at start and on SIGHUP; the preflight refuses a bad rule with one line
naming its key."""

from __future__ import annotations

from dataclasses import fields

from ferromq._core import RewriteRule
from ferromq.config import ConfigError, RewriteConfig, RewriteRuleConfig, require

__all__ = ["rewrite_rules"]

_REQUIRED = tuple(f.name for f in fields(RewriteRuleConfig) if f.name != "action")


def rewrite_rules(config: RewriteConfig) -> list[RewriteRule]:
    """The compiled rules; raises :class:`ConfigError` naming a bad one's key."""
    compiled = []
    for index, rule in enumerate(config.rules):
        where = f"rewrite.rules[{index}]"
        require(rule, where, *_REQUIRED)
        try:
            compiled.append(RewriteRule(rule.action, rule.source, rule.re, rule.to))
        except ValueError as exc:
            key, _, problem = str(exc).partition(": ")
            raise ConfigError(f"{where}.{key}: {problem}") from None
    return compiled
