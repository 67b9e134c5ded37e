"""The ``ferromq`` console entrypoint.

Each subcommand is a subparser whose ``handler`` default runs it and returns the exit
status. Configuration reaches every command the same way: ``-c/--config FILE`` (added
by :func:`ferromq.arguments.add_config_argument`) plus ``FERROMQ_*`` environment
overrides, both read by :func:`ferromq.config.load_config`; ``serve`` and
``check-config`` then apply the command line's own overrides
(:func:`add_override_arguments`: ``-p/--port`` and ``-b/--bind`` replace the first
listener's port and host, as Mosquitto's ``-p`` does, ``-v/--verbose`` logs at debug).
A configuration error is the user's to fix, so it is one line on stderr and exit
status 2 (argparse's status for bad usage), never a traceback; argparse's own errors
are one line too (:class:`CommandParser`).

Every failure at start-up a user can cause is one line on stderr and an exit status:
2 the configuration or what it names (:func:`usable_config_or_exit`: the schema, then
:func:`ferromq.preflight.check` — auth providers, installed extras, data directory — and
a ``--pid-file`` a running process holds), 3 the store cannot be opened (Redis or Kafka
unreachable, the data directory in use), 4 a listener cannot listen (port in use,
address not local). Listeners are bound before the store is opened, so a port in use
leaves nothing on disk.

- ``serve``: run the broker until SIGTERM or SIGINT (graceful shutdown within
  ``[server] shutdown_timeout``, else exit 1: :mod:`ferromq.shutdown`); SIGHUP
  reloads the configuration (:mod:`ferromq.reload`); ``--pid-file`` (:mod:`ferromq.pidfile`).
  With ``[server] workers`` (``--workers``) above 1 it is a node's supervisor
  (:mod:`ferromq.node.supervisor`), which runs this same command once per shard with
  ``FERROMQ_SHARD`` set: a shard reports its start-up failure to the supervisor, which
  prints the one line (exit 1 besides: a shard that keeps dying).
- ``check-config``: the same checks as ``serve`` before it listens; print the effective
  configuration (TOML, or JSON with ``--json``).
- ``version`` (and ``-V``/``--version``): the package's and the compiled modules'
  versions.
- ``bench``: the load generator (:mod:`ferromq.bench`, which registers itself).
- ``users add``: add a user to a users file (:mod:`ferromq.auth.cli`, likewise).
- ``bans add | remove | list``: edit the bans file (:mod:`ferromq.bans_cli`, likewise).
- ``ctl``: operate a running broker over its admin API (:mod:`ferromq.ctl`, likewise).
- ``init``: write a commented starter configuration (:mod:`ferromq.starter_config`,
  likewise).
- ``pipeline run | list | jars``: the Spark jobs over the broker's stream
  (:mod:`ferromq.pipeline.cli`, likewise; pyspark is imported only by ``run``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import NoReturn

from ferromq import __version__, bans_cli, bench, ctl, preflight, starter_config
from ferromq.arguments import add_config_argument
from ferromq.auth import cli as users_cli
from ferromq.config import (
    Config,
    ConfigError,
    config_as_dict,
    load_config,
    override_first_listener,
    override_workers,
    render_toml,
)
from ferromq.exits import EXIT_CANNOT_LISTEN, EXIT_CONFIG_ERROR, EXIT_STORE_UNAVAILABLE, fail
from ferromq.log import configure_logging, log_as_shard
from ferromq.node.workers import pin_shard, worker_count
from ferromq.pidfile import PidFile
from ferromq.pipeline import cli as pipeline_cli
from ferromq.shard.identity import ShardIdentity
from ferromq.shard.link import ShardLink, stop_with_supervisor
from ferromq.shutdown import Shutdown
from ferromq.sockets import raise_descriptor_limit


class CommandParser(argparse.ArgumentParser):
    """argparse with its usage errors as one line (``ferromq serve: error: ...``)
    pointing at ``--help``, instead of the usage text followed by the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_override_arguments(parser: argparse.ArgumentParser) -> None:
    """``-p/--port``, ``-b/--bind``, ``--workers`` and ``-v/--verbose``, applied over the
    file and the environment by :func:`usable_config`."""
    parser.add_argument(
        "-p",
        "--port",
        metavar="PORT",
        help="listen on PORT instead of the first listener's port (default 1883)",
    )
    parser.add_argument(
        "-b",
        "--bind",
        metavar="HOST",
        help="listen on HOST (an address, 0.0.0.0 for all) instead of the first "
        "listener's host (default 127.0.0.1)",
    )
    parser.add_argument(
        "--workers",
        metavar="N|auto",
        help='shard processes, one per core (as [server] workers; default "auto": '
        "every CPU this process may use)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help='log at debug level (as [log] level = "debug")',
    )


