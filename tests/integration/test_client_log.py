"""The operator's log with real clients over real sockets, under uvloop and asyncio:
one line per connect (client id, user name, PROXY-aware peer, listener, protocol, keep
alive, session settings), disconnect (with its reason), subscribe and unsubscribe, as
text and as JSON; a rotating log file; syslog to a unix datagram socket the test binds;
a per-client packet trace switched on and off with SIGHUP; nothing at warning level."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conftest import (
    RunningBroker,
    Starter,
    hang_up,
    owner_tag,
    serving,
    start_broker,
    suite_shards,
    untagged,
)
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, subscribe
from tests.support.proxy_headers import v1

MEMORY = '[storage]\nbackend = "memory"\n'


def lines_with(log: str, *parts: str) -> list[str]:
    return [line for line in log.splitlines() if all(part in line for part in parts)]


def line_with(broker: RunningBroker, *parts: str) -> str:
    """The first log line holding every one of ``parts``, waiting for it (without its
    shard's tag: :func:`~tests.conftest.untagged`)."""
    deadline = time.monotonic() + 10
    while not (found := lines_with(broker.log(), *parts)):
        assert time.monotonic() < deadline, f"no line with {parts}:\n{broker.log()}"
        time.sleep(0.05)
    return untagged(found[0])


def accepts(broker: RunningBroker) -> bool:
    try:
        socket.create_connection((broker.host, broker.port), timeout=2).close()
    except OSError:
        return False
    return True


def stopped_log(broker: RunningBroker) -> str:
    """The whole log once the broker has exited: nothing more can be written."""
    assert broker.stop() == 0, broker.log()
    return broker.log()


def session_of(client: paho.Client) -> None:
    client.unsubscribe("plant/#")
    client.disconnect()
    client.loop_stop()


def test_connect_subscribe_unsubscribe_disconnect_as_text(started: Starter, loop: str) -> None:
    broker = started(loop, MEMORY)
    client, _ = paho_client(
        broker, "text-1", 5, configure=lambda c: c.username_pw_set("alice", "pw")
    )
    subscribe(client, "plant/#", 1)
    session_of(client)
    connected = line_with(broker, "INFO ferromq.client client connected client_id=text-1")
    assert re.search(r" username=alice peer=127\.0\.0\.1:\d+ ", connected), connected
    assert "listener=default protocol=5.0 keep_alive=60 clean_start=true" in connected
    assert "session_expiry=0 session_present=false" in connected
    assert line_with(broker, "ferromq.client subscribed client_id=text-1").endswith(
        "filter=plant/# qos=1 granted=1"
    )
    assert line_with(broker, "unsubscribed client_id=text-1").endswith("filter=plant/#")
    disconnected = line_with(broker, "client disconnected client_id=text-1")
    assert disconnected.endswith('reason=client_disconnect reason_code="0x00 Normal disconnection"')


def test_the_same_events_as_json(started: Starter, loop: str) -> None:
    broker = started(loop, MEMORY + '[log]\nformat = "json"\n')
    client, _ = paho_client(broker, "json-1", 4, clean=False)
    subscribe(client, "plant/#", 0)
    session_of(client)
    line_with(broker, '"msg": "client disconnected"')
    events = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
    by_msg = {event["msg"]: event for event in events if event.get("client_id") == "json-1"}
    connected = by_msg["client connected"]
    assert connected["logger"] == "ferromq.client"
    assert connected["level"] == "info"
    assert connected["protocol"] == "3.1.1"
    assert connected["keep_alive"] == 60
    assert connected["clean_start"] is False
    assert connected["username"] is None
    assert connected["peer"].startswith("127.0.0.1:")
    assert connected["listener"] == "default"
    assert by_msg["subscribed"]["filter"] == "plant/#"
    assert by_msg["subscribed"]["granted"] == 0
    assert by_msg["unsubscribed"]["filter"] == "plant/#"
    assert by_msg["client disconnected"]["reason"] == "client_disconnect"


def test_disconnect_reasons(started: Starter, loop: str) -> None:
    broker = started(loop, MEMORY)
    dropped = RawClient(broker.host, broker.port, version=5)
    dropped.connect("dropped")
    dropped.close()
    assert "reason=socket_closed" in line_with(broker, "disconnected client_id=dropped")

    first = RawClient(broker.host, broker.port, version=5)
    first.connect("twin")
    second = RawClient(broker.host, broker.port, version=5)
    second.connect("twin")
    assert 'reason=taken_over reason_code="0x8E Session taken over"' in line_with(
        broker, "disconnected client_id=twin"
    )

    rude = RawClient(broker.host, broker.port, version=5)
    rude.connect("rude")
    rude.send({"type": "connect", "protocol_version": 5, "client_id": "rude"})
    assert 'reason=protocol_error reason_code="0x82 Protocol Error"' in line_with(
        broker, "disconnected client_id=rude"
    )

    sleepy = RawClient(broker.host, broker.port, version=5)
    sleepy.connect("sleepy", keep_alive=1)
    assert "reason=keep_alive_timeout" in line_with(broker, "disconnected client_id=sleepy")

    log = stopped_log(broker)
    assert lines_with(log, "disconnected client_id=twin", "reason=server_shutdown")


def test_the_peer_is_the_proxy_headers_client(started: Starter, loop: str) -> None:
    broker = started(loop, '[[listeners]]\nname = "lb"\nproxy_protocol = true\n' + MEMORY)
    client = RawClient(broker.host, broker.port, preamble=v1("192.0.2.7", 50312))
    client.connect("proxied")
    line = line_with(broker, "client connected client_id=proxied")
    assert "peer=192.0.2.7:50312 listener=lb protocol=3.1.1" in line


def test_nothing_is_logged_per_client_at_warning(tmp_path: Path, loop: str) -> None:
    broker = start_broker(tmp_path, loop, MEMORY + '[log]\nlevel = "warning"\n', ready=accepts)
    try:
        client, _ = paho_client(broker, "quiet-1", 5)
        subscribe(client, "plant/#", 1)
        session_of(client)
        log = stopped_log(broker)
    finally:
        broker.stop()
    assert "client connected" not in log
    assert "subscribed" not in log
    assert "client disconnected" not in log


def test_a_rotating_log_file(tmp_path: Path, loop: str) -> None:
    path = tmp_path / "logs" / "ferromq.log"
    path.parent.mkdir()
    config = (
        MEMORY + f'[log]\ndestination = "file"\nfile = "{path}"\nmax_bytes = "2KiB"\nbackups = 2\n'
    )
    broker = start_broker(tmp_path, loop, config, ready=lambda _: serving(_read(path)))
    try:
        for i in range(40):
            client = RawClient(broker.host, broker.port, version=4)
            client.connect(f"rotating-{i}")
            client.send({"type": "disconnect"})
            client.expect_closed()
        line_with_file = _wait_in(path.parent, "client connected client_id=rotating-39")
        # Rotated at the size (before the long "stopped" lines, each a file of its own).
        assert all((path.parent / f"ferromq.log.{n}").stat().st_size <= 2048 for n in (1, 2))
    finally:
        broker.stop()
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "ferromq.log",
        "ferromq.log.1",
        "ferromq.log.2",
    ]
    assert "INFO ferromq.client client connected client_id=rotating-39" in line_with_file
    assert "rotating" not in broker.log()  # nothing of it on stderr


