"""The cluster on the admin side, from real memberships on a real Redis.

A broker's real admin listener (over HTTP on loopback, with a token) serves a broker
whose ``cluster`` is a small stand-in for the lead's ``ClusterNode`` (its node id, a
real :class:`~ferromq.cluster.membership.Membership`, fixed figures). What an operator
notices: ``GET /api/v1/cluster`` lists every node with its state (alive, dead,
adopted by a survivor) in the shape its OpenAPI document gives, and answers 404 "not
clustered" on a broker without ``[cluster]``; ``ferromq ctl cluster`` prints the same
as a table with this node's figures (``--json``: the API's body) and exits 1 with one
line when not clustered; ``/metrics`` has the cluster series; ``/readyz`` says the
node's id and whether its heartbeat reaches Redis; the ``$SYS/broker/cluster/``
topics count the nodes in each state.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest
from redis.asyncio import Redis
from tests.support.services import RedisServer, free_ports

from ferromq.admin.schema import check
from ferromq.admin.views import CLUSTER
from ferromq.broker import Broker
from ferromq.cli import main as cli_main
from ferromq.cluster.figures import NODE_FIGURES, ClusterFigures
from ferromq.cluster.lease import Lease
from ferromq.cluster.membership import MemberInfo, Membership
from ferromq.config import AdminConfig, Config, ListenerConfig, SysConfig

TOKEN = "cluster-admin-token"
FIGURES = ClusterFigures(
    batches_sent=7,
    batches_received=5,
    bytes_sent=4096,
    bytes_received=2048,
    remote_filters=3,
    subscriptions_sent=2,
    kafka_healthy=True,
    held_acks=1,
)


@dataclass
class StandInNode:
    """What the admin side reads of the lead's ClusterNode."""

    node_id: str
    membership: Membership

    def figures(self) -> ClusterFigures:
        return FIGURES


def _lease_lost() -> NoReturn:
    raise AssertionError("a member of this test lost its lease")


def lease(node_id: str, seconds: float = 3.0) -> Lease:
    """A member's lease that fails the test rather than end the process."""
    return Lease(node_id, seconds, _lease_lost)


def info(node_id: str, started: float, admin: str | None) -> MemberInfo:
    return MemberInfo(node_id, started, 100, (f"127.0.0.1:{1883 + ord(node_id[0])}",), admin, "9.9")


# What each node's heartbeat says of its traffic.
A_FIGURES = dict.fromkeys(NODE_FIGURES, 1) | {"clients_connected": 10, "publish_received": 500}
B_FIGURES = dict.fromkeys(NODE_FIGURES, 2) | {"clients_connected": 5}


@contextlib.asynccontextmanager
async def three_nodes(redis_url: str) -> AsyncIterator[tuple[Redis, Membership, str]]:
    """Nodes a (alive), b (alive) and c (dead, adopted by a) in a fresh prefix;
    yields the client, a's membership and the prefix."""
    redis = Redis.from_url(redis_url)
    kp = f"test-{uuid.uuid4().hex[:10]}:cluster:"
    a = Membership(
        redis, kp, info("a", 1_700_000_000.5, "127.0.0.1:8081"), lease("a"), figures=A_FIGURES.copy
    )
    b = Membership(redis, kp, info("b", 1_700_000_100.0, None), lease("b"), figures=B_FIGURES.copy)
    c = Membership(
        redis, kp, info("c", 1_700_000_200.0, "127.0.0.1:8083"), lease("c"), figures=A_FIGURES.copy
    )
    for node in (a, b, c):
        await node.join()
    await c.leave()
    await redis.set(kp + "adopted:c", "a")
    try:
        yield redis, a, kp
    finally:
        await a.leave()
        await b.leave()
        await redis.aclose()


@contextlib.asynccontextmanager
async def admin_of(cluster: StandInNode | None) -> AsyncIterator[int]:
    """A real broker in this loop (MQTT and admin listeners on free ports, ``$SYS``
    every second), its ``cluster`` the given one once started (the stand-in is not
    started as a ClusterNode is); yields the admin port."""
    mqtt, port = free_ports(2)
    admin = AdminConfig(enabled=True, port=port, token=TOKEN)
    config = Config(listeners=(ListenerConfig(port=mqtt),), admin=admin, sys=SysConfig(1))
    broker = Broker(config)
    await broker.start()
    broker.cluster = cluster  # type: ignore[assignment]
    try:
        yield port
    finally:
        broker.cluster = None  # the test's memberships leave by themselves
        await broker.stop()


