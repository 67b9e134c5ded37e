"""``ferromq bans ACTION``: edit the bans file (``[bans] file``, :mod:`ferromq.admission`).

- ``add`` / ``remove`` with one of ``--client-id ID``, ``--username NAME``,
  ``--address ADDRESS`` (an IPv4 or IPv6 address or a CIDR network);
- ``list``: one line per ban, its kind and its value.

The file is ``--file FILE``, or else ``[bans] file`` of the configuration (``--config
FILE`` and ``FERROMQ_*``, as ``serve`` reads it); ``add`` creates it when missing. The
running broker applies the file on SIGHUP (``kill -HUP``), closing the connections a
new ban matches. Every change is checked as the broker will read it and rewrites the
file whole (:func:`ferromq.textfile.replace_text`). Exit status 2 for a bad request
(a ban already there or not there, a bad address, an unreadable file).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, Final

from ferromq.config import (
    BanList,
    ConfigError,
    load_ban_file,
    parse_ban_list,
    toml_table,
)
from ferromq.file_cli import file_subcommands
from ferromq.textfile import replace_text

__all__ = ["BAN_KINDS", "ban_entries", "edit_ban_file", "register"]

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
    already there or not there, a bad address, an unreadable file). Also the admin
    API's (:mod:`ferromq.admin.api`)."""
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


def _change(args: argparse.Namespace, add: bool) -> str:
    kind = next(kind for kind in BAN_KINDS if getattr(args, kind) is not None)
    done = edit_ban_file(args.file, kind, getattr(args, kind), add)
    return f"{done}; kill -HUP the broker to apply"


def bans_list(args: argparse.Namespace) -> str:
    return "\n".join(f"{kind}\t{value}" for kind, value in ban_entries(load_ban_file(args.file)))


def register(commands: Any) -> None:
    """Add ``bans`` to the CLI's subcommands."""
    action = file_subcommands(
        commands,
        "bans",
        "manage the bans file; [bans] file, unless --file; SIGHUP applies it",
        "bans.file",
        lambda config: config.bans.file,
    )
    changes = (
        (
            "add",
            True,
            "Ban a client id, a user name or an address (or CIDR network). "
            "The file is created if missing.",
        ),
        ("remove", False, "Lift a ban."),
    )
    for name, add, description in changes:
        parser = action(name, partial(_change, add=add), description)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--client-id", dest="client_id", help="a client id")
        which.add_argument("--username", help="a user name (as authenticated)")
        which.add_argument("--address", help="an IPv4 / IPv6 address or CIDR network")
    action("list", bans_list, "List the bans: kind and value, one per line.")
