"""The brokers under test, each started on a free loopback port from a generated config:
ferromq, Mosquitto (Debian's), amqtt, and the peers ../shared/peers builds (FlashMQ,
rumqttd, NanoMQ, Mosquitto 2.1).

The port serves one :class:`Listener`: plain TCP, or TLS, WebSocket or WebSocket over
TLS with a given certificate (each spec names the ``transports`` it can serve), so
every broker of a transport comparison gets the same certificate and key.

A :class:`BrokerSpec` knows how to write its broker's config and command line and
whether the broker is installed here; ``spec.using(n)`` is the same broker told to use
``n`` cores (ferromq ``--workers n``, FlashMQ ``thread_count n``; the others have no
such setting that works, see each class). :func:`start` runs it (optionally pinned to
cores with ``taskset``) and waits until its port accepts connections; the returned
:class:`RunningBroker` reports the CPU time and RSS of the broker's whole process tree
(a ferromq node with workers is a supervisor and its shard processes) and stops it.
Every broker listens on 127.0.0.1 only.

The integration tests import this module too, so there is one way to start Mosquitto.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ferromq.bench_memory import process_tree, stat_fields

# Queued messages per offline persistent session: large enough that the persistent
# scenarios measure the broker, not its default cap of 1000.
MAX_QUEUED = 1_000_000


@dataclass(frozen=True)
class Listener:
    """What the broker's port serves: ``transport`` is tcp, tls, ws or wss; the TLS
    ones use ``certfile`` (the chain) and ``keyfile``."""

    transport: str = "tcp"
    certfile: Path | None = None
    keyfile: Path | None = None

    @property
    def tls(self) -> bool:
        return self.transport in ("tls", "wss")

    @property
    def websocket(self) -> bool:
        return self.transport in ("ws", "wss")


TCP = Listener()


class BrokerSpec:
    name: str
    #: MQTT protocol levels the broker speaks.
    protocols: ClassVar[frozenset[int]]
    #: Listener transports it can serve.
    transports: ClassVar[frozenset[str]] = frozenset({"tcp"})

    def missing(self) -> str | None:
        """Why this broker cannot run here, or ``None`` when it can."""
        raise NotImplementedError

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        """Write the config into ``workdir``; return the command that serves
        ``listener`` on ``port``."""
        raise NotImplementedError

    def using(self, cores: int) -> BrokerSpec:
        """This broker told to use ``cores`` cores. One core keeps the broker's own
        defaults, as every earlier comparison ran it; a broker with no such setting
        is itself."""
        return self


class Mosquitto(BrokerSpec):
    """Debian's Mosquitto 2.0 (built without WebSocket support)."""

    name = "mosquitto"
    protocols = frozenset({4, 5})
    transports = frozenset({"tcp", "tls"})

    def missing(self) -> str | None:
        if shutil.which("mosquitto") is None:
            return "mosquitto is not installed (apt-get install -y mosquitto)"
        return None

    def executable(self) -> list[str]:
        return ["mosquitto"]

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        conf = workdir / "mosquitto.conf"
        transport = ""
        if listener.websocket:
            transport += "protocol websockets\n"
        if listener.tls:
            transport += f"certfile {listener.certfile}\nkeyfile {listener.keyfile}\n"
        conf.write_text(
            f"listener {port} 127.0.0.1\n" + transport + "allow_anonymous true\n"
            f"max_queued_messages {MAX_QUEUED}\n"
            "persistence false\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n"
        )
        return [*self.executable(), "-c", str(conf)]


class Amqtt(BrokerSpec):
    name = "amqtt"
    protocols = frozenset({4})  # amqtt speaks MQTT 3.1.1 only

    def missing(self) -> str | None:
        if importlib.util.find_spec("amqtt") is None:
            return "amqtt is not installed (pip install amqtt)"
        return None

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        conf = workdir / "amqtt.yaml"
        conf.write_text(
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: 127.0.0.1:{port}\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )
        return [sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(conf)]


# Like Mosquitto's "persistence false": the broker comparisons store nothing; the store
# benchmarks (redis_store.py) name their store.
NO_STORE = '[storage]\nbackend = "memory"\n'


_SERVE = (sys.executable, "-m", "ferromq", "serve")


@functools.cache
def _serve_help() -> str | None:
    """``ferromq serve --help``, or ``None`` when ferromq is not installed."""
    probe = subprocess.run([*_SERVE, "--help"], capture_output=True, text=True, check=False)
    return probe.stdout if probe.returncode == 0 else None


