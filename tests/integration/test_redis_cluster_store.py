"""The Redis store on a real 3-node Redis Cluster (tests/support/services.py), a real `ferromq
serve` and real MQTT clients. What a user would notice: seed 002 and a `kill -9` lose
nothing on a cluster as on one server; clients' keys spread over every node, each
client's keys on one; a slot moved to another node while the broker runs is followed
and nothing is lost; a node down holds the acknowledgements back and names the node,
and the broker carries on once it is back; a server that is no cluster node stops the
broker with a message naming the URL."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from ferromq._core import key_hash_slot
from tests.conftest import Starter
from tests.integration.test_redis_store import (
    LOOPS,
    key_prefix,
    kill,
    kill_9_mid_stream,
    outage_holds_acknowledgements,
    persistent_subscriber,
    receive,
    redis_config,
)
from tests.support.commands import serve_exit
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client
from tests.support.seed_002 import seed_002
from tests.support.services import RedisCluster, RedisServer


def client(node: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=10)


def serving(cluster: RedisCluster, key: str) -> RedisServer:
    """The node that serves ``key``'s slot now."""
    slot = client(cluster.nodes[0]).cluster("KEYSLOT", key)
    for first, last, primary, *_ in client(cluster.nodes[0]).execute_command("CLUSTER SLOTS"):
        if first <= slot <= last:
            return next(n for n in cluster.nodes if n.port == primary[1])
    raise AssertionError(f"no node serves slot {slot}")


def keys_on(node: RedisServer, pattern: str) -> list[bytes]:
    return list(client(node).scan_iter(match=pattern, count=1000))


def test_key_slots_are_the_cluster_s(redis_cluster: RedisCluster) -> None:
    keys = ["foo", "p:{client-1}_messages", "{}x", "a{b}{c}", "{{x}}", "ü{ñ}", "x" * 300]
    node = client(redis_cluster.nodes[0])
    assert [key_hash_slot(k.encode()) for k in keys] == [node.cluster("KEYSLOT", k) for k in keys]


@pytest.mark.parametrize("loop", LOOPS)
def test_seed_002_on_a_cluster(redis_cluster: RedisCluster, started: Starter, loop: str) -> None:
    seed_002(started(loop, redis_config(redis_cluster.url, cluster=True)), "seam-consumer")


@pytest.mark.parametrize("loop", LOOPS)
def test_kill_9_mid_stream_on_a_cluster_loses_no_acknowledged_message(
    redis_cluster: RedisCluster, started: Starter, loop: str
) -> None:
    kill_9_mid_stream(started, loop, redis_config(redis_cluster.url, cluster=True))


