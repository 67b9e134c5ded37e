"""``ferromq init [PATH] [--force]``: write a commented starter configuration file.

The file is generated from the one schema (:mod:`ferromq.config`), so it holds every
section and key there is, each with its default and its documentation: a section's
class docstring heads its table, a key's attribute docstring (the string literal after
the field, which Python does not keep at run time, so it is read from the source with
:mod:`ast`) comments the key. Table headers are live and keys are commented out
(``#key = default``, Mosquitto's convention for a setting left at its default), so the
file is valid TOML that loads to the defaults, and removing one ``#`` changes one
setting. Values are written as ``ferromq check-config`` prints them
(:func:`ferromq.config.toml_value`); a key without a default says ``(not set)``.

An existing file is never replaced without ``--force``: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
from dataclasses import fields, is_dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ferromq.config import Config, toml_value

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["attribute_docs", "plain_text", "register", "starter_config"]

EXIT_NOT_WRITTEN: Final = 2
DEFAULT_PATH: Final = Path("ferromq.toml")

_HEADER: Final = """\
ferromq configuration, written by `ferromq init` from the configuration schema.

Every setting is listed with its default and what it does, commented out; to change
one, delete the # in front of its key. Sizes take 1048576, "256KiB" or "1MB";
durations 10, "10s", "5m", "7d". FERROMQ_<SECTION>__<KEY>=value and
FERROMQ_LISTEN=host:port override this file. Add a [[listeners]] table for each
further address to serve. Check the file with: ferromq check-config --config FILE"""

# reStructuredText in the docstrings, as a reader of a TOML file wants it: ``key``,
# :mod:`ferromq.auth` and :class:`~ferromq.x.Name` become `key`, `ferromq.auth`, `Name`.
_LITERAL: Final = re.compile(r"``([^`]+)``")
_ROLE: Final = re.compile(r":[a-z]+:`(~[\w.]*\.)?([^`]+)`")


def plain_text(text: str) -> str:
    """A schema docstring with its reStructuredText markup as Markdown code spans."""
    return _ROLE.sub(r"`\2`", _LITERAL.sub(r"`\1`", text))


def _comment(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in plain_text(text).splitlines()]


def attribute_docs(table: type) -> dict[str, str]:
    """Field name → the docstring under it, for ``table`` and the tables it extends
    (shared with :mod:`ferromq.config_reference`)."""
    docs: dict[str, str] = {}
    for cls in reversed(table.__mro__):  # a subclass's docstring wins
        if not is_dataclass(cls):
            continue
        definition = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        assert isinstance(definition, ast.ClassDef)
        for statement, after in pairwise(definition.body):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _table(header: str, table: DataclassInstance) -> list[str]:
    """``table`` under ``header``, then its sub-tables (``[stream.files]``) each under
    its own header."""
    docs = attribute_docs(type(table))
    lines = [*_comment(inspect.cleandoc(type(table).__doc__ or "")), header, ""]
    inner = []
    for setting in fields(table):
        default = getattr(table, setting.name)
        if is_dataclass(default):
            inner += _table(f"{header[:-1]}.{setting.name}]", default)  # type: ignore[arg-type]
            continue
        shown = "(not set)" if default is None else toml_value(default)
        lines += [*_comment(docs.get(setting.name, "")), f"#{setting.name} = {shown}", ""]
    return lines + inner


def starter_config() -> str:
    """The starter file: every section and key of the schema, keys commented out."""
    lines = [*_comment(_HEADER), ""]
    defaults = Config()
    for section in fields(Config):
        value = getattr(defaults, section.name)
        item = section.metadata.get("tables")
        if item is not None:  # an array of tables with no entry by default: an example
            example = _table(f"[[{section.name}]]", item())
            lines += [line if not line or line.startswith("#") else f"#{line}" for line in example]
        elif isinstance(value, tuple):  # an array of tables, one entry by default
            lines += _table(f"[[{section.name}]]", value[0])
        else:
            lines += _table(f"[{section.name}]", value)
    return "\n".join(lines)


def _init(args: argparse.Namespace) -> int:
    path: Path = args.path
    try:
        with path.open("w" if args.force else "x", encoding="utf-8") as out:
            out.write(starter_config())
    except FileExistsError:
        print(
            f"ferromq: error: {path} exists; `ferromq init --force {path}` replaces it",
            file=sys.stderr,
        )
        return EXIT_NOT_WRITTEN
    except OSError as exc:  # a missing directory, no write access, a directory
        print(f"ferromq: error: {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    print(f"wrote {path}: every setting at its default; run ferromq serve --config {path}")
    return 0


def register(commands: Any) -> None:
    """Add ``init`` to the ``ferromq`` command line (:mod:`ferromq.cli`)."""
    parser = commands.add_parser(
        "init",
        help="write a starter configuration file",
        description="Write a TOML configuration file listing every setting with its "
        "default and what it does, commented out, ready to edit. An existing file is "
        "kept unless --force is given.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=DEFAULT_PATH,
        metavar="PATH",
        help=f"the file to write (default: {DEFAULT_PATH})",
    )
    parser.add_argument("--force", action="store_true", help="replace PATH if it exists")
    parser.set_defaults(handler=_init)
