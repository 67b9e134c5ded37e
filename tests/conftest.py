"""Shared fixtures: a real `ferromq serve` process on a free loopback port, run once
under uvloop and once under stdlib asyncio (STYLE.md: every integration test runs
under both loops); `started` for tests that start (and restart) brokers themselves;
session-wide real Redis, Redis Cluster and Kafka (`redis_url`, `redis_cluster`,
`kafka_bootstrap`, started by tests/support/services.py) and a test's own stoppable
`redis_server`."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from ferromq._core import shard_of
from ferromq.node.workers import worker_count
from tests.support import services
from tests.support.services import free_port
from tests.support.tls_certs import Pki, authority

# The brokers the suite starts run the number of workers the test command names
# (FERROMQ_SERVER__WORKERS=2 for the suite at two shards); unset, one, whatever the
# machine's cores ("auto", the default, would follow them). A broker whose test
# configures [server] itself (start_broker) runs what the test says.
_WORKERS = "FERROMQ_SERVER__WORKERS"
os.environ.setdefault(_WORKERS, "1")
_SHARD_TAG = re.compile(r" shard=\d+$")


def suite_shards() -> int:
    """The number of shards of the suite's brokers (their node's processes)."""
    return worker_count(os.environ[_WORKERS])


def owner_tag(client_id: str) -> str:
    """What ends a log line about ``client_id`` (its owner shard's tag,
    :func:`ferromq.log.tag_process`) at the suite's workers: nothing at one."""
    count = suite_shards()
    return "" if count == 1 else f" shard={shard_of(client_id, count)}"


def serving(log: str) -> bool:
    """Whether a broker's log says it serves: its "listening" line, or for a node of
    several shards (its supervisor logged "node starting") "node serving"."""
    return "node serving" in log or ("listening" in log and "node starting" not in log)


def untagged(line: str) -> str:
    """A log line without the ``shard=K`` a shard of a node puts last, so a test checks
    the same line at one worker and at several."""
    return _SHARD_TAG.sub("", line)


def shard_directory(base: Path, client_id: str) -> Path:
    """Where a per-shard directory under ``base`` (the stream spill) keeps what
    ``client_id`` sent at the suite's workers: ``base`` itself at one."""
    count = suite_shards()
    return base if count == 1 else base / f"shard-{shard_of(client_id, count)}"


def suite_workers() -> int:
    """The number of shards of the brokers the suite starts (those whose test does not
    configure [server] itself)."""
    return int(os.environ[_WORKERS])


@dataclass
class RunningBroker:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, *parts: str, timeout: float = 60.0) -> str:
        """Until one line of the log holds every part; the whole log then. A shard's
        lines reach the node's log a moment after what they report."""
        deadline = time.monotonic() + timeout
        while not any(all(p in line for p in parts) for line in self.log().splitlines()):
            assert time.monotonic() < deadline, f"no log line with {parts}:\n{self.log()[-3000:]}"
            time.sleep(0.05)
        return self.log()

    def shards(self) -> dict[int, str]:
        """A node's shard processes (the supervisor's children): pid → start time."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = children.read_text().split() if children.exists() else ()
        return {int(pid): started for pid in pids if (started := _start_time(int(pid)))}

    def kill(self) -> None:
        """SIGKILL every process of the broker (a node's shards first, so none is
        restarted, then its supervisor) and wait for it."""
        _kill(self.shards())
        self.process.kill()
        self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; a node's shards still running once
        the supervisor is gone (it was killed) are killed too, so none outlives the
        test."""
        shards = self.shards()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _kill(shards)
        return self.process.returncode


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (/proc/<pid>/stat field 22), None once it is gone: tells
    the process from a later one given its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except FileNotFoundError:
        return None


def _kill(processes: dict[int, str]) -> None:
    """SIGKILL each process (pid → start time) still running."""
    for pid, started in processes.items():
        if _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def ferromq_command() -> list[str]:
    script = shutil.which("ferromq")
    return [script] if script else [sys.executable, "-m", "ferromq"]


def spawn_serve(
    config: Path,
    loop: str,
    log_path: Path,
    env: dict[str, str],
    preexec_fn: Callable[[], None] | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``ferromq serve --config config --loop loop`` with its output in ``log_path``,
    after ``prefix`` (``ip netns exec NAME``, say)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [*prefix, *ferromq_command(), "serve", "--config", str(config), "--loop", loop],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=preexec_fn,
        )