class Ferromq(BrokerSpec):
    """ferromq with ``workers`` shard processes (``serve --workers``): named
    ``ferromq-w<N>`` when the number is fixed, plain ``ferromq`` when it follows the
    cores the broker is given (:meth:`using`; one by default)."""

    protocols = frozenset({4, 5})
    transports = frozenset({"tcp", "tls", "ws", "wss"})

    def __init__(
        self, extra_config: str = NO_STORE, workers: int | None = None, cores: int = 1
    ) -> None:
        #: TOML appended to the generated config (a ``[storage]`` choice, ``[redis]``).
        self.extra_config = extra_config
        self.fixed_workers = workers
        self.workers = workers or cores
        self.name = "ferromq" if workers is None else f"ferromq-w{workers}"

    def using(self, cores: int) -> Ferromq:
        return Ferromq(self.extra_config, self.fixed_workers, cores)

    def configured(self, extra_config: str) -> Ferromq:
        """The same node with another ``extra_config``."""
        return Ferromq(extra_config, self.fixed_workers, self.workers)

    def missing(self) -> str | None:
        usage = _serve_help()
        if usage is None:
            return "ferromq is not installed (pip install .)"
        if self.workers > 1 and "--workers" not in usage:
            return "this ferromq serve has no --workers option"
        return None

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        conf = workdir / "ferromq.toml"
        transport = f'protocol = "{listener.transport}"\n'
        if listener.tls:
            transport += f'certfile = "{listener.certfile}"\nkeyfile = "{listener.keyfile}"\n'
        # Queue + in-flight window (1024 by default) share a session's 65,535 packet ids
        # (config check); Mosquitto's queue is raised to MAX_QUEUED.
        conf.write_text(
            "[[listeners]]\n"
            'host = "127.0.0.1"\n'
            f"port = {port}\n" + transport + "[session]\n"
            f"queue_limit = {min(MAX_QUEUED, 64_000)}\n"
            "[log]\n"
            'level = "warning"\n' + self.extra_config
        )
        # Given explicitly: the default ("auto", one per core of the affinity mask)
        # would follow taskset, not the comparison. Before --workers existed, one.
        usage = _serve_help() or ""
        workers = ["--workers", str(self.workers)] if "--workers" in usage else []
        return [*_SERVE, "--config", str(conf), *workers]


# ../shared/peers beside the repository: build.sh builds the peers, start/<name>.sh runs one.
PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers"
PEERS_PREFIX = Path(os.environ.get("PEERS_PREFIX", Path.home() / ".cache" / "ferromq-peers"))


class Peer(BrokerSpec):
    """A peer broker built by ``../shared/peers/build.sh NAME``, started by its start
    script with the throughput settings the peers README recommends (``settings``)."""

    binary: ClassVar[str]
    settings: ClassVar[tuple[str, ...]] = ()

    def missing(self) -> str | None:
        if not (PEERS_PREFIX / self.name / "bin" / self.binary).exists():
            return f"{self.name} is not built (../shared/peers/build.sh {self.name})"
        return None

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        return ["env", *self.settings, str(PEERS / "start" / f"{self.name}.sh"), str(port)]


class Mosquitto21(Mosquitto):
    """Mosquitto 2.1 as ``../shared/peers/build.sh mosquitto-2.1`` builds it (with its
    own WebSocket support), run with the same config as Debian's."""

    name = "mosquitto-2.1"
    transports = frozenset({"tcp", "tls", "ws", "wss"})

    @property
    def home(self) -> Path:
        return PEERS_PREFIX / self.name

    def missing(self) -> str | None:
        if not (self.home / "sbin" / "mosquitto").exists():
            return f"{self.name} is not built (../shared/peers/build.sh {self.name})"
        return None

    def executable(self) -> list[str]:
        return [
            "env",
            f"LD_LIBRARY_PATH={self.home / 'lib'}",
            str(self.home / "sbin" / "mosquitto"),
        ]


class FlashMQ(Peer):
    """FlashMQ: one thread per CPU by default; ``using(n)`` sets ``thread_count n``."""

    name = "flashmq"
    protocols = frozenset({4, 5})
    transports = frozenset({"tcp", "tls", "ws", "wss"})
    binary = "flashmq"
    settings = ("FLASHMQ_LOG_LEVEL=warning",)

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def using(self, cores: int) -> FlashMQ:
        return FlashMQ(cores if cores > 1 else None)

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        if listener == TCP and self.threads is None:
            return super().command(port, workdir, listener)
        # The start script serves plain MQTT with FlashMQ's thread count: the same
        # config, with the listener's transport and certificate and the threads.
        conf = workdir / "flashmq.conf"
        tls = f"  fullchain {listener.certfile}\n  privkey {listener.keyfile}\n"
        threads = f"thread_count {self.threads}\n" if self.threads else ""
        conf.write_text(
            "allow_anonymous true\n"
            "log_level warning\n" + threads + "listen {\n"
            f"  protocol {'websockets' if listener.websocket else 'mqtt'}\n"
            "  inet_protocol ip4\n"
            "  inet4_bind_address 127.0.0.1\n"
            f"  port {port}\n" + (tls if listener.tls else "") + "}\n"
        )
        return [str(PEERS_PREFIX / self.name / "bin" / self.binary), "--config-file", str(conf)]