def test_a_reload_moves_the_log_to_the_file_named_now(tmp_path: Path, loop: str) -> None:
    """SIGHUP reopens the destination: the node's lines (every shard's) go to the new
    file from then on, none to the old one."""
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    config = MEMORY + '[log]\ndestination = "file"\nfile = "{}"\n'
    broker = start_broker(
        tmp_path, loop, config.format(before), ready=lambda _: serving(_read(before))
    )
    try:
        broker.config_path.write_text(config.format(after))
        broker.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _read(after).count("configuration reloaded") < suite_shards():
            assert time.monotonic() < deadline, _read(before) + _read(after)
            time.sleep(0.05)
        for n in range(4):  # owned by either shard of a node of two
            RawClient(broker.host, broker.port, version=4).connect(f"moved-{n}")
            _wait_in(tmp_path, f"client connected client_id=moved-{n}")
    finally:
        broker.stop()
    assert "moved-" not in _read(before)
    assert lines_with(_read(after), "client connected client_id=moved-3")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_in(directory: Path, text: str) -> str:
    """The line holding ``text`` in the log file or its rotated copies, waiting for it."""

    def every_file() -> str:
        return "\n".join(_read(path) for path in sorted(directory.iterdir()))

    deadline = time.monotonic() + 10
    while text not in every_file():
        assert time.monotonic() < deadline, f"no {text!r} in {directory}:\n{every_file()}"
        time.sleep(0.05)
    return untagged(next(line for line in every_file().splitlines() if text in line))


