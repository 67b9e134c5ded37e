"""``ferromq serve --workers N``: a supervisor and N shard processes behaving as one
broker (python/ferromq/node/supervisor.py, docs/shards.md), under both loops.

- Two workers are two shard processes, children of the one ``ferromq serve`` the user
  started, each on its own CPU and logging with ``shard=K``; clients connect, publish and subscribe,
  including between clients the kernel spread over both shards (the bus).
- SIGTERM stops the node with status 0 and leaves no process behind, SIGHUP reloads
  every shard; ``kill -9`` of the supervisor stops its shards too; the pid file holds
  the supervisor's pid.
- A shard killed with SIGKILL is logged in one line and started again; clients
  reconnect, a persistent one to its session; a shard that keeps dying stops the node
  with status 1.
- Start-up failures stay one line with today's status: a port in use (4), a store
  another node holds (3).
- A restart with another number of workers restores every session, and records the
  store's new layout.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conftest import RunningBroker, ferromq_command, start_broker
from tests.support.paho_clients import paho_client, round_trip, subscribe
from tests.support.services import free_port
from tests.support.shards import alive, node_serving, shard_pids, with_retries

# Its brokers set their own number of shards: the suite at two shards skips it.
pytestmark = pytest.mark.own_workers


def dead(pid: int) -> bool:
    return not alive(pid)


def restarted(node: RunningBroker, pid: int) -> bool:
    """Whether shard 0 of ``node`` runs as another process than ``pid`` now."""
    return shard_pids(node)[0] != pid


def shards_that_logged(log: str, message: str) -> set[int]:
    """The shards with a line holding ``message`` (a shard's lines end ``shard=K``)."""
    return {
        int(line.rsplit(" shard=", 1)[1])
        for line in log.splitlines()
        if message in line and " shard=" in line and line.rsplit(" shard=", 1)[1].isdigit()
    }


def start_node(
    tmp_path: Path, loop: str, workers: int = 2, env: dict[str, str] | None = None
) -> RunningBroker:
    return start_broker(
        tmp_path,
        loop,
        env={"FERROMQ_SERVER__WORKERS": str(workers), **(env or {})},
        ready=node_serving if workers > 1 else None,  # one worker: no supervisor
    )


@pytest.fixture
def nodes() -> Iterator[list[RunningBroker]]:
    """Nodes a test starts, stopped (and their shards checked gone) however it ends."""
    started: list[RunningBroker] = []
    yield started
    for running in started:
        shards = children(running.process.pid)
        running.stop()
        for pid in shards:
            with_retries(partial(dead, pid))


def children(pid: int) -> set[int]:
    """The live child processes of ``pid``."""
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            found |= {int(child) for child in text.split()}
    except FileNotFoundError:
        pass
    return {child for child in found if alive(child)}


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]


def shard_of_connection(running: RunningBroker, client: paho.Client) -> int:
    """The shard serving ``client``'s connection: the shard process holding the socket
    whose peer is the client's local port (/proc/net/tcp and /proc/<pid>/fd)."""
    sock = client.socket()
    assert isinstance(sock, socket.socket)
    client_port = sock.getsockname()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == running.port and int(remote.split(":")[1], 16) == (
            client_port
        ):
            inode = fields[9]
    assert inode is not None, "the client's connection is not in /proc/net/tcp"
    for shard, pid in shard_pids(running).items():
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return shard
            except FileNotFoundError:
                continue
    raise AssertionError("no shard holds the client's connection")


def test_two_workers_are_two_shard_processes_serving_clients(
    tmp_path: Path, loop: str, nodes: list[RunningBroker]
) -> None:
    node = start_node(tmp_path, loop)
    nodes.append(node)
    shards = children(node.process.pid)
    assert len(shards) == 2
    assert set(shard_pids(node).values()) == shards
    for pid in shards:
        assert command_line(pid)[1:4] == ["-m", "ferromq", "serve"]
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:  # each shard on its own CPU of the mask
        assert {k: os.sched_getaffinity(pid) for k, pid in shard_pids(node).items()} == {
            0: {cpus[0]},
            1: {cpus[1]},
        }
    log = node.log()
    assert shards_that_logged(log, "ferromq.listener listening ") == {0, 1}
    # One client publishing to itself stays on one shard.
    client, inbox = paho_client(node, "self", 4)
    subscribe(client, "echo", 1)
    client.publish("echo", b"hello", qos=1).wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"hello"
    client.disconnect()
    client.loop_stop()