def start_broker(
    tmp_path: Path,
    loop: str,
    config_text: str = "",
    env: dict[str, str] | None = None,
    nofile: int | None = None,
    ready: Callable[[RunningBroker], bool] | None = None,
) -> RunningBroker:
    """A ``ferromq serve`` on a free port; ``nofile`` caps its file descriptors
    (RLIMIT_NOFILE, soft and hard); ``ready`` says when it serves (default: its output
    has the "listening" line), for a broker that logs elsewhere or not at info."""
    port = free_port()
    own = "[server]" in config_text  # a test's own number of workers, not the suite's
    config = tmp_path / f"ferromq-{port}.toml"
    config.write_text(config_text)
    log_path = tmp_path / f"broker-{port}.log"
    suite = {key: value for key, value in os.environ.items() if key != _WORKERS or not own}
    environ = {
        **suite,
        "FERROMQ_LISTEN": f"127.0.0.1:{port}",
        # Each broker its own embedded store, unless the test names one to restart on.
        "FERROMQ_STORAGE__PATH": str(tmp_path / f"store-{port}"),
        **(env or {}),
    }
    limit = None if nofile is None else partial(_limit_files, nofile)
    process = spawn_serve(config, loop, log_path, environ, limit)
    # Ready once it logs "listening": the listeners are bound before the store is
    # restored, so a connection succeeds earlier and waits in the backlog until then.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited early:\n{log_path.read_text()}")
        running = RunningBroker("127.0.0.1", port, process, log_path, config)
        if ready(running) if ready else serving(running.log()):
            return running
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"broker did not listen on {port}:\n{log_path.read_text()}")


def _limit_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


@pytest.fixture(params=["uvloop", "asyncio"])
def loop(request: pytest.FixtureRequest) -> str:
    """The event loop a test's own brokers run on (``start_broker``)."""
    return str(request.param)


@pytest.fixture(params=["uvloop", "asyncio"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param)
    yield running
    running.stop()


Starter = Callable[[str, str], RunningBroker]


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Starter]:
    """Start brokers (loop, config) that are all stopped when the test ends, however it
    ends."""
    brokers: list[RunningBroker] = []

    def start(loop: str, config: str) -> RunningBroker:
        brokers.append(start_broker(tmp_path, loop, config))
        return brokers[-1]

    yield start
    for running in brokers:
        running.stop()


def _session_service(
    env_var: str,
    start: Callable[[Path], services.Service],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The address in env_var (scripts/test.sh started the service), or else a service
    started here on first use and stopped at session end. A missing prerequisite fails."""
    preset = os.environ.get(env_var)
    if preset:
        yield preset
        return
    try:
        service = start(tmp_path_factory.mktemp(env_var.lower()))
    except services.ServiceUnavailable as error:
        unavailable = str(error)
    else:
        yield service.address
        service.stop()
        return
    pytest.fail(unavailable, pytrace=False)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """redis://host:port/0 of a real redis-server (tests/support/services.py)."""
    yield from _session_service(services.REDIS_ENV, services.start_redis, tmp_path_factory)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[services.RedisServer]:
    """A real redis-server of the test's own (with an AOF), which the test may stop and
    start again on its port (the session's ``redis_url`` must stay up)."""
    try:
        server = services.start_redis(tmp_path, appendonly=True)
    except services.ServiceUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def kafka_server(tmp_path: Path) -> Iterator[services.KafkaServer]:
    """A real single-node Kafka of the test's own, which the test may freeze (SIGSTOP),
    kill and start again on its ports (the session's ``kafka_bootstrap`` must stay up);
    continued and stopped at the end."""
    try:
        server = services.start_kafka(tmp_path / "kafka")
    except services.ServiceUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGCONT)
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.RedisCluster]:
    """A real 3-node Redis Cluster (tests/support/services.py), started on first use."""
    try:
        cluster = services.start_redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
    except services.ServiceUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a real single-node KRaft Kafka (tests/support/services.py)."""
    yield from _session_service(services.KAFKA_ENV, services.start_kafka, tmp_path_factory)


def hang_up(broker: RunningBroker, line: str) -> None:
    """SIGHUP, then wait until the broker logs ``line`` once more than before (each
    shard of a node once: every one has reloaded)."""
    expected = broker.log().count(line) + suite_shards()
    broker.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while broker.log().count(line) < expected:
        assert broker.process.poll() is None, f"SIGHUP ended the broker:\n{broker.log()}"
        assert time.monotonic() < deadline, f"no {line!r} after SIGHUP:\n{broker.log()}"
        time.sleep(0.05)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = authority(tmp_path)
    client = ca.issue("client", "device-7", uris=("urn:dev:7",))
    return Pki(ca, ca.server(), client)
