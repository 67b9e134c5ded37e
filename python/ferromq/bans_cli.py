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

__all__ = ["register"]

# option → BanList field, and how one is named in messages
_KINDS: Final = {
    "client_id": ("client_ids", "client id"),
    "username": ("usernames", "user name"),
    "address": ("addresses", "address"),
}


def _change(args: argparse.Namespace, add: bool) -> str:
    path: Path = args.file
    bans = BanList() if add and not path.exists() else load_ban_file(path)
    option = next(kind for kind in _KINDS if getattr(args, kind) is not None)
    key, shown = _KINDS[option]
    value: str = getattr(args, option)
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
    done = "banned" if add else "unbanned"
    return f"{done} {shown} {value!r} in {path}; kill -HUP the broker to apply"


def bans_list(args: argparse.Namespace) -> str:
    bans = load_ban_file(args.file)
    lines = []
    for option, (key, _) in _KINDS.items():
        lines += [f"{option}\t{value}" for value in getattr(bans, key)]
    return "\n".join(lines)


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
