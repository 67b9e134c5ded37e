"""Recognise a Mosquitto ``mosquitto.conf`` handed to ferromq in place of its TOML.

``ferromq serve -c /etc/mosquitto/mosquitto.conf`` is a natural first try for a
Mosquitto user. Such a file is not TOML (``listener 1883`` has no ``=``), so parsing
fails; instead of a TOML syntax error the user gets one line saying the format is TOML
and the ferromq keys for each directive recognised, e.g.::

    [[listeners]] port = 1883, host = "0.0.0.0"; [auth] allow_anonymous = true

A file counts as Mosquitto's when at least one line is a directive of :data:`_KEYS`
(``name value``); nothing else about it is interpreted. Directives without a
counterpart here are left out of the hint, not guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

__all__ = ["toml_hint"]

# `name value`; a value starting with "=" is a TOML line (`port = 1883`), not Mosquitto's.
_DIRECTIVE: Final = re.compile(r"\s*([a-z_]+)\s+([^=\s].*?)\s*")

_Keys = list[tuple[str, str]]  # (key, TOML value) pairs of one table


def _text(value: str) -> str:
    return json.dumps(value)


def _boolean(value: str) -> str:
    return "true" if value.lower() == "true" else "false"


def _plain(key: str, render: Callable[[str], str] = str) -> Callable[[str], _Keys]:
    return lambda value: [(key, render(value))]


def _listener(value: str) -> _Keys:
    port, _, host = value.partition(" ")
    keys = [("port", port)]
    return [*keys, ("host", _text(host.strip()))] if host.strip() else keys


def _log_dest(value: str) -> _Keys:
    kind, _, path = value.partition(" ")
    if kind == "file" and path.strip():
        return [("destination", '"file"'), ("file", _text(path.strip()))]
    return [("destination", _text(kind))] if kind in ("stderr", "syslog") else []


def _users_file(value: str) -> _Keys:
    return [
        (
            "users_file",
            f'"users.toml" (made by: ferromq users import-mosquitto {value} --file users.toml)',
        )
    ]


# directive -> (table it goes to, its keys there). "[[listeners]]" keys of a `listener`
# line start a new listener; the other listener keys go to the latest one.
_KEYS: Final[dict[str, tuple[str, Callable[[str], _Keys]]]] = {
    "listener": ("[[listeners]]", _listener),
    "port": ("[[listeners]]", _plain("port")),
    "bind_address": ("[[listeners]]", _plain("host", _text)),
    "protocol": (
        "[[listeners]]",
        lambda v: [("protocol", '"ws"' if v == "websockets" else '"tcp"')],
    ),
    "certfile": ("[[listeners]]", _plain("certfile", _text)),
    "keyfile": ("[[listeners]]", _plain("keyfile", _text)),
    "cafile": ("[[listeners]]", _plain("cafile", _text)),
    "require_certificate": ("[[listeners]]", _plain("require_certificate", _boolean)),
    "use_identity_as_username": ("[[listeners]]", _plain("use_identity_as_username", _boolean)),
    "max_connections": ("[limits]", _plain("max_connections")),
    "max_keepalive": ("[limits]", _plain("max_keepalive")),
    "max_packet_size": ("[limits]", _plain("max_packet_size")),
    "max_inflight_messages": ("[limits]", _plain("max_inflight")),
    "max_queued_messages": ("[session]", _plain("queue_limit")),
    "allow_anonymous": ("[auth]", _plain("allow_anonymous", _boolean)),
    "password_file": ("[auth]", _users_file),
    "acl_file": ("[acl]", lambda v: [("file", _text(v)), ("format", '"mosquitto"')]),
    "persistence": (
        "[storage]",
        lambda v: [("backend", '"embedded"' if _boolean(v) == "true" else '"memory"')],
    ),
    "persistence_location": ("[storage]", _plain("path", _text)),
    "log_dest": ("[log]", _log_dest),
}


def toml_hint(text: str) -> str | None:
    """The ferromq TOML for the Mosquitto directives in ``text``, as one line, or None
    when no line is one."""
    tables: list[tuple[str, _Keys]] = []
    for line in text.splitlines():
        match = _DIRECTIVE.fullmatch(line)
        if match is None or match[1] not in _KEYS:
            continue
        header, keys_of = _KEYS[match[1]]
        keys = keys_of(match[2])
        if not keys:
            continue
        table = next((entry for entry in reversed(tables) if entry[0] == header), None)
        if table is None or (match[1] == "listener" and any(k == "port" for k, _ in table[1])):
            table = (header, [])
            tables.append(table)
        table[1].extend(keys)
    if not tables:
        return None
    shown = "; ".join(
        f"{header} {', '.join(f'{key} = {value}' for key, value in keys)}"
        for header, keys in tables
    )
    return f"this looks like a Mosquitto configuration, but ferromq reads TOML; equivalent: {shown}"
