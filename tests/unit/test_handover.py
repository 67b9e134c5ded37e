"""The pieces of the connection hand-over between a node's shards
(ferromq.shard.handover) on real sockets and a real event loop: the header that travels
with a handed-over descriptor, the router that reads a connection's first packet to
learn its owner, and the sender and receiver on a SOCK_SEQPACKET pair."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import resource
import socket
from collections.abc import Iterator

import pytest

from ferromq._core import encode, shard_of
from ferromq.shard.handover import (
    MESSAGE_MAX,
    READ_SIZE,
    Handed,
    HandoverReceiver,
    HandoverSender,
    Router,
)
from ferromq.shard.identity import ShardIdentity


def _connect(client_id: str, version: int = 5) -> bytes:
    return encode({"type": "connect", "client_id": client_id, "clean_start": True}, version)


def _owned_by(owner: int, count: int = 2) -> str:
    """A client id shard ``owner`` of ``count`` owns."""
    return next(f"c-{n}" for n in itertools.count() if shard_of(f"c-{n}", count) == owner)


def _shard(index: int) -> ShardIdentity:
    return ShardIdentity(index, 2, -1, (), -1, ())


def test_the_header_carries_what_the_owner_needs_and_the_bytes_read() -> None:
    handed = Handed(1, "websocket", ("10.0.0.7", 40001), "device-9", b"\x10\x00rest")
    assert Handed.decode(handed.encode()) == handed
    plain = Handed(0, "mqtt", ("::1", 2), None, b"")
    assert Handed.decode(plain.encode()) == plain


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (b"\x00\x00", "no header"),
        (b"\x00\x00\x00\x02[]", "unreadable"),
        (b'\x00\x00\x00\x1a[0, "tcp", "h", 1, null]', "framing 'tcp'"),
    ],
)
def test_a_damaged_header_is_refused_naming_what_is_wrong(message: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Handed.decode(message)


class _Routed:
    """What a router decided, and whether it gave its admission slot back."""

    def __init__(self) -> None:
        self.routes: list[tuple[bytes, int]] = []
        self.released = 0
        self.timeouts = 0
        self.decided = asyncio.get_running_loop().create_future()
        self.lost = asyncio.get_running_loop().create_future()

    def route(self, transport: asyncio.Transport, data: bytes, owner: int) -> None:
        self.routes.append((data, owner))
        transport.close()
        self.decided.set_result(None)

    def release(self) -> None:
        self.released += 1
        self.lost.set_result(None)

    def timed_out(self) -> None:
        self.timeouts += 1


async def _route(
    chunks: list[bytes],
    *,
    framing: str = "mqtt",
    index: int = 0,
    max_packet_size: int = 1 << 20,
    timeout: float = 10.0,
    preread: bytes = b"",
) -> _Routed:
    """Route a connection whose client sends ``chunks``, one send each, over a real
    socket (the router's side made the way the listener makes it)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    routed = _Routed()
    router = Router(
        framing,  # type: ignore[arg-type]
        _shard(index),
        timeout,
        max_packet_size,
        preread,
        routed.route,
        routed.release,
        routed.timed_out,
    )
    await loop.connect_accepted_socket(lambda: router, ours)
    theirs.setblocking(False)
    for chunk in chunks:
        await loop.sock_sendall(theirs, chunk)
        await asyncio.sleep(0.01)
    either = [routed.decided, routed.lost]
    await asyncio.wait_for(asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED), 10)
    theirs.close()
    return routed


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Iterator[asyncio.Runner]:
    import uvloop

    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        yield runner


@pytest.mark.parametrize("owner", [0, 1])
def test_the_router_names_the_owner_with_every_byte_read(run: asyncio.Runner, owner: int) -> None:
    connect = _connect(_owned_by(owner))
    subscribe = encode(
        {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "a", "qos": 1}]}, 5
    )
    # The CONNECT cut inside its fixed header and its payload, a SUBSCRIBE right after it.
    chunks = [connect[:1], connect[1:7], connect[7:] + subscribe]
    routed = run.run(_route(chunks))
    assert routed.routes == [(connect + subscribe, owner)]
    assert routed.released == 0


@pytest.mark.parametrize("preread", [0, 5])
def test_the_router_reads_a_connect_in_websocket_frames(run: asyncio.Runner, preread: int) -> None:
    """Cut inside the frame's header; ``preread``: bytes the upgrade read past its
    request, given to the router when it is made."""
    connect = _connect(_owned_by(1))
    frame = bytes([0x82, 0x80 | len(connect)]) + b"\0\0\0\0" + connect  # masked, zero key
    chunks = [frame[preread:4], frame[4:]] if preread < 4 else [frame[preread:]]
    routed = run.run(_route(chunks, framing="websocket", preread=frame[:preread]))
    assert routed.routes == [(frame, 1)]


@pytest.mark.parametrize(
    "first",
    [
        encode({"type": "pingreq"}, 4),  # not a CONNECT: the engine refuses it here
        _connect(""),  # no client id: the engine assigns one this shard owns
    ],
)
def test_what_has_no_owner_stays_on_the_accepting_shard(run: asyncio.Runner, first: bytes) -> None:
    routed = run.run(_route([first], index=1))
    assert routed.routes == [(first, 1)]


def test_an_oversized_first_packet_goes_to_the_local_engine_at_its_header(
    run: asyncio.Runner,
) -> None:
    connect = _connect(_owned_by(1) + "x" * 300)
    routed = run.run(_route([connect[:3]], max_packet_size=256))
    assert routed.routes == [(connect[:3], 0)]


