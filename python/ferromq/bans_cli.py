"""``ferromq bans ACTION``: edit the bans file (``[bans] file``, :mod:`ferromq.admission`).

- ``add`` / ``remove`` with one of ``--client-id ID``, ``--username NAME``,
  ``--address ADDRESS`` (an IPv4 or IPv6 address or a CIDR network);
- ``list``: one line per ban, its kind and its value.

The file is ``--file FILE``, or else ``[bans] file`` of the configuration (``--config
FILE`` and ``FERROMQ_*``, as ``serve`` reads it); ``add`` creates it when missing. The
running broker applies the file on SIGHUP (``kill -HUP``), closing the connections a
new ban matches. Every change is checked as the broker will read it and rewrites the
file whole (:func:`ferromq.bans.edit_ban_file`). Exit status 2 for a bad request
(a ban already there or not there, a bad address, an unreadable file).
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from ferromq.bans import BAN_KINDS, ban_entries, edit_ban_file
from ferromq.config import load_ban_file
from ferromq.file_cli import file_subcommands

__all__ = ["register"]


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
