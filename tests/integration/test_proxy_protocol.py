"""PROXY protocol listeners (``proxy_protocol = true``, ferromq.proxy_protocol) with
headers the test builds by hand, under uvloop and asyncio: the address a v1 or v2
header names reaches the HTTP authentication request and the broker's log, on TCP,
TLS (the header before the handshake) and WebSocket listeners; a v2 LOCAL health
check keeps the socket's address; a connection without a header, or from outside
``proxy_trusted``, is closed and counted in $SYS."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningBroker, Starter
from tests.integration.ws_raw import WsRawClient
from tests.support.json_service import json_service
from tests.support.mqtt_raw import RawClient, sys_value_reaches
from tests.support.proxy_headers import v1, v2
from tests.support.tls_certs import Pki, client_context, tls_keys


def proxy_config(listener: str = "", sections: str = "") -> str:
    return (
        f"[[listeners]]\nproxy_protocol = true\n{listener}\n"
        f'[storage]\nbackend = "memory"\n{sections}'
    )


def rejected_peer(broker: RunningBroker, client: RawClient | WsRawClient) -> str:
    """Break the protocol (a second CONNECT) and read the peer the broker logs."""
    client.connect("proxied")
    client.send({"type": "connect", "protocol_version": 4, "client_id": "again"})
    log = broker.wait_for_log("connection rejected")
    line = next(line for line in log.splitlines() if "connection rejected" in line)
    return line.split("peer=")[1].split(" ")[0]


@pytest.mark.parametrize(
    ("header", "shown"),
    [
        (v1("192.0.2.7", 50312), "192.0.2.7:50312"),
        (v1("2001:db8::7", 4000), "[2001:db8::7]:4000"),
        (v2("198.51.100.9", 6001), "198.51.100.9:6001"),
        (v2("2001:db8::9", 6002), "[2001:db8::9]:6002"),
    ],
)
def test_the_headers_address_is_the_peer_in_the_log(
    started: Starter, loop: str, header: bytes, shown: str
) -> None:
    broker = started(loop, proxy_config())
    client = RawClient(broker.host, broker.port, preamble=header)
    assert rejected_peer(broker, client) == shown


def test_a_local_health_check_keeps_the_socket_address(started: Starter, loop: str) -> None:
    broker = started(loop, proxy_config())
    client = RawClient(broker.host, broker.port, preamble=v2("0.0.0.0", 0, command=0x0))
    assert rejected_peer(broker, client).startswith("127.0.0.1:")


def test_the_http_auth_request_carries_the_headers_address(tmp_path: Path, loop: str) -> None:
    from tests.conftest import start_broker

    def allow(_method: str, _path: str, _body: Any) -> tuple[int, Any]:
        return 200, {"result": "allow"}

    with json_service(allow) as service:
        broker = start_broker(
            tmp_path,
            loop,
            proxy_config("", f'[auth]\nproviders = ["http"]\nhttp_url = "{service.url}/auth"\n'),
        )
        try:
            client = RawClient(broker.host, broker.port, preamble=v2("203.0.113.5", 7007))
            assert client.connect("device", username="u", password=b"p")["reason_code"] == 0
            assert service.requests[0][2]["peer"] == "203.0.113.5:7007"
        finally:
            broker.stop()


def test_the_header_comes_before_tls(started: Starter, loop: str, pki: Pki) -> None:
    broker = started(loop, proxy_config(tls_keys(pki)))
    client = RawClient(
        broker.host,
        broker.port,
        tls=client_context(pki.ca.cafile),
        preamble=v1("192.0.2.44", 1234),
    )
    assert rejected_peer(broker, client) == "192.0.2.44:1234"


@pytest.mark.parametrize("secure", [False, True])
def test_the_header_comes_before_the_websocket_upgrade(
    started: Starter, loop: str, pki: Pki, secure: bool
) -> None:
    listener = tls_keys(pki).replace('"tls"', '"wss"') if secure else 'protocol = "ws"\n'
    broker = started(loop, proxy_config(listener))
    tls = client_context(pki.ca.cafile) if secure else None
    client = WsRawClient(broker.host, broker.port, tls=tls, preamble=v2("192.0.2.45", 4321))
    assert rejected_peer(broker, client) == "192.0.2.45:4321"


def refused(broker: RunningBroker, preamble: bytes) -> None:
    """The broker closes the connection without answering a byte (a reset when it closed
    with our bytes unread) within 5 s, half the default connect timeout; else a timeout
    raises."""
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(preamble)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(4096) == b""


def test_connections_without_a_valid_header_are_closed_and_counted(
    started: Starter, loop: str
) -> None:
    broker = started(
        loop, proxy_config("", '[limits]\nconnect_timeout = "1s"\n[sys]\ninterval = 1\n')
    )
    connect = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
    refused(broker, connect)  # plain MQTT, no header
    refused(broker, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX")  # malformed
    refused(broker, b"PROXY TCP4 1.2.3")  # then nothing: the connect timeout
    log = broker.wait_for_log("no valid PROXY header")
    assert 'why="no PROXY protocol header"' in log
    client = RawClient(broker.host, broker.port, preamble=v1("192.0.2.8", 8))
    client.connect("sys-reader")
    sys_value_reaches(client, "$SYS/broker/clients/refused/proxy_header", 3)


def test_headers_only_from_trusted_addresses(started: Starter, loop: str) -> None:
    broker = started(loop, proxy_config('proxy_trusted = ["10.0.0.0/8"]\n'))
    refused(broker, v1("192.0.2.7", 1))
    log = broker.wait_for_log("no valid PROXY header")
    assert "listeners[0] (default).proxy_trusted" in log
    trusting = started(loop, proxy_config('proxy_trusted = ["10.0.0.0/8", "127.0.0.1"]\n'))
    client = RawClient(trusting.host, trusting.port, preamble=v1("192.0.2.7", 1))
    assert client.connect("trusted")["reason_code"] == 0


def test_admission_sees_the_headers_address(started: Starter, loop: str) -> None:
    """Bans and per-address limits apply to the client the header names, not to the
    load balancer every connection comes from."""
    broker = started(
        loop,
        proxy_config(
            "",
            '[limits]\nmax_connections_per_address = 1\n[bans]\naddresses = ["192.0.2.66"]\n',
        ),
    )
    refused(broker, v1("192.0.2.66", 1))
    log = broker.wait_for_log("connection refused at accept")
    assert "peer=192.0.2.66:1" in log and "reason=banned" in log
    # Two clients behind the one proxy address: one connection per address each.
    first = RawClient(broker.host, broker.port, preamble=v1("192.0.2.67", 1))
    second = RawClient(broker.host, broker.port, preamble=v2("192.0.2.68", 2))
    assert first.connect("first")["reason_code"] == 0
    assert second.connect("second")["reason_code"] == 0
    # That address's second connection is closed at once (admitted, it would wait for
    # a CONNECT until the connect timeout, and `refused` would time out).
    refused(broker, v1("192.0.2.67", 3))
