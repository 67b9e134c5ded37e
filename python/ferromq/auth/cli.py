"""``ferromq users ACTION``: edit a users file (:mod:`ferromq.auth.users`).

- ``add NAME``: a new user with a salted SCRAM-SHA-256 credential (file created if
  missing); ``passwd NAME``: a new credential for an existing user (also turns an
  imported Mosquitto hash into a SCRAM credential); ``delete NAME``; ``list``: one
  line per user — name, client type, how the password is kept.
- ``import-mosquitto FILE``: the users of a ``mosquitto_passwd`` file with their
  hashes as they are (:mod:`ferromq.auth.mosquitto`), so they log in with their old
  passwords; all or nothing — a name already in the users file stops the import.

The users file is ``--file FILE``, or else ``[auth] users_file`` of the configuration
(``--config FILE`` and ``FERROMQ_*``, as ``serve`` reads it). A password is read from
stdin with ``--password-stdin`` (one line; for scripts),
otherwise prompted for twice on the terminal. Exit status 2 for a bad request (an
existing or unknown user, an unreadable file, an empty password), like a
configuration error; every change rewrites the file whole (:func:`save_users`).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferromq.auth.mosquitto import MosquittoHashError, read_mosquitto_passwd
from ferromq.auth.provider import CLIENT_TYPES
from ferromq.auth.scram import DEFAULT_ITERATIONS, ScramCredential
from ferromq.auth.users import (
    UserRecord,
    UsersFileError,
    add_user,
    delete_user,
    load_users,
    save_users,
)
from ferromq.file_cli import file_subcommands

__all__ = ["register"]


def _credential(args: argparse.Namespace) -> ScramCredential:
    """A SCRAM credential for the password read as the options say."""
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif not sys.stdin.isatty():
        raise UsersFileError("no terminal to prompt on; use --password-stdin")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise UsersFileError("the passwords differ")
    if not password:
        raise UsersFileError("empty password")
    try:
        return ScramCredential.derive(password, iterations=args.iterations)
    except ValueError as exc:  # SASLprep refused a character
        raise UsersFileError(str(exc)) from None


def _existing(args: argparse.Namespace) -> dict[str, UserRecord]:
    users = load_users(args.file)
    if args.name not in users:
        raise UsersFileError(f"users file {args.file}: no user {args.name!r}")
    return users


def users_add(args: argparse.Namespace) -> str:
    if args.file.exists() and args.name in load_users(args.file):  # before the prompt
        raise UsersFileError(f"users file {args.file}: user {args.name!r} exists")
    add_user(args.file, args.name, UserRecord(_credential(args), args.client_type))
    return f"added {args.client_type} user {args.name!r} to {args.file}"


def users_passwd(args: argparse.Namespace) -> str:
    users = _existing(args)
    users[args.name] = UserRecord(_credential(args), users[args.name].client_type)
    save_users(args.file, users)
    return f"changed the password of {args.name!r} in {args.file}"


def users_delete(args: argparse.Namespace) -> str:
    delete_user(args.file, args.name)
    return f"deleted {args.name!r} from {args.file}"


def users_list(args: argparse.Namespace) -> str:
    users = load_users(args.file)
    return "\n".join(f"{name}\t{r.client_type}\t{r.scheme}" for name, r in users.items())


def users_import_mosquitto(args: argparse.Namespace) -> str:
    try:
        imported = read_mosquitto_passwd(args.passwd_file)
    except MosquittoHashError as exc:
        raise UsersFileError(str(exc)) from None
    users = load_users(args.file) if args.file.exists() else {}
    clash = next((name for name in imported if name in users), None)
    if clash is not None:
        raise UsersFileError(f"users file {args.file}: user {clash!r} exists; nothing imported")
    users.update((name, UserRecord(hashed, args.client_type)) for name, hashed in imported.items())
    save_users(args.file, users)
    count = f"{len(imported)} {args.client_type} users"
    return f"imported {count} from {args.passwd_file} into {args.file}"


def _iterations(text: str) -> int:
    value = int(text)
    if value < DEFAULT_ITERATIONS:
        raise argparse.ArgumentTypeError(f"at least {DEFAULT_ITERATIONS} (RFC 7677)")
    return value


def _client_type(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--client-type",
        choices=CLIENT_TYPES,
        default="device",
        help="what the users' clients are (default: device)",
    )


def register(commands: Any) -> None:
    """Add ``users`` to the CLI's subcommands."""
    added = file_subcommands(
        commands,
        "users",
        "manage the users file; [auth] users_file, unless --file",
        "auth.users_file",
        lambda config: config.auth.users_file,
    )

    def action(
        name: str, handler: Callable[[argparse.Namespace], str], description: str, *, user: bool
    ) -> argparse.ArgumentParser:
        parser = added(name, handler, description)
        if user:
            parser.add_argument("name", help="the user name clients send in CONNECT")
        return parser

    def password_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )
        parser.add_argument(
            "--iterations",
            type=_iterations,
            default=DEFAULT_ITERATIONS,
            help=f"PBKDF2 iterations (default and minimum {DEFAULT_ITERATIONS})",
        )

    add = action(
        "add",
        users_add,
        "Add a user with a salted SCRAM-SHA-256 credential (no password is stored). "
        "The file is created if missing.",
        user=True,
    )
    password_options(add)
    _client_type(add)
    password_options(
        action(
            "passwd",
            users_passwd,
            "Set a new password (a new SCRAM-SHA-256 credential) for an existing user.",
            user=True,
        )
    )
    action("delete", users_delete, "Delete a user.", user=True)
    action("list", users_list, "List the users: name, client type, password scheme.", user=False)
    imported = action(
        "import-mosquitto",
        users_import_mosquitto,
        "Import the users of a mosquitto_passwd file ($7$ PBKDF2-SHA512 or $6$ SHA512 "
        "hashes); they log in with their Mosquitto passwords. The file is created if "
        "missing; a user already in it stops the import.",
        user=False,
    )
    imported.add_argument("passwd_file", type=Path, metavar="FILE", help="mosquitto_passwd file")
    _client_type(imported)
