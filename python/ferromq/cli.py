"""The ``ferromq`` console entrypoint.

Subcommands register themselves on the parser built here (``register(subparsers)``
in their own module) and set a ``handler`` that returns the exit status:
``bench`` (:mod:`ferromq.bench`) is the load generator.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ferromq import __version__, bench


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferromq",
        description="ferromq: an MQTT 3.1.1 / 5.0 broker with a compiled core.",
    )
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
