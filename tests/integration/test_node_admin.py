"""The admin listener, `/metrics` and `$SYS` of a node: a real `ferromq serve --workers 2`
(a supervisor and two shard processes) with `[admin]` and a token, real paho clients
owned by each shard, requests over HTTP and `ferromq ctl`.

What a user would notice: clients whose sessions live on different shards are one
listing, paged across the shards, counted once in `/stats`; a kick reaches a client on
either shard as DISCONNECT 0x98; `/metrics` gives the node's totals and each shard's
series with a `shard` label, which add up to them; `/readyz` shows each shard ready;
`ferromq ctl` works against the node as against one broker; `$SYS/broker/` counts the
node's clients and `$SYS/broker/shard/<K>/` each shard's.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Protocol

import paho.mqtt.client as paho
import pytest

from ferromq._core import shard_of
from tests.conftest import RunningBroker, start_broker
from tests.support.admin_client import (
    TOKEN,
    Samples,
    api,
    disconnects,
    get,
    ok,
    paged_client_ids,
    scrape,
    token_config,
    value,
)
from tests.support.paho_clients import paho_client, stop, subscribe
from tests.support.services import free_port
from tests.support.waiting import wait_for

# Its brokers set their own number of shards: the suite at two shards skips it.
pytestmark = pytest.mark.own_workers

WORKERS = 2


class NodeStarter(Protocol):
    def __call__(self, loop: str, extra: str, admin: str = "") -> tuple[RunningBroker, int]: ...


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeStarter]:
    """Start nodes of two shards (loop, config, and keys of ``[admin]``) with an admin
    listener (token); each is stopped when the test ends. Gives the node and its admin
    port."""
    nodes: list[RunningBroker] = []

    def start(loop: str, extra: str, admin: str = "") -> tuple[RunningBroker, int]:
        port = free_port()
        serving = f"admin listening address=127.0.0.1:{port}"
        config = f"[server]\nworkers = {WORKERS}\n" + token_config(port, extra, admin)
        nodes.append(
            start_broker(tmp_path, loop, config, ready=lambda running: serving in running.log())
        )
        return nodes[-1], port

    yield start
    for running in nodes:
        running.stop()


def owned_ids(prefix: str, per_shard: int) -> list[str]:
    """``per_shard`` client ids owned by each shard, shard 0's first."""
    ids: list[str] = []
    for shard in range(WORKERS):
        found = (
            f"{prefix}-{n}" for n in range(1000) if shard_of(f"{prefix}-{n}", WORKERS) == shard
        )
        ids += [next(found) for _ in range(per_shard)]
    return ids


def by_shard(samples: Samples, name: str, **labels: str) -> list[float]:
    return [value(samples, name, **labels, shard=str(k)) for k in range(WORKERS)]


def _gone(port: int, client_id: str) -> bool:
    """Whether the node's API no longer knows ``client_id``."""
    return api(port, "GET", f"/clients/{client_id}")[0] == 404


def test_clients_of_both_shards_are_one_listing_and_kicked(node: NodeStarter, loop: str) -> None:
    broker, port = node(loop, "")
    ids = owned_ids("listed", 2)
    clients = {client_id: paho_client(broker, client_id, 5)[0] for client_id in ids}
    # Each shard holds the sessions it owns.
    sessions = by_shard(scrape(port, TOKEN), "ferromq_sessions_current", state="online")
    assert sessions == [2.0, 2.0]

    status, page = api(port, "GET", "/clients")
    assert status == 200 and page["next"] is None
    assert sorted(item["client_id"] for item in page["items"]) == sorted(ids)
    assert api(port, "GET", "/stats")[1]["clients_connected"] == len(ids)
    # One at a time: the pages cross from shard 0 to shard 1 and list each client once.
    assert sorted(paged_client_ids(port, 1)) == sorted(ids)
    status, page = api(port, "GET", "/sessions?client_id_prefix=listed&limit=3")
    assert len(page["items"]) == 3 and page["next"] is not None

    for client_id in (ids[0], ids[-1]):  # one on each shard
        status, detail = api(port, "GET", f"/clients/{client_id}")
        assert status == 200 and detail["connected"]
        reasons = disconnects(clients[client_id])
        assert api(port, "DELETE", f"/clients/{client_id}") == (204, None)
        assert reasons.get(timeout=5) == "Administrative action"
        wait_for(partial(_gone, port, client_id), "kicked")
    status, page = api(port, "GET", "/clients")
    assert sorted(item["client_id"] for item in page["items"]) == sorted(ids[1:-1])
    status, ready = api(port, "GET", "/openapi.json")
    assert status == 200 and "/clients/{client_id}" in ready["paths"]
    status, body = get(port, "/readyz", TOKEN)
    readiness = json.loads(body)
    assert status == 200 and readiness["status"] == "ready"
    assert [shard["status"] for shard in readiness["shards"]] == ["ready"] * WORKERS
    status, shards = api(port, "GET", "/shards")
    assert [(item["shard"], item["ready"]) for item in shards["items"]] == [(0, True), (1, True)]
    assert [item["stats"]["clients_connected"] for item in shards["items"]] == [1, 1]
    for client in clients.values():
        stop(client)


