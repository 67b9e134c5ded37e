"""The ``ferromq`` console entrypoint.

Subcommands register themselves on the parser built here; this issue ships none yet,
so ``ferromq`` only answers ``--version`` and ``--help`` and serves nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ferromq import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferromq",
        description="ferromq: an MQTT 3.1.1 / 5.0 broker with a compiled core.",
    )
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
