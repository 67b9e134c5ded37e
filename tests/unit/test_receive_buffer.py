"""``ferromq._protocol.ReceiveBuffer`` driven the way an asyncio transport drives it.

A transport calls ``get_buffer(-1)``, writes what it read into the returned
memoryview, then calls ``buffer_updated(n)``. These tests do the same with chunks of
random sizes (one byte up to many frames), with several connections sharing one arena
and their reads interleaved, and with frames larger than the arena, and check that
every packet comes out once, in order, equal to what was encoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import cycle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.codec_strategies import DETERMINISTIC, any_packet, frame, packets_of, str16

from ferromq import codec
from ferromq._protocol import ReadArena, ReceiveBuffer

Packet = dict[str, Any]
SMALL_ARENA = 8192  # the smallest ReadArena allows: 2 * MIN_FREE
CHUNK_SIZES = st.lists(st.integers(1, 3000), min_size=1, max_size=8)


@dataclass
class Connection:
    """One peer's byte stream, fed to its ReceiveBuffer one transport read at a time."""

    wire: bytes
    buffer: ReceiveBuffer
    chunks: Iterator[int]
    pos: int = 0
    received: list[Packet] = field(default_factory=list)
    # Offsets where a frame ends: the only places where nothing may be pending.
    boundaries: set[int] = field(default_factory=set)

    @classmethod
    def open(
        cls, packets: list[Packet], arena: ReadArena, sizes: list[int], version: int = 5
    ) -> Connection:
        frames = [codec.encode(p, version) for p in packets]
        ends, total = set(), 0
        for f in frames:
            total += len(f)
            ends.add(total)
        decoder = codec.FrameDecoder()  # learns the version from the CONNECT
        return cls(b"".join(frames), ReceiveBuffer(decoder, arena), cycle(sizes), boundaries=ends)

    @property
    def done(self) -> bool:
        return self.pos == len(self.wire)

    def read(self) -> codec.CodecError | None:
        """One transport read: lend, fill, report."""
        view = self.buffer.get_buffer(-1)
        assert len(view) > 0
        n = min(next(self.chunks), len(view), len(self.wire) - self.pos)
        view[:n] = self.wire[self.pos : self.pos + n]
        view.release()  # a transport drops its view after recv_into
        self.pos += n
        packets, error = self.buffer.buffer_updated(n)
        self.received.extend(packets)
        if error is None and self.pos in self.boundaries:
            assert self.buffer.pending == 0
        return error


def stream(data: st.DataObject, *, max_size: int = 30) -> list[Packet]:
    """A CONNECT then any 5.0 packets, mostly PUBLISH."""
    connect = data.draw(packets_of("connect", 5))
    body = st.one_of(packets_of("publish", 5), any_packet(5))
    return [connect, *data.draw(st.lists(body, max_size=max_size))]


@DETERMINISTIC
@given(data=st.data(), sizes=CHUNK_SIZES, arena_size=st.sampled_from([SMALL_ARENA, 16384]))
def test_every_packet_once_in_order(data: st.DataObject, sizes: list[int], arena_size: int) -> None:
    packets = stream(data)
    conn = Connection.open(packets, ReadArena(arena_size), sizes)
    while not conn.done:
        assert conn.read() is None
    assert conn.received == packets
    assert conn.buffer.pending == 0


@settings(DETERMINISTIC, max_examples=30)
@given(data=st.data(), order=st.lists(st.integers(0, 2), min_size=1, max_size=50))
def test_connections_sharing_one_arena(data: st.DataObject, order: list[int]) -> None:
    # The transport reads one connection at a time; any connection may be next. Each
    # keeps only its unfinished frame, so another's read into the arena must not
    # disturb it.
    arena = ReadArena(SMALL_ARENA)
    conns = [
        Connection.open(stream(data, max_size=12), arena, data.draw(CHUNK_SIZES)) for _ in range(3)
    ]
    turns = cycle(order)
    while unfinished := [c for c in conns if not c.done]:
        conn = unfinished[next(turns) % len(unfinished)]
        assert conn.read() is None
    for conn in conns:
        assert conn.received == decode_whole(conn.wire)
        assert conn.buffer.pending == 0


