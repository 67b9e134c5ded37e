"""The ``ferromq`` console entrypoint.

Each subcommand is a subparser whose ``handler`` default runs it and returns the exit
status. Configuration reaches every command the same way: ``--config FILE`` (added by
:func:`add_config_argument`) plus ``FERROMQ_*`` environment overrides, both read by
:func:`ferromq.config.load_config`. A configuration error is the user's to fix, so it is
one line on stderr and exit status 2 (argparse's status for bad usage), never a traceback.

Every failure at start-up a user can cause is one line on stderr and an exit status:
2 the configuration or what it names (:func:`usable_config_or_exit`: the schema, then
:func:`ferromq.preflight.check` — auth providers, installed extras, data directory), 3 the
store cannot be opened (Redis or Kafka unreachable, the data directory in use), 4 a
listener cannot listen (port in use, address not local). Listeners are bound before the
store is opened, so a port in use leaves nothing on disk.

- ``serve``: run the broker until SIGTERM or SIGINT (graceful shutdown); SIGHUP
  reloads the configuration (:mod:`ferromq.reload`).
- ``check-config``: the same checks as ``serve`` before it listens; print the effective
  configuration (TOML, or JSON with ``--json``).
- ``bench``: the load generator (:mod:`ferromq.bench`, which registers itself).
- ``users add``: add a user to a users file (:mod:`ferromq.auth.cli`, likewise).
- ``bans add | remove | list``: edit the bans file (:mod:`ferromq.bans_cli`, likewise).
- ``init``: write a commented starter configuration (:mod:`ferromq.starter_config`,
  likewise).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from ferromq import __version__, bans_cli, bench, preflight, starter_config
from ferromq.auth import cli as users_cli
from ferromq.config import Config, ConfigError, config_as_dict, load_config, render_toml
from ferromq.log import configure_logging

EXIT_CONFIG_ERROR = 2
EXIT_STORE_UNAVAILABLE = 3
EXIT_CANNOT_LISTEN = 4


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """Give a subcommand the shared ``--config FILE`` option (``args.config``)."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML configuration file (default: built-in defaults); "
        "FERROMQ_<SECTION>__<KEY> and FERROMQ_LISTEN=host:port override it",
    )


def usable_config(args: argparse.Namespace) -> Config:
    """The configuration ``args.config`` and the environment describe, checked against
    what it names (:func:`ferromq.preflight.check`). Raises :class:`ConfigError`."""
    config = load_config(args.config, os.environ)
    preflight.check(config)
    return config


def usable_config_or_exit(args: argparse.Namespace) -> Config:
    """:func:`usable_config`, or one line on stderr and exit status 2."""
    try:
        return usable_config(args)
    except ConfigError as exc:
        fail(exc)
        raise SystemExit(EXIT_CONFIG_ERROR) from None


def fail(error: Exception) -> None:
    print(f"ferromq: error: {error}", file=sys.stderr)


def check_config(args: argparse.Namespace) -> int:
    config = usable_config_or_exit(args)
    if args.json:
        print(json.dumps(config_as_dict(config), indent=2))
    else:
        sys.stdout.write(render_toml(config))
    return 0


def serve(args: argparse.Namespace) -> int:
    config = usable_config_or_exit(args)
    configure_logging(config.log)
    from ferromq.broker import serve as run_broker
    from ferromq.listener import ListenError

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await run_broker(config, stop, lambda: usable_config(args))

    from ferromq.storage import StoreUnavailable

    try:
        if args.loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    except ConfigError as exc:  # a file the configuration names changed since preflight
        fail(exc)
        return EXIT_CONFIG_ERROR
    except StoreUnavailable as exc:
        fail(exc)
        return EXIT_STORE_UNAVAILABLE
    except ListenError as exc:
        fail(exc)
        return EXIT_CANNOT_LISTEN
    return 0


def default_loop() -> str:
    # Looked up, not imported: every command builds this parser.
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferromq",
        description="ferromq: an MQTT 3.1.1 / 5.0 broker with a compiled core.",
    )
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve_parser = commands.add_parser(
        "serve",
        help="run the broker",
        description="Run the MQTT broker on the configured listeners "
        "(default 127.0.0.1:1883) until SIGTERM or SIGINT; SIGHUP reloads the "
        "configuration. Exit status 2: configuration, 3: store unavailable, "
        "4: cannot listen.",
    )
    add_config_argument(serve_parser)
    serve_parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default=default_loop(),
        help="event loop (default: uvloop when installed)",
    )
    serve_parser.set_defaults(handler=serve)

    check = commands.add_parser(
        "check-config",
        help="validate the configuration and print the effective settings",
        description="Load the configuration file and FERROMQ_* environment overrides, "
        "check what they name as serve would (users file, installed extras, data "
        "directory), and print the effective settings. Exit status 2 on a problem.",
    )
    add_config_argument(check)
    check.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    check.set_defaults(handler=check_config)
    bench.register(commands)
    users_cli.register(commands)
    bans_cli.register(commands)
    starter_config.register(commands)
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
