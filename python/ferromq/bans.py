"""The bans file's entries, and one ban added or removed, as both the ``ferromq bans``
command (:mod:`ferromq.bans_cli`) and the admin API (:mod:`ferromq.admin.api`) edit it.
Every change is checked as the broker will read it (:mod:`ferromq.admission` applies the
file on SIGHUP) and rewrites the file whole (:func:`ferromq.fileio.replace_text`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Final

from ferromq.config import BanList, ConfigError, load_ban_file, parse_ban_list, toml_table
from ferromq.fileio import replace_text

__all__ = ["BAN_KINDS", "ban_entries", "edit_ban_file"]

# kind (the option) → BanList field, and how one is named in messages
BAN_KINDS: Final = {
    "client_id": ("client_ids", "client id"),
    "username": ("usernames", "user name"),
    "address": ("addresses", "address"),
}


def edit_ban_file(path: Path, kind: str, value: str, add: bool) -> str:
    """Add or remove one ban of ``kind`` (a :data:`BAN_KINDS` key) in the bans file at
    ``path`` (created by an add), checked as the broker will read it; returns what
    was done. Raises :class:`~ferromq.config.ConfigError` naming file and value (a ban
    already there or not there, a bad address, an unreadable file)."""
    bans = BanList() if add and not path.exists() else load_ban_file(path)
    key, shown = BAN_KINDS[kind]
    table = {field: list(values) for field, values in asdict(bans).items()}
    if (value in table[key]) == add:
        state = "already banned" if add else "not banned"
        raise ConfigError(f"bans file {path}: {shown} {value!r} is {state}")
    if add:
        table[key].append(value)
    else:
        table[key].remove(value)
    parse_ban_list(table, f"bans file {path}")  # refuse what the broker would refuse
    replace_text(path, "\n".join(toml_table("# ferromq bans (ferromq bans add | remove)", table)))
    return f"{'banned' if add else 'unbanned'} {shown} {value!r} in {path}"


def ban_entries(bans: BanList) -> list[tuple[str, str]]:
    """``(kind, value)`` of every ban in ``bans``, kinds in :data:`BAN_KINDS` order."""
    return [(kind, value) for kind, (key, _) in BAN_KINDS.items() for value in getattr(bans, key)]