def test_clients_on_different_shards_reach_each_other(
    tmp_path: Path, loop: str, nodes: list[RunningBroker]
) -> None:
    node = start_node(tmp_path, loop)
    nodes.append(node)
    # The kernel spreads connections by their addresses: open pairs until a
    # subscriber and a publisher sit on different shards.
    for attempt in range(20):
        sub, inbox = paho_client(node, f"sub-{attempt}", 5)
        pub, _ = paho_client(node, f"pub-{attempt}", 5)
        if shard_of_connection(node, sub) != shard_of_connection(node, pub):
            round_trip(sub, inbox, pub, 1)
            return
        for client in (sub, pub):
            client.disconnect()
            client.loop_stop()
    raise AssertionError("20 pairs of connections all landed on one shard")


def test_sigterm_stops_the_node_cleanly_and_leaves_no_process(tmp_path: Path, loop: str) -> None:
    node = start_node(tmp_path, loop)
    shards = children(node.process.pid)
    assert len(shards) == 2
    assert node.stop() == 0
    assert not any(alive(pid) for pid in shards)
    node.wait_for_log("node stopped workers=2")


def test_sigterm_to_every_process_at_once_is_a_clean_stop(tmp_path: Path, loop: str) -> None:
    # As systemd stops a unit (KillMode=control-group): the shards get SIGTERM from it
    # and from the supervisor.
    port = free_port()
    with (tmp_path / "node.log").open("wb") as log:
        process = subprocess.Popen(
            [*ferromq_command(), "serve", "--workers", "2", "-p", str(port), "--loop", loop],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "FERROMQ_STORAGE__PATH": str(tmp_path / "data")},
            start_new_session=True,
        )
    try:
        with_retries(lambda: "node serving" in (tmp_path / "node.log").read_text())
        shards = children(process.pid)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(30) == 0, (tmp_path / "node.log").read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert not any(alive(pid) for pid in shards)


def test_sighup_reloads_every_shard(tmp_path: Path, loop: str, nodes: list[RunningBroker]) -> None:
    node = start_node(tmp_path, loop)
    nodes.append(node)
    node.process.send_signal(signal.SIGHUP)
    with_retries(lambda: node.log().count("configuration reloaded") == 2)
    log = node.log()
    assert shards_that_logged(log, "configuration reloaded ") == {0, 1}


def test_the_shards_stop_when_the_supervisor_is_killed(tmp_path: Path, loop: str) -> None:
    node = start_node(tmp_path, loop)
    shards = children(node.process.pid)
    node.process.kill()
    node.process.wait()
    for pid in shards:
        with_retries(partial(dead, pid))


def test_a_killed_shard_is_restarted_and_its_client_gets_its_session_back(
    tmp_path: Path, loop: str, nodes: list[RunningBroker]
) -> None:
    node = start_node(tmp_path, loop)
    nodes.append(node)
    client, inbox = paho_client(node, "survivor", 4, clean=False)
    subscribe(client, "alerts", 1)
    victim = shard_of_connection(node, client)
    pid = shard_pids(node)[victim]
    reconnected: queue.Queue[bool] = queue.Queue()
    client.on_connect = lambda _c, _u, flags, _rc, _p: reconnected.put(flags.session_present)
    os.kill(pid, signal.SIGKILL)
    with_retries(lambda: "shard restarted" in node.log())
    log = node.log()
    assert f"ERROR ferromq.node shard died shard={victim} pid={pid} " in log
    assert 'status="killed by SIGKILL"' in log
    assert shard_pids(node)[victim] != pid
    assert len(children(node.process.pid)) == 2
    # paho reconnects by itself; the session (and its subscription) is there.
    assert reconnected.get(timeout=15) is True
    client.publish("alerts", b"after the restart", qos=1).wait_for_publish(5)
    assert inbox.get(timeout=5).payload == b"after the restart"
    client.disconnect()
    client.loop_stop()


def test_a_shard_that_keeps_dying_stops_the_node(tmp_path: Path, loop: str) -> None:
    node = start_node(tmp_path, loop)
    for death in range(5):
        pid = shard_pids(node)[0]
        with_retries(partial(alive, pid))
        os.kill(pid, signal.SIGKILL)
        if death < 4:
            with_retries(partial(restarted, node, pid))
    assert node.process.wait(30) == 1
    node.wait_for_log("shard keeps dying, node stopping shard=0 deaths=5")


