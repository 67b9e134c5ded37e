"""The node's admission counters (``ferromq._core.NodeCounters``, one memfd every shard
maps) from Python: two mappings of one region count as one; two shards' admissions
share the node's limits; a shard started again gives back what its predecessor held; a
full table leaves a key untracked (its limit not applied) instead of failing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from ferromq._core import NodeCounters
from ferromq.admission import Admission, Bans
from ferromq.config import Config, LimitsConfig


@pytest.fixture
def region() -> Iterator[int]:
    fd = NodeCounters.create(1 << 10, 2)
    yield fd
    os.close(fd)


def shards(fd: int, clock: list[float], **limits: Any) -> tuple[Admission, Admission]:
    config = Config(limits=replace(LimitsConfig(), **limits))
    return (
        Admission(config, Bans(), lambda: clock[0], NodeCounters(fd, 0)),
        Admission(config, Bans(), lambda: clock[0], NodeCounters(fd, 1)),
    )


def test_two_mappings_of_one_region_see_one_count(region: int) -> None:
    first, second = NodeCounters(region, 0), NodeCounters(region, 1)
    assert first.take("key", 2) is True
    assert second.take("key", 2) is True
    assert first.take("key", 2) is False  # the node's limit, counted on both
    assert second.count("key") == 2
    second.give("key")
    assert first.count("key") == 1
    assert first.take("key", 2) is True


def test_two_shards_share_the_nodes_connection_limits(region: int) -> None:
    clock = [1000.0]
    one, two = shards(region, clock, max_connections=3, max_connections_per_address=2)
    assert one.admit("default", "192.0.2.1") is None
    assert two.admit("default", "192.0.2.1") is None
    refusal = one.admit("default", "192.0.2.1")
    assert refusal is not None and refusal.reason == "max_connections_per_address"
    assert two.admit("default", "192.0.2.2") is None
    refusal = one.admit("default", "192.0.2.3")
    assert refusal is not None and refusal.reason == "max_connections"
    two.released("default", "192.0.2.1")
    assert one.admit("default", "192.0.2.1") is None
    # Each shard reports what it holds; the node's admin sums them.
    assert (one.stats()["connections_open"], two.stats()["connections_open"]) == (2, 1)


def test_a_handed_over_connection_keeps_one_slot(region: int) -> None:
    clock = [1000.0]
    accepting, owner = shards(region, clock, max_connections=1)
    assert accepting.admit("default", "192.0.2.1") is None
    accepting.released("default", "192.0.2.1")  # handed to its client id's owner
    owner.adopted("default", "192.0.2.1")
    refusal = accepting.admit("default", "192.0.2.9")
    assert refusal is not None and refusal.reason == "max_connections"
    owner.released("default", "192.0.2.1")
    assert accepting.admit("default", "192.0.2.9") is None


def test_connect_rate_and_flapping_are_the_nodes(region: int) -> None:
    clock = [1000.0]
    one, two = shards(region, clock, max_connect_rate=2, flapping_max_connects=3)
    assert one.admit("default", "192.0.2.1") is None
    assert two.admit("default", "192.0.2.1") is None
    refusal = one.admit("default", "192.0.2.2")
    assert refusal is not None and refusal.reason == "connect_rate"
    clock[0] += 1.0  # the bucket refills
    assert two.admit("default", "192.0.2.1") is None  # the address's third connect
    refusal = one.admit("default", "192.0.2.1")
    assert refusal is not None and refusal.reason == "flapping"
    clock[0] += 1.0
    refusal = two.admit("default", "192.0.2.1")  # the ban one made holds on two
    assert refusal is not None and refusal.reason == "flapping"
    assert (one.stats()["flapping_banned"], two.stats()["flapping_banned"]) == (1, 0)


def test_users_are_counted_across_shards_except_a_takeover(region: int) -> None:
    clock = [1000.0]
    one, two = shards(region, clock, max_connections_per_user=1)
    assert one.admit_connect(1, 1, "a", "alice", "192.0.2.1") is None
    refusal = two.admit_connect(1, 1, "b", "alice", "192.0.2.1")
    assert refusal is not None and refusal.reason == "max_connections_per_user"
    assert one.admit_connect(2, 2, "a", "alice", "192.0.2.1") is None  # takes "a" over
    one.closed(1)
    one.closed(2)
    assert two.admit_connect(1, 1, "b", "alice", "192.0.2.1") is None


def test_a_restarted_shard_gives_back_what_its_predecessor_held(region: int) -> None:
    died = NodeCounters(region, 1)
    assert died.take("broker", 0) and died.take("broker", 0)
    assert NodeCounters(region, 0).take("broker", 0)
    NodeCounters(region, 1, reset=True)
    assert NodeCounters(region, 0).count("broker") == 1


def test_a_full_table_leaves_new_keys_untracked() -> None:
    fd = NodeCounters.create(32, 1)  # the smallest table: 32 slots
    try:
        counters = NodeCounters(fd, 0)
        results = [counters.take(f"key-{n}", 1) for n in range(40)]
        assert results[:32] == [True] * 32
        assert results[32:] == [None] * 8  # no room: not tracked, not refused
        assert counters.take("key-39", 1) is None  # and stays so, consistently
        counters.give("key-39")
        assert counters.count("key-39") == 0
        assert counters.take("key-0", 1) is False  # the tracked ones still count
        # Admission admits what it cannot track (the limit is not applied to it).
        config = Config(limits=replace(LimitsConfig(), max_connections_per_address=1))
        gate = Admission(config, Bans(), counters=counters)
        assert gate.admit("default", "192.0.2.1") is None
        assert gate.admit("default", "192.0.2.1") is None
    finally:
        os.close(fd)


def test_a_region_is_checked_when_mapped(region: int) -> None:
    with pytest.raises(ValueError, match="not one for shard 2"):
        NodeCounters(region, 2)
    with pytest.raises(ValueError, match="power of two"):
        NodeCounters.create(100, 2)
