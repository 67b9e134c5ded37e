"""The Redis store end to end: a real redis-server, a real `ferromq serve` and real
MQTT clients. What a user would notice: messages acknowledged to a publisher survive a
broker crash; sessions, subscriptions and retained messages survive a restart; while
Redis is down nothing is acknowledged and the log names the server, and everything goes
through once Redis is back; a Redis that cannot be reached at start-up stops the broker
with a message naming it."""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from ferromq import bench
from tests.conftest import RunningBroker, Starter
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, subscribe
from tests.support.seed_002 import seed_002
from tests.support.services import RedisServer, free_port
from tests.support.waiting import wait_for

LOOPS = ["uvloop", "asyncio"]
_prefixes = itertools.count()


def redis_config(url: str, *, cluster: bool = False) -> str:
    # Each broker its own keys, so tests may share a server; an offline session holds
    # every message these tests send (the default queue drops the oldest past 1,000).
    return (
        '[storage]\nbackend = "redis"\n[session]\nqueue_limit = 5000\n'
        f'[redis]\nurl = "{url}"\nkey_prefix = "t{next(_prefixes)}-{os.getpid()}:"\n'
        f"cluster = {str(cluster).lower()}\n"
    )


def key_prefix(config: str) -> str:
    """The key prefix a :func:`redis_config` gave its broker."""
    return config.split('key_prefix = "', 1)[1].split('"', 1)[0]


def kill(broker: RunningBroker) -> None:
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)


def persistent_subscriber(broker: RunningBroker, client_id: str, topic: str) -> None:
    """Subscribe with a persistent session, then go away."""
    client, _ = paho_client(broker, client_id, 5, clean=False)
    subscribe(client, topic, 1)
    client.disconnect()
    client.loop_stop()


def receive(broker: RunningBroker, client_id: str, count: int) -> list[paho.MQTTMessage]:
    """Resume `client_id`'s session and take `count` messages."""
    client, inbox = paho_client(broker, client_id, 5, clean=False)
    try:
        return [inbox.get(timeout=30) for _ in range(count)]
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_seed_002_on_redis(redis_server: RedisServer, started: Starter, loop: str) -> None:
    seed_002(started(loop, redis_config(redis_server.url)), "seam-consumer")


@pytest.mark.parametrize("loop", LOOPS)
def test_kill_9_mid_stream_loses_no_acknowledged_message(
    redis_server: RedisServer, started: Starter, loop: str
) -> None:
    kill_9_mid_stream(started, loop, redis_config(redis_server.url))


def kill_9_mid_stream(started: Starter, loop: str, config: str) -> None:
    """Kill the broker while 3,000 QoS 1 messages stream to an offline persistent
    subscriber; after a restart on the same store, every message the publisher saw
    acknowledged arrives, in order."""
    broker = started(loop, config)
    persistent_subscriber(broker, "crash-sub", "crash/t")
    publisher, _ = paho_client(broker, "crash-pub", 5)
    sent = [publisher.publish("crash/t", n.to_bytes(4, "big"), qos=1) for n in range(3000)]
    wait_for(lambda: sum(info.is_published() for info in sent) >= 1000, "1,000 PUBACKs")
    kill(broker)
    acknowledged = {n for n, info in enumerate(sent) if info.is_published()}
    publisher.disconnect()
    publisher.loop_stop()
    assert 1000 <= len(acknowledged) < 3000, "killed mid-stream"

    broker = started(loop, config)
    # Everything the broker stored comes back in order: at least every
    # acknowledged message (a stored one may not have had its PUBACK yet).
    client, inbox = paho_client(broker, "crash-sub", 5, clean=False)
    received: list[int] = []
    while not acknowledged <= set(received):
        try:
            message = inbox.get(timeout=30)
        except queue.Empty:
            missing = sorted(acknowledged - set(received))
            pytest.fail(f"{len(missing)} acknowledged messages lost, first {missing[:5]}")
        received.append(int.from_bytes(message.payload, "big"))
    client.disconnect()
    client.loop_stop()
    assert received == sorted(received), "order kept across the restart"
    broker.wait_for_log("store restored store=redis sessions=")