def test_a_silent_connection_is_closed_at_the_connect_timeout(run: asyncio.Runner) -> None:
    routed = run.run(_route([_connect(_owned_by(1))[:4]], timeout=0.2))
    assert routed.routes == []
    assert (routed.released, routed.timeouts) == (1, 1)


async def _hand_over(
    count: int, most: int = 1024, backlog: list[bool] | None = None
) -> tuple[list[bytes], list[str]]:
    """Hand ``count`` connections with 16 KiB read each over a SEQPACKET pair while the
    owner is not reading (the socket buffer takes about a dozen, the sender ``most``
    more), then read them at the owner: what the owner got, what was lost; each client
    reads what the owner sent it, or the close of a connection lost. ``backlog`` gets
    what the sender said of its backlog, in order."""
    loop = asyncio.get_running_loop()
    receive, send = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    clients: list[socket.socket] = []
    lost: list[str] = []
    said = [] if backlog is None else backlog
    sender = HandoverSender(loop, send.detach(), lost.append, said.append, most)
    for n in range(count):
        client, server = socket.socketpair()
        clients.append(client)
        handed = Handed(0, "mqtt", ("127.0.0.1", n), None, b"%d" % n + bytes(READ_SIZE))
        sender.send(handed.encode(), server.detach())
    got: list[bytes] = []
    done = loop.create_future()

    def received(handed: Handed, sock: socket.socket) -> None:
        number = handed.data.rstrip(b"\0")
        sock.sendall(number)
        sock.close()
        got.append(number)
        if len(got) == count - len(lost):
            done.set_result(None)

    receiver = HandoverReceiver(loop, receive.detach(), received, lost.append, 0.05)
    await asyncio.wait_for(done, 10)
    receiver.close()
    sender.close()
    answers = [client.recv(16) for client in clients]
    for client in clients:
        client.close()
    assert answers == got + [b""] * len(lost)
    return got, lost


def test_hand_overs_wait_for_a_full_owner_and_arrive_in_order(run: asyncio.Runner) -> None:
    # 40 x 16 KiB is more than the socket buffer holds (208 KiB): most wait in the FIFO.
    assert run.run(_hand_over(40)) == ([b"%d" % n for n in range(40)], [])


def test_a_sender_says_when_its_hand_overs_pile_up_and_when_they_are_taken(
    run: asyncio.Runner,
) -> None:
    # About a dozen fit the socket buffer; the rest wait, passing half of 40 (the
    # listener stops accepting then), and are all taken once the owner reads.
    backlog: list[bool] = []
    got, lost = run.run(_hand_over(40, most=40, backlog=backlog))
    assert (len(got), lost) == (40, [])
    assert backlog == [True, False]


def test_an_owner_that_stops_taking_hand_overs_holds_a_bounded_number(
    run: asyncio.Runner,
) -> None:
    got, lost = run.run(_hand_over(40, most=5))
    assert 5 < len(got) < 40 and got == [b"%d" % n for n in range(len(got))]
    assert lost == ["the owner shard is not taking hand-overs: 5 waiting"] * (40 - len(got))


async def _hand_over_out_of_descriptors(count: int) -> list[str]:
    """Hand ``count`` connections to an owner that has no descriptor free when they
    arrive, then free some: what reaches it (each connection still answering)."""
    loop = asyncio.get_running_loop()
    receive, send = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lost: list[str] = []
    sender = HandoverSender(loop, send.detach(), lost.append, print)
    clients = []
    for n in range(count):
        client, server = socket.socketpair()
        clients.append(client)
        sender.send(Handed(0, "mqtt", ("127.0.0.1", n), None, b"").encode(), server.detach())
    got: list[int] = []
    done = loop.create_future()

    def received(handed: Handed, sock: socket.socket) -> None:
        sock.sendall(b"%d" % handed.peer[1])
        sock.close()
        got.append(handed.peer[1])
        if len(got) == count:
            done.set_result(None)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    lowest = os.dup(0)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest + 16, hard))
    try:
        with contextlib.suppress(OSError):  # take every descriptor left
            while True:
                held.append(os.dup(0))
        receiver = HandoverReceiver(loop, receive.detach(), received, lost.append, 0.05)
        await asyncio.sleep(0.3)  # the receiver is ready meanwhile, and pauses
        assert got == []
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    await asyncio.wait_for(done, 10)
    receiver.close()
    sender.close()
    assert [client.recv(8) for client in clients] == [b"%d" % n for n in range(count)]
    for client in clients:
        client.close()
    return lost


def test_an_owner_out_of_descriptors_takes_its_hand_overs_once_some_are_free(
    run: asyncio.Runner,
) -> None:
    # Received then, each would come without its descriptor (MSG_CTRUNC) and be lost.
    assert run.run(_hand_over_out_of_descriptors(5)) == []


def test_a_hand_over_message_larger_than_a_message_may_be_is_refused() -> None:
    big = Handed(0, "mqtt", ("h", 1), None, bytes(MESSAGE_MAX))
    receive, send = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = asyncio.new_event_loop()
    sender = HandoverSender(loop, send.detach(), print, print)
    with pytest.raises(ValueError, match="hand-over message of"):
        sender.send(big.encode(), -1)
    sender.close()
    receive.close()
    loop.close()
