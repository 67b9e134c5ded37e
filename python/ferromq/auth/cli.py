"""``ferromq users add NAME --file users.toml``: create a user in a users file.

The password is read from stdin with ``--password-stdin`` (one line; for scripts),
otherwise prompted for twice on the terminal. Only the salted SCRAM-SHA-256
credential is written (:mod:`ferromq.auth.users`). Exit status 2 for a bad request
(an existing user, an unreadable file, an empty password), like a configuration error.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from ferromq.auth.provider import CLIENT_TYPES
from ferromq.auth.scram import DEFAULT_ITERATIONS, ScramCredential
from ferromq.auth.users import UserRecord, UsersFileError, add_user

__all__ = ["register"]

EXIT_BAD_REQUEST = 2


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        raise UsersFileError("no terminal to prompt on; use --password-stdin")
    password = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != password:
        raise UsersFileError("the passwords differ")
    return password


def users_add(args: argparse.Namespace) -> int:
    try:
        password = _read_password(args)
        if not password:
            raise UsersFileError("empty password")
        try:
            credential = ScramCredential.derive(password, iterations=args.iterations)
        except ValueError as exc:  # SASLprep refused a character
            raise UsersFileError(str(exc)) from None
        add_user(args.file, args.name, UserRecord(credential, args.client_type))
    except UsersFileError as exc:
        print(f"ferromq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    print(f"added {args.client_type} user {args.name!r} to {args.file}")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < DEFAULT_ITERATIONS:
        raise argparse.ArgumentTypeError(f"at least {DEFAULT_ITERATIONS} (RFC 7677)")
    return value


def register(commands: Any) -> None:
    """Add ``users`` to the CLI's subcommands."""
    users = commands.add_parser(
        "users",
        help="manage the users file",
        description="Manage the users file named by [auth] users_file.",
    )
    actions = users.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="add a user",
        description="Add a user with a salted SCRAM-SHA-256 credential (no password is "
        "stored). The file is created if missing.",
    )
    add.add_argument("name", help="the user name clients send in CONNECT")
    add.add_argument("--file", type=Path, required=True, help="the users file (TOML)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add.add_argument(
        "--client-type",
        choices=CLIENT_TYPES,
        default="device",
        help="what the user's clients are (default: device)",
    )
    add.add_argument(
        "--iterations",
        type=_positive,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations (default and minimum {DEFAULT_ITERATIONS})",
    )
    add.set_defaults(handler=users_add)