def test_metrics_are_the_node_totals_with_each_shard(node: NodeStarter, loop: str) -> None:
    broker, port = node(loop, "")
    before = scrape(port, TOKEN)
    ids = owned_ids("metered", 1)
    subscriber, inbox = paho_client(broker, ids[0], 5)
    subscribe(subscriber, "metered/#", 1)
    publisher, _ = paho_client(broker, ids[1], 5)
    count = 10
    for n in range(count):
        publisher.publish("metered/t", b"%d" % n, qos=1).wait_for_publish(5)
    publisher.publish("metered/kept", b"retained!", qos=1, retain=True).wait_for_publish(5)
    for _ in range(count + 1):
        inbox.get(timeout=5)
    # Every shard holds the retained message; the node holds it once.
    retained = len("metered/kept") + len(b"retained!")
    wait_for(
        lambda: by_shard(scrape(port, TOKEN), "ferromq_retained_bytes") == [retained] * WORKERS,
        "the retained message on every shard",
    )
    after = scrape(port, TOKEN)

    def rose(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert rose("ferromq_messages_received_total") == count + 1
    assert rose("ferromq_retained_bytes") == retained
    assert value(after, "ferromq_store_up") == 1 and by_shard(after, "ferromq_store_up") == [1, 1]
    assert rose("ferromq_packets_received_total", type="connect") == 2
    assert value(after, "ferromq_sessions_current", state="online") == 2
    assert value(after, "ferromq_subscriptions_current") == 1
    for name, labels in (
        ("ferromq_messages_received_total", {}),
        ("ferromq_messages_sent_total", {}),
        ("ferromq_packets_received_total", {"type": "publish"}),
        ("ferromq_sessions_current", {"state": "online"}),
        ("ferromq_eventloop_lag_seconds_count", {}),
    ):
        assert value(after, name, **labels) == sum(by_shard(after, name, **labels)), name
    # The publisher's messages arrived on shard 1, which owns it.
    assert by_shard(after, "ferromq_messages_received_total")[1] >= count + 1
    assert by_shard(after, "ferromq_node_shard_up") == [1.0] * WORKERS
    assert value(after, "ferromq_node_shards") == WORKERS
    for client in (subscriber, publisher):
        stop(client)


def test_ctl_operates_the_node(node: NodeStarter, loop: str) -> None:
    broker, port = node(loop, "")
    ids = owned_ids("ctl", 1)
    clients = {client_id: paho_client(broker, client_id, 5) for client_id in ids}
    listed = json.loads(ok(port, "clients", "list", "--json"))
    assert sorted(item["client_id"] for item in listed) == sorted(ids)
    rows = [line.split() for line in ok(port, "shards").splitlines()]
    assert rows[0][:3] == ["SHARD", "READY", "CLIENTS_CONNECTED"]
    assert [row[:3] for row in rows[1:]] == [["0", "True", "1"], ["1", "True", "1"]]

    inbox = clients[ids[0]][1]
    assert ok(port, "subscriptions", "add", ids[0], "ops/#", "--qos", "1").strip() == (
        f"subscribed {ids[0]} to ops/#"
    )
    assert "published to ops/kept" in ok(port, "publish", "ops/kept", "hello", "--retain")
    message = inbox.get(timeout=5)
    assert (message.topic, message.payload) == ("ops/kept", b"hello")
    wait_for(lambda: "ops/kept" in ok(port, "retained", "list"), "retained on the node")
    assert "payload: hello" in ok(port, "retained", "show", "ops/kept")

    kicked, _ = clients[ids[1]]
    reasons = disconnects(kicked)
    assert ok(port, "clients", "kick", ids[1]).strip() == f"kicked {ids[1]}"
    assert reasons.get(timeout=5) == "Administrative action"
    assert ok(port, "retained", "delete", "ops/kept").strip() == (
        "cleared the retained message of ops/kept"
    )
    for client, _ in clients.values():
        stop(client)


def sys_values(client: paho.Client, topics: set[str]) -> Callable[[], dict[str, int]]:
    """The latest value of each $SYS topic ``client`` receives."""
    latest: dict[str, int] = {}

    def keep(_c: paho.Client, _u: object, message: paho.MQTTMessage) -> None:
        if message.topic in topics:
            latest[message.topic] = int(message.payload.split()[0])

    client.on_message = keep
    return lambda: dict(latest)


def test_sys_reports_the_node_and_each_shard(node: NodeStarter, loop: str) -> None:
    broker, _ = node(loop, "[sys]\ninterval = 1\n")
    ids = owned_ids("sys", 2)
    clients = [paho_client(broker, client_id, 5)[0] for client_id in ids]
    watcher = clients[-1]  # on shard 1: shard 0's node tree reaches it live
    node_topic = "$SYS/broker/clients/connected"
    shard_topics = [f"$SYS/broker/shard/{k}/clients/connected" for k in range(WORKERS)]
    latest = sys_values(watcher, {node_topic, *shard_topics})
    subscribe(watcher, "$SYS/broker/#", 0)
    wait_for(
        lambda: (
            latest().get(node_topic) == len(ids)
            and [latest().get(topic) for topic in shard_topics] == [2, 2]
        ),
        "the node's clients and each shard's in $SYS",
    )
    for client in clients:
        stop(client)


def test_a_shard_that_does_not_answer_is_named_and_the_others_serve(
    node: NodeStarter, loop: str
) -> None:
    # No $SYS among the retained; a second for a shard to answer (5 by default).
    broker, port = node(loop, "[sys]\ninterval = 0\n", "shard_timeout = 1\n")
    publisher, _ = paho_client(broker, owned_ids("kept", 1)[1], 5)
    publisher.publish("kept/t", b"still here", qos=1, retain=True).wait_for_publish(5)
    wait_for(
        lambda: by_shard(scrape(port, TOKEN), "ferromq_retained_messages") == [1, 1],
        "the retained message on both shards",
    )
    shard_0 = int(re.search(r"shard started shard=0 pid=(\d+)", broker.log())[1])  # type: ignore[index]
    os.kill(shard_0, signal.SIGSTOP)  # alive, and answering nothing
    try:
        status, body = get(port, "/readyz", TOKEN)
        shards = json.loads(body)["shards"]
        assert status == 503 and [shard["status"] for shard in shards] == ["unreachable", "ready"]
        status, error = api(port, "GET", "/clients")
        assert status == 503 and error["error"].startswith("shard 0 did not answer")
        # Retained messages are on every shard: shard 1 answers for the node.
        status, kept = api(port, "GET", "/retained/kept%2Ft")
        assert status == 200 and kept["payload"] == "still here"
        samples = scrape(port, TOKEN)
        assert by_shard(samples, "ferromq_node_shard_up") == [0, 1]
        status, listed = api(port, "GET", "/shards")
        assert [(item["shard"], item["ready"]) for item in listed["items"]] == [
            (0, False),
            (1, True),
        ]
        assert listed["items"][0]["error"].startswith("shard 0 did not answer")
        assert value(samples, "ferromq_retained_messages") == 1
    finally:
        os.kill(shard_0, signal.SIGCONT)
    stop(publisher)
