"""The command line's one ``-c/--config FILE`` option, which every subcommand takes:
``serve`` and ``check-config`` (:mod:`ferromq.cli`) as the file-editing commands
(:mod:`ferromq.file_cli`), which :mod:`ferromq.cli` registers and so cannot import it
back."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_config_argument"]


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Give a subcommand the shared ``-c/--config FILE`` option (``args.config``)."""
    parser.add_argument(
        "-c",
        "--config",
        type=Path,
        metavar="FILE",
        help="configuration file in TOML (default: built-in defaults); environment "
        "variables FERROMQ_<SECTION>__<KEY> and FERROMQ_LISTEN=host:port override it",
    )
