"""WebSocket listeners (``protocol = "ws" | "wss"``, ferromq.websocket_upgrade and the
engine's framing) under uvloop and asyncio: paho-mqtt over WS and WSS, MQTT packets
cut across frames and several in one frame (a raw client, tests/integration/ws_raw.py),
malformed frames closing that connection only with their close status, the close
handshake, and upgrades refused with an HTTP error (wrong path, origin, subprotocol,
version, a request held open)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from ferromq._core import encode
from tests.conftest import RunningBroker, Starter
from tests.integration.test_tls import generator_delivers_exactly_once
from tests.integration.ws_raw import WsRawClient, client_frame, upgrade_request
from tests.support.mqtt_raw import sys_value_reaches
from tests.support.paho_clients import paho_client, round_trip
from tests.support.tls_certs import Pki, client_context, tls_keys


def ws_config(listener: str = "", sections: str = "") -> str:
    """A broker whose first listener (moved by FERROMQ_LISTEN) is WebSocket."""
    listener = listener or 'protocol = "ws"\n'
    return f'[[listeners]]\n{listener}\n[storage]\nbackend = "memory"\n{sections}'


def http_answer(broker: RunningBroker, request: bytes) -> str:
    """The broker's HTTP answer to ``request``, read to the close."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer.decode("latin-1")


@pytest.mark.parametrize("version", [4, 5])
def test_paho_round_trip_over_websocket(started: Starter, loop: str, version: int) -> None:
    broker = started(loop, ws_config())
    sub, inbox = paho_client(broker, f"ws-sub-{version}", version, transport="websockets")
    pub, _ = paho_client(broker, f"ws-pub-{version}", version, transport="websockets")
    round_trip(sub, inbox, pub, 1)


@pytest.mark.parametrize("version", [4, 5])
def test_paho_round_trip_over_wss(started: Starter, loop: str, pki: Pki, version: int) -> None:
    broker = started(loop, ws_config(tls_keys(pki).replace('"tls"', '"wss"')))

    def secure(client: object) -> None:
        client.tls_set(str(pki.ca.cafile))  # type: ignore[attr-defined]

    sub, inbox = paho_client(
        broker, f"wss-sub-{version}", version, configure=secure, transport="websockets"
    )
    pub, _ = paho_client(
        broker, f"wss-pub-{version}", version, configure=secure, transport="websockets"
    )
    round_trip(sub, inbox, pub, 1)


def test_packets_span_frames_and_frames_hold_several_packets(started: Starter, loop: str) -> None:
    broker = started(loop, ws_config())
    client = WsRawClient(broker.host, broker.port)
    assert client.connect("framer")["reason_code"] == 0
    subscribe = {"type": "subscribe", "packet_id": 1, "filters": [{"filter": "f/#", "qos": 1}]}
    big = bytes(range(256)) * 400  # 100 KiB: a 64-bit frame length on the way back
    publishes = [
        {"type": "publish", "topic": f"f/{i}", "payload": big if i == 1 else b"p%d" % i}
        for i in range(3)
    ]
    # SUBSCRIBE and three PUBLISHes in one frame...
    client.send(subscribe, *publishes)
    # The SUBACK may follow the matching PUBLISHes (MQTT 3.1.1 and 5.0, 3.8.4: "The Server
    # is permitted to start sending PUBLISH packets matching the Subscription before the
    # Server sends the SUBACK"): in a node of several shards it waits for every shard.
    packets = [client.recv() for _ in range(4)]
    assert [p["type"] for p in packets].count("suback") == 1, packets
    assert [bytes(p["payload"]) for p in packets if p["type"] == "publish"] == [b"p0", big, b"p2"]
    # ...and one PUBLISH cut into 7-byte frames, the middle ones a fragmented message.
    wire = encode({"type": "publish", "topic": "f/cut", "payload": b"x" * 50}, 4)
    pieces = [wire[i : i + 7] for i in range(0, len(wire), 7)]
    frames = [client_frame(pieces[0])]
    frames.append(client_frame(pieces[1], fin=False))
    frames += [client_frame(piece, opcode=0x0, fin=False) for piece in pieces[2:-2]]
    frames.append(client_frame(pieces[-2], opcode=0x0))
    frames.append(client_frame(pieces[-1]))
    for frame in frames:
        client.send_raw(frame)
    assert bytes(client.recv()["payload"]) == b"x" * 50


def test_frames_sent_with_the_upgrade_request_are_not_lost(started: Starter, loop: str) -> None:
    broker = started(loop, ws_config())
    connect = encode({"type": "connect", "protocol_version": 4, "client_id": "eager"}, 4)
    client = WsRawClient(broker.host, broker.port, early=client_frame(connect))
    assert client.recv()["type"] == "connack"


def test_ping_pong_and_the_close_handshake(started: Starter, loop: str) -> None:
    broker = started(loop, ws_config())
    client = WsRawClient(broker.host, broker.port)
    client.connect("closer")
    client.send_raw(client_frame(b"ping!", opcode=0x9))
    assert client.recv_frame() == (0xA, b"ping!")
    client.send_raw(client_frame(struct.pack("!H", 1001) + b"going", opcode=0x8))
    assert client.recv_frame() == (0x8, struct.pack("!H", 1001))
    client.wait_closed()


