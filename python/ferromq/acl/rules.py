"""ACL rules as users write them: one JSON/TOML object per rule, the shape shared by
the ``[acl] file`` (TOML ``[[rules]]`` tables) and the rules an authentication
answer carries (a JWT claim, the HTTP service's ``acl`` field)::

    {"permission": "allow" | "deny",
     "action": "publish" | "subscribe" | "read" | "all" | [several of them],
     "topic": "sensors/%u/#"            (or "topics": [...], one rule each, in order)
     "user" | "client_id" | "certificate": "...", or "anonymous": true  (file only)}

``read`` is the retained messages sent on subscribe; live messages reach a client
through a subscription, which ``subscribe`` decides. Placeholders: ``%u`` user
name, ``%c`` client id, ``%C`` certificate identity, ``%{name}`` a string JWT
claim, ``%%`` a percent sign. Each rule becomes one :class:`ferromq._core.AclRule`,
compiled by the core; a bad one is a ``ValueError`` whose one line names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ferromq._core import AclRule

__all__ = ["ACTIONS", "rules_from_object"]

ACTIONS: Final = ("publish", "subscribe", "read", "all")
_SUBJECTS: Final = ("user", "client_id", "certificate", "anonymous")
_KEYS: Final = ("permission", "action", "topic", "topics", *_SUBJECTS)


def _names(value: object, key: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, str) for item in items):
        raise ValueError(f"{key}: expected a string or a list of strings, got {value!r}")
    return [str(item) for item in items]


def rules_from_object(item: object, *, subjects: bool) -> list[AclRule]:
    """The rules one object describes (one per topic). ``subjects``: the object may
    name whom it is for (a rules file); an authentication answer's rules are for
    the client it accepted."""
    if not isinstance(item, Mapping):
        raise ValueError(f"expected a table/object, got {item!r}")
    allowed = _KEYS if subjects else _KEYS[:4]
    for key in item:
        if key not in allowed:
            raise ValueError(f"{key}: unknown key (known: {', '.join(allowed)})")
    permission = item.get("permission")
    if permission not in ("allow", "deny"):
        raise ValueError(f'permission: expected "allow" or "deny", got {permission!r}')
    if "action" not in item:
        raise ValueError("action: required (publish, subscribe, read or all)")
    actions = _names(item["action"], "action")
    for action in actions:
        if action not in ACTIONS:
            raise ValueError(f"action: unknown action {action!r} ({', '.join(ACTIONS)})")
    if ("topic" in item) == ("topics" in item):
        raise ValueError("topic: exactly one of topic and topics is required")
    topics = _names(item["topic"] if "topic" in item else item["topics"], "topics")
    subject: dict[str, str | bool] = {}
    for key in _SUBJECTS:
        value = item.get(key)
        if value is None:
            continue
        expected = bool if key == "anonymous" else str
        if not isinstance(value, expected):
            raise ValueError(f"{key}: expected a {expected.__name__}, got {value!r}")
        subject[key] = value
    if len(subject) > 1:
        raise ValueError(f"{next(iter(subject))}: a rule is for one of {', '.join(_SUBJECTS)}")
    anonymous = bool(subject.pop("anonymous", False))
    names = {key: str(value) for key, value in subject.items()}
    return [
        AclRule(
            str(permission),
            actions,
            topic,
            user=names.get("user"),
            client_id=names.get("client_id"),
            certificate=names.get("certificate"),
            anonymous=anonymous,
        )
        for topic in topics
    ]
