"""No process of the broker outlives its stop: ``[server] shutdown_timeout`` bounds a
stop even while the store does not answer (python/ferromq/shutdown.py,
docs/shards.md), under both loops.

The store is the test's own Redis, SIGSTOPped: connections stay open and nothing is
answered, so the last batch a stop writes waits for the command timeout (set far
above the shutdown timeout here). A persistent subscriber has received a QoS 1
message it does not acknowledge and its shard's store has not confirmed, so that
shard's stop has a batch to write. Assertions are on the processes (/proc), with
generous bounds.

- ``kill -9`` of a node's supervisor: every shard is gone (its link ends; the kernel
  sends it SIGTERM, tested alone below);
- SIGTERM to one shard: it exits with status 1, naming what it waited for, and a
  stop of the node, with the shard restarting on a store that does not answer, ends
  too;
- SIGTERM to a broker of one process: the same; a second SIGTERM ends the stop at
  once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferromq._core import shard_of
from tests.conftest import RunningBroker, start_broker
from tests.support.paho_clients import paho_client, subscribe
from tests.support.services import RedisServer
from tests.support.shards import alive, node_serving, shard_pids, with_retries

# Its brokers set their own number of shards: the suite at two shards skips it.
pytestmark = pytest.mark.own_workers

SHUTDOWN_TIMEOUT = 3
GONE_WITHIN = 30.0  # seconds: the timeout, the supervisor's margin, a loaded machine
SUBSCRIBER = "keeper"
CUT_SHORT = (
    'stop cut short, exiting now reason="not stopped within 3s" '
    'waiting_for="the store (redis) to take the last writes" status=1'
)


def redis_broker(
    tmp_path: Path, loop: str, redis: RedisServer, workers: int, shutdown_timeout: int
) -> RunningBroker:
    config = (
        f'[storage]\nbackend = "redis"\n[redis]\nurl = "{redis.url}"\ncommand_timeout = 600\n'
        f"[server]\nworkers = {workers}\nshutdown_timeout = {shutdown_timeout}\n"
    )
    return start_broker(tmp_path, loop, config, ready=node_serving if workers > 1 else None)


@contextlib.contextmanager
def silent(redis: RedisServer) -> Iterator[None]:
    """Redis keeps its connections and answers nothing (SIGSTOP) until the block ends."""
    os.kill(redis.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis.pid, signal.SIGCONT)


@contextlib.contextmanager
def unstored_delivery(broker: RunningBroker, redis: RedisServer) -> Iterator[None]:
    """Within the block Redis is silent and ``SUBSCRIBER`` holds a QoS 1 message
    unacknowledged (in flight: to be stored) that its shard has not stored yet."""
    subscriber, inbox = paho_client(
        broker, SUBSCRIBER, 4, clean=False, configure=lambda client: client.manual_ack_set(True)
    )
    subscribe(subscriber, "held", 1)
    publisher, _ = paho_client(broker, "publisher", 4)
    try:
        with silent(redis):
            publisher.publish("held", b"not stored", qos=1)
            assert inbox.get(timeout=10).payload == b"not stored"
            yield
    finally:
        for client in (subscriber, publisher):
            client.disconnect()
            client.loop_stop()


def gone(pid: int) -> None:
    with_retries(lambda: not alive(pid), GONE_WITHIN)


def test_killing_the_supervisor_ends_every_shard(
    tmp_path: Path, loop: str, redis_server: RedisServer
) -> None:
    node = redis_broker(tmp_path, loop, redis_server, 2, SHUTDOWN_TIMEOUT)
    try:
        with unstored_delivery(node, redis_server):
            shards = list(shard_pids(node).values())
            node.process.kill()
            node.process.wait()
            for pid in shards:
                gone(pid)
    finally:
        node.stop()


def test_sigterm_ends_a_shard_within_the_timeout_and_the_node_stops(
    tmp_path: Path, loop: str, redis_server: RedisServer
) -> None:
    node = redis_broker(tmp_path, loop, redis_server, 2, SHUTDOWN_TIMEOUT)
    try:
        with unstored_delivery(node, redis_server):
            owner = shard_of(SUBSCRIBER, 2)
            pid = shard_pids(node)[owner]
            os.kill(pid, signal.SIGTERM)
            gone(pid)
            with_retries(lambda: f"shard died shard={owner} pid={pid} " in node.log())
            log = node.log()
            assert f"{CUT_SHORT} shard={owner}" in log
            assert 'status="exited with status 1"' in log
            # The shard restarts on a store that does not answer; the node's stop
            # still ends, and takes every shard with it.
            shards = node.shards()
            node.process.terminate()
            assert node.process.wait(GONE_WITHIN) == 1
            assert not any(alive(shard) for shard in shards)
    finally:
        node.stop()


def test_sigterm_ends_a_broker_of_one_process_within_the_timeout(
    tmp_path: Path, loop: str, redis_server: RedisServer
) -> None:
    broker = redis_broker(tmp_path, loop, redis_server, 1, SHUTDOWN_TIMEOUT)
    try:
        with unstored_delivery(broker, redis_server):
            broker.process.terminate()
            assert broker.process.wait(GONE_WITHIN) == 1
        assert CUT_SHORT in broker.log()
    finally:
        broker.stop()


def test_a_second_sigterm_ends_the_stop_at_once(
    tmp_path: Path, loop: str, redis_server: RedisServer
) -> None:
    broker = redis_broker(tmp_path, loop, redis_server, 1, 600)
    try:
        with unstored_delivery(broker, redis_server):
            broker.process.terminate()
            with_retries(lambda: "reason=server_shutdown" in broker.log())  # stopping
            broker.process.terminate()
            assert broker.process.wait(GONE_WITHIN) == 1
        assert 'stop cut short, exiting now reason="second SIGTERM"' in broker.log()
    finally:
        broker.stop()


def test_the_kernel_signals_a_shard_whose_supervisor_died() -> None:
    # The backstop alone, no link: a process that asked for it gets SIGTERM when its
    # parent dies.
    orphan = (
        "import os, time\n"
        "from ferromq.shard.link import stop_with_supervisor\n"
        "stop_with_supervisor(os.getppid())\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(600)\n"
    )
    spawn = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {orphan!r}])"
    parent = subprocess.Popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        gone(child)
    finally:
        parent.kill()
        parent.wait()


def test_a_shard_whose_supervisor_died_before_it_asked_stops_itself() -> None:
    # The race the backstop has: the supervisor is gone before the request, so the
    # kernel will never send the signal; the shard sees another parent and stops.
    code = "from ferromq.shard.link import stop_with_supervisor; stop_with_supervisor(-1)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == -signal.SIGTERM
