"""Mosquitto's ``acl_file`` (``[acl] format = "mosquitto"``), so an installation
moves over with its rules. Lines::

    # comment
    topic [read|write|readwrite|deny] <topic>      (no access word: readwrite)
    user <name>
    pattern [read|write|readwrite|deny] <topic>    (%u and %c placeholders)

Mapping onto ferromq's rules (``read`` → subscribe and read, ``write`` → publish,
``readwrite`` → all, ``deny`` → deny all): ``topic`` lines before any ``user`` line
are for anonymous clients, after ``user NAME`` for that user; ``pattern`` lines for
every client. Mosquitto checks a client's own topic lines before the patterns, and
``deny`` lines before grants within each; the rules are emitted in that order (topic
denies, topic grants, pattern denies, pattern grants), so first-match-wins gives
Mosquitto's answers. Mosquitto refuses what no line grants: set ``[acl] default =
"deny"`` to keep that. One difference: ferromq decides a subscription once, at
SUBSCRIBE (a deny overlapping the filter refuses it), where Mosquitto checks ``read``
again for each message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ferromq._core import AclRule

__all__ = ["parse_acl_file"]

_ACCESS: Final = {
    "read": ("allow", ["subscribe", "read"]),
    "write": ("allow", ["publish"]),
    "readwrite": ("allow", ["all"]),
    "deny": ("deny", ["all"]),
}


def parse_acl_file(text: str, path: Path) -> list[AclRule]:
    """The rules of an ``acl_file``; ``ValueError`` naming ``path:line`` otherwise."""
    topic_deny: list[AclRule] = []
    topic_grant: list[AclRule] = []
    pattern_deny: list[AclRule] = []
    pattern_grant: list[AclRule] = []
    user: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        where = f"{path}:{number}"
        if keyword == "user":
            if not rest:
                raise ValueError(f"{where}: user needs a name")
            user = rest
            continue
        if keyword not in ("topic", "pattern"):
            raise ValueError(f"{where}: unknown keyword {keyword!r} (topic, pattern or user)")
        access, _, topic = rest.partition(" ")
        if access not in _ACCESS or not topic.strip():
            access, topic = "readwrite", rest
        topic = topic.strip()
        if not topic:
            raise ValueError(f"{where}: {keyword} needs a topic")
        permission, actions = _ACCESS[access]
        try:
            if keyword == "pattern":
                rule = AclRule(permission, actions, topic)
            else:
                rule = AclRule(permission, actions, topic, user=user, anonymous=user is None)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        pick = (topic_deny, topic_grant) if keyword == "topic" else (pattern_deny, pattern_grant)
        pick[0 if permission == "deny" else 1].append(rule)
    return topic_deny + topic_grant + pattern_deny + pattern_grant
