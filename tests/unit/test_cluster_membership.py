"""Cluster membership (ferromq.cluster.membership) against a real Redis.

What a node of a cluster notices: it is listed alive once it joins and dead once it
leaves; two nodes see each other; a node whose heartbeat stops (killed, no leave) is
seen dead within ``ttl + heartbeat`` and reported once; a node whose sessions a
survivor took over is ``adopted``; a Redis restart makes the heartbeat fail
(``healthy`` false) and it resumes by itself within the lease; a member whose alive key
is gone when it beats again (frozen or cut off past its lease, or a Redis that
restarted empty) loses its lease instead of coming back. Also on a real Redis Cluster.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import pytest
import uvloop
from redis.asyncio import Redis, RedisCluster
from tests.support.services import RedisCluster as RedisClusterService
from tests.support.services import RedisServer

from ferromq.cluster.lease import Lease
from ferromq.cluster.membership import MemberInfo, Membership, MemberState

T = TypeVar("T")
LOOPS = ("uvloop", "asyncio")
TTL = 1.0  # the lease: a heartbeat every fifth of it
HEARTBEAT = TTL / 5
PATIENCE = 15.0  # seconds a test waits for what must happen before it fails


def run(loop: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return uvloop.run(main()) if loop == "uvloop" else asyncio.run(main())


def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}:cluster:"


def info(node_id: str, admin: str | None = "127.0.0.1:8080") -> MemberInfo:
    return MemberInfo(node_id, time.time(), 4242, ("127.0.0.1:1883",), admin, "0.test")


class LeaseLost(Exception):
    """What losing a lease does in these tests (a member process exits)."""


def _lost() -> NoReturn:
    raise LeaseLost


def member(
    redis: Redis | RedisCluster, key_prefix: str, node_id: str, lease: float = TTL
) -> Membership:
    return Membership(redis, key_prefix, info(node_id), Lease(node_id, lease, _lost))


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not await check():
        assert time.monotonic() < deadline, f"not seen in {PATIENCE} s: {what}"
        await asyncio.sleep(0.05)


def states(members: list[MemberState]) -> dict[str, tuple[str, str | None]]:
    return {m.info.node_id: (m.state, m.adopted_by) for m in members}


@pytest.mark.parametrize("loop", LOOPS)
def test_join_lists_the_node_alive_and_leave_dead(redis_url: str, loop: str) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        kp = prefix()
        me = info("a")
        a = Membership(redis, kp, me, Lease("a", TTL, _lost))
        await a.join()
        assert await a.members() == [MemberState(me, "alive", None)]
        assert 0 < await redis.pttl(kp + "alive:a") <= TTL * 1000
        await a.leave()
        assert await a.members() == [MemberState(me, "dead", None)]
        assert await redis.exists(kp + "alive:a") == 0
        await redis.aclose()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_two_members_see_each_other_alive(redis_url: str, loop: str) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        kp = prefix()
        a, b = member(redis, kp, "a"), member(redis, kp, "b")
        seen_by_a: list[tuple[str, str]] = []
        seen_by_b: list[tuple[str, str]] = []
        a.on_change(lambda node, state: seen_by_a.append((node, state)))
        b.on_change(lambda node, state: seen_by_b.append((node, state)))
        await a.join()
        await b.join()

        async def both_reported() -> bool:
            return bool(seen_by_a) and bool(seen_by_b)

        await until(both_reported, "each member reports the other")
        assert seen_by_a == [("b", "alive")] and seen_by_b == [("a", "alive")]
        for node in (a, b):
            assert states(await node.members()) == {"a": ("alive", None), "b": ("alive", None)}
        await b.leave()

        async def a_saw_b_leave() -> bool:
            return ("b", "dead") in seen_by_a

        await until(a_saw_b_leave, "a reports b dead after b leaves")
        assert seen_by_a == [("b", "alive"), ("b", "dead")] and a.healthy
        await a.leave()
        await redis.aclose()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_member_whose_heartbeat_stops_turns_dead_once(redis_url: str, loop: str) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        kp = prefix()
        a, b = member(redis, kp, "a"), member(redis, kp, "b")
        seen: list[tuple[str, str]] = []
        a.on_change(lambda node, state: seen.append((node, state)))
        await b.join()
        await a.join()

        async def b_alive() -> bool:
            return seen == [("b", "alive")]

        await until(b_alive, "a reports b alive")
        killed = b._task  # the process dies: its heartbeat stops, nothing is deleted
        assert killed is not None
        killed.cancel()

        async def b_dead() -> bool:
            return ("b", "dead") in seen

        await until(b_dead, "a reports b dead")
        await asyncio.sleep(5 * HEARTBEAT)  # later reads of a dead b report nothing more
        assert seen == [("b", "alive"), ("b", "dead")]
        assert states(await a.members())["b"] == ("dead", None)

        await redis.set(kp + "adopted:b", "a")
        assert states(await a.members()) == {"a": ("alive", None), "b": ("adopted", "a")}
        await asyncio.sleep(3 * HEARTBEAT)
        assert seen == [("b", "alive"), ("b", "dead")]  # adopted is still dead: no call
        await a.leave()
        await redis.aclose()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_heartbeat_survives_a_redis_restart(redis_server: RedisServer, loop: str) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_server.url)
        kp = prefix()
        a = member(redis, kp, "a", lease=30.0)  # outlasts the restart
        await a.join()
        await asyncio.to_thread(redis_server.stop)

        async def unhealthy() -> bool:
            return not a.healthy

        await until(unhealthy, "healthy false while Redis is down")
        await asyncio.to_thread(redis_server.start)

        async def healthy() -> bool:
            return a.healthy

        await until(healthy, "healthy again once Redis is back")
        assert states(await a.members()) == {"a": ("alive", None)}
        await a.leave()
        await redis.aclose()

    run(loop, main)


def test_a_member_missing_from_the_registry_is_registered_again(redis_url: str) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        kp = prefix()
        a = member(redis, kp, "a")
        await a.join()
        await redis.delete(kp + "members")

        async def listed() -> bool:
            return states(await a.members()) == {"a": ("alive", None)}

        await until(listed, "a registered again")
        await a.leave()
        await redis.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_member_whose_alive_key_expired_loses_its_lease(redis_url: str, loop: str) -> None:
    """As when it was frozen or cut off past its lease (another member may have adopted
    its clients) or Redis restarted empty: it does not come back to life."""

    async def main() -> None:
        redis = Redis.from_url(redis_url)
        kp = prefix()
        a = member(redis, kp, "a")
        await a.join()
        await redis.delete(kp + "alive:a")
        task = a._task
        assert task is not None
        with pytest.raises(LeaseLost):
            await asyncio.wait_for(task, PATIENCE)
        assert await redis.exists(kp + "alive:a") == 0
        await redis.aclose()

    run(loop, main)


def test_on_a_redis_cluster(redis_cluster: RedisClusterService) -> None:
    async def main() -> None:
        redis = RedisCluster.from_url(redis_cluster.url)
        kp = prefix()
        a, b = member(redis, kp, "a"), member(redis, kp, "b")
        seen: list[tuple[str, str]] = []
        a.on_change(lambda node, state: seen.append((node, state)))
        await a.join()
        await b.join()

        async def b_alive() -> bool:
            return seen == [("b", "alive")]

        await until(b_alive, "a reports b alive on a Redis Cluster")
        await b.leave()
        await redis.set(kp + "adopted:b", "a")
        assert states(await a.members()) == {"a": ("alive", None), "b": ("adopted", "a")}
        await a.leave()
        await redis.aclose()

    asyncio.run(main())