@pytest.fixture
def syslog_socket() -> Iterator[tuple[Path, socket.socket]]:
    """A unix datagram socket standing in for /dev/log (a short path: sun_path holds
    108 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="fmq-", dir="/tmp"))
    path = directory / "log"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    yield path, sock
    sock.close()
    shutil.rmtree(directory)


def test_syslog_to_a_unix_datagram_socket(
    tmp_path: Path, loop: str, syslog_socket: tuple[Path, socket.socket]
) -> None:
    path, sock = syslog_socket
    received: list[str] = []

    def datagrams() -> str:
        while True:
            try:
                received.append(sock.recv(65536).decode())
            except BlockingIOError:
                return "\n".join(received)

    config = MEMORY + f'[log]\ndestination = "syslog"\nsyslog_address = "{path}"\n'
    broker = start_broker(tmp_path, loop, config, ready=lambda _: serving(datagrams()))
    try:
        client = RawClient(broker.host, broker.port, version=5)
        client.connect("sys-1")
        deadline = time.monotonic() + 10
        while not lines_with(datagrams(), "client connected client_id=sys-1"):
            assert time.monotonic() < deadline, received
            time.sleep(0.05)
    finally:
        broker.stop()
    message = next(m for m in received if "client connected client_id=sys-1" in m)
    # <30>: facility daemon (3) * 8 + severity info (6); the ident names the process.
    assert message.startswith(f"<30>ferromq[{broker.process.pid}]: INFO ferromq.client ")


def test_a_client_trace_switched_on_and_off_by_sighup(started: Starter, loop: str) -> None:
    broker = started(loop, MEMORY)
    traced, _ = paho_client(broker, "traced-1", 5)
    other, _ = paho_client(broker, "other-1", 5)
    traced.publish("t/before", b"before", qos=1).wait_for_publish(5)

    broker.config_path.write_text(MEMORY + '[log]\ntrace_clients = ["traced-1"]\n')
    hang_up(broker, "configuration reloaded")
    traced.publish("t/x", b"hello", qos=1).wait_for_publish(5)
    other.publish("t/y", b"other", qos=1).wait_for_publish(5)
    line = line_with(broker, "INFO ferromq.trace packet in client_id=traced-1 type=publish")
    assert line.endswith("packet_id=2 topic=t/x qos=1 payload_bytes=5 payload=hello")
    assert lines_with(broker.log(), "payload=hello" + owner_tag("traced-1")), "its owner's"
    assert line_with(broker, "packet out client_id=traced-1 type=puback").endswith(
        "packet_id=2 reason_codes=0x10"  # No matching subscribers
    )

    broker.config_path.write_text(MEMORY)
    hang_up(broker, "configuration reloaded")
    traced.publish("t/after", b"after", qos=1).wait_for_publish(5)
    for client in (traced, other):
        client.disconnect()
        client.loop_stop()
    log = stopped_log(broker)
    assert lines_with(log, "trace on client_id=traced-1")
    assert lines_with(log, "trace off client_id=traced-1")
    assert not lines_with(log, "ferromq.trace", "client_id=other-1")
    assert not lines_with(log, "ferromq.trace", "before")
    assert not lines_with(log, "ferromq.trace", "after")
