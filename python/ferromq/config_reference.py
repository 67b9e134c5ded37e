"""The configuration reference, ``docs/configuration.md``, generated from the one schema.

Every section, key, kind, range and default comes from :mod:`ferromq.config` by
introspection: the loader's tables are the fields of :class:`~ferromq.config.Config`, a
key's kind is the parser in its field's metadata, and a key's text is the docstring under
the field, read from the source with :mod:`ast` (shared with :mod:`ferromq.starter_config`,
which writes the same text into ``ferromq init``'s file). A section added to the schema
appears here without a change to this module; a kind this module does not know is shown
by its class name rather than refused.

    python -m ferromq.config_reference > docs/configuration.md
    python -m ferromq.config_reference --check docs/configuration.md   # exit 1 if stale

``tests/unit/test_config_reference.py`` fails when the committed page and the schema
differ, naming the command above.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from dataclasses import Field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ferromq.config import (
    Config,
    _Bool,
    _Choice,
    _Int,
    _Names,
    _Networks,
    _Options,
    _Quantity,
    _Text,
    _TextList,
    _Url,
    _Workers,
    toml_value,
)
from ferromq.starter_config import attribute_docs, plain_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["COMMAND", "main", "reference"]

COMMAND: Final = "python -m ferromq.config_reference > docs/configuration.md"
"""How the committed page is made again, as the test's failure message says it."""

EXIT_STALE: Final = 1

# Upper bounds this large (MAX_U63 and fractions of it) are the integer type's, not a
# limit a user meets: the reference says "at least" instead of printing 19 digits.
_NO_UPPER_BOUND: Final = 1 << 53

_SIZE_UNITS: Final = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_DURATION_UNITS: Final = (("d", 86400), ("h", 3600), ("m", 60))

_HEADER: Final = f"""\
<!-- Generated from python/ferromq/config.py by `{COMMAND}`; do not edit by hand. -->

# Configuration reference

Every setting of `ferromq serve`, one section per TOML table, as the schema
(`python/ferromq/config.py`) declares it: its kind, the values it accepts, its default
and what it does. `ferromq init` writes the same settings into a starter file, commented
out at their defaults; `ferromq check-config --config FILE` prints every effective
setting, or one line naming the bad key and exits 2.

- Precedence: built-in defaults, then the TOML file (`--config FILE`), then `FERROMQ_*`
  environment variables, then the command line (`-p`, `-b`, `--workers`).
- Environment: `FERROMQ_<SECTION>__<KEY>=value` overrides one key
  (`FERROMQ_LOG__LEVEL=debug`), `FERROMQ_<SECTION>__<TABLE>__<KEY>` a key of a
  sub-table (`FERROMQ_STREAM__FILES__DIRECTORY`), and `FERROMQ_LISTEN=host:port`
  (`[::1]:1883` for IPv6) the first listener's address. An unknown
  `FERROMQ_<X>__<Y>` is an error; an array is written comma-separated; a boolean takes
  `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`.
- Sizes: an integer number of bytes, or `"<n><unit>"` with `B`, `KB`, `MB`, `GB` (powers
  of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024), case-blind.
- Durations: an integer number of seconds, or `"<n><unit>"` with `s`, `m`, `h`, `d`;
  held as whole seconds.
- Choices are case-blind. Defaults are shown as `check-config` prints them."""


def _human(amount: int, units: Sequence[tuple[str, int]], base: str) -> str:
    """``amount`` in the largest unit that divides it: 1048576 → ``1 MiB``."""
    for name, size in units:
        if amount >= size and amount % size == 0:
            return f"{amount // size} {name}"
    return f"{amount} {base}"


def _is_size(kind: _Quantity) -> bool:
    return "kib" in kind.units


def _quantity(kind: _Quantity, amount: int) -> str:
    if _is_size(kind):
        return _human(amount, _SIZE_UNITS, "B")
    return _human(amount, _DURATION_UNITS, "s")


def _bounds(low: int, high: int | None, show: Any = str) -> str:
    if high is None or high >= _NO_UPPER_BOUND:
        return f"at least {show(low)}"
    return f"{show(low)} to {show(high)}"


def _quoted(options: Sequence[str]) -> str:
    return ", ".join(f'`"{option}"`' for option in options)


def _kind(kind: object) -> tuple[str, str]:
    """The kind's name and the values it accepts, for the section's table."""
    # Subclasses before the classes they extend.
    if isinstance(kind, _Names):
        return "array of names", f"each one of {_quoted(kind.options)}"
    if isinstance(kind, _Networks):
        return "array of addresses", "IPv4/IPv6 addresses or CIDR networks"
    if isinstance(kind, _TextList):
        return "array of strings", "any"
    if isinstance(kind, _Url):
        return "URL", "`http://` or `https://` with a host"
    if isinstance(kind, _Text):
        return "string", "any" if kind.allow_empty else "not empty"
    if isinstance(kind, _Choice):
        return "choice", _quoted(kind.options)
    if isinstance(kind, _Bool):
        return "boolean", "`true`, `false`"
    if isinstance(kind, _Int):
        return "integer", _bounds(kind.low, kind.high)
    if isinstance(kind, _Quantity):
        name = "size" if _is_size(kind) else "duration"
        return name, _bounds(kind.low, kind.high, lambda amount: _quantity(kind, amount))
    if isinstance(kind, _Options):
        return "table", "strings, numbers, booleans or arrays of them"
    if isinstance(kind, _Workers):
        return "workers", f'`"auto"` or 1 to {kind.high}'
    return type(kind).__name__.lstrip("_").lower(), ""


