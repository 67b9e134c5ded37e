"""The pieces of a node's shards that Python sees (docs/shards.md): the bus region two
engines share through a memfd, the owner of a client id, and the client id read from
a connection's first bytes before any engine sees them."""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator

import pytest

from ferromq._core import Bus, Engine, connect_owner, encode, shard_of
from ferromq.config import Config
from ferromq.engine import engine_from_config
from ferromq.shard.bus_pump import ring_capacity


def _fnv1a(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return value


def _shard(index: int) -> Engine:
    engine = engine_from_config(Config())
    engine.set_shards(index, 2)
    return engine


@pytest.fixture
def bus_fd() -> Iterator[int]:
    fd = Bus.create(2, 1 << 16)
    yield fd
    os.close(fd)


def test_a_retained_message_published_on_one_shard_is_held_by_the_other(bus_fd: int) -> None:
    first, second = _shard(0), _shard(1)
    first_bus, second_bus = Bus(bus_fd, 0, 2), Bus(bus_fd, 1, 2)
    first.publish("plant/7/state", b"on", retain=True)
    assert first_bus.send(first) == []  # the other side never parked: no wake-up
    assert second.retained_message("plant/7/state", 0) is None
    assert second_bus.receive(second, 0) == 2  # the message and its RETAIN
    held = second.retained_message("plant/7/state", 0)
    assert held is not None and held.payload == b"on"


def test_a_parked_shard_is_woken_once_records_arrive(bus_fd: int) -> None:
    first, second = _shard(0), _shard(1)
    first_bus, second_bus = Bus(bus_fd, 0, 2), Bus(bus_fd, 1, 2)
    assert second_bus.park() is False  # nothing arrived: it may sleep
    first.publish("a", b"1", retain=True)
    assert first_bus.send(first) == [1]
    assert second_bus.receive(second, 0) == 2


def test_a_full_ring_keeps_the_rest_for_the_next_tick(bus_fd: int) -> None:
    first, second = _shard(0), _shard(1)
    first_bus, second_bus = Bus(bus_fd, 0, 2), Bus(bus_fd, 1, 2)
    for n in range(200):
        first.publish(f"t/{n}", b"x" * 1000, retain=True)
    first_bus.send(first)
    assert first_bus.backlog() > 0
    received = second_bus.receive(second, 0)
    while first_bus.backlog():
        first_bus.send(first)
        received += second_bus.receive(second, 0)
    assert received == 400
    assert len(second.retained_messages("#", 0, limit=1000).items) == 200


def test_a_region_for_another_node_shape_is_refused(bus_fd: int) -> None:
    with pytest.raises(ValueError, match="not one for shard 2 of 2"):
        Bus(bus_fd, 2, 2)
    with pytest.raises(ValueError, match="not one for shard 0 of 3"):
        Bus(bus_fd, 0, 3)
    with pytest.raises(ValueError, match="power of two"):
        Bus.create(2, 5000)


def test_the_owner_of_a_client_id_is_fnv1a_modulo_the_shards() -> None:
    for client_id in ("sensor-1", "", "ünï", "x" * 300):
        for count in (1, 2, 3, 16):
            assert shard_of(client_id, count) == _fnv1a(client_id) % count
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("a", 0)


def test_the_owner_is_read_from_the_first_packet() -> None:
    connect = encode({"type": "connect", "client_id": "meter-42"}, 5)
    owner = shard_of("meter-42", 16)
    assert connect_owner(connect, "mqtt", 1024, 99, 16) == owner
    assert connect_owner(connect + b"\xc0\x00", "mqtt", 1024, 99, 16) == owner
    assert connect_owner(connect[:-1], "mqtt", 1024, 99, 16) is None
    assert connect_owner(b"", "mqtt", 1024, 99, 16) is None
    # What is not a routable CONNECT stays on shard 99, whose engine refuses it.
    assert connect_owner(b"\xc0\x00", "mqtt", 1024, 99, 16) == 99
    assert connect_owner(b"\x10\x02\x00\x05", "mqtt", 1024, 99, 16) == 99  # name cut short
    assert connect_owner(connect, "mqtt", 8, 99, 16) == 99  # above max_packet_size
    empty = encode({"type": "connect", "client_id": ""}, 5)
    assert connect_owner(empty, "mqtt", 1024, 99, 16) == 99


def test_the_owner_is_read_through_websocket_frames() -> None:
    connect = encode({"type": "connect", "client_id": "browser-1"}, 4)
    key = b"\x01\x02\x03\x04"
    masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(connect))
    frame = struct.pack("!BB", 0x82, 0x80 | len(connect)) + key + masked
    assert connect_owner(frame, "websocket", 1024, 99, 16) == shard_of("browser-1", 16)
    assert connect_owner(frame[:-3], "websocket", 1024, 99, 16) is None
    with pytest.raises(ValueError, match="unknown framing"):
        connect_owner(connect, "carrier-pigeon", 1024, 99, 16)


def test_rings_shrink_as_shards_multiply() -> None:
    assert ring_capacity(2) == 16 * 1024 * 1024
    assert ring_capacity(64) == 1024 * 1024
    sizes = [ring_capacity(n) for n in range(2, 65)]
    assert all(a >= b for a, b in itertools.pairwise(sizes))
