"""Subcommands that edit a file the configuration names: ``ferromq users`` (the users
file) and ``ferromq bans`` (the bans file).

:func:`file_subcommands` adds the command; each action it adds is a subparser with
``--file FILE`` and ``--config FILE``. The file is ``--file``, or else the one the
configuration names (``--config`` and ``FERROMQ_*``, read as ``serve`` reads them). An
action returns the line to print; a :class:`~ferromq.config.ConfigError` (a bad
request: an unknown or existing entry, an unreadable file) or a file that cannot be
written is one line on stderr and exit status 2, like a configuration error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeAlias

from ferromq.arguments import add_config_argument
from ferromq.config import Config, ConfigError, load_config

__all__ = ["EXIT_BAD_REQUEST", "Action", "file_subcommands"]

EXIT_BAD_REQUEST: Final = 2

Action: TypeAlias = Callable[[argparse.Namespace], str]
"""Runs with ``args.file`` set to the file; returns what to print."""


def file_subcommands(
    commands: Any,
    name: str,
    description: str,
    key: str,
    file_of: Callable[[Config], str | None],
) -> Callable[[str, Action, str], argparse.ArgumentParser]:
    """Add the command ``name``; returns what adds one of its actions (name, action,
    description). ``key`` names the setting ``file_of`` reads (``auth.users_file``)."""
    command = commands.add_parser(name, help=description.split(";")[0], description=description)
    actions = command.add_subparsers(dest="action", metavar="ACTION", required=True)

    def run(action: Action) -> Callable[[argparse.Namespace], int]:
        def handler(args: argparse.Namespace) -> int:
            try:
                if args.file is None:
                    named = file_of(load_config(args.config, os.environ))
                    if named is None:
                        raise ConfigError(f"no --file, and the configuration names no {key}")
                    args.file = named
                args.file = Path(args.file)
                message = action(args)
            except ConfigError as exc:
                print(f"ferromq: error: {exc}", file=sys.stderr)
                return EXIT_BAD_REQUEST
            except OSError as exc:  # the file cannot be written (its directory, rights)
                print(f"ferromq: error: {args.file}: {exc.strerror}", file=sys.stderr)
                return EXIT_BAD_REQUEST
            if message:
                print(message)
            return 0

        return handler

    def add(action_name: str, action: Action, action_description: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            action_name, help=action_description.split(".")[0], description=action_description
        )
        parser.add_argument("--file", type=Path, help=f"the file (TOML); default: {key}")
        add_config_argument(parser)
        parser.set_defaults(handler=run(action))
        return parser

    return add
