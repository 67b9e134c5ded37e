"""The cluster as an operator sees it, from two real clustered `ferromq serve` nodes on a
real Kafka and a real Redis (a topic prefix and a Redis key prefix of the test's own).

What a user would notice: `GET /api/v1/cluster` and `ferromq ctl cluster` on either
node list both nodes alive with their MQTT and admin addresses, and so does the
dashboard's Cluster panel (in Debian's headless chromium, as tests/integration/
test_dashboard.py drives it); once one node is killed with SIGKILL (no clean leave) the
other lists it dead, in the API, in `ctl cluster`, in the panel and in
`ferromq_cluster_nodes{state="dead"}`.
"""

from __future__ import annotations

import uuid
from functools import partial

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.conftest import RunningBroker, Starter
from tests.integration.test_dashboard import Dashboard, browser  # noqa: F401 (a fixture)
from tests.support.admin_client import TOKEN, api, get, ok, token_config
from tests.support.services import free_ports
from tests.support.waiting import wait_for

# Its brokers set their own number of shards: the suite at two shards skips it.
pytestmark = pytest.mark.own_workers


def node_config(node_id: str, admin_port: int, kafka: str, redis: str, unique: str) -> str:
    # One shard per node, whatever the suite's workers: one member each, named as the node.
    cluster = (
        f'[cluster]\nnode_id = "{node_id}"\nkafka = "{kafka}"\nredis = "{redis}"\n'
        f'topic_prefix = "test-{unique}."\n[redis]\nkey_prefix = "test-{unique}:"\n'
        "[server]\nworkers = 1\n"
    )
    return token_config(admin_port, cluster)


def _states_are(admin_port: int, expected: dict[str, str]) -> bool:
    return states(admin_port) == expected


def states(admin_port: int) -> dict[str, str]:
    status, answer = api(admin_port, "GET", "/cluster")
    if status != 200:
        return {}
    return {node["node_id"]: node["state"] for node in answer["nodes"]}


def panel(page: Dashboard) -> dict[str, str]:
    """The Cluster panel's nodes and states."""
    return {row[0]: row[1] for row in page.rows("cluster-nodes")}


def test_ctl_api_and_dashboard_list_the_nodes_then_a_killed_one_dead(
    started: Starter,
    loop: str,
    redis_url: str,
    kafka_bootstrap: str,
    browser: WebDriver,  # noqa: F811 (the fixture)
) -> None:
    unique = uuid.uuid4().hex[:10]
    admin_a, admin_b = free_ports(2)
    nodes: dict[str, RunningBroker] = {
        node_id: started(loop, node_config(node_id, port, kafka_bootstrap, redis_url, unique))
        for node_id, port in (("a", admin_a), ("b", admin_b))
    }
    both_alive = {"a": "alive", "b": "alive"}
    for port in (admin_a, admin_b):
        wait_for(partial(_states_are, port, both_alive), f"both nodes alive on :{port}")

    status, answer = api(admin_b, "GET", "/cluster")
    assert status == 200 and answer["node_id"] == "b"
    listed = {node["node_id"]: node for node in answer["nodes"]}
    for node_id, port in (("a", admin_a), ("b", admin_b)):
        assert listed[node_id]["mqtt"] == [f"127.0.0.1:{nodes[node_id].port}"]
        assert listed[node_id]["admin"] == f"127.0.0.1:{port}"
        assert listed[node_id]["pid"] == nodes[node_id].process.pid
    lines = ok(admin_a, "cluster").splitlines()
    assert lines[0].split() == ["NODE", "STATE", "STARTED", "MQTT", "ADMIN", "ADOPTED_BY"]
    assert [line.split()[:2] for line in lines[1:3]] == [["a", "alive"], ["b", "alive"]]
    assert "this node: a" in lines
    page = Dashboard(browser, admin_a)
    page.open()
    page.find("cluster")
    page.until(lambda: panel(page) == {"a (this node)": "alive", "b": "alive"}, "both in the panel")

    nodes["b"].kill()
    wait_for(lambda: states(admin_a) == {"a": "alive", "b": "dead"}, "b dead on a")
    rows = {line.split()[0]: line.split()[1] for line in ok(admin_a, "cluster").splitlines()[1:3]}
    assert rows == {"a": "alive", "b": "dead"}
    metrics = get(admin_a, "/metrics", TOKEN)[1].decode().splitlines()
    assert 'ferromq_cluster_nodes{state="dead"} 1.0' in metrics
    assert 'ferromq_cluster_nodes{state="alive"} 1.0' in metrics
    page.until(
        lambda: panel(page) == {"a (this node)": "alive", "b": "dead"}, "b dead in the panel"
    )
    assert page.console_errors() == []
