"""The test command's real services (tests/support/services.py), used the way the persistence stores
will use them: redis-py asyncio with the hiredis parser (keys with a TTL, a Lua script by
SHA with the NOSCRIPT fallback), aiokafka with acks=all and a consumer group whose committed
offset is the cursor a returning client resumes from. Under uvloop and asyncio, as the
broker runs under either."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
import uvloop
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from redis._parsers import _AsyncHiredisParser
from redis.exceptions import NoScriptError

from tests.support import services

T = TypeVar("T")

LOOPS = ["uvloop", "asyncio"]

# Returns the new length of a list after pushing ARGV[1], and the key's TTL kept.
PUSH_SCRIPT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('LLEN', KEYS[1])
"""


def run(loop: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return uvloop.run(main()) if loop == "uvloop" else asyncio.run(main())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---- Redis ------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_redis_round_trip_through_hiredis(redis_url: str, loop: str) -> None:
    key = unique("{client}_messages_1")

    # redis-py types a reply as bytes | str (str with decode_responses); these clients
    # decode nothing, and the assertions below hold the replies to bytes.
    async def main() -> tuple[str, bytes | str | None, int]:
        client = aioredis.from_url(redis_url)
        try:
            connection = await client.connection_pool.get_connection()
            parser = type(connection._parser).__name__
            await client.connection_pool.release(connection)
            payload = bytes(range(256))
            await client.set(key, payload, px=60_000)
            return parser, await client.get(key), await client.pttl(key)
        finally:
            await client.aclose()

    parser, stored, ttl_ms = run(loop, main)
    assert parser == _AsyncHiredisParser.__name__
    assert stored == bytes(range(256))
    assert 0 < ttl_ms <= 60_000


@pytest.mark.parametrize("loop", LOOPS)
def test_redis_script_by_sha_falls_back_on_noscript(redis_url: str, loop: str) -> None:
    key = unique("{client}_list")

    async def main() -> tuple[list[int], bool, list[bytes | str], int]:
        client = aioredis.from_url(redis_url)
        try:
            push = client.register_script(PUSH_SCRIPT)
            await client.script_flush()
            try:
                await client.evalsha(push.sha, 1, key, b"lost", 60_000)
            except NoScriptError:
                refused = True
            else:
                refused = False
            # register_script's call: EVALSHA, and on NOSCRIPT load the script and retry.
            lengths = [await push(keys=[key], args=[f"m{i}", 60_000]) for i in range(3)]
            await client.script_flush()
            lengths.append(await push(keys=[key], args=["m3", 60_000]))
            return lengths, refused, await client.lrange(key, 0, -1), await client.pttl(key)
        finally:
            await client.aclose()

    lengths, refused, items, ttl_ms = run(loop, main)
    assert refused, "EVALSHA of a flushed script must answer NOSCRIPT"
    assert lengths == [1, 2, 3, 4]
    assert items == [b"m0", b"m1", b"m2", b"m3"]
    assert 0 < ttl_ms <= 60_000


def test_redis_keeps_nothing_on_disk_unless_asked_for_aof(tmp_path: Path) -> None:
    async def write(url: str) -> None:
        client = aioredis.from_url(url)
        try:
            await client.set("kept", b"if appendonly")
        finally:
            await client.aclose()

    async def read(url: str) -> bytes | str | None:
        client = aioredis.from_url(url)
        try:
            return await client.get("kept")
        finally:
            await client.aclose()

    plain = services.start_redis(tmp_path / "plain")
    asyncio.run(write(plain.url))
    plain.stop()
    assert plain.running() is False
    assert sorted(p.name for p in (tmp_path / "plain" / "redis").iterdir()) == ["redis.log"]

    durable = services.start_redis(tmp_path / "aof", appendonly=True)
    asyncio.run(write(durable.url))
    durable.stop()
    # A new server on the same directory replays the AOF.
    again = services.start_redis(tmp_path / "aof", appendonly=True)
    try:
        assert asyncio.run(read(again.url)) == b"if appendonly"
    finally:
        again.stop()


# ---- Kafka ------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_kafka_acks_all_then_group_resumes_from_committed_offset(
    kafka_bootstrap: str, loop: str
) -> None:
    topic, group = unique("ferromq-app"), unique("ferromq-group")
    partition = TopicPartition(topic, 0)

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

    async def main() -> tuple[list[int], list[bytes], int | None, list[tuple[int, bytes]]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            sent = [await producer.send_and_wait(topic, f"m{i}".encode()) for i in range(10)]
        finally:
            await producer.stop()

        first = consumer()
        await first.start()
        try:
            read = [(await first.getone()).value for _ in range(4)]
            # The next offset to read is the cursor: offsets 0-3 are acknowledged.
            await first.commit({partition: 4})
        finally:
            await first.stop()

        second = consumer()
        await second.start()
        try:
            committed = await second.committed(partition)
            rest = [await second.getone() for _ in range(6)]
        finally:
            await second.stop()
        return (
            [record.offset for record in sent],
            [value or b"" for value in read],
            committed,
            [(record.offset, record.value or b"") for record in rest],
        )

    offsets, read, committed, rest = run(loop, main)
    assert offsets == list(range(10))
    assert read == [b"m0", b"m1", b"m2", b"m3"]
    assert committed == 4
    assert rest == [(i, f"m{i}".encode()) for i in range(4, 10)]


# ---- the module itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "missing"),
    [
        (services.start_redis, "`redis-server` is not on PATH: install it with `apt-get install"),
        (services.start_kafka, "`java` is not on PATH: install it with `apt-get install"),
    ],
)
def test_missing_prerequisite_is_named_with_its_install_command(
    start: Callable[[Path], services.Service],
    missing: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(services.ServiceUnavailable, match=re.escape(missing)):
        start(tmp_path)


def test_cli_starts_both_for_the_shell_and_stops_what_it_recorded(tmp_path: Path) -> None:
    def cli(action: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, services.__file__, action, "--state-dir", str(tmp_path)]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    async def answers(redis_url: str, kafka_bootstrap: str) -> list[str]:
        client = aioredis.from_url(redis_url)
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            await admin.start()
            topics = await admin.list_topics()
            return [str(await client.ping()), type(topics).__name__]
        finally:
            await admin.close()
            await client.aclose()

    started = cli("start")
    recorded = {p.stem: json.loads(p.read_text())["pid"] for p in tmp_path.glob("*.json")}
    try:
        assert started.returncode == 0, started.stderr
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
        )
        assert set(recorded) == {"redis", "kafka"}
        assert set(exports) == {services.REDIS_ENV, services.KAFKA_ENV}
        replies = asyncio.run(answers(exports[services.REDIS_ENV], exports[services.KAFKA_ENV]))
        assert replies == ["True", "list"]
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert [name for name, pid in recorded.items() if services.pid_alive(pid)] == []
    assert list(tmp_path.glob("*.json")) == []