def decode_whole(wire: bytes) -> list[Packet]:
    packets, consumed, error = codec.FrameDecoder().decode_buffer(wire)
    assert (consumed, error) == (len(wire), None)
    return packets


PATTERN = bytes(range(251)) * 1000  # no period that lines up with the frame sizes
HEAVY = settings(DETERMINISTIC, max_examples=20)  # each example moves ~0.5 MB


def big_publish(size: int, packet_id: int) -> Packet:
    return {
        "type": "publish",
        "topic": f"big/{packet_id}",
        "payload": PATTERN[:size],
        "qos": 1,
        "retain": False,
        "dup": False,
        "packet_id": packet_id,
        "properties": [("user_property", ("n", str(packet_id)))],
    }


CONNECT: Packet = {
    "type": "connect",
    "protocol_version": 5,
    "clean_start": True,
    "keep_alive": 30,
    "client_id": "big",
    "will": None,
    "username": None,
    "password": None,
    "properties": [],
}
PING: Packet = {"type": "pingreq"}


@HEAVY
@given(sizes=st.lists(st.integers(1, 70_000), min_size=1, max_size=6))
def test_frames_larger_than_the_arena(sizes: list[int]) -> None:
    # 200 KB payloads through a 16 KiB arena: the connection moves to a private buffer
    # for the big frame and back to the arena once it is through.
    packets = [CONNECT, big_publish(200_000, 1), PING, big_publish(150_000, 2), PING, PING]
    conn = Connection.open(packets, ReadArena(16384), sizes)
    while not conn.done:
        assert conn.read() is None
    assert conn.received == packets
    assert conn.buffer.pending == 0


def test_big_frame_one_byte_at_a_time_stays_bounded() -> None:
    # The worst case for copying: every read is one byte. Still exact, and the pending
    # count tracks the unfinished frame.
    packets = [CONNECT, big_publish(20_000, 7), PING]
    conn = Connection.open(packets, ReadArena(SMALL_ARENA), [1])
    start = len(codec.encode(CONNECT, 5))
    end = start + len(codec.encode(packets[1], 5))
    while not conn.done:
        assert conn.read() is None
        if start <= conn.pos < end:
            assert conn.buffer.pending == conn.pos - start
    assert conn.received == packets


@DETERMINISTIC
@given(data=st.data(), sizes=CHUNK_SIZES)
def test_error_mid_stream_returns_the_packets_before_it(
    data: st.DataObject, sizes: list[int]
) -> None:
    before = stream(data, max_size=10)
    after = data.draw(st.lists(packets_of("publish", 5), max_size=5))
    bad = frame(0x30, str16("no/#/wildcards") + b"\x00")  # [MQTT-3.3.2-2]
    wire = codec.encode_many(before, 5) + bad + codec.encode_many(after, 5)
    conn = Connection.open([], ReadArena(SMALL_ARENA), sizes)
    conn.wire = wire
    error = None
    while error is None and not conn.done:
        error = conn.read()
    assert isinstance(error, codec.TopicNameInvalid)
    assert error.reason_code == 0x90
    assert conn.received == before
    assert conn.buffer.pending == 0


def test_oversized_header_fails_before_the_body_arrives() -> None:
    decoder = codec.FrameDecoder(max_packet_size=1024, protocol_version=5)
    buffer = ReceiveBuffer(decoder, ReadArena(SMALL_ARENA))
    view = buffer.get_buffer(-1)
    ping = codec.encode(PING, 5)
    header = b"\x30\xff\xff\xff\x7f"  # 268 MB announced; nothing of it sent
    view[: len(ping) + len(header)] = ping + header
    packets, error = buffer.buffer_updated(len(ping) + len(header))
    assert packets == [PING]
    assert isinstance(error, codec.PacketTooLarge)
    assert buffer.pending == 0


def test_arena_size_has_a_floor() -> None:
    with pytest.raises(ValueError, match="at least"):
        ReadArena(SMALL_ARENA - 1)
    assert ReadArena(SMALL_ARENA).size == SMALL_ARENA
