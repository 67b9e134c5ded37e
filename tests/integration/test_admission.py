"""Admission (ferromq.admission) with real brokers, real sockets and real clients, under
uvloop and asyncio: connections per source address refused at accept; connections per
user refused at CONNECT (v5 0x97, 3.1.1 return code 3) except a session takeover; a
listener's connect rate; bans by address / CIDR (IPv4 and IPv6), client id and user
name from ``[bans]`` and a bans file; a ban added with ``ferromq bans add`` and SIGHUP
closing the connections it matches (v5 DISCONNECT 0x98) and lifted again; the
``ferromq bans`` CLI's errors. Loopback has every 127.x.y.z, so each test's clients
connect from addresses of their own (``source``)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningBroker, Starter, ferromq_command, hang_up
from tests.integration.test_accept_path import (
    connected,
    connects,
    round_trip,
    subscribed,
    sys_value,
)
from tests.support.mqtt_raw import RawClient
from tests.support.services import free_port

MEMORY = '[storage]\nbackend = "memory"\n[sys]\ninterval = 1\n'
BANNED, QUOTA_EXCEEDED, ADMINISTRATIVE_ACTION = 0x8A, 0x97, 0x98
NOT_AUTHORIZED_V3, SERVER_UNAVAILABLE_V3 = 5, 3


def bans(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ferromq_command(), "bans", *args], capture_output=True, text=True, timeout=30
    )


def refused_at_accept(broker: RunningBroker, source: str, port: int | None = None) -> bool:
    """A connection from ``source`` is closed with nothing sent back."""
    client = RawClient(broker.host, port or broker.port, source=source)
    client.send({"type": "connect", "protocol_version": 4, "client_id": f"from-{source}"})
    return client.expect_closed() == []


def connack(broker: RunningBroker, client_id: str, version: int, **fields: Any) -> int:
    """The reason code (v5) or return code (3.1.1) of a CONNECT; the client is closed."""
    client = RawClient(broker.host, broker.port, version)
    code = int(client.connect(client_id, **fields)["reason_code"])
    client.close()
    return code


def test_connections_per_address_are_refused_at_accept_and_counted(
    started: Starter, loop: str
) -> None:
    broker = started(loop, "[limits]\nmax_connections_per_address = 2\n" + MEMORY)
    topic = "$SYS/broker/clients/refused/max_connections_per_address"
    watcher = subscribed(broker, "watcher", "alive", topic, source="127.0.1.1")
    crowd = [connected(broker.host, broker.port, f"c{n}", "127.0.1.2") for n in range(2)]

    assert refused_at_accept(broker, "127.0.1.2")
    assert sys_value(watcher, topic, at_least=1) >= 1
    broker.wait_for_log("limits.max_connections_per_address = 2")
    assert connects(broker.host, broker.port, "elsewhere", "127.0.1.3") is not None
    assert round_trip(watcher, "alive")

    crowd.pop().close()  # the address gets its slot back once the broker sees the close
    assert any(connects(broker.host, broker.port, f"after{n}", "127.0.1.2") for n in range(50))


def test_a_listener_overrides_the_per_address_limit(started: Starter, loop: str) -> None:
    second = free_port()
    broker = started(
        loop,
        "[[listeners]]\n"
        f'[[listeners]]\nname = "gateway"\nport = {second}\nmax_connections_per_address = 3\n'
        "[limits]\nmax_connections_per_address = 1\n" + MEMORY,
    )
    first = connected(broker.host, broker.port, "one", "127.0.2.1")
    assert refused_at_accept(broker, "127.0.2.1")
    gateway = [connected(broker.host, second, f"g{n}", "127.0.2.2") for n in range(3)]
    assert refused_at_accept(broker, "127.0.2.2", second)
    assert len(gateway) == 3 and first.poll() == []


@pytest.mark.parametrize(("version", "refused"), [(5, QUOTA_EXCEEDED), (4, SERVER_UNAVAILABLE_V3)])
def test_connections_per_user_are_refused_at_connect(
    started: Starter, loop: str, version: int, refused: int
) -> None:
    broker = started(loop, "[limits]\nmax_connections_per_user = 2\n" + MEMORY)
    topic = "$SYS/broker/clients/refused/max_connections_per_user"
    watcher = subscribed(broker, "watcher", topic)
    alice = []
    for n in range(2):
        client = RawClient(broker.host, broker.port, version)
        assert client.connect(f"alice-{n}", username="alice")["reason_code"] == 0
        alice.append(client)

    assert connack(broker, "alice-2", version, username="alice") == refused
    assert connack(broker, "bob-0", version, username="bob") == 0
    assert sys_value(watcher, topic, at_least=1) >= 1
    broker.wait_for_log("limits.max_connections_per_user = 2")
    # Reconnecting with an open connection's client id takes that session over
    # [MQTT-3.1.4-3]: the user still holds two connections, so it is let in.
    again = RawClient(broker.host, broker.port, version)
    assert again.connect("alice-0", username="alice")["reason_code"] == 0
    alice[0].expect_closed()
    assert connack(broker, "alice-3", version, username="alice") == refused


def test_a_listener_connect_rate_refuses_the_excess(started: Starter, loop: str) -> None:
    broker = started(loop, "[[listeners]]\nmax_connect_rate = 1\n" + MEMORY)
    # One connection a second: of a burst of 20 most are closed at accept.
    results = [connects(broker.host, broker.port, f"r{n}") for n in range(20)]
    assert None in results and results[0] is not None
    broker.wait_for_log("listeners[0] (default).max_connect_rate = 1")


def test_bans_from_the_config_and_the_bans_file(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    bans_file = tmp_path / "bans.toml"
    assert bans("add", "--file", str(bans_file), "--client-id", "evil").returncode == 0
    assert bans("add", "--file", str(bans_file), "--address", "127.0.3.0/24").returncode == 0
    broker = started(
        loop,
        f'[bans]\nfile = "{bans_file}"\nusernames = ["mallory"]\naddresses = ["127.0.4.4"]\n'
        + MEMORY,
    )
    topic = "$SYS/broker/clients/refused/banned"
    watcher = subscribed(broker, "watcher", "alive", topic)

    assert refused_at_accept(broker, "127.0.3.9")  # the file's network
    assert refused_at_accept(broker, "127.0.4.4")  # the config's address
    assert connects(broker.host, broker.port, "neighbour", "127.0.4.5") is not None
    assert connack(broker, "evil", 5) == BANNED
    assert connack(broker, "evil", 4) == NOT_AUTHORIZED_V3
    assert connack(broker, "fine", 5, username="mallory") == BANNED
    assert sys_value(watcher, topic, at_least=5) >= 5
    assert round_trip(watcher, "alive")


def test_a_ban_added_at_run_time_closes_what_it_matches(
    started: Starter, loop: str, tmp_path: Path
) -> None:
    bans_file = tmp_path / "bans.toml"
    bans_file.write_text("")
    broker = started(loop, f'[bans]\nfile = "{bans_file}"\n' + MEMORY)
    bystander = subscribed(broker, "bystander", "alive")
    victim = RawClient(broker.host, broker.port, 5)
    assert victim.connect("victim")["reason_code"] == 0
    legacy = RawClient(broker.host, broker.port, 4)
    assert legacy.connect("legacy")["reason_code"] == 0
    network = RawClient(broker.host, broker.port, 5, source="127.0.5.6")
    assert network.connect("on-the-network")["reason_code"] == 0

    added = bans("add", "--file", str(bans_file), "--client-id", "victim")
    assert added.returncode == 0, added.stderr
    assert bans("add", "--file", str(bans_file), "--client-id", "legacy").returncode == 0
    assert bans("add", "--file", str(bans_file), "--address", "127.0.5.4/30").returncode == 0
    hang_up(broker, "configuration reloaded")

    disconnect = victim.expect_closed()
    assert [(p["type"], p["reason_code"]) for p in disconnect] == [
        ("disconnect", ADMINISTRATIVE_ACTION)
    ]
    assert legacy.expect_closed() == []  # 3.1.1 has no DISCONNECT from the server
    assert [p["reason_code"] for p in network.expect_closed()] == [ADMINISTRATIVE_ACTION]
    assert connack(broker, "victim", 5) == BANNED
    assert refused_at_accept(broker, "127.0.5.7")
    assert round_trip(bystander, "alive"), "a client no ban matches was disturbed"

    assert bans("remove", "--file", str(bans_file), "--client-id", "victim").returncode == 0
    hang_up(broker, "configuration reloaded")
    assert connack(broker, "victim", 5) == 0


def test_an_ipv6_ban_closes_at_accept(started: Starter, loop: str) -> None:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    port = free_port()
    broker = started(
        loop,
        f'[[listeners]]\n[[listeners]]\nname = "v6"\nhost = "::1"\nport = {port}\n'
        '[bans]\naddresses = ["::1/128"]\n' + MEMORY,
    )
    client = RawClient("::1", port)
    client.send({"type": "connect", "protocol_version": 4, "client_id": "v6"})
    assert client.expect_closed() == []
    assert connects(broker.host, broker.port, "v4") is not None
    broker.wait_for_log("bans: ::1/128")


def test_the_bans_cli_lists_and_refuses_bad_requests(tmp_path: Path) -> None:
    bans_file = str(tmp_path / "bans.toml")
    assert bans("add", "--file", bans_file, "--username", "mallory").returncode == 0
    assert bans("add", "--file", bans_file, "--address", "2001:db8::/32").returncode == 0
    listed = bans("list", "--file", bans_file)
    assert listed.stdout.splitlines() == ["username\tmallory", "address\t2001:db8::/32"]

    twice = bans("add", "--file", bans_file, "--username", "mallory")
    assert (twice.returncode, twice.stderr.count("\n")) == (2, 1)
    assert "user name 'mallory' is already banned" in twice.stderr
    bad = bans("add", "--file", bans_file, "--address", "10.0.0.1/8")
    assert bad.returncode == 2
    assert 'addresses: "10.0.0.1/8" is not an IPv4 or IPv6 address' in bad.stderr
    absent = bans("remove", "--file", bans_file, "--client-id", "nobody")
    assert absent.returncode == 2 and "client id 'nobody' is not banned" in absent.stderr
    assert bans("list", "--file", bans_file).stdout == listed.stdout  # nothing changed
    nowhere = bans("add", "--file", str(tmp_path / "no" / "bans.toml"), "--username", "x")
    assert (nowhere.returncode, nowhere.stderr.count("\n")) == (2, 1)
    assert "bans.toml: No such file or directory" in nowhere.stderr


def test_bans_that_need_connects_in_python_wait_for_a_restart(started: Starter, loop: str) -> None:
    # Started without admission at CONNECT, the engine accepts CONNECTs itself: a reload
    # cannot hand them to Python, so the new bans are logged as needing a restart and
    # the running (no) bans stay, at CONNECT and at accept alike.
    broker = started(loop, MEMORY)
    broker.config_path.write_text(
        '[bans]\nclient_ids = ["late"]\naddresses = ["127.0.9.9"]\n' + MEMORY
    )
    hang_up(broker, "changed settings need a restart")
    broker.wait_for_log("bans.addresses,bans.client_ids")
    assert connack(broker, "late", 5) == 0
    assert connects(broker.host, broker.port, "address", "127.0.9.9") is not None
