"""Abuse at the connection level costs the attacker, not the broker or its other clients,
under uvloop and asyncio: an honest paho-mqtt client connected beside each attack keeps
publishing and receiving, the attacker's connections are closed, and $SYS says why.

- slowloris (sockets sending half a CONNECT, then holding): closed at
  ``limits.connect_timeout``, counted in ``$SYS/broker/clients/connect_timeouts``;
- a CONNECT flood from one address: banned after ``limits.flapping_max_connects``,
  then closed at accept (``clients/refused/flapping``, ``clients/banned/flapping``);
- a TLS handshake flood with garbage and stalled ClientHellos on a TLS listener:
  closed and counted in ``clients/tls_handshake_failed``.

An oversize packet announced by the length header is closed with v5 DISCONNECT 0x95
before its body is read: tests/conformance/test_10_malformed.py
(``test_oversize_is_refused_from_the_length_header``, and
``test_oversize_packet_closes`` with a bystander still served)."""

from __future__ import annotations

import queue
import socket
from collections.abc import Callable

import paho.mqtt.client as paho

from tests.conftest import RunningBroker, Starter
from tests.integration.test_accept_path import connects, subscribed, sys_value
from tests.integration.test_tls import tls_config, wait_closed, wait_for_sys_value
from tests.support.paho_clients import paho_client, subscribe
from tests.support.tls_certs import Pki

MEMORY = '[storage]\nbackend = "memory"\n[sys]\ninterval = 1\n'
ATTACKERS = 100
HALF_A_CONNECT = b"\x10\x7f\x00\x04MQTT\x05"  # announces 127 bytes, sends 7


class Honest:
    """A paho v5 client that publishes to itself at QoS 1 and checks each message comes
    back."""

    def __init__(
        self, broker: RunningBroker, configure: Callable[[paho.Client], None] | None = None
    ) -> None:
        self.client, self.inbox = paho_client(broker, "honest", 5, configure=configure)
        subscribe(self.client, "honest/#", 1)
        self.sent = 0

    def still_works(self) -> None:
        self.sent += 1
        payload = f"message {self.sent}".encode()
        self.client.publish("honest/t", payload, qos=1).wait_for_publish(10)
        try:
            assert self.inbox.get(timeout=10).payload == payload
        except queue.Empty:
            raise AssertionError(f"the honest client lost message {self.sent}") from None

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def attacker(broker: RunningBroker, source: str) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), 15, (source, 0))
    sock.settimeout(15)  # wait_closed fails on a socket the broker leaves open this long
    return sock


def test_slowloris_is_closed_at_the_connect_timeout(started: Starter, loop: str) -> None:
    broker = started(loop, '[limits]\nconnect_timeout = "1s"\n' + MEMORY)
    honest = Honest(broker)
    held = []
    for _ in range(ATTACKERS):
        sock = attacker(broker, "127.0.6.1")
        sock.sendall(HALF_A_CONNECT)
        held.append(sock)
        if len(held) % 25 == 0:
            honest.still_works()
    for sock in held:
        wait_closed(sock)
    honest.still_works()
    watcher = subscribed(broker, "watcher", "$SYS/broker/clients/connect_timeouts")
    topic = "$SYS/broker/clients/connect_timeouts"
    assert sys_value(watcher, topic, at_least=ATTACKERS) >= ATTACKERS
    honest.close()


def test_a_connect_flood_from_one_address_is_banned(started: Starter, loop: str) -> None:
    broker = started(
        loop,
        '[limits]\nflapping_max_connects = 20\nflapping_window = "1m"\nflapping_ban = "5m"\n'
        + MEMORY,
    )
    honest = Honest(broker)
    answered = 0
    for n in range(10 * 20):
        client = connects(broker.host, broker.port, f"flood-{n}", "127.0.7.1")
        if client is not None:
            answered += 1
            client.close()
        if n % 50 == 0:
            honest.still_works()
    # Every connection counts, so the flood keeps its address banned while it lasts.
    assert answered == 20
    assert connects(broker.host, broker.port, "flood-again", "127.0.7.1") is None
    assert connects(broker.host, broker.port, "neighbour", "127.0.7.2") is not None
    honest.still_works()
    watcher = subscribed(broker, "watcher", "$SYS/broker/clients/refused/flapping")
    assert sys_value(watcher, "$SYS/broker/clients/refused/flapping", at_least=181) >= 181
    broker.wait_for_log("limits.flapping_max_connects = 20 per 60s, banned for 300s")
    honest.close()


def test_a_tls_handshake_flood_is_closed_and_counted(
    started: Starter,
    loop: str,
    pki: Pki,
) -> None:
    broker = started(
        loop, tls_config(pki, sections='[limits]\nconnect_timeout = "1s"\n[sys]\ninterval = 1\n')
    )
    honest = Honest(broker, configure=lambda client: client.tls_set(str(pki.ca.cafile)))
    flood = []
    for n in range(ATTACKERS):
        sock = attacker(broker, "127.0.8.1")
        if n % 2:
            sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
        else:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
        flood.append(sock)
        if n % 25 == 0:
            honest.still_works()
    for sock in flood:
        wait_closed(sock)
    honest.still_works()
    wait_for_sys_value(broker, pki, "$SYS/broker/clients/tls_handshake_failed", ATTACKERS)
    honest.close()
