"""A node's figures from its shards': what `$SYS/broker/`, `/stats` and `/readyz` of a
node of two shards say when the shards' figures differ, one shard's store fails or one
shard does not answer."""

from __future__ import annotations

import json

from ferromq.admin.node_health import node_readiness
from ferromq.admin.shards import ShardAnswer, ShardUnreachable
from ferromq.storage.persister import StoreHealth
from ferromq.sys_topics import (
    COUNTERS,
    Figures,
    node_figures,
    node_stats,
    shard_prefix,
    sys_messages,
)

ZERO = dict.fromkeys(COUNTERS.values(), 0)


def stats(connected: int, retained: int) -> dict[str, int]:
    return {
        **ZERO,
        "clients_connected": connected,
        "clients_disconnected": 1,
        "retained_messages": retained,
        "bytes_received": 100 * connected,
    }


def test_node_stats_sum_shards_and_count_replicated_retained_once() -> None:
    node = node_stats([stats(3, 7), stats(2, 7)])
    assert node["clients_connected"] == 5 and node["bytes_received"] == 500
    assert node["clients_disconnected"] == 2
    assert node["retained_messages"] == 7  # every shard holds the node's retained messages


def test_node_sys_tree_adds_up_and_fails_with_a_shard_store() -> None:
    first = Figures(stats(3, 0), 40, StoreHealth())
    second = Figures(stats(2, 0), 12, StoreHealth(False, 4, "disk full"))
    tree = dict(sys_messages(node_figures([first, second])))
    assert tree["$SYS/broker/clients/connected"] == b"5"
    assert tree["$SYS/broker/uptime"] == b"40 seconds"
    assert tree["$SYS/broker/store/state"] == b"failing"
    assert tree["$SYS/broker/store/errors"] == b"4"
    assert tree["$SYS/broker/store/last_error"] == b"disk full"
    shard = dict(sys_messages(second, shard_prefix(1)))
    assert shard["$SYS/broker/shard/1/clients/connected"] == b"2"
    # A shard's figures travel as JSON and come back the same.
    assert Figures.from_json(json.loads(json.dumps(second.to_json()))) == second


def test_node_not_ready_while_a_shard_does_not_answer() -> None:
    body = {"status": "ready", "listeners": {"default": True}, "store": {"state": "ok"}}
    answers: list[ShardAnswer | ShardUnreachable] = [
        ShardAnswer(0, 200, json.dumps({**body, "stream": {"state": "off"}}).encode(), "json"),
        ShardUnreachable(1, "connection refused"),
    ]
    ready, readiness = node_readiness(answers)
    assert not ready and readiness["status"] == "not ready"
    assert readiness["listeners"] == {"default": True}
    assert readiness["shards"] == [
        {"shard": 0, **body, "stream": {"state": "off"}},
        {
            "shard": 1,
            "status": "unreachable",
            "error": "shard 1 did not answer: connection refused",
        },
    ]