MALFORMED = {
    "unmasked": (client_frame(b"\xc0\x00", mask=False), 1002),
    "reserved opcode": (client_frame(b"\xc0\x00", opcode=0x3), 1002),
    "reserved bits": (client_frame(b"\xc0\x00", first=0x40), 1002),
    "text frame": (client_frame(b"\xc0\x00", opcode=0x1), 1003),
    "oversize length header": (bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 40), 1009),
    "bad close": (client_frame(b"\x03", opcode=0x8), 1002),
    "continuation first": (client_frame(b"\xc0\x00", opcode=0x0), 1002),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_frame_closes_that_connection_only(
    started: Starter, loop: str, case: str
) -> None:
    broker = started(loop, ws_config())
    bystander = WsRawClient(broker.host, broker.port)
    bystander.connect("bystander")
    bystander.send({"type": "subscribe", "packet_id": 1, "filters": [{"filter": "b", "qos": 0}]})
    assert bystander.recv()["type"] == "suback"
    offender = WsRawClient(broker.host, broker.port)
    offender.connect("offender")
    frame, status = MALFORMED[case]
    offender.send_raw(frame)
    assert offender.close_status() == status
    offender.wait_closed()
    broker.wait_for_log("connection rejected")
    # The other client goes on, and a new one gets in.
    publisher = WsRawClient(broker.host, broker.port)
    publisher.connect("publisher")
    publisher.send({"type": "publish", "topic": "b", "payload": b"still here"})
    assert bytes(bystander.recv()["payload"]) == b"still here"


def test_no_subprotocol_is_accepted_without_one(started: Starter, loop: str) -> None:
    broker = started(loop, ws_config())
    for offered, echoed in [(None, None), ("mqttv3.1, mqtt", "mqttv3.1"), ("x, mqtt", "mqtt")]:
        client = WsRawClient(broker.host, broker.port, protocol=offered)
        header = next(
            (line for line in client.response.split("\r\n") if line.startswith("Sec-WebSocket-P")),
            None,
        )
        assert header == (None if echoed is None else f"Sec-WebSocket-Protocol: {echoed}")
        assert client.connect(f"sub-{echoed}")["reason_code"] == 0


def test_upgrades_refused_with_an_http_error(started: Starter, loop: str) -> None:
    broker = started(
        loop,
        ws_config('protocol = "ws"\npath = "/things"\norigins = ["https://app.example"]\n'),
    )
    good: dict[str, Any] = {"path": "/things", "origin": "https://app.example"}
    host = broker.host
    cases = [
        (upgrade_request(host, **{**good, "path": "/mqtt"}), "404 Not Found"),
        (upgrade_request(host, **{**good, "origin": "https://evil.example"}), "403 Forbidden"),
        (upgrade_request(host, path="/things"), "403 Forbidden"),  # no Origin at all
        (upgrade_request(host, **good, protocol="stomp"), "400 Bad Request"),
        (upgrade_request(host, **good).replace(b"Version: 13", b"Version: 8"), "426 Upgrade"),
        (upgrade_request(host, **good).replace(b"GET", b"POST"), "405 Method Not Allowed"),
        (b"GET /things HTTP/1.1\r\nHost: x\r\n\r\n", "426 Upgrade Required"),
        (b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", "400 Bad Request"),  # MQTT, no HTTP
        (b"GET /things HTTP/1.1\r\nX: " + b"y" * 9000, "431 Request Header Fields"),
    ]
    for request, status in cases:
        assert http_answer(broker, request).startswith(f"HTTP/1.1 {status}"), request[:40]
    log = broker.wait_for_log("WebSocket upgrade refused")
    assert 'why="404 no WebSocket endpoint at /mqtt; use /things"' in log
    client = WsRawClient(host, broker.port, **good)
    assert client.connect("allowed")["reason_code"] == 0


def test_an_upgrade_held_open_is_answered_408_at_the_connect_timeout(
    started: Starter, loop: str
) -> None:
    broker = started(loop, ws_config("", '[limits]\nconnect_timeout = "1s"\n[sys]\ninterval = 1\n'))
    half = upgrade_request(broker.host)[:30]
    assert http_answer(broker, half).startswith("HTTP/1.1 408 Request Timeout")
    client = WsRawClient(broker.host, broker.port)
    client.connect("sys-reader")
    sys_value_reaches(client, "$SYS/broker/clients/refused/websocket_upgrade", 1)


def test_wss_keeps_the_certificate_identity(started: Starter, loop: str, pki: Pki) -> None:
    listener = tls_keys(
        pki, "require_certificate = true\nuse_identity_as_username = true\n"
    ).replace('"tls"', '"wss"')
    broker = started(loop, ws_config(listener))
    client = WsRawClient(broker.host, broker.port, tls=client_context(pki.ca.cafile, pki.client))
    assert client.connect("dev-7")["reason_code"] == 0
    log = broker.wait_for_log("authenticated")
    assert "username=device-7" in log


def test_tls_port_config_path(tmp_path: Path) -> None:
    """``path`` must start with a slash (one line naming the key)."""
    from ferromq.config import ConfigError, load_config

    config = tmp_path / "c.toml"
    config.write_text('[[listeners]]\nprotocol = "ws"\npath = "mqtt"\n')
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.path: must start with /"):
        load_config(config, {})


@pytest.mark.parametrize("secure", [False, True])
def test_load_generator_over_websocket_accounts_every_message(
    started: Starter, loop: str, pki: Pki, secure: bool
) -> None:
    """``ferromq bench --transport ws|wss`` (its own WebSocket framing, several MQTT
    packets per frame) against the engine's deframer: QoS 1 both ways, every message
    delivered exactly once."""
    listener = tls_keys(pki).replace('"tls"', '"wss"') if secure else ""
    broker = started(loop, ws_config(listener))
    if secure:
        generator_delivers_exactly_once(broker, "wss", pki.ca.cafile)
    else:
        generator_delivers_exactly_once(broker, "ws")
