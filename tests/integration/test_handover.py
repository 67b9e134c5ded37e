"""Client-id affinity in a node of two shards (``ferromq serve`` with ``workers = 2``,
ferromq.shard.handover) under uvloop and asyncio: whichever shard the kernel gives a
connection to (SO_REUSEPORT), the client is served by the shard that owns its client
id, so its persistent session is found again and a takeover reaches the old
connection. Over ``tcp`` (the socket handed over), ``tls`` and ``ws`` (relayed), and a
PROXY listener; the owner sees the real client address and certificate.

Which shard accepted a connection cannot be seen from outside; which shard serves a
client can: each shard's log lines carry ``shard=K``, and ``client connected`` names
the client id. Without the hand-over about half of the connections below would be
served by the shard that does not own their client id."""

from __future__ import annotations

import queue
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from ferromq._core import shard_of
from tests.conftest import RunningBroker, start_broker
from tests.integration.ws_raw import WsRawClient
from tests.support.mqtt_raw import RawClient
from tests.support.paho_clients import paho_client, subscribe
from tests.support.proxy_headers import v1
from tests.support.tls_certs import Pki, client_context, tls_keys

# Its brokers set their own number of shards: the suite at two shards skips it.
pytestmark = pytest.mark.own_workers

CLIENTS = 12
"""Client ids per test: both shards own some (checked by :func:`_ids`)."""
_CONNECTED = re.compile(r"client connected .*")


def _ids(prefix: str) -> list[str]:
    ids = [f"{prefix}-{n}" for n in range(CLIENTS)]
    assert {shard_of(client_id, 2) for client_id in ids} == {0, 1}
    return ids


def _field(line: str, name: str) -> str:
    return line.split(f" {name}=", 1)[1].split(" ", 1)[0]


def _served(node: RunningBroker) -> list[tuple[str, int, str, str]]:
    """Every ``client connected`` line: (client id, serving shard, peer, user name)."""
    return [
        (
            _field(line, "client_id"),
            int(_field(line, "shard")),
            _field(line, "peer"),
            _field(line, "username"),
        )
        for line in _CONNECTED.findall(node.log())
    ]


def _all_served_by_their_owner(node: RunningBroker, ids: list[str], connects: int) -> None:
    """Each of ``ids`` connected ``connects`` times, each time served by its owner (the
    lines may follow the CONNACK by a little: they are waited for)."""
    want, deadline = connects * len(ids), time.monotonic() + 5
    served = [entry for entry in _served(node) if entry[0] in ids]
    while len(served) < want and time.monotonic() < deadline:
        time.sleep(0.05)
        served = [entry for entry in _served(node) if entry[0] in ids]
    assert len(served) == want, served
    assert all(shard == shard_of(client_id, 2) for client_id, shard, _, _ in served), served


@pytest.fixture
def node() -> Iterator[list[RunningBroker]]:
    """The nodes a test starts (:func:`_start`), stopped when it ends."""
    nodes: list[RunningBroker] = []
    yield nodes
    for running in nodes:
        running.stop()


def _start(
    nodes: list[RunningBroker], tmp_path: Path, loop: str, listeners: str, listening: int = 1
) -> RunningBroker:
    """A node of two shards whose first listener FERROMQ_LISTEN moves; ready once every
    shard listens on every one of its ``listening`` listeners."""
    config = f'[server]\nworkers = 2\n{listeners}\n[storage]\nbackend = "memory"\n'
    running = start_broker(
        tmp_path, loop, config, ready=lambda node: node.log().count(" listening ") >= 2 * listening
    )
    nodes.append(running)
    return running


def test_every_client_is_served_by_its_owner_and_finds_its_session_again(
    node: list[RunningBroker], tmp_path: Path, loop: str
) -> None:
    broker = _start(node, tmp_path, loop, "[[listeners]]")
    ids = _ids("tcp")
    for client_id in ids:  # a persistent session subscribed at QoS 1, then offline
        client, _ = paho_client(broker, client_id, 5, clean=False)
        subscribe(client, f"to/{client_id}", 1)
        client.disconnect()
        client.loop_stop()
    publisher, _ = paho_client(broker, "tcp-publisher", 5)
    for client_id in ids:
        publisher.publish(f"to/{client_id}", client_id.encode(), qos=1).wait_for_publish(5)
    publisher.disconnect()
    publisher.loop_stop()
    for client_id in ids:  # each reconnect lands on either shard
        inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
        client, _ = paho_client(broker, client_id, 5, clean=False, on_message=inbox.put)
        assert inbox.get(timeout=5).payload == client_id.encode()
        client.disconnect()
        client.loop_stop()
    _all_served_by_their_owner(broker, ids, 2)


def test_a_takeover_reaches_the_old_connection_whichever_shard_took_either(
    node: list[RunningBroker], tmp_path: Path, loop: str
) -> None:
    broker = _start(node, tmp_path, loop, "[[listeners]]")
    ids = _ids("takeover")
    for client_id in ids:
        old = RawClient(broker.host, broker.port, version=5)
        assert old.connect(client_id)["reason_code"] == 0
        new = RawClient(broker.host, broker.port, version=5)
        assert new.connect(client_id)["reason_code"] == 0
        # [MQTT-3.1.4-3]: the existing connection is disconnected, v5 with 0x8E.
        assert old.expect_closed() == [
            {"type": "disconnect", "reason_code": 0x8E, "properties": []}
        ]
        new.close()
    _all_served_by_their_owner(broker, ids, 2)


