"""The supervisor: ``ferromq serve`` with ``[server] workers`` above 1 (docs/shards.md).

It serves no client itself. It checks what only starting can tell once for the node,
so a problem is one line and today's exit status, not one per shard: the listeners'
addresses are free (bound without ``SO_REUSEPORT`` and closed again: exit 4, before
anything is created on disk) and the embedded store is not another node's (it holds
``storage.path``'s lock for its life: exit 3). Then it makes what the shards share —
the bus (``Bus.create``: one memfd for every pair's ring), the admission counters
(``NodeCounters.create``: one memfd, :mod:`ferromq.admission`), the TLS session-ticket
key (a memfd, :mod:`ferromq.tls_tickets`), one eventfd per shard for wake-ups, one
``SOCK_SEQPACKET`` pair per shard for connection hand-overs — and starts
each shard as ``python -m ferromq serve <the same arguments>`` with its
:class:`~ferromq.shard.identity.ShardIdentity` in ``FERROMQ_SHARD`` and those
descriptors inherited (``pass_fds``), plus a stream socket pair of its own
(:mod:`ferromq.shard.link`: ``restored`` / ``serve`` / ``serving`` / ``failed``).

Start: once every shard has restored its store, the supervisor records the store's
layout (:func:`ferromq.storage.layout.commit`, which deletes a previous layout the
shards took over) and only then tells them to ``serve``, so no client is served from a
layout a crash could still discard. Once every shard serves, it writes the pid file
(its own pid), says READY=1 to systemd and, with ``[admin] enabled``, serves the
node's admin listener (:func:`ferromq.node.admin.bind_node_admin`, bound before the
shards start, so an address in use is exit 4 and nothing started). A shard that
cannot start reports why; the supervisor prints that one line, stops the others and
exits with the shard's status (2 configuration, 3 store, 4 listen). So does a serving
shard that reports why it stopped (a bus frame of a version this build does not read).

Log: the supervisor owns the node's log destination (``[log]``: the one file it
rotates, syslog, or its stderr). A shard's stderr is a pipe the supervisor reads,
writing each line through its own handler (:func:`ferromq.log.relay_line`). On SIGHUP
it opens the destination the configuration names now (the shards report a
configuration they refuse; the supervisor then keeps its own).

Running: SIGTERM and SIGINT stop the node: every shard is told ``stop`` on its link
and stops gracefully within ``[server] shutdown_timeout`` or exits hard
(:mod:`ferromq.shutdown`); exit 0 once all stopped cleanly, and a shard still running
:data:`STOP_MARGIN` seconds after that is killed. SIGHUP is forwarded (each shard
reloads) once the log's destination is reopened. A shard that dies otherwise
(``kill -9``, a crash) is logged in one line with its pid and status and started
again with the same identity after a backoff that doubles from
:data:`BACKOFF_FIRST`; its clients reconnect to the shards still listening (or to it).
The :data:`DEATHS_ALLOWED`-th death within :data:`DEATHS_WINDOW` seconds stops the
node with exit status 1: a shard that cannot stay up needs a person. If the
supervisor itself dies, every shard sees its link close (and the kernel sends it
SIGTERM: ``PR_SET_PDEATHSIG``) and stops the same way.

Cost: nothing per message or connection; the supervisor wakes per shard event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ferromq import sd_notify
from ferromq._core import Bus, NodeCounters
from ferromq.config import Config, ConfigError, listener_path
from ferromq.exits import EXIT_CANNOT_LISTEN, EXIT_CONFIG_ERROR, EXIT_STORE_UNAVAILABLE, fail
from ferromq.log import install_handler, log_event, log_handler, relay_line
from ferromq.pidfile import PidFile
from ferromq.shard.bus_pump import ring_capacity
from ferromq.shard.identity import ENV, ShardIdentity
from ferromq.shard.link import RESTORED, SERVE, SERVING, STOP, parse_failed
from ferromq.sockets import ListenError, bind_sockets
from ferromq.storage import StoreUnavailable, layout
from ferromq.storage.embedded import lock_directory
from ferromq.tls_tickets import new_ticket_keys

if TYPE_CHECKING:
    from ferromq.admin import AdminServer

__all__ = ["BACKOFF_FIRST", "DEATHS_ALLOWED", "DEATHS_WINDOW", "supervise"]

logger = logging.getLogger("ferromq.node")

BACKOFF_FIRST: Final = 0.1
BACKOFF_MAX: Final = 5.0
DEATHS_ALLOWED: Final = 5
DEATHS_WINDOW: Final = 60.0
STOP_MARGIN: Final = 2.0
"""Seconds past ``[server] shutdown_timeout`` before a shard still running is killed:
the shard's own deadline comes first and logs what it was waiting for."""
EXIT_SHARDS_FAILING: Final = 1
COUNTER_SLOTS: Final = 1 << 20
"""Keys the node's admission counters hold (16 bytes each, plus 4 per shard; the memfd's
pages are allocated as keys touch them): listeners, addresses and user names seen."""
LOG_LINE_LIMIT: Final = 1024 * 1024
"""Bytes of one line a shard writes to its stderr (a record with its traceback)."""


