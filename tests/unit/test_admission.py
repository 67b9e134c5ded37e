"""ferromq.admission's decisions without sockets: ban lookups against ``ipaddress``'s own
membership test, the flapping ban's window and expiry on a clock the test moves, and
the counts given back when connections end."""

from __future__ import annotations

import random
from dataclasses import replace
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network
from typing import Any

from ferromq.admission import Admission, Bans, parse_address
from ferromq.config import BanList, BansConfig, Config, LimitsConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, bans: Bans | None = None, **limits: Any) -> Admission:
    config = Config(limits=replace(LimitsConfig(), **limits))
    return Admission(config, bans or Bans(), clock)


def test_ban_lookup_agrees_with_ipaddress_membership() -> None:
    rng = random.Random(13)
    networks: list[IPv4Network | IPv6Network] = []
    for _ in range(200):
        if rng.random() < 0.5:
            prefix = rng.choice([8, 16, 24, 30, 32])
            networks.append(ip_network((rng.getrandbits(32), 32)).supernet(new_prefix=prefix))
        else:
            prefix = rng.choice([16, 32, 48, 64, 128])
            networks.append(ip_network((rng.getrandbits(128), 128)).supernet(new_prefix=prefix))
    bans = Bans([BanList(addresses=tuple(str(network) for network in networks))])
    # Addresses inside some network and random ones, both families.
    probes = [network[rng.randrange(network.num_addresses)] for network in networks]
    probes += [ip_address(rng.getrandbits(32)) for _ in range(500)]
    probes += [ip_address(rng.getrandbits(128)) for _ in range(500)]
    for probe in probes:
        expected = any(probe.version == n.version and probe in n for n in networks)
        assert (bans.address(probe) is not None) == expected, probe


def test_addresses_are_compared_as_addresses() -> None:
    bans = Bans([BansConfig(addresses=("2001:db8::/32", "192.0.2.7"))])
    assert bans.address(parse_address("2001:0db8:0:0::1")) == "2001:db8::/32"
    assert bans.address(parse_address("::ffff:192.0.2.7")) == "192.0.2.7/32"
    assert bans.address(parse_address("fe80::1%eth0")) is None
    assert parse_address("not an address") is None
    assert parse_address("192.0.2.7\0") is None
    assert parse_address("192.0.2.7") == ip_address("192.0.2.7")
    assert parse_address("::ffff:192.0.2.7") == ip_address("192.0.2.7")
    assert parse_address("fe80::1%eth0") == ip_address("fe80::1")
    assert parse_address("2001:db8::1") == ip_address("2001:db8::1")


def test_flapping_bans_for_the_ban_duration_then_lets_in() -> None:
    clock = Clock()
    gate = admission(clock, flapping_max_connects=3, flapping_window=10, flapping_ban=60)
    for _ in range(3):
        assert gate.admit("default", "192.0.2.1") is None
        gate.released("default", "192.0.2.1")
    refusal = gate.admit("default", "192.0.2.1")
    assert refusal is not None and refusal.reason == "flapping"
    assert gate.admit("default", "192.0.2.2") is None  # another address
    clock.now += 59
    assert gate.admit("default", "192.0.2.1") is not None
    assert gate.stats()["flapping_banned"] == 1
    clock.now += 2
    assert gate.admit("default", "192.0.2.1") is None
    assert gate.stats()["refused_flapping"] == 2


def test_connects_spread_over_windows_are_not_flapping() -> None:
    clock = Clock()
    gate = admission(clock, flapping_max_connects=3, flapping_window=10, flapping_ban=60)
    for _ in range(10):
        for _ in range(3):
            assert gate.admit("default", "192.0.2.1") is None
            gate.released("default", "192.0.2.1")
        clock.now += 10


def test_per_address_slots_come_back_when_released() -> None:
    gate = admission(Clock(), max_connections_per_address=2)
    assert gate.admit("default", "192.0.2.1") is None
    assert gate.admit("default", "192.0.2.1") is None
    refusal = gate.admit("default", "192.0.2.1")
    assert refusal is not None and refusal.rule == "limits.max_connections_per_address = 2"
    gate.released("default", "192.0.2.1")
    assert gate.admit("default", "192.0.2.1") is None
    assert gate.stats()["connections_open"] == 2


def test_per_user_limit_counts_open_connections_and_takeovers_once() -> None:
    gate = admission(Clock(), max_connections_per_user=2)
    assert gate.admit_connect(1, 11, "a-1", "alice", "192.0.2.1") is None
    assert gate.admit_connect(2, 12, "a-2", "alice", "192.0.2.1") is None
    refusal = gate.admit_connect(3, 13, "a-3", "alice", "192.0.2.1")
    assert refusal is not None and refusal.reason_code == 0x97
    assert gate.admit_connect(3, 13, "a-1", "alice", "192.0.2.1") is None  # takes a-1 over
    gate.closed(1)
    gate.closed(3)
    assert gate.admit_connect(4, 14, "a-4", "alice", "192.0.2.1") is None
    assert gate.admit_connect(5, 15, "anon", None, "192.0.2.1") is None


def test_use_returns_the_connected_clients_a_new_ban_matches() -> None:
    clock = Clock()
    gate = admission(clock)
    gate.admit_connect(1, 11, "victim", None, "192.0.2.1")
    gate.admit_connect(2, 12, "other", "mallory", "192.0.2.2")
    gate.admit_connect(3, 13, "other-2", None, "198.51.100.9")
    gate.admit_connect(4, 14, "fine", "alice", "203.0.113.1")
    gate.closed(4)
    bans = Bans(
        [
            BanList(
                client_ids=("victim",),
                usernames=("mallory", "alice"),
                addresses=("198.51.100.0/24",),
            )
        ]
    )
    assert sorted(gate.use(Config(), bans)) == [(1, 11), (2, 12), (3, 13)]
    refusal = gate.admit_connect(5, 15, "victim", None, "203.0.113.2")
    assert refusal is not None and refusal.reason_code == 0x8A
    refusal = gate.admit("default", "198.51.100.200")
    assert refusal is not None and refusal.rule == "bans: 198.51.100.0/24"