class Rumqttd(Peer):
    """rumqttd 0.20: MQTT 5 listens on port + 1, so the comparison uses its 3.1.1
    listener only. Its threads are fixed, with no setting: one router thread and one
    single-threaded tokio runtime per listener (every connection of a listener on it),
    so it can keep two cores busy whatever it is told; taskset bounds it."""

    name = "rumqttd"
    protocols = frozenset({4})
    binary = "rumqttd"
    settings = ("RUMQTTD_MAX_PAYLOAD=1048576",)


class NanoMQ(Peer):
    """NanoMQ 0.25.3 (its start script: the shipped MQTT defaults, no persistence).
    Its threads are NNG's: one epoll poller and a task pool of 2 x the machine's CPUs.
    ``system.num_taskq_thread`` / ``max_taskq_thread`` (config, environment or command
    line) are read after NNG has started that pool, so they change nothing in this
    version (4 ``nng:task`` threads on 2 CPUs whatever they say): it runs with its
    defaults, bounded by taskset. Log level ``error``: ``warn`` logs every connect."""

    name = "nanomq"
    protocols = frozenset({4, 5})
    binary = "nanomq"
    settings = ("NANOMQ_LOG_LEVEL=error",)


BROKERS: dict[str, BrokerSpec] = {
    b.name: b
    for b in (Ferromq(), Mosquitto(), Mosquitto21(), Amqtt(), FlashMQ(), Rumqttd(), NanoMQ())
}


def named(name: str) -> BrokerSpec:
    """The broker called ``name``: one of BROKERS, or ``ferromq-w<N>`` (ferromq with N
    workers whatever the cores it is given)."""
    if name in BROKERS:
        return BROKERS[name]
    prefix = "ferromq-w"
    if name.startswith(prefix) and name[len(prefix) :].isdigit() and int(name[len(prefix) :]):
        return Ferromq(workers=int(name[len(prefix) :]))
    known = ", ".join([*BROKERS, "ferromq-w<N>"])
    raise ValueError(f"unknown broker {name!r} (known: {known})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` and its descendants have used so far:
    each live one's own (utime, stime: fields 14, 15) plus what its exited and reaped
    children used (cutime, cstime: 16, 17), so a child that ends between two samples
    still counts, once, in its parent's."""
    ticks = 0
    for member in process_tree(pid):
        try:
            fields = stat_fields(member)
        except OSError:
            if member == pid:
                raise
            continue  # exited since the tree was read; its parent's cutime has it
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class RunningBroker:
    spec: BrokerSpec
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker's processes have used so far."""
        return cpu_seconds(self.process.pid)

    def rss_bytes(self) -> int:
        """Resident set size of the broker's processes now (summed: pages they share
        count once per process)."""
        total = 0
        for member in process_tree(self.process.pid):
            try:
                status = Path(f"/proc/{member}/status").read_text()
            except OSError:
                continue
            total += sum(
                int(line.split()[1]) * 1024
                for line in status.splitlines()
                if line.startswith("VmRSS:")
            )
        return total

    def stop(self) -> None:
        """SIGTERM the broker, SIGKILL it after 10 s, then SIGKILL whatever of its
        process tree outlived it."""
        if self.process.poll() is not None:
            return
        tree = process_tree(self.process.pid)[1:]
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for member in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)


def start(
    spec: BrokerSpec,
    workdir: Path,
    core: int | Iterable[int] | None = None,
    timeout: float = 15.0,
    listener: Listener = TCP,
) -> RunningBroker:
    """Start ``spec`` serving ``listener`` on a free port (pinned to ``core``, or to
    each of several cores, if given) and wait until the port accepts connections."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command: Sequence[str] = spec.command(port, workdir, listener)
    if core is not None:
        cores = [core] if isinstance(core, int) else core
        command = ["taskset", "-c", ",".join(map(str, cores)), *command]
    log = workdir / f"{spec.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    broker = RunningBroker(spec, port, process, log)
    deadline = time.monotonic() + timeout
    while not _accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            broker.stop()
            last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"{spec.name} did not start: {last[0]}")
        time.sleep(0.05)
    return broker