def supervise(
    config: Config,
    argv: list[str],
    count: int,
    pid_file: PidFile | None,
    load: Callable[[], Config] | None = None,
) -> int:
    """Run a node of ``count`` shards until SIGTERM/SIGINT; its exit status. ``load``
    reads the configuration again (SIGHUP: the log's destination)."""
    try:
        _check_listeners(config)
        admin = _bind_admin(config, count)
        lock = _lock_store(config)
    except (ListenError, StoreUnavailable, ConfigError) as exc:
        fail(exc)
        return {
            ListenError: EXIT_CANNOT_LISTEN,
            StoreUnavailable: EXIT_STORE_UNAVAILABLE,
            ConfigError: EXIT_CONFIG_ERROR,
        }[type(exc)]
    try:
        return asyncio.run(Supervisor(config, argv, count, pid_file, admin, load).run())
    finally:
        if lock is not None:
            os.close(lock)


def _check_listeners(config: Config) -> None:
    """Every listener's address is free, as a broker of one shard would find it."""
    for index, listener in enumerate(config.listeners):
        for sock in bind_sockets(listener_path(index, listener), listener.host, listener.port):
            sock.close()


def _bind_admin(config: Config, count: int) -> AdminServer | None:
    """The node's admin listener, bound before the shards start (``[admin] enabled``)."""
    if not config.admin.enabled:
        return None
    from ferromq.node.admin import bind_node_admin  # the optional ``admin`` extra

    return bind_node_admin(config, count)


def _lock_store(config: Config) -> int | None:
    if config.storage.backend != "embedded":
        return None
    return lock_directory(Path(config.storage.path).resolve())


async def _relay_log(stderr: asyncio.StreamReader) -> None:
    """Write a shard's stderr lines through the node's log handler until it closes."""
    while True:
        try:
            line = await stderr.readline()
        except ValueError:  # a line past LOG_LINE_LIMIT: dropped, said
            log_event(logger, logging.WARNING, "shard log line too long, dropped")
            continue
        if not line:
            return
        relay_line(line.decode(errors="replace").rstrip("\n"))