@pytest.mark.parametrize("loop", LOOPS)
def test_clients_spread_over_every_node_each_on_one_and_all_come_back(
    redis_cluster: RedisCluster, started: Starter, loop: str
) -> None:
    config = redis_config(redis_cluster.url, cluster=True)
    prefix = key_prefix(config)
    broker = started(loop, config)
    clients = [f"spread-{n}" for n in range(60)]
    for client_id in clients:
        persistent_subscriber(broker, client_id, f"spread/{client_id}")
    publisher, _ = paho_client(broker, "spread-pub", 5)
    for client_id in clients:
        publisher.publish(f"spread/{client_id}", client_id.encode(), qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()

    for node in redis_cluster.nodes:
        assert keys_on(node, f"{prefix}*"), f"{node.host_port} holds none of the keys"
    for client_id in clients[:10]:
        holding = [n for n in redis_cluster.nodes if keys_on(n, f"{prefix}{{{client_id}}}*")]
        assert holding == [serving(redis_cluster, f"{prefix}{{{client_id}}}")], client_id
        suffixes = {k.decode().split("}", 1)[1] for k in keys_on(holding[0], f"{prefix}*")
                    if k.decode().startswith(f"{prefix}{{{client_id}}}")}  # fmt: skip
        assert {"_session", "_subscriptions", "_messages", "_last_packet_id"} <= suffixes

    # A restart reads every node back: each session has its queued message.
    kill(broker)
    broker = started(loop, config)
    for client_id in clients:
        assert [m.payload for m in receive(broker, client_id, 1)] == [client_id.encode()]


def move_slot(cluster: RedisCluster, slot: int, source: RedisServer) -> RedisServer:
    """Move ``slot`` from ``source`` to another node the way `redis-cli --cluster
    reshard` does: IMPORTING / MIGRATING, MIGRATE of its keys, then SETSLOT NODE on
    every node. Returns the new owner."""
    target = next(n for n in cluster.nodes if n is not source)
    src, dst = client(source), client(target)
    source_id, target_id = src.cluster("MYID"), dst.cluster("MYID")
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for node in cluster.nodes:
        client(node).execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
    cluster.wait_ok()
    return target


@pytest.mark.parametrize("loop", LOOPS)
def test_a_slot_moved_while_the_broker_runs_is_followed_and_nothing_is_lost(
    redis_cluster: RedisCluster, started: Starter, loop: str
) -> None:
    config = redis_config(redis_cluster.url, cluster=True)
    tag = f"{key_prefix(config)}{{mover}}"
    broker = started(loop, config)
    persistent_subscriber(broker, "mover", "move/t")
    publisher, _ = paho_client(broker, "move-pub", 5)
    for n in range(100):
        publisher.publish("move/t", b"%d" % n, qos=1).wait_for_publish(10)
    source = serving(redis_cluster, tag)
    assert keys_on(source, f"{tag}*"), "stored on the slot's first owner"

    # Publishes go on while the slot moves: the store meets ASK / TRYAGAIN / MOVED.
    later = [publisher.publish("move/t", b"%d" % n, qos=1) for n in range(100, 300)]
    target = move_slot(redis_cluster, key_hash_slot(tag.encode()), source)
    for info in later:
        info.wait_for_publish(60)
    publisher.disconnect()
    publisher.loop_stop()
    log = broker.log()
    # Which reply a batch meets depends on where the migration is when it lands.
    assert any(reply in log for reply in ("MOVED", "ASK", "TRYAGAIN")), "the store met the move"
    assert not keys_on(source, f"{tag}*") and keys_on(target, f"{tag}*")

    # What was acknowledged is on the new owner: a restart from the cluster has it all.
    kill(broker)
    broker = started(loop, config)
    payloads = [m.payload for m in receive(broker, "mover", 300)]
    assert payloads == [b"%d" % n for n in range(300)]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_node_down_holds_acknowledgements_naming_it_and_the_broker_carries_on(
    redis_cluster: RedisCluster, started: Starter, loop: str
) -> None:
    config = redis_config(redis_cluster.url, cluster=True)
    broker = started(loop, config)
    node = serving(redis_cluster, f"{key_prefix(config)}{{patient}}")

    def start() -> None:
        node.start()
        redis_cluster.wait_ok()

    outage_holds_acknowledgements(broker, "patient", node.stop, start, node.host_port)


def test_cluster_mode_against_a_server_that_is_no_cluster_node_exits_naming_the_url(
    redis_url: str, tmp_path: Path
) -> None:
    done = serve_exit(tmp_path, redis_config(redis_url, cluster=True))
    assert done.returncode == 3, done.stderr
    assert f"redis store at {redis_url}: redis.cluster = true but" in done.stderr
    assert "is not a cluster node" in done.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("/0", "/2"), "a Redis Cluster is reached over TCP and has database 0 only"),
        (('key_prefix = "', 'key_prefix = "{app}'), "redis.key_prefix '{app}"),
    ],
)
def test_cluster_settings_a_cluster_cannot_honour_exit_naming_them(
    redis_cluster: RedisCluster, tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    done = serve_exit(tmp_path, redis_config(redis_cluster.url, cluster=True).replace(*edit))
    assert done.returncode == 3, done.stderr
    assert message in done.stderr


def test_one_client_s_keys_stay_on_one_node_whatever_its_id(
    redis_cluster: RedisCluster, started: Starter
) -> None:
    # Ids whose hash tag would be empty ("}..."): all their keys still share a slot,
    # so the scripts that touch several of them run on a cluster.
    config = redis_config(redis_cluster.url, cluster=True)
    broker = started("uvloop", config)
    for client_id in ("}brace", "a}b", "{x}"):
        persistent_subscriber(broker, client_id, "odd/t")
    publisher, _ = paho_client(broker, "odd-pub", 5)
    publisher.publish("odd/t", b"kept", qos=1).wait_for_publish(30)
    publisher.disconnect()
    publisher.loop_stop()
    kill(broker)
    broker = started("uvloop", config)
    for client_id in ("}brace", "a}b", "{x}"):
        sub = RawClient(broker.host, broker.port, version=4)
        assert sub.connect(client_id, clean=False)["session_present"] is True
        assert sub.recv(timeout=10)["payload"] == b"kept"
        sub.close()
