"""The users file: one SCRAM-SHA-256 credential and client type per user, in TOML.

::

    [users."alice"]
    client_type = "device"            # or "application"
    iterations = 4096
    salt = "<base64>"
    stored_key = "<base64>"           # H(ClientKey), RFC 5802 §3
    server_key = "<base64>"

    [users."legacy"]                  # imported by `ferromq users import-mosquitto`
    client_type = "device"
    mosquitto_hash = "$7$101$<salt>$<hash>"

No password is stored: a SCRAM record checks a CONNECT password and runs a SCRAM
exchange (:mod:`ferromq.auth.scram`); a Mosquitto hash (:mod:`ferromq.auth.mosquitto`)
checks a CONNECT password only, until the broker derives a SCRAM credential from the
first password that matches it (:func:`replace_credential`) or ``ferromq users
passwd`` sets a new one. ``ferromq users`` edits the file (:func:`save_users`); it is rewritten
whole through a temporary file and a rename, readable by its owner only. Errors are
:class:`UsersFileError` and name the file and the key, like configuration errors.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferromq.auth.mosquitto import MosquittoHash, MosquittoHashError
from ferromq.auth.provider import CLIENT_TYPES, ClientType
from ferromq.auth.scram import ScramCredential
from ferromq.config import ConfigError, toml_table, toml_value
from ferromq.fileio import replace_text

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

__all__ = [
    "UserRecord",
    "UsersFileError",
    "add_user",
    "delete_user",
    "load_users",
    "replace_credential",
    "save_users",
]

_HEADER = (
    "# ferromq users: SCRAM-SHA-256 credentials (RFC 5802/7677), no passwords.\n"
    "# Edit with `ferromq users add | passwd | delete | list | import-mosquitto`.\n\n"
)


class UsersFileError(ConfigError):
    """A users file that cannot be read or written; the message names file and key."""


@dataclass(frozen=True)
class UserRecord:
    credential: ScramCredential | MosquittoHash
    client_type: ClientType = "device"

    @property
    def scheme(self) -> str:
        """How the password is kept, as ``ferromq users list`` shows it."""
        credential = self.credential
        return "scram-sha-256" if isinstance(credential, ScramCredential) else credential.scheme


def _bytes_field(table: Mapping[str, Any], key: str, where: str) -> bytes:
    value = table.get(key)
    if not isinstance(value, str):
        raise UsersFileError(f"{where}.{key}: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise UsersFileError(f"{where}.{key}: not valid base64") from None


def _record(table: object, where: str) -> UserRecord:
    if not isinstance(table, dict):
        raise UsersFileError(f"{where}: expected a table")
    client_type = table.get("client_type", "device")
    if client_type not in CLIENT_TYPES:
        raise UsersFileError(
            f"{where}.client_type: expected one of {', '.join(CLIENT_TYPES)}, got {client_type!r}"
        )
    if "mosquitto_hash" in table:
        return UserRecord(_mosquitto_hash(table, where), client_type)
    unknown = set(table) - {"client_type", "iterations", "salt", "stored_key", "server_key"}
    if unknown:
        raise UsersFileError(f"{where}.{sorted(unknown)[0]}: unknown key")
    iterations = table.get("iterations")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise UsersFileError(f"{where}.iterations: expected a positive integer")
    credential = ScramCredential(
        _bytes_field(table, "salt", where),
        iterations,
        _bytes_field(table, "stored_key", where),
        _bytes_field(table, "server_key", where),
    )
    return UserRecord(credential, client_type)


def _mosquitto_hash(table: Mapping[str, Any], where: str) -> MosquittoHash:
    unknown = set(table) - {"client_type", "mosquitto_hash"}
    if unknown:
        raise UsersFileError(f"{where}.{sorted(unknown)[0]}: not allowed with mosquitto_hash")
    value = table["mosquitto_hash"]
    if not isinstance(value, str):
        raise UsersFileError(f"{where}.mosquitto_hash: expected a string")
    try:
        return MosquittoHash.parse(value)
    except MosquittoHashError as exc:
        raise UsersFileError(f"{where}.mosquitto_hash: {exc}") from None


def load_users(path: Path) -> dict[str, UserRecord]:
    """Every user of the file at ``path``; a missing file is an error."""
    where = f"users file {path}"
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsersFileError(f"{where}: not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsersFileError(f"{where}: cannot be read: {exc}") from None
    users = document.get("users", {})
    if set(document) - {"users"} or not isinstance(users, dict):
        raise UsersFileError(f"{where}: expected only [users.NAME] tables")
    return {name: _record(table, f"{where}: users.{name}") for name, table in users.items()}


def _render(users: Mapping[str, UserRecord]) -> str:
    lines: list[str] = []
    for name, record in users.items():
        credential = record.credential
        table: dict[str, object] = {"client_type": record.client_type}
        if isinstance(credential, MosquittoHash):
            table["mosquitto_hash"] = str(credential)
        else:
            table["iterations"] = credential.iterations
            table["salt"] = base64.b64encode(credential.salt).decode()
            table["stored_key"] = base64.b64encode(credential.stored_key).decode()
            table["server_key"] = base64.b64encode(credential.server_key).decode()
        lines += toml_table(f"[users.{toml_value(name)}]", table)
    return _HEADER + "\n".join(lines)


def save_users(path: Path, users: Mapping[str, UserRecord]) -> None:
    """Write ``users`` as the users file at ``path``, replacing it whole."""
    replace_text(path, _render(users))


def replace_credential(path: Path, name: str, old: object, record: UserRecord) -> bool:
    """Put ``record`` in place of ``name``'s entry when that still holds the credential
    ``old`` (nobody changed it meanwhile); True when the file was rewritten."""
    users = load_users(path)
    current = users.get(name)
    if current is None or current.credential != old:
        return False
    users[name] = record
    save_users(path, users)
    return True


def add_user(path: Path, name: str, record: UserRecord) -> None:
    """Add ``name`` to the users file at ``path`` (created when missing); an existing
    user is an error."""
    users = load_users(path) if path.exists() else {}
    if name in users:
        raise UsersFileError(f"users file {path}: user {name!r} exists")
    users[name] = record
    save_users(path, users)


def delete_user(path: Path, name: str) -> None:
    """Remove ``name`` from the users file at ``path``; an unknown user is an error."""
    users = load_users(path)
    if name not in users:
        raise UsersFileError(f"users file {path}: no user {name!r}")
    del users[name]
    save_users(path, users)
