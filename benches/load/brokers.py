"""The brokers under test, each started on a free loopback port from a generated config:
ferromq, Mosquitto (Debian's), amqtt, and the peers ../shared/peers builds (FlashMQ,
rumqttd).

The port serves one :class:`Listener`: plain TCP, or TLS, WebSocket or WebSocket over
TLS with a given certificate (each spec names the ``transports`` it can serve), so
every broker of a transport comparison gets the same certificate and key.

A :class:`BrokerSpec` knows how to write its broker's config and command line and
whether the broker is installed here; :func:`start` runs it (optionally pinned to one
core with ``taskset``) and waits until its port accepts connections; the returned
:class:`RunningBroker` reports the CPU time the broker process used (utime + stime
from ``/proc/<pid>/stat``) and stops it. Every broker listens on 127.0.0.1 only.

The integration tests import this module too, so there is one way to start Mosquitto.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

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
    name: ClassVar[str]
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


class Ferromq(BrokerSpec):
    name = "ferromq"
    protocols = frozenset({4, 5})
    transports = frozenset({"tcp", "tls", "ws", "wss"})
    _serve = (sys.executable, "-m", "ferromq", "serve")

    def __init__(self, extra_config: str = NO_STORE) -> None:
        #: TOML appended to the generated config (a ``[storage]`` choice, ``[redis]``).
        self.extra_config = extra_config

    def missing(self) -> str | None:
        probe = subprocess.run([*self._serve, "--help"], capture_output=True, check=False)
        if probe.returncode != 0:
            return "ferromq is not installed (pip install .)"
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
        return [*self._serve, "--config", str(conf)]


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
    name = "flashmq"
    protocols = frozenset({4, 5})
    transports = frozenset({"tcp", "tls", "ws", "wss"})
    binary = "flashmq"
    settings = ("FLASHMQ_LOG_LEVEL=warning",)

    def command(self, port: int, workdir: Path, listener: Listener = TCP) -> list[str]:
        if listener == TCP:
            return super().command(port, workdir, listener)
        # The start script serves plain MQTT only: the same config, with the
        # listener's transport and certificate.
        conf = workdir / "flashmq.conf"
        tls = f"  fullchain {listener.certfile}\n  privkey {listener.keyfile}\n"
        conf.write_text(
            "allow_anonymous true\n"
            "log_level warning\n"
            "listen {\n"
            f"  protocol {'websockets' if listener.websocket else 'mqtt'}\n"
            "  inet_protocol ip4\n"
            "  inet4_bind_address 127.0.0.1\n"
            f"  port {port}\n" + (tls if listener.tls else "") + "}\n"
        )
        return [str(PEERS_PREFIX / self.name / "bin" / self.binary), "--config-file", str(conf)]


class Rumqttd(Peer):
    # MQTT 5 listens on port + 1: the comparison uses its 3.1.1 listener only.
    name = "rumqttd"
    protocols = frozenset({4})
    binary = "rumqttd"
    settings = ("RUMQTTD_MAX_PAYLOAD=1048576",)


BROKERS: dict[str, BrokerSpec] = {
    b.name: b for b in (Ferromq(), Mosquitto(), Mosquitto21(), Amqtt(), FlashMQ(), Rumqttd())
}


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
    """User + system CPU time process ``pid`` has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the parenthesised command name; utime and stime are 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class RunningBroker:
    spec: BrokerSpec
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process has used so far."""
        return cpu_seconds(self.process.pid)

    def rss_bytes(self) -> int:
        """Resident set size of the broker process now."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(
    spec: BrokerSpec,
    workdir: Path,
    core: int | None = None,
    timeout: float = 15.0,
    listener: Listener = TCP,
) -> RunningBroker:
    """Start ``spec`` serving ``listener`` on a free port (pinned to ``core`` if given)
    and wait until the port accepts connections."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command: Sequence[str] = spec.command(port, workdir, listener)
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
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