@pytest.mark.parametrize("loop", LOOPS)
def test_restart_keeps_sessions_subscriptions_and_retained(
    redis_server: RedisServer, started: Starter, loop: str
) -> None:
    config = redis_config(redis_server.url)
    broker = started(loop, config)
    persistent_subscriber(broker, "keeper", "keep/#")
    publisher, _ = paho_client(broker, "retainer", 5)
    publisher.publish("status/door", b"open", qos=1, retain=True).wait_for_publish(10)
    publisher.publish("keep/queued", b"while away", qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()
    assert broker.stop() == 0

    broker = started(loop, config)
    client, inbox = paho_client(broker, "keeper", 5, clean=False)
    assert inbox.get(timeout=10).payload == b"while away"
    # The subscription came back with the session: no new SUBSCRIBE.
    publisher, _ = paho_client(broker, "after-restart", 5)
    publisher.publish("keep/live", b"new", qos=1).wait_for_publish(10)
    assert inbox.get(timeout=10).payload == b"new"
    subscribe(client, "status/#", 1)
    retained = inbox.get(timeout=10)
    assert (retained.topic, retained.payload, retained.retain) == ("status/door", b"open", True)
    for c in (client, publisher):
        c.disconnect()
        c.loop_stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_redis_down_holds_acknowledgements_and_everything_goes_through_when_back(
    redis_server: RedisServer, started: Starter, loop: str
) -> None:
    broker = started(loop, redis_config(redis_server.url))
    outage_holds_acknowledgements(
        broker, "patient", redis_server.stop, redis_server.start, f"127.0.0.1:{redis_server.port}"
    )


def outage_holds_acknowledgements(
    broker: RunningBroker,
    subscriber: str,
    stop: Callable[[], None],
    start: Callable[[], None],
    server: str,
) -> None:
    """While ``stop`` has taken the Redis server holding ``subscriber``'s keys away,
    publishes to it are not acknowledged and the log names ``server``; once ``start``
    brings it back, everything goes through and arrives in order."""
    persistent_subscriber(broker, subscriber, "down/t")
    publisher, _ = paho_client(broker, "down-pub", 5)
    before = [publisher.publish("down/t", b"%d" % n, qos=1) for n in range(10)]
    for info in before:
        info.wait_for_publish(10)

    stop()
    during = [publisher.publish("down/t", b"%d" % n, qos=1) for n in range(10, 20)]
    wait_for(lambda: "store write failed" in broker.log(), "the broker reports the failure")
    assert not any(info.is_published() for info in during), "acknowledged while Redis is down"
    failure = next(line for line in broker.log().splitlines() if "store write failed" in line)
    assert server in failure, failure

    start()  # a new process: the store reconnects and loads its scripts
    for info in during:
        info.wait_for_publish(60)
    publisher.disconnect()
    publisher.loop_stop()
    payloads = [m.payload for m in receive(broker, subscriber, 20)]
    assert payloads == [b"%d" % n for n in range(20)]


def test_unreachable_redis_at_start_exits_naming_the_url(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    config = tmp_path / "ferromq.toml"
    config.write_text(redis_config(url).replace("[redis]", "[redis]\nconnect_timeout = 1"))
    done = subprocess.run(
        [sys.executable, "-m", "ferromq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}"},
    )
    assert done.returncode == 3, done.stderr
    assert f"redis store at {url}" in done.stderr


def test_a_url_that_is_not_redis_exits_naming_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "ferromq.toml"
    url = f"http://127.0.0.1:{free_port()}/0"  # never contacted: not a Redis URL
    config.write_text(redis_config(url))
    done = subprocess.run(
        [sys.executable, "-m", "ferromq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}"},
    )
    assert done.returncode == 3, done.stderr
    assert f"redis.url '{url}'" in done.stderr


def test_a_password_never_reaches_the_log(tmp_path: Path) -> None:
    url = f"redis://user:s3cret@127.0.0.1:{free_port()}/0"
    config = tmp_path / "ferromq.toml"
    config.write_text(redis_config(url))
    done = subprocess.run(
        [sys.executable, "-m", "ferromq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FERROMQ_LISTEN": f"127.0.0.1:{free_port()}"},
    )
    assert done.returncode == 3
    assert "s3cret" not in done.stderr and "user:***@127.0.0.1" in done.stderr


@pytest.mark.parametrize("loop", LOOPS)
def test_scripts_flushed_from_redis_are_sent_again_with_eval(
    redis_server: RedisServer, started: Starter, loop: str
) -> None:
    broker = started(loop, redis_config(redis_server.url))
    persistent_subscriber(broker, "flushed", "flush/t")
    publisher, _ = paho_client(broker, "flush-pub", 5)
    publisher.publish("flush/t", b"before", qos=1).wait_for_publish(10)
    assert redis_server.command("SCRIPT", "FLUSH") == b"+OK"
    publisher.publish("flush/t", b"after", qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()
    broker.wait_for_log("redis lost its scripts; batch sent again with EVAL")
    assert [m.payload for m in receive(broker, "flushed", 2)] == [b"before", b"after"]


@pytest.mark.parametrize("loop", LOOPS)
def test_order_holds_past_the_packet_id_wrap_across_a_crash(
    redis_server: RedisServer, started: Starter, loop: str
) -> None:
    config = redis_config(redis_server.url)
    broker = started(loop, config)
    # 66,000 QoS 1 deliveries to one persistent subscriber carry its delivery sequence
    # past 65,535: its packet ids have wrapped, the Redis scores have not.
    report = bench.run(
        {
            "scenario": "p2p",
            "pairs": 1,
            "pub_qos": 1,
            "sub_qos": 1,
            "persistent": True,
            "count": 66_000,
            "inflight": 1000,
            "warmup": 0,
            "client_id_prefix": "wrap",
            "topic_prefix": "wrap",
            "port": broker.port,
            "progress": False,
        }
    )
    assert report["delivery"]["received"] == 66_000
    publisher, _ = paho_client(broker, "wrap-pub", 5)
    for n in range(300):
        publisher.publish("wrap/p2p/0", b"%d" % n, qos=1).wait_for_publish(10)
    publisher.loop_stop()
    kill(broker)

    broker = started(loop, config)
    sub = RawClient(broker.host, broker.port, version=4)
    assert sub.connect("wrap-s0", clean=False)["session_present"] is True
    packets = [sub.recv(timeout=10) for _ in range(300)]
    sub.close()
    assert [p["payload"] for p in packets] == [b"%d" % n for n in range(300)]
    ids = [p["packet_id"] for p in packets]
    assert ids[0] < 1000, f"packet ids wrapped: {ids[0]}"
    assert ids == list(range(ids[0], ids[0] + 300))


def test_a_broker_stopped_while_redis_is_down_still_exits(
    redis_server: RedisServer, started: Starter
) -> None:
    broker = started("uvloop", redis_config(redis_server.url))
    persistent_subscriber(broker, "stranded", "stranded/t")
    publisher, _ = paho_client(broker, "stranded-pub", 5)
    redis_server.stop()
    unacknowledged = publisher.publish("stranded/t", b"x", qos=1)
    wait_for(lambda: "store write failed" in broker.log(), "the broker reports the failure")
    publisher.disconnect()
    publisher.loop_stop()
    assert broker.stop(timeout=60) == 0
    assert not unacknowledged.is_published()
    broker.wait_for_log("store unavailable at shutdown")