def test_a_tls_client_is_relayed_to_its_owner_with_its_address_and_certificate(
    node: list[RunningBroker], tmp_path: Path, loop: str, pki: Pki
) -> None:
    extra = "require_certificate = true\nuse_identity_as_username = true\n"
    broker = _start(node, tmp_path, loop, f"[[listeners]]\n{tls_keys(pki, extra)}")
    context = client_context(pki.ca.cafile, pki.client)
    ids = _ids("tls")
    ports: dict[str, list[int]] = {}
    for clean in (True, False):
        for client_id in ids:
            client = RawClient(broker.host, broker.port, version=5, tls=context)
            ports.setdefault(client_id, []).append(client.sock.getsockname()[1])
            expiry = [("session_expiry_interval", 300)]
            connack = client.connect(client_id, clean=clean, properties=expiry)
            assert connack["reason_code"] == 0
            assert connack["session_present"] is not clean  # the first connect's session
            client.send({"type": "disconnect"})
            client.close()
    _all_served_by_their_owner(broker, ids, 2)
    for client_id, _, peer, username in _served(broker):
        assert username == "device-7"  # the certificate's CN, as the user name
        assert peer.startswith("127.0.0.1:") and int(peer.split(":")[1]) in ports[client_id]


def test_a_websocket_client_is_relayed_to_its_owner(
    node: list[RunningBroker], tmp_path: Path, loop: str
) -> None:
    broker = _start(node, tmp_path, loop, '[[listeners]]\nprotocol = "ws"')
    ids = _ids("ws")
    for client_id in ids:
        client, _ = paho_client(broker, client_id, 5, clean=False, transport="websockets")
        subscribe(client, f"to/{client_id}", 1)
        client.disconnect()
        client.loop_stop()
    publisher = WsRawClient(broker.host, broker.port, version=5)
    assert publisher.connect("ws-publisher")["reason_code"] == 0
    for n, client_id in enumerate(ids, 1):
        publisher.send(
            {
                "type": "publish",
                "topic": f"to/{client_id}",
                "payload": b"x" * 70_000,
                "qos": 1,
                "packet_id": n,
            }
        )
        assert publisher.recv()["type"] == "puback"
    for client_id in ids:
        inbox: queue.Queue[paho.MQTTMessage] = queue.Queue()
        client, _ = paho_client(
            broker, client_id, 5, clean=False, on_message=inbox.put, transport="websockets"
        )
        assert inbox.get(timeout=5).payload == b"x" * 70_000
        client.disconnect()
        client.loop_stop()
    _all_served_by_their_owner(broker, ids, 2)


def test_a_proxied_client_reaches_its_owner_with_the_address_its_header_names(
    node: list[RunningBroker], tmp_path: Path, loop: str
) -> None:
    broker = _start(node, tmp_path, loop, "[[listeners]]\nproxy_protocol = true")
    ids = _ids("proxied")
    for n, client_id in enumerate(ids):
        client = RawClient(
            broker.host, broker.port, version=5, preamble=v1("203.0.113.7", 40000 + n)
        )
        assert client.connect(client_id)["reason_code"] == 0
        client.send({"type": "disconnect"})
        client.close()
    _all_served_by_their_owner(broker, ids, 1)
    peers = {client_id: peer for client_id, _, peer, _ in _served(broker)}
    assert peers == {client_id: f"203.0.113.7:{40000 + n}" for n, client_id in enumerate(ids)}


@pytest.mark.parametrize(
    ("first", "reply"),
    [
        # A protocol level above 5: MQTT 5's 0x84 with its reason, then closed
        # [MQTT-3.1.2-2].
        (
            b"\x10\x11\x00\x04MQTT\x06\x02\x00\x3c\x00\x05owned",
            b"\x20\x1c\x00\x84\x19\x1f\x00\x16protocol level above 5",
        ),
        # An older unknown level: 3.1.1's return code 0x01, which it can read.
        (b"\x10\x11\x00\x04MQTT\x02\x02\x00\x3c\x00\x05owned", b"\x20\x02\x00\x01"),
        # Not a CONNECT first [MQTT-3.1.0-1]: closed without a reply.
        (b"\xc0\x00", b""),
        # A CONNECT announcing 2 MiB, over limits.max_packet_size: closed at its header.
        (b"\x10\x80\x80\x80\x01", b""),
        # A Remaining Length of five bytes [MQTT-1.5.5]: closed.
        (b"\x10\xff\xff\xff\xff\x01", b""),
    ],
)
def test_a_malformed_first_packet_is_refused_as_on_one_shard(
    node: list[RunningBroker], tmp_path: Path, loop: str, first: bytes, reply: bytes
) -> None:
    broker = _start(node, tmp_path, loop, "[[listeners]]")
    for _ in range(CLIENTS):  # both shards accept some
        with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
            sock.sendall(first)
            answer = b""
            while chunk := sock.recv(64):
                answer += chunk
        assert answer == reply


def test_a_first_packet_too_large_for_a_hand_over_message_is_relayed(
    node: list[RunningBroker], tmp_path: Path, loop: str
) -> None:
    broker = _start(node, tmp_path, loop, "[[listeners]]")
    ids = _ids("large")
    will = {"topic": "gone", "payload": b"w" * 60_000, "qos": 0, "retain": False}
    for client_id in ids:  # a CONNECT of 90 KB, past MESSAGE_MAX (64 KiB)
        client = RawClient(broker.host, broker.port, version=5)
        connack = client.connect(client_id, will=will, username="u", password=b"p" * 30_000)
        assert connack["reason_code"] == 0
        client.send({"type": "pingreq"})
        assert client.recv()["type"] == "pingresp"
        client.send({"type": "disconnect"})
        client.close()
    _all_served_by_their_owner(broker, ids, 1)