def get(port: int, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def ctl(port: int, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(["ctl", "--url", f"http://127.0.0.1:{port}", "--token", TOKEN, *args])
    return status, out.getvalue(), err.getvalue()


async def blocking(call: Callable[..., Any], *args: Any) -> Any:
    """A blocking client call (urllib, the ctl) off the loop serving the listener."""
    return await asyncio.to_thread(call, *args)


EXPECTED_NODES = [
    {
        "node_id": "a",
        "node": "a",
        "state": "alive",
        "adopted_by": None,
        "started": 1_700_000_000.5,
        "pid": 100,
        "mqtt": ["127.0.0.1:1980"],
        "admin": "127.0.0.1:8081",
        "version": "9.9",
        "figures": A_FIGURES,
    },
    {
        "node_id": "b",
        "node": "b",
        "state": "alive",
        "adopted_by": None,
        "started": 1_700_000_100.0,
        "pid": 100,
        "mqtt": ["127.0.0.1:1981"],
        "admin": None,
        "version": "9.9",
        "figures": B_FIGURES,
    },
    {
        "node_id": "c",
        "node": "c",
        "state": "adopted",
        "adopted_by": "a",
        "started": 1_700_000_200.0,
        "pid": 100,
        "mqtt": ["127.0.0.1:1982"],
        "admin": "127.0.0.1:8083",
        "version": "9.9",
        "figures": {},
    },
]


def test_api_lists_the_nodes_with_their_state_as_documented(redis_url: str) -> None:
    async def main() -> None:
        async with three_nodes(redis_url) as (_, a, _kp), admin_of(StandInNode("a", a)) as port:
            status, body = await blocking(get, port, "/api/v1/cluster")
            assert status == 200, body
            answer = json.loads(body)
            check(answer, CLUSTER, "answer")
            assert answer == {
                "node_id": "a",
                "nodes": EXPECTED_NODES,
                "figures": {
                    "batches_sent": 7,
                    "batches_received": 5,
                    "bytes_sent": 4096,
                    "bytes_received": 2048,
                    "remote_filters": 3,
                    "subscriptions_sent": 2,
                    "kafka_healthy": True,
                    "held_acks": 1,
                },
                # a and b are alive; c, dead, counts for nothing
                "totals": dict.fromkeys(NODE_FIGURES, 3)
                | {"clients_connected": 15, "publish_received": 502},
            }
            status, body = await blocking(get, port, "/api/v1/openapi.json")
            document = json.loads(body)["paths"]["/cluster"]["get"]
            assert set(document["responses"]) >= {"200", "404", "503"}
            status, body = await blocking(get, port, "/readyz")
            assert json.loads(body)["cluster"] == {"state": "ok", "node_id": "a"}

    asyncio.run(main())


def test_ctl_cluster_prints_the_nodes_and_this_nodes_figures(redis_url: str) -> None:
    async def main() -> None:
        async with three_nodes(redis_url) as (_, a, _kp), admin_of(StandInNode("a", a)) as port:
            status, out, err = await blocking(ctl, port, "cluster")
            assert status == 0, err
            lines = out.splitlines()
            assert lines[0].split() == ["NODE", "STATE", "STARTED", "MQTT", "ADMIN", "ADOPTED_BY"]
            assert lines[1].split() == [
                "a",
                "alive",
                "2023-11-14T22:13:20+00:00",
                "127.0.0.1:1980",
                "127.0.0.1:8081",
                "-",
            ]
            assert lines[2].split()[:2] == ["b", "alive"] and lines[2].split()[4:] == ["-", "-"]
            assert lines[3].split()[:2] == ["c", "adopted"] and lines[3].split()[-1] == "a"
            assert "this node: a" in lines and "bytes_sent: 4096" in lines
            assert "kafka_healthy: True" in lines and "held_acks: 1" in lines
            status, out, err = await blocking(ctl, port, "cluster", "--json")
            assert status == 0 and json.loads(out)["nodes"] == EXPECTED_NODES

    asyncio.run(main())


def test_not_clustered_is_a_404_and_a_ctl_refusal() -> None:
    async def main() -> None:
        async with admin_of(None) as port:
            status, body = await blocking(get, port, "/api/v1/cluster")
            assert (status, json.loads(body)) == (404, {"error": "not clustered"})
            status, out, err = await blocking(ctl, port, "cluster")
            assert (status, out, err) == (1, "", "ferromq ctl: 404 not clustered\n")
            status, body = await blocking(get, port, "/readyz")
            assert json.loads(body)["cluster"] == {"state": "off"}
            status, body = await blocking(get, port, "/metrics")
            assert b"ferromq_cluster" not in body

    asyncio.run(main())


def test_metrics_have_the_cluster_series(redis_url: str) -> None:
    async def main() -> None:
        async with three_nodes(redis_url) as (_, a, _kp), admin_of(StandInNode("a", a)) as port:
            status, body = await blocking(get, port, "/metrics")
            assert status == 200
            lines = set(body.decode().splitlines())
            for line in (
                'ferromq_cluster_nodes{state="alive"} 2.0',
                'ferromq_cluster_nodes{state="dead"} 0.0',
                'ferromq_cluster_nodes{state="adopted"} 1.0',
                "ferromq_cluster_bytes_sent_total 4096.0",
                "ferromq_cluster_bytes_received_total 2048.0",
                "ferromq_cluster_batches_sent_total 7.0",
                "ferromq_cluster_batches_received_total 5.0",
                "ferromq_cluster_subscriptions_sent_total 2.0",
                "ferromq_cluster_remote_filters 3.0",
                "ferromq_cluster_kafka_up 1.0",
                "ferromq_cluster_held_acks 1.0",
                "ferromq_cluster_redis_up 1.0",
                "ferromq_clients_maximum 0.0",  # the broker's own series are still there
            ):
                assert line in lines, line

    asyncio.run(main())


def test_sys_topics_count_the_nodes_by_state(redis_url: str) -> None:
    async def main() -> None:
        async with three_nodes(redis_url) as (redis, a, kp):
            await redis.delete(kp + "adopted:c")  # c dead, not yet taken over
            async with admin_of(StandInNode("a", a)) as port:
                query = urllib.parse.urlencode({"filter": "$SYS/broker/cluster/#"})
                deadline = time.monotonic() + 15
                while True:  # the next $SYS publication
                    _, body = await blocking(get, port, f"/api/v1/retained?{query}")
                    published = {i["topic"]: i["payload"] for i in json.loads(body)["items"]}
                    if published or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.05)
        assert published == {
            "$SYS/broker/cluster/node_id": "a",
            "$SYS/broker/cluster/nodes/alive": "2",
            "$SYS/broker/cluster/nodes/dead": "1",
            "$SYS/broker/cluster/nodes/adopted": "0",
            **{f"$SYS/broker/cluster/totals/{name}": "3" for name in NODE_FIGURES},
            "$SYS/broker/cluster/totals/clients_connected": "15",
            "$SYS/broker/cluster/totals/publish_received": "502",
        }

    asyncio.run(main())


@pytest.mark.parametrize("path", ["/api/v1/cluster", "/metrics"])
def test_redis_gone_is_a_503_and_no_node_counts(redis_server: RedisServer, path: str) -> None:
    async def main() -> tuple[int, bytes, dict[str, object]]:
        redis = Redis.from_url(redis_server.url)
        a = Membership(redis, "gone:cluster:", info("a", time.time(), None), lease("a", 1.0))
        await a.join()
        async with admin_of(StandInNode("a", a)) as port:
            await blocking(redis_server.stop)
            deadline = time.monotonic() + 15
            while a.healthy:
                assert time.monotonic() < deadline, "the heartbeat never failed"
                await asyncio.sleep(0.05)
            status, body = await blocking(get, port, path)
            ready = json.loads((await blocking(get, port, "/readyz"))[1])
        await a.leave()
        await redis.aclose()
        return status, body, ready

    status, body, ready = asyncio.run(main())
    assert ready["cluster"] == {"state": "failing", "node_id": "a"}
    if path == "/metrics":
        assert status == 200 and b"ferromq_cluster_redis_up 0.0" in body
        assert b"ferromq_cluster_nodes" not in body and b"ferromq_cluster_held_acks 1.0" in body
    else:
        assert status == 503
        assert json.loads(body)["error"].startswith("cluster members unreadable in Redis: ")