def _command_line(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the command line's overrides, when the command takes them."""
    if not hasattr(args, "verbose"):
        return config
    config = override_first_listener(config, args.bind, args.port)
    config = override_workers(config, args.workers)
    if args.verbose:
        config = replace(config, log=replace(config.log, level="debug"))
    return config


def usable_config(args: argparse.Namespace) -> Config:
    """The configuration ``args.config`` and the environment describe, checked against
    what it names (:func:`ferromq.preflight.check`). Raises :class:`ConfigError`."""
    config = _command_line(load_config(args.config, os.environ), args)
    preflight.check(config)
    return config


def usable_config_or_exit(args: argparse.Namespace) -> Config:
    """:func:`usable_config`, or one line on stderr and exit status 2."""
    try:
        return usable_config(args)
    except ConfigError as exc:
        fail(exc)
        raise SystemExit(EXIT_CONFIG_ERROR) from None


def check_config(args: argparse.Namespace) -> int:
    config = usable_config_or_exit(args)
    if args.json:
        print(json.dumps(config_as_dict(config), indent=2))
    else:
        sys.stdout.write(render_toml(config))
    return 0


def serve(args: argparse.Namespace) -> int:
    shard = ShardIdentity.from_env()
    if shard is not None:
        return _serve_shard(args, shard)
    config = usable_config_or_exit(args)
    pid_file = PidFile(args.pid_file) if args.pid_file is not None else None
    try:
        configure_logging(config.log)
        if pid_file is not None:
            pid_file.claim()
    except ConfigError as exc:
        fail(exc)
        return EXIT_CONFIG_ERROR
    workers = worker_count(config.server.workers)
    raise_descriptor_limit()
    try:
        if workers > 1:
            from ferromq.node.supervisor import supervise

            return supervise(config, args.argv, workers, pid_file, partial(usable_config, args))
        serving = pid_file.write if pid_file is not None else None
        return _run_broker(args, config, lambda status, exc: fail(exc), serving)
    finally:
        if pid_file is not None:
            pid_file.remove()


def _serve_shard(args: argparse.Namespace, shard: ShardIdentity) -> int:
    """One shard of a node (:mod:`ferromq.node.supervisor` started it): stopped with
    its supervisor, on its CPU, its lines tagged ``shard=K`` and written by the
    supervisor (:func:`log_as_shard`), its start-up failures told to the supervisor,
    which prints the node's one line."""
    stop_with_supervisor(shard.supervisor_pid)
    link = ShardLink(shard.supervisor_fd)
    log_as_shard(shard.index)
    pin_shard(shard.index, shard.count)
    try:
        config = usable_config(args)
        configure_logging(config.log)
    except ConfigError as exc:
        link.fail(EXIT_CONFIG_ERROR, exc)
        return EXIT_CONFIG_ERROR
    return _run_broker(args, config, link.fail, link.serving, shard, link)


def _run_broker(
    args: argparse.Namespace,
    config: Config,
    report: Callable[[int, Exception], object],
    serving: Callable[[], None] | None,
    shard: ShardIdentity | None = None,
    link: ShardLink | None = None,
) -> int:
    """Run the broker (or a shard) until SIGTERM or SIGINT (a shard: or its ``link``
    says stop), stopping within ``[server] shutdown_timeout`` (:mod:`ferromq.shutdown`);
    a start-up failure is ``report``-ed with its exit status, which is returned."""
    from ferromq.broker import serve as run_broker
    from ferromq.sockets import ListenError
    from ferromq.storage import StoreUnavailable

    async def main() -> None:
        shutdown = Shutdown(config.server.shutdown_timeout)
        shutdown.handle_signals()
        restored = None
        if link is not None:
            link.watch(shutdown.requested)
            restored = partial(link.restored, shutdown.requested)
        await run_broker(config, shutdown, lambda: usable_config(args), serving, shard, restored)

    try:
        if args.loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    except ConfigError as exc:  # a file the configuration names changed since preflight
        report(EXIT_CONFIG_ERROR, exc)
        return EXIT_CONFIG_ERROR
    except StoreUnavailable as exc:
        report(EXIT_STORE_UNAVAILABLE, exc)
        return EXIT_STORE_UNAVAILABLE
    except ListenError as exc:
        report(EXIT_CANNOT_LISTEN, exc)
        return EXIT_CANNOT_LISTEN
    return 0


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def version_report() -> list[str]:
    """The package's version, then each compiled module's (a mismatch means a stale
    build) with the file it was loaded from, then the interpreter's."""
    from ferromq import _core, _protocol

    return [
        f"ferromq {__version__}",
        f"ferromq._core {_core.__version__} (Rust engine) {_core.__file__}",
        f"ferromq._protocol {_protocol.__version__} (Cython IO) {_protocol.__file__}",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"uvloop {_installed('uvloop')}",
    ]


def version_line() -> str:
    """``ferromq -V``: the package's version and the compiled modules', on one line."""
    from ferromq import _core, _protocol

    return (
        f"ferromq {__version__} (_core {_core.__version__}, _protocol {_protocol.__version__}, "
        f"{platform.python_implementation()} {platform.python_version()})"
    )


class _ShowVersion(argparse.Action):
    """``-V``: the version line, built only when asked for (it imports both compiled
    modules)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(version_line())
        parser.exit()


def version(args: argparse.Namespace) -> int:
    print("\n".join(version_report()))
    return 0


def default_loop() -> str:
    # Looked up, not imported: every command builds this parser.
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


_EXAMPLES = argparse.RawDescriptionHelpFormatter  # keeps the examples' lines as written


def _paragraphs(*texts: str) -> str:
    """Help text for ``_EXAMPLES`` parsers, which do not wrap it themselves."""
    return "\n\n".join(textwrap.fill(text, 79) for text in texts)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="ferromq",
        formatter_class=_EXAMPLES,
        description="ferromq: an MQTT 3.1, 3.1.1 and 5.0 broker.",
        epilog="examples:\n"
        "  ferromq serve                     listen on 127.0.0.1:1883\n"
        "  ferromq serve -b 0.0.0.0 -p 1884  listen on every address, port 1884\n"
        "  ferromq serve -c /etc/ferromq/ferromq.toml\n"
        "  ferromq check-config -c ferromq.toml\n\n"
        "Run 'ferromq COMMAND --help' for a command's options.",
    )
    parser.add_argument(
        "-V", "--version", action=_ShowVersion, nargs=0, help="show the version and exit"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve_parser = commands.add_parser(
        "serve",
        help="run the broker",
        formatter_class=_EXAMPLES,
        description=_paragraphs(
            "Run the MQTT broker until it gets SIGTERM or SIGINT (Ctrl-C). SIGHUP reloads "
            "the configuration file.",
            "Without a configuration file it listens on 127.0.0.1:1883, accepts any "
            "client and keeps its sessions in ./ferromq-data. -p and -b replace the port "
            "and host of the first listener the configuration file (or FERROMQ_LISTEN) "
            "names; other listeners stay as configured.",
        ),
        epilog="examples:\n"
        "  ferromq serve -p 1884\n"
        "  ferromq serve -b 0.0.0.0 -v\n"
        "  ferromq serve -c /etc/ferromq/ferromq.toml --pid-file /run/ferromq.pid\n\n"
        "exit status: 0 stopped, 1 a shard kept dying or the stop outlasted [server] "
        "shutdown_timeout, 2 configuration or command line, 3 store unavailable, 4 "
        "cannot listen",
    )
    add_config_argument(serve_parser)
    add_override_arguments(serve_parser)
    serve_parser.add_argument(
        "--pid-file",
        type=Path,
        metavar="FILE",
        help="write the process id to FILE once listening, remove it on exit; refuse "
        "to start while the process FILE names runs",
    )
    serve_parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default=default_loop(),
        help="event loop (default: uvloop when installed)",
    )
    serve_parser.set_defaults(handler=serve)

    check = commands.add_parser(
        "check-config",
        help="check the configuration and print the settings in effect",
        formatter_class=_EXAMPLES,
        description=_paragraphs(
            "Check the configuration as serve would before listening (the file, FERROMQ_* "
            "environment variables, the command line, and the files it names: users, ACL, "
            "bans, TLS certificates, data directory), then print every setting in effect, "
            "defaults included. Exit status 2 on a problem, with one line naming it."
        ),
        epilog="examples:\n"
        "  ferromq check-config -c ferromq.toml\n"
        "  ferromq check-config -c ferromq.toml -p 1884 --json",
    )
    add_config_argument(check)
    add_override_arguments(check)
    check.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    check.set_defaults(handler=check_config)

    version_parser = commands.add_parser(
        "version",
        help="show the versions of ferromq and its compiled modules",
        description="Show the version of ferromq, of its two compiled modules (with the "
        "files they were loaded from) and of Python: what to include in a bug report.",
    )
    version_parser.set_defaults(handler=version)
    bench.register(commands)
    users_cli.register(commands)
    bans_cli.register(commands)
    ctl.register(commands)
    starter_config.register(commands)
    pipeline_cli.register(commands)
    for command_parser in commands.choices.values():
        # The parser to name in an "unrecognized arguments" error (see main).
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would name the top parser; the command's help is the useful one
        named: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        named.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "serve":
        args.argv = list(sys.argv[1:] if argv is None else argv)  # what a node's shards run
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
