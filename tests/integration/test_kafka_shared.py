"""Shared subscriptions of APPLICATION clients through Kafka consumer groups (issue 7,
item 5), against a real Kafka, a real ``ferromq serve`` and raw MQTT clients: the
group's messages are stored once in its topic and shared among the members by
Kafka's partition assignment; a group with no member online keeps them in Kafka,
across a ``kill -9`` of the broker; a member that vanishes without acknowledging
leaves its messages to another member."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError

from ferromq.storage.kafka import shared_topic_name
from tests.conftest import RunningBroker, start_broker
from tests.integration.test_kafka_store import (
    APP,
    kafka_config,
    publish_counting,
    unique_prefix,
)
from tests.support.mqtt_raw import RawClient

GROUP = "$share/workers/jobs/#"
PARTITIONS = 4


def shared_config(bootstrap: str, prefix: str) -> str:
    return kafka_config(bootstrap, prefix) + f"shared_partitions = {PARTITIONS}\n"


def join(broker: RunningBroker, client_id: str, *, subscribe: bool = True) -> RawClient:
    """A persistent 3.1.1 member of GROUP (subscribing on its first connection)."""
    member = RawClient(broker.host, broker.port, version=4)
    member.connect(client_id, clean=False)
    if subscribe:
        member.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": GROUP, "qos": 1}]})
        assert member.recv()["type"] == "suback"
    return member


def group_members(bootstrap: str, prefix: str) -> int:
    """Members of GROUP's consumer group that have their partitions (state Stable)."""

    async def describe() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            [response] = await admin.describe_consumer_groups(
                [f"{prefix}share.{GROUP.removeprefix('$share/')}"]
            )
        except GroupCoordinatorNotAvailableError:
            return 0  # a fresh Kafka still creating its offsets topic
        finally:
            await admin.close()
        [(error, _, state, *_rest, members)] = response.groups
        return len(members) if error == 0 and state == "Stable" else 0

    return asyncio.run(describe())


def wait_for_members(bootstrap: str, prefix: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while group_members(bootstrap, prefix) != count:
        assert time.monotonic() < deadline, f"the consumer group never had {count} members"
        time.sleep(0.2)


def topic_records(bootstrap: str, prefix: str) -> int:
    """Records in GROUP's topic over all its partitions."""

    async def count() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            name = shared_topic_name(prefix, GROUP)
            partitions = [TopicPartition(name, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.beginning_offsets(partitions)
            return sum(ends[tp] - starts[tp] for tp in partitions)
        finally:
            await consumer.stop()

    return asyncio.run(count())


def publish_jobs(broker: RunningBroker, count: int, acked: list[int]) -> None:
    """``count`` numbered QoS 1 messages to the group's topic; ``acked`` gets each
    PUBACKed number, until done or the broker goes away."""
    publish_counting(broker, count, 0, acked, topic="jobs/numbered")


def read_acknowledging(
    member: RawClient, until: set[int], got: list[int], seen: set[int] | None = None
) -> None:
    """Read and acknowledge into ``got`` until every number of ``until`` is in
    ``seen`` (what all the members reading together got; this member's alone when
    None) or nothing arrives for 10 s."""
    seen = set() if seen is None else seen
    last_read = time.monotonic()
    while not until <= seen:
        try:
            packet = member.recv(timeout=0.2)
        except TimeoutError:
            if time.monotonic() - last_read > 10:
                return
            continue
        last_read = time.monotonic()
        assert packet["type"] == "publish", packet
        number = int.from_bytes(packet["payload"], "big")
        got.append(number)
        seen.add(number)
        member.send({"type": "puback", "packet_id": packet["packet_id"]})


def test_the_group_s_messages_are_stored_once_and_shared_by_partition(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    broker = start_broker(tmp_path, loop, shared_config(kafka_bootstrap, prefix))
    try:
        members = [join(broker, f"{APP}worker-{i}") for i in range(2)]
        wait_for_members(kafka_bootstrap, prefix, 2)
        acked: list[int] = []
        publish_jobs(broker, 400, acked)
        assert len(acked) == 400
        got: list[list[int]] = [[], []]
        seen: set[int] = set()
        readers = [
            threading.Thread(target=read_acknowledging, args=(m, set(range(400)), g, seen))
            for m, g in zip(members, got, strict=True)
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        for member in members:
            member.close()
    finally:
        broker.stop()
    everything = got[0] + got[1]
    assert sorted(everything) == list(range(400)), "each message once, to one member"
    assert got[0] and got[1], "Kafka gave each member its partitions"
    assert topic_records(kafka_bootstrap, prefix) == 400, "stored once, in the group's topic"


def test_a_group_with_no_member_online_keeps_its_messages_across_kill_9(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    config = shared_config(kafka_bootstrap, prefix)
    env = {"FERROMQ_STORAGE__PATH": str(tmp_path / "store")}
    broker = start_broker(tmp_path, loop, config, env)
    join(broker, f"{APP}away").close()  # subscribed, then offline

    acked: list[int] = []
    publisher = threading.Thread(target=publish_jobs, args=(broker, 3000, acked))
    publisher.start()
    while len(acked) < 500 and publisher.is_alive():
        time.sleep(0.01)
    broker.process.kill()  # kill -9, mid-stream
    broker.process.wait()
    publisher.join(30)
    assert 500 <= len(acked) < 3000, "killed mid-stream"

    broker = start_broker(tmp_path, loop, config, env)
    try:
        member = join(broker, f"{APP}away", subscribe=False)
        got: list[int] = []
        read_acknowledging(member, set(acked), got)
        member.close()
    finally:
        broker.stop()
    assert set(acked) <= set(got), "every acknowledged message reached the member"


def test_a_member_vanishing_unacknowledged_leaves_its_messages_to_another(
    kafka_bootstrap: str, tmp_path: Path, loop: str
) -> None:
    prefix = unique_prefix()
    broker = start_broker(tmp_path, loop, shared_config(kafka_bootstrap, prefix))
    try:
        silent = join(broker, f"{APP}silent")
        steady = join(broker, f"{APP}steady")
        wait_for_members(kafka_bootstrap, prefix, 2)
        acked: list[int] = []
        publish_jobs(broker, 200, acked)
        silent_got = []
        while True:  # reads what Kafka gave it, acknowledges nothing
            try:
                silent_got.append(int.from_bytes(silent.recv(timeout=3)["payload"], "big"))
            except TimeoutError:
                break
        assert silent_got, "the silent member had partitions"
        silent.close()
        got: list[int] = []
        read_acknowledging(steady, set(range(200)), got)
        steady.close()
    finally:
        broker.stop()
    assert set(got) == set(range(200)), "the steady member ends with every message"
    assert set(silent_got) <= set(got), "including all the silent member held"