def _status_text(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


@dataclass
class _Shard:
    identity: ShardIdentity
    process: asyncio.subprocess.Process | None = None
    link: socket.socket | None = None
    restored: bool = False
    serving: bool = False
    deaths: deque[float] = field(default_factory=deque)
    relay: asyncio.Task[None] | None = None  # its stderr into the node's log


class Supervisor:
    def __init__(
        self,
        config: Config,
        argv: list[str],
        count: int,
        pid_file: PidFile | None,
        admin: AdminServer | None = None,
        load: Callable[[], Config] | None = None,
    ):
        self.admin = admin
        self.config = config
        self._load = load
        self.argv = argv
        self.count = count
        self.pid_file = pid_file
        wake_fds = tuple(os.eventfd(0, os.EFD_NONBLOCK) for _ in range(count))
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(count)]
        self._keep = [sock for pair in pairs for sock in pair]  # open for restarts
        send = tuple(pair[1].fileno() for pair in pairs)
        bus_fd = Bus.create(count, ring_capacity(count))
        counters_fd = NodeCounters.create(COUNTER_SLOTS, count)
        ticket_keys_fd = os.memfd_create("ferromq-tls-tickets", 0)  # inherited, not CLOEXEC
        os.write(ticket_keys_fd, new_ticket_keys())
        self.shards = [
            _Shard(
                ShardIdentity(
                    k,
                    count,
                    bus_fd,
                    wake_fds,
                    pairs[k][0].fileno(),
                    send,
                    counters_fd=counters_fd,
                    ticket_keys_fd=ticket_keys_fd,
                )
            )
            for k in range(count)
        ]
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopping = False
        self._serving = False
        self._failure: tuple[int, str | None] | None = None  # start-up: status, message
        self._status = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload)
        log_event(logger, logging.INFO, "node starting", workers=self.count, pid=os.getpid())
        self._tasks = [asyncio.create_task(self._keep_running(shard)) for shard in self.shards]
        try:
            if await self._started():
                if self.admin is not None:
                    await self.admin.start()
                await self._stop.wait()
        finally:
            sd_notify.notify(sd_notify.STOPPING)
            if self.admin is not None:
                await self.admin.close()
            await self._stop_shards()
        if self._failure is not None:
            status, message = self._failure
            if message is not None:
                print(f"ferromq: error: {message}", file=sys.stderr)  # the line the shard reported
            return status
        if self._status == 0:
            log_event(logger, logging.INFO, "node stopped", workers=self.count)
        return self._status

    async def _started(self) -> bool:
        """Every shard restored, the layout recorded, every shard serving: True; False
        when a shard failed to start or a stop came first."""
        for stage in ("restored", "serving"):
            while not all(getattr(shard, stage) for shard in self.shards):
                if self._failure is not None or self._stop.is_set():
                    return False
                stop = asyncio.ensure_future(self._stop.wait())
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait((stop, changed), return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                changed.cancel()
                self._changed.clear()
            if stage == "restored":
                if self.config.storage.backend == "embedded":
                    layout.commit(Path(self.config.storage.path).resolve(), self.count)
                self._serving = True
                for shard in self.shards:
                    self._send(shard, SERVE)
        if self._failure is not None or self._stop.is_set():
            return False
        if self.pid_file is not None:
            try:
                self.pid_file.write()
            except ConfigError as exc:
                self._failure = (EXIT_CONFIG_ERROR, str(exc))
                return False
        sd_notify.notify(sd_notify.READY)
        log_event(logger, logging.INFO, "node serving", workers=self.count)
        return True

    async def _keep_running(self, shard: _Shard) -> None:
        """Run ``shard``, and again after each unexpected death."""
        while True:
            returncode, failed = await self._run_once(shard)
            if self._stopping or self._stop.is_set():  # stopped with the node
                return
            index, pid = shard.identity.index, shard.process.pid if shard.process else None
            if self._serving and failed is not None:
                # It stopped on what it cannot read (a newer build's bus frame):
                # starting it again would meet it again, so the node stops with its line.
                self._failure = failed
                self._stop.set()
                return
            if not self._serving:  # the node's start: the node fails with it
                if failed is None:
                    log_event(
                        logger,
                        logging.ERROR,
                        "shard failed to start",
                        shard=index,
                        pid=pid,
                        status=_status_text(returncode),
                    )
                self._failure = failed or (returncode if returncode > 0 else 1, None)
                self._changed.set()
                return
            log_event(
                logger,
                logging.ERROR,
                "shard died",
                shard=index,
                pid=pid,
                status=_status_text(returncode),
            )
            now = time.monotonic()
            shard.deaths.append(now)
            while shard.deaths[0] < now - DEATHS_WINDOW:
                shard.deaths.popleft()
            if len(shard.deaths) >= DEATHS_ALLOWED:
                log_event(
                    logger,
                    logging.ERROR,
                    "shard keeps dying, node stopping",
                    shard=index,
                    deaths=len(shard.deaths),
                    within_seconds=int(DEATHS_WINDOW),
                )
                self._status = EXIT_SHARDS_FAILING
                self._stop.set()
                return
            await asyncio.sleep(min(BACKOFF_FIRST * 2 ** (len(shard.deaths) - 1), BACKOFF_MAX))
            if self._stopping:
                return

    async def _run_once(self, shard: _Shard) -> tuple[int, tuple[int, str] | None]:
        """Start ``shard``'s process and follow it until it exits: its return code, and
        the status and message it reported if it could not start."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        identity = replace(
            shard.identity, supervisor_fd=theirs.fileno(), supervisor_pid=os.getpid()
        )
        environ = {**os.environ, ENV: identity.to_env()}
        environ.pop("NOTIFY_SOCKET", None)  # systemd hears from the supervisor only
        shard.restored = shard.serving = False
        try:
            shard.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "ferromq",
                *self.argv,
                env=environ,
                pass_fds=identity.inherited_fds(),
                stderr=asyncio.subprocess.PIPE,
                limit=LOG_LINE_LIMIT,
            )
        finally:
            theirs.close()
        assert shard.process.stderr is not None
        shard.relay = asyncio.create_task(_relay_log(shard.process.stderr))
        shard.link = ours
        if self._stopping:  # the node began stopping while this shard was being started
            self._send(shard, STOP)
        log_event(
            logger,
            logging.INFO,
            "shard started",
            shard=shard.identity.index,
            pid=shard.process.pid,
        )
        failed = await self._follow(shard, ours)
        returncode = await shard.process.wait()
        # Its last lines, up to the end of the pipe (a stop waits for them too).
        await asyncio.shield(shard.relay)
        shard.link = None
        ours.close()
        return returncode, failed

    async def _follow(self, shard: _Shard, sock: socket.socket) -> tuple[int, str] | None:
        """Read the shard's lines until it closes its end (it exited)."""
        reader, writer = await asyncio.open_connection(sock=sock.dup())
        failed = None
        try:
            while line := (await reader.readline()).decode(errors="replace").strip():
                if line == RESTORED:
                    shard.restored = True
                    if self._serving:  # a restarted shard: the node serves already
                        self._send(shard, SERVE)
                elif line == SERVING:
                    shard.serving = True
                    if self._serving and shard.deaths:
                        log_event(
                            logger,
                            logging.INFO,
                            "shard restarted",
                            shard=shard.identity.index,
                            pid=shard.process.pid if shard.process else None,
                        )
                else:
                    failed = parse_failed(line) or failed
                self._changed.set()
        finally:
            writer.close()
        return failed

    def _send(self, shard: _Shard, line: str) -> None:
        if shard.link is not None:
            with contextlib.suppress(OSError):
                shard.link.send(f"{line}\n".encode())

    def _reload(self) -> None:
        """SIGHUP: the log's destination as configured now, then every shard reloads."""
        if self._load is not None:
            with contextlib.suppress(ConfigError):  # the shards say why, once each
                log = self._load().log
                install_handler(log_handler(log), log.level)
        self._forward(signal.SIGHUP)

    def _forward(self, signum: int) -> None:
        for shard in self.shards:
            if shard.process is not None and shard.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    shard.process.send_signal(signum)

    async def _stop_shards(self) -> None:
        self._stopping = True
        for shard in self.shards:
            self._send(shard, STOP)
        running = [shard.process for shard in self.shards if shard.process is not None]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(process.wait() for process in running)),
                self.config.server.shutdown_timeout + STOP_MARGIN,
            )
        except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
            log_event(logger, logging.ERROR, "shards did not stop in time, killed")
            for process in running:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(shard.relay for shard in self.shards if shard.relay is not None))
        unclean = [
            process.returncode
            for process in running
            if process.returncode not in (0, -signal.SIGTERM, None)
        ]
        if unclean and self._status == 0 and self._failure is None:
            self._status = EXIT_SHARDS_FAILING