def _default(setting: Field[Any], value: object) -> str:
    if value is None:
        return "not set"
    shown = f"`{toml_value(value)}`"
    kind = setting.metadata.get("kind")
    if isinstance(kind, _Quantity) and isinstance(value, int) and value:
        human = _quantity(kind, value)
        if human != f"{value} B":  # a size in bytes is its own spelling; "20 s" says seconds
            shown += f" ({human})"
    return shown


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _anchor(header: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped."""
    return "".join(c for c in header.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


_LISTENERS_ENV: Final = (
    "Environment: `FERROMQ_LISTEN=host:port` sets the first entry's `host` and `port`, as "
    "the command line's `-b` and `-p` do; the other keys are set in the file only."
)
_NO_ENV: Final = "Environment: none; these entries are set in the file only."


# A table waiting to be written: its header, the line saying how the environment sets
# it, the environment prefix of its sub-tables (None: they have none) and its default
# value (for an array of tables, a default entry).
_Pending = tuple[str, str, "str | None", "DataclassInstance"]


def _table_list_item(setting: Field[Any]) -> type[DataclassInstance] | None:
    """The entry class of a key that holds an array of tables (``[[rewrite.rules]]``):
    the schema names it in the field's metadata as ``tables``."""
    item = setting.metadata.get("tables")
    return item if isinstance(item, type) and is_dataclass(item) else None


def _section(
    header: str, env: str, prefix: str | None, table: DataclassInstance
) -> tuple[list[str], list[_Pending]]:
    """The lines of one table, and the sub-tables (``[stream.files]``) it holds."""
    docs = attribute_docs(type(table))
    lines = [f"## `{header}`", "", plain_text(inspect.cleandoc(type(table).__doc__ or "")), ""]
    lines += [env, "", "| key | kind | accepts | default |", "|---|---|---|---|"]
    inner: list[_Pending] = []
    prose: list[str] = []
    path = header.strip("[]")
    for setting in fields(table):
        value = getattr(table, setting.name)
        item = _table_list_item(setting)
        if is_dataclass(value) and not isinstance(value, type):
            name = f"[{path}.{setting.name}]"
            below = None if prefix is None else f"{prefix}__{setting.name.upper()}"
            line = _NO_ENV if below is None else f"Environment: `{below}__<KEY>`."
            inner.append((name, line, below, value))
            kind, accepts, default = "table", f"[`{name}`](#{_anchor(name)})", ""
        elif item is not None:
            name = f"[[{path}.{setting.name}]]"
            inner.append((name, _NO_ENV, None, item()))
            kind, accepts = "array of tables", f"[`{name}`](#{_anchor(name)}) entries"
            default = "none" if value == () else _cell(_default(setting, value))
        else:
            kind, accepts = _kind(setting.metadata.get("kind"))
            accepts, default = _cell(accepts), _cell(_default(setting, value))
        lines.append(f"| `{setting.name}` | {kind} | {accepts} | {default} |")
        doc = docs.get(setting.name)
        if doc:
            text = plain_text(doc).splitlines()
            prose.append(f"- **`{setting.name}`**: {text[0]}")
            prose += [f"  {line}".rstrip() for line in text[1:]]
    lines += ["", *prose, ""] if prose else [""]
    return lines, inner


def reference() -> str:
    """The whole page, as ``docs/configuration.md`` holds it."""
    defaults = Config()
    contents: list[str] = []
    body: list[str] = []
    for section in fields(Config):
        value = getattr(defaults, section.name)
        pending: list[_Pending]
        item = _table_list_item(section)
        if item is not None:  # an array of tables, none by default ([[bridges]])
            pending = [(f"[[{section.name}]]", _NO_ENV, None, item())]
        elif isinstance(value, tuple):  # an array of tables: one entry by default
            pending = [(f"[[{section.name}]]", _LISTENERS_ENV, None, value[0])]
        else:
            top = f"FERROMQ_{section.name.upper()}"
            pending = [(f"[{section.name}]", f"Environment: `{top}__<KEY>`.", top, value)]
        while pending:
            header, env, prefix, table = pending.pop(0)
            lines, inner = _section(header, env, prefix, table)
            contents.append(f"- [`{header}`](#{_anchor(header)})")
            body += lines
            pending += inner
    return "\n".join([_HEADER, "", *contents, "", *body]).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ferromq.config_reference",
        description="Print the configuration reference (docs/configuration.md) generated "
        "from the config schema, or check a file against it.",
    )
    parser.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="exit 1 if FILE differs from the generated reference",
    )
    args = parser.parse_args(argv)
    text = reference()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    try:
        current = args.check.read_text(encoding="utf-8")
    except OSError as exc:
        current = f"({exc.strerror})"
    if current != text:
        print(f"{args.check} is not the schema's reference; run: {COMMAND}", file=sys.stderr)
        return EXIT_STALE
    return 0


if __name__ == "__main__":
    sys.exit(main())