def test_the_pid_file_holds_the_supervisor(tmp_path: Path, loop: str) -> None:
    pid_file = tmp_path / "ferromq.pid"
    port = free_port()
    with (tmp_path / "node.log").open("wb") as log:
        process = subprocess.Popen(
            [
                *ferromq_command(),
                *("serve", "--workers", "2", "-p", str(port), "--loop", loop),
                *("--pid-file", str(pid_file)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "FERROMQ_STORAGE__PATH": str(tmp_path / "data")},
        )
    try:
        with_retries(pid_file.exists)
        assert pid_file.read_text() == f"{process.pid}\n"
        assert "node serving" in (tmp_path / "node.log").read_text()
    finally:
        process.terminate()
        assert process.wait(30) == 0
    assert not pid_file.exists()


def one_line_failure(result: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    assert result.returncode == status, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert all(word in errors[0] for word in words), errors[0]


def serve_briefly(
    tmp_path: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``ferromq serve *args`` that is expected to fail at start."""
    return subprocess.run(
        [*ferromq_command(), "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FERROMQ_STORAGE__PATH": str(tmp_path / "data"), **env},
    )


def test_a_port_in_use_is_one_line_and_status_4(tmp_path: Path, loop: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve_briefly(tmp_path, "--workers", "2", "-p", str(port), "--loop", loop, env={})
    one_line_failure(result, 4, f"127.0.0.1:{port}", "listeners[0]")
    assert not (tmp_path / "data").exists()


def test_a_store_another_node_holds_is_one_line_and_status_3(
    tmp_path: Path, loop: str, nodes: list[RunningBroker]
) -> None:
    store = str(tmp_path / "shared")
    nodes.append(start_node(tmp_path, loop, env={"FERROMQ_STORAGE__PATH": store}))
    for workers in ("1", "2"):  # a node of one broker or of shards: refused alike
        result = serve_briefly(
            tmp_path,
            *("--workers", workers, "-p", str(free_port()), "--loop", loop),
            env={"FERROMQ_STORAGE__PATH": store},
        )
        one_line_failure(result, 3, "embedded store", "in use by another ferromq")


def test_a_store_the_shards_cannot_reach_is_one_line_and_status_3(
    tmp_path: Path, loop: str
) -> None:
    # Every shard fails to connect to Redis; the node says so once.
    env = {
        "FERROMQ_STORAGE__BACKEND": "redis",
        "FERROMQ_REDIS__URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    result = serve_briefly(
        tmp_path, "--workers", "2", "-p", str(free_port()), "--loop", loop, env=env
    )
    one_line_failure(result, 3, "redis")


def test_a_bad_workers_value_is_one_line_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    config.write_text('[server]\nworkers = "many"\n')
    result = serve_briefly(tmp_path, "--config", str(config), env={})
    one_line_failure(result, 2, "server.workers", '"many"')
    result = serve_briefly(tmp_path, "--workers", "0", env={})
    one_line_failure(result, 2, "--workers", '"0"')


@pytest.mark.parametrize("counts", [(1, 2, 1), (2, 3, 2)])
def test_a_restart_with_another_number_of_workers_keeps_every_session(
    tmp_path: Path, loop: str, counts: tuple[int, int, int]
) -> None:
    store = tmp_path / "data"
    env = {"FERROMQ_STORAGE__PATH": str(store)}
    clients = [f"device-{i}" for i in range(8)]

    def node(workers: int) -> RunningBroker:
        return start_node(tmp_path, loop, workers, env)

    first = node(counts[0])
    for client_id in clients:
        client, _ = paho_client(first, client_id, 4, clean=False)
        subscribe(client, f"to/{client_id}", 1)
        client.disconnect()
        client.loop_stop()
    publisher, _ = paho_client(first, "publisher", 4)
    publisher.publish("status/door", b"open", qos=1, retain=True).wait_for_publish(5)
    for client_id in clients:
        publisher.publish(f"to/{client_id}", client_id.encode(), qos=1).wait_for_publish(5)
    publisher.disconnect()
    publisher.loop_stop()
    assert first.stop() == 0
    for workers in counts[1:]:
        again = node(workers)
        try:
            for client_id in clients:
                client, inbox = paho_client(again, client_id, 4, clean=False)
                if workers == counts[1]:  # the first restart delivers what was queued
                    assert inbox.get(timeout=5).payload == client_id.encode(), client_id
                client.publish(f"to/{client_id}", b"live", qos=1).wait_for_publish(5)
                assert inbox.get(timeout=5).payload == b"live", client_id
                client.disconnect()
                client.loop_stop()
            late, late_inbox = paho_client(again, f"late-{workers}", 4)
            subscribe(late, "status/#", 1)
            assert late_inbox.get(timeout=5).payload == b"open"  # retained on every shard
            late.disconnect()
            late.loop_stop()
        finally:
            assert again.stop() == 0
        manifest = json.loads((store / "layout.json").read_text())
        assert manifest == {"workers": workers}
        layouts = sorted(p.name for p in store.iterdir() if p.name.startswith("workers-"))
        assert layouts == ([] if workers == 1 else [f"workers-{workers}"])
        assert any(store.glob("journal-*.log")) == (workers == 1)
