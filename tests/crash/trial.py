"""A crash trial: a real broker (one shard, or a node of shards) killed with SIGKILL
again and again while the clients of `clients.py` stream through it.

A *kill* names what dies, as it dies in production:

- ``process``: the one process of a one-shard broker;
- ``supervisor``: a node's supervisor alone (its shards see their link close and stop
  by themselves; the next start waits for them to be gone);
- ``shard``: one shard of a node, taking turns between the publisher's owner and the
  subscriber's (the supervisor starts it again; the other shard keeps serving). The
  supervisor gives up a shard that dies too often (`DEATHS_ALLOWED` in
  `DEATHS_WINDOW`), so before a kill that would reach that, the node is stopped with
  SIGTERM and started again;
- ``group``: every process of the node at once, as when a machine or container dies.

Each life streams until the subscriber has taken a random number of new messages and
then kills at a random moment of the flows: as the subscriber reads a PUBREL, as it
reads a new message, or between two reads. The trial ends with one life that is not
killed, in which both clients finish every open flow; `Tally` then says what was lost
and what was doubled.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from ferromq._core import shard_of
from ferromq.node.supervisor import DEATHS_ALLOWED, DEATHS_WINDOW
from tests.conftest import RunningBroker, start_broker
from tests.crash.clients import Publisher, Subscriber, Tally, pump, settle

KILLS = ("process", "supervisor", "shard", "group")
REPOSITORY = Path(__file__).resolve().parents[2]  # the plugins' module path


def ids_on_shards(shards: int, across: bool, subscriber_prefix: str = "") -> tuple[str, str]:
    """A publisher and a subscriber client id (starting with ``subscriber_prefix``),
    owned by different shards when ``across`` (their messages then cross the bus),
    else by the same one."""
    publisher = "crash-pub"
    for n in range(1000):
        subscriber = f"{subscriber_prefix}crash-sub-{n}"
        if (shard_of(subscriber, shards) != shard_of(publisher, shards)) == across:
            return publisher, subscriber
    raise AssertionError("no such client id")


def shard_pids(broker: RunningBroker) -> list[int]:
    pid = broker.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in children.read_text().split()] if children.exists() else []


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pids: list[int], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not all(_gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"processes {pids} outlived their node"
        time.sleep(0.02)


class Trial:
    """One broker configuration, its store kept across lives, and the two clients."""

    def __init__(
        self,
        tmp_path: Path,
        shards: int,
        qos: int,
        version: int,
        across: bool = True,
        seed: int = 0,
        redis_url: str | None = None,
        kafka_bootstrap: str | None = None,
        plugin: str | None = None,
    ) -> None:
        self.tmp_path, self.shards = tmp_path, shards
        # With ``plugin`` (module:Class from this repository), every message waits for
        # that plugin's verdict before it is routed and acknowledged.
        self.plugin = plugin
        # The embedded store in the trial's directory, or Redis under a key prefix
        # of the trial's own; with Kafka, the subscriber is an APPLICATION client
        # whose queue is a Kafka topic under a prefix of the trial's own.
        own = f"crash-{os.getpid()}-{id(self)}"
        storage = 'fsync = "batch"\n'
        sections = ""
        subscriber_prefix = ""
        if redis_url is not None:
            storage = 'backend = "redis"\n'
            # Room in the store for the session queue the trial allows (below).
            sections += (
                f'[redis]\nurl = "{redis_url}"\nkey_prefix = "{own}:"\n'
                "max_messages_per_client = 65535\n"
            )
        if kafka_bootstrap is not None:
            subscriber_prefix = "app-"
            storage += (
                f'application_client_prefixes = ["{subscriber_prefix}"]\n'
                'application_store = "kafka"\n'
            )
            sections += (
                f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{own}."\n'
            )
        if plugin is not None:
            sections += f'[[plugins]]\nname = "{plugin}"\n'
        self.store = "[storage]\n" + storage + sections
        self.random = random.Random(seed)
        publisher_id, subscriber_id = ids_on_shards(
            shards, across and shards > 1, subscriber_prefix
        )
        topic = f"crash/{qos}/{version}"
        self.publisher = Publisher(publisher_id, topic, qos, version)
        self.subscriber = Subscriber(subscriber_id, topic, qos, version)
        self.broker: RunningBroker | None = None
        self.kills = 0
        self.deaths: dict[int, list[float]] = {}
        # what each kill hit: (what died, the publisher's last number then)
        self.history: list[tuple[str, int]] = []

    def start(self) -> RunningBroker:
        self.broker = start_broker(
            self.tmp_path,
            "uvloop",
            config_text=f"[server]\nworkers = {self.shards}\n{self.store}",
            env={
                "FERROMQ_STORAGE__PATH": str(self.tmp_path / "data"),
                "FERROMQ_SESSION__QUEUE_LIMIT": "60000",
                "PYTHONPATH": str(REPOSITORY),
            },
        )
        return self.broker

    def run(self, kill: str, kills: int) -> Tally:
        """``kills`` lives each ended by ``kill``, then one that completes every flow."""
        self.start()
        try:
            self._connect(subscribe=True)
            for _ in range(kills):
                self._stream_until_kill(kill)
                self._connect(subscribe=False)
            settle(self.publisher, self.subscriber)
        finally:
            self._close_clients()
            self.broker_running().kill()
        return Tally.of(self.publisher, self.subscriber)

    def _stream_until_kill(self, kill: str) -> None:
        """Stream until a random number of new deliveries, then kill at a random
        moment of the flows; the node serves again (restarted, or its shard restarted)
        when this returns."""
        target = self.random.randint(30, 300)
        moments = ("pubrel", "new", None) if self.publisher.qos == 2 else ("new", None)
        moment = self.random.choice(moments)
        fresh = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stop_at = moment if fresh >= target else None
            try:
                new, stopped = pump(self.publisher, self.subscriber, True, stop_at)
            except (ConnectionError, OSError):
                # A shard restarted under one client: both reconnect, as an
                # application does on a lost connection.
                self._connect(subscribe=False)
                continue
            fresh += new
            if stopped or (fresh >= target and moment is None):
                self._kill(kill)
                return
        raise AssertionError(f"only {fresh} new messages in 30 s ({self.tally()})")

    def _kill(self, kill: str) -> None:
        assert self.broker is not None
        self.kills += 1
        victim = (self.publisher, self.subscriber)[self.kills % 2].client_id
        self.history.append((victim if kill == "shard" else kill, self.publisher.next))
        if kill == "process" or kill == "group":
            self.broker.kill()
            self.start()
        elif kill == "supervisor":
            shards = shard_pids(self.broker)
            self.broker.process.send_signal(signal.SIGKILL)
            self.broker.process.wait(10)
            wait_gone(shards)
            self.start()
        elif kill == "shard":
            owner = (self.publisher, self.subscriber)[self.kills % 2].client_id
            shard = shard_of(owner, self.shards)
            if self._would_be_given_up(shard):
                self.broker.stop()
                self.deaths.clear()
                self.start()
                self._connect(subscribe=False)
            self.deaths.setdefault(shard, []).append(time.monotonic())
            pids = shard_pids(self.broker_running())
            pid = pids[shard_of(owner, self.shards)] if len(pids) == self.shards else None
            assert pid is not None, f"shards {pids}"
            os.kill(pid, signal.SIGKILL)
            _wait_until(lambda: len(shard_pids(self.broker_running())) == self.shards
                        and pid not in shard_pids(self.broker_running()))  # fmt: skip
        else:
            raise ValueError(kill)

    def _would_be_given_up(self, shard: int) -> bool:
        """Whether one more death of ``shard`` now would make the supervisor stop."""
        since = time.monotonic() - DEATHS_WINDOW
        return sum(at > since for at in self.deaths.get(shard, [])) + 1 >= DEATHS_ALLOWED

    def broker_running(self) -> RunningBroker:
        assert self.broker is not None
        return self.broker

    def _connect(self, subscribe: bool) -> None:
        """Both clients (re)connected, retrying while the node restarts."""
        self._close_clients()
        broker = self.broker_running()
        deadline = time.monotonic() + 30
        while True:
            try:
                self.subscriber.connect(broker.host, broker.port, subscribe)
                self.publisher.connect(broker.host, broker.port)
                return
            except (ConnectionError, OSError, TimeoutError, AssertionError):
                self._close_clients()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _close_clients(self) -> None:
        for client in (self.publisher.client, self.subscriber.client):
            if client is not None:
                with contextlib.suppress(OSError):
                    client.close()

    def tally(self) -> Tally:
        return Tally.of(self.publisher, self.subscriber)


def _wait_until(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.05)
