"""Admission: whether a new connection, and then its CONNECT, may come in.

One :class:`Admission` per broker keeps the counts and the ban list and answers two
questions, each once per connection (never per message):

- **At accept** (:meth:`Admission.admit`, from :mod:`ferromq.listener` with the
  listener's name and the peer's address, before a byte is read). The first check that
  fails names the refusal, counted in ``$SYS/broker/clients/refused/<reason>``:

  1. ``banned``: the address is in the ban list (an address or a CIDR network);
  2. ``flapping``: the address is serving a temporary ban, or this connection is one
     more than ``limits.flapping_max_connects`` within ``limits.flapping_window``,
     which bans it for ``limits.flapping_ban`` (EMQX's flapping detection; every
     connection counts, refused ones too, so a flood keeps itself out);
  3. ``connect_rate``: the listener's ``max_connect_rate`` bucket is empty (a token
     bucket of one second's worth);
  4. ``listener_max_connections`` / ``max_connections``: the listener's / the broker's
     open connections;
  5. ``max_connections_per_address``: the address's open connections on every listener,
     against the listener's override or ``[limits]``.

  An admitted socket holds its slots until :meth:`Admission.released`.
- **At CONNECT** (:meth:`Admission.admit_connect`, from :class:`~ferromq.auth.AuthGate`
  after authentication, so the user name is the authenticated one): a banned client id,
  user name or address gets v5 CONNACK 0x8A Banned (3.1.1 return code 5 Not
  authorized); a user at ``limits.max_connections_per_user`` gets 0x97 Quota exceeded,
  which the engine maps to 3.1.1 return code 3 Server unavailable — 3.1.1 has no quota
  code (§3.2.2.3), and 3 says "try again later" where 5 would say the credentials are
  refused, which devices commonly treat as final. A CONNECT with the client id of one
  of the user's open connections takes that session over [MQTT-3.1.4-3], so that
  connection is not counted against it. The connection is known until
  :meth:`Admission.closed`. The engine hands CONNECTs to Python only when something
  decides them there (:func:`checks_connect`, ``ferromq.engine``).

Run-time changes (:meth:`Admission.use`, on SIGHUP and for a later admin API): new
limits and bans apply to the next connection; the connected clients a new ban matches
are returned, for the gate to close with DISCONNECT 0x98 Administrative action (0x8A
Banned exists for CONNACK only, §3.14.2.1).

Costs: a ban lookup is one set lookup per distinct prefix length in the ban list (an
address is masked to each length and looked up), so it does not grow with the number of
bans. Memory: a count per address with an open connection, a flapping window per
address seen within ``flapping_window`` (swept once per window) and an entry per
temporary ban. IPv6 addresses are counted one by one, like IPv4 ones (a client holding
a /64 can spread over it; ban the network).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from pathlib import Path
from typing import Final, Literal, TypeAlias, get_args

from ferromq.config import (
    BanList,
    BansConfig,
    Config,
    LimitsConfig,
    ListenerConfig,
    listener_path,
    load_ban_file,
)

__all__ = [
    "ADMINISTRATIVE_ACTION",
    "BANNED",
    "QUOTA_EXCEEDED",
    "REFUSAL_REASONS",
    "Admission",
    "Bans",
    "Refusal",
    "RefusalReason",
    "checks_connect",
    "load_bans",
    "parse_address",
]

# MQTT 5 reason codes (§2.4).
BANNED: Final = 0x8A
QUOTA_EXCEEDED: Final = 0x97
ADMINISTRATIVE_ACTION: Final = 0x98

RefusalReason: TypeAlias = Literal[
    "banned",
    "flapping",
    "connect_rate",
    "listener_max_connections",
    "max_connections",
    "max_connections_per_address",
    "max_connections_per_user",
]
REFUSAL_REASONS: Final[tuple[RefusalReason, ...]] = get_args(RefusalReason)
_CONNACK: Final[dict[RefusalReason, int]] = {
    "banned": BANNED,
    "max_connections_per_user": QUOTA_EXCEEDED,
}

Address: TypeAlias = IPv4Address | IPv6Address


def parse_address(host: str) -> Address | None:
    """The IP address of a peer's host (an IPv4-mapped IPv6 address as IPv4), or None
    for what is not an IP address."""
    try:
        address = ip_address(host)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address.__class__(address.packed)  # drops an IPv6 scope id ("%eth0")


def checks_connect(config: Config) -> bool:
    """Whether admission has something to decide at CONNECT, so the engine must hand
    every CONNECT to Python."""
    return config.limits.max_connections_per_user > 0 or config.bans.configured()


@dataclass(frozen=True)
class Refusal:
    """Why a connection may not come in: the counted reason and the rule that said so,
    as the log shows it (``limits.max_connections_per_address = 5``)."""

    reason: RefusalReason
    rule: str

    @property
    def reason_code(self) -> int:
        """The v5 CONNACK reason code of a refusal at CONNECT."""
        return _CONNACK[self.reason]


class Bans:
    """A ban list compiled for lookups: client ids and user names in sets, networks
    grouped by (IP version, prefix length) as sets of masked integers."""

    def __init__(self, lists: Iterable[BanList] = ()) -> None:
        client_ids: set[str] = set()
        usernames: set[str] = set()
        networks: dict[tuple[int, int], set[int]] = {}
        for bans in lists:
            client_ids.update(bans.client_ids)
            usernames.update(bans.usernames)
            for text in bans.addresses:
                network = ip_network(text)  # the config schema checked it
                shift = network.max_prefixlen - network.prefixlen
                key = (network.version, network.prefixlen)
                networks.setdefault(key, set()).add(int(network.network_address) >> shift)
        self._client_ids = frozenset(client_ids)
        self._usernames = frozenset(usernames)
        self._networks = {key: frozenset(masked) for key, masked in networks.items()}

    def address(self, address: Address | None) -> str | None:
        """The banned network holding ``address``, if any (``10.0.0.0/8``)."""
        if address is None:
            return None
        value, version, bits = int(address), address.version, address.max_prefixlen
        for (net_version, prefix), masked in self._networks.items():
            if net_version == version and value >> (bits - prefix) in masked:
                return str(ip_network((value >> (bits - prefix) << (bits - prefix), prefix)))
        return None

    def connection(
        self, client_id: str, username: str | None, address: Address | None
    ) -> str | None:
        """What bans a connection, for the log (``client id "x"``), if anything does."""
        if client_id in self._client_ids:
            return f"client id {client_id!r}"
        if username is not None and username in self._usernames:
            return f"user name {username!r}"
        network = self.address(address)
        return None if network is None else f"address {network}"


def load_bans(config: BansConfig) -> Bans:
    """``[bans]`` and its file compiled. Raises :class:`~ferromq.config.ConfigError`
    naming the file and the key when the file cannot be used."""
    lists: list[BanList] = [config]
    if config.file is not None:
        lists.append(load_ban_file(Path(config.file)))
    return Bans(lists)


@dataclass
class _Bucket:
    """A token bucket of ``rate`` tokens a second holding one second's worth."""

    rate: int
    tokens: float = 0.0
    at: float = 0.0

    def take(self, now: float) -> bool:
        self.tokens = min(float(self.rate), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class _Listener:
    """One listener's limits, each with the rule the log names when it refuses."""

    max_connections: tuple[int, str]
    max_connections_per_address: tuple[int, str]
    bucket: tuple[_Bucket, str] | None
    open: int = 0


@dataclass
class _Window:
    start: float
    connects: int = 0


@dataclass(frozen=True)
class _Client:
    token: int
    client_id: str
    username: str | None
    address: Address | None


@dataclass
class _State:
    """What the counts are over; kept across :meth:`Admission.use`."""

    open: int = 0
    per_address: Counter[Address] = field(default_factory=Counter)
    windows: dict[Address, _Window] = field(default_factory=dict)
    banned_until: dict[Address, float] = field(default_factory=dict)
    clients: dict[int, _Client] = field(default_factory=dict)
    users: dict[str, dict[int, str]] = field(default_factory=dict)  # user → conn → client id
    refused: Counter[str] = field(default_factory=Counter)
    next_sweep: float = 0.0


class Admission:
    """The broker's admission decisions and the counts they rest on."""

    def __init__(
        self, config: Config, bans: Bans, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._state = _State()
        self._listeners: dict[str, _Listener] = {}
        self._limits = config.limits
        self._bans = bans
        self.use(config, bans)

    def use(self, config: Config, bans: Bans) -> list[tuple[int, int]]:
        """Decide later connections with ``config``'s limits and ``bans``; returns the
        connected clients (connection id, token) ``bans`` matches."""
        self._limits, self._bans = config.limits, bans
        listeners = {
            listener.name: self._listener(index, listener, config.limits)
            for index, listener in enumerate(config.listeners)
        }
        for name, listener in listeners.items():
            old = self._listeners.get(name)
            if old is not None:
                listener.open = old.open
        self._listeners = listeners
        return [
            (conn, client.token)
            for conn, client in self._state.clients.items()
            if bans.connection(client.client_id, client.username, client.address) is not None
        ]

    @staticmethod
    def _listener(index: int, config: ListenerConfig, limits: LimitsConfig) -> _Listener:
        def limit(key: str, value: int | None) -> tuple[int, str]:
            """The listener's ``key`` or else ``[limits]``'s, with its rule."""
            if value is None:
                value = getattr(limits, key)
                assert isinstance(value, int)
                return value, f"limits.{key} = {value}"
            return value, f"{listener_path(index, config)}.{key} = {value}"

        rate, rate_rule = limit("max_connect_rate", config.max_connect_rate)
        return _Listener(
            limit("max_connections", config.max_connections),
            limit("max_connections_per_address", config.max_connections_per_address),
            (_Bucket(rate, float(rate)), rate_rule) if rate else None,
        )

    def admit(self, listener: str, host: str) -> Refusal | None:
        """Whether a connection from ``host`` just accepted on the listener named
        ``listener`` may stay; admitted, it holds its slots until :meth:`released`."""
        refusal = self._refusal(self._listeners[listener], parse_address(host))
        if refusal is not None:
            self._state.refused[refusal.reason] += 1
        return refusal

    def _refusal(self, listener: _Listener, address: Address | None) -> Refusal | None:
        state, limits = self._state, self._limits
        network = self._bans.address(address)
        if network is not None:
            return Refusal("banned", f"bans: {network}")
        now = self._clock()
        if address is not None and limits.flapping_max_connects and self._flapping(address, now):
            return Refusal(
                "flapping",
                f"limits.flapping_max_connects = {limits.flapping_max_connects} per "
                f"{limits.flapping_window}s, banned for {limits.flapping_ban}s",
            )
        if listener.bucket is not None and not listener.bucket[0].take(now):
            return Refusal("connect_rate", listener.bucket[1])
        most, rule = listener.max_connections
        if most and listener.open >= most:
            return Refusal("listener_max_connections", rule)
        if limits.max_connections and state.open >= limits.max_connections:
            return Refusal("max_connections", f"limits.max_connections = {limits.max_connections}")
        most, rule = listener.max_connections_per_address
        if address is not None and most and state.per_address[address] >= most:
            return Refusal("max_connections_per_address", rule)
        listener.open += 1
        state.open += 1
        if address is not None:
            state.per_address[address] += 1
        return None

    def _flapping(self, address: Address, now: float) -> bool:
        """Whether ``address`` is banned for flapping, counting this connection."""
        state, limits = self._state, self._limits
        if now >= state.next_sweep:
            self._sweep(now)
        until = state.banned_until.get(address)
        if until is not None:
            if now < until:
                return True
            del state.banned_until[address]
        window = state.windows.get(address)
        if window is None or now - window.start >= limits.flapping_window:
            window = state.windows[address] = _Window(now)
        window.connects += 1
        if window.connects <= limits.flapping_max_connects:
            return False
        del state.windows[address]
        state.banned_until[address] = now + limits.flapping_ban
        return True

    def _sweep(self, now: float) -> None:
        state, window = self._state, self._limits.flapping_window
        state.windows = {a: w for a, w in state.windows.items() if now - w.start < window}
        state.banned_until = {a: t for a, t in state.banned_until.items() if now < t}
        state.next_sweep = now + window

    def released(self, listener: str, host: str) -> None:
        """A connection :meth:`admit` let in has ended; called once for it."""
        state = self._state
        self._listeners[listener].open -= 1
        state.open -= 1
        address = parse_address(host)
        if address is not None:
            state.per_address[address] -= 1
            if not state.per_address[address]:
                del state.per_address[address]

    def admit_connect(
        self, conn: int, token: int, client_id: str, username: str | None, host: str
    ) -> Refusal | None:
        """Whether the authenticated CONNECT of connection ``conn`` (from ``host``) may
        come in; admitted, it is known until :meth:`closed`."""
        address = parse_address(host)
        banned = self._bans.connection(client_id, username, address)
        refusal: Refusal | None = None
        if banned is not None:
            refusal = Refusal("banned", f"bans: {banned}")
        elif username is not None and self._limits.max_connections_per_user:
            limit = self._limits.max_connections_per_user
            others = self._state.users.get(username, {})
            taken_over = client_id in others.values()
            if len(others) - taken_over >= limit:
                refusal = Refusal(
                    "max_connections_per_user", f"limits.max_connections_per_user = {limit}"
                )
        if refusal is not None:
            self._state.refused[refusal.reason] += 1
            return refusal
        self.closed(conn)  # a connection id reused before its close was seen
        self._state.clients[conn] = _Client(token, client_id, username, address)
        if username is not None:
            self._state.users.setdefault(username, {})[conn] = client_id
        return None

    def closed(self, conn: int) -> None:
        """Connection ``conn`` has ended (whether or not its CONNECT was admitted)."""
        state = self._state
        client = state.clients.pop(conn, None)
        if client is None or client.username is None:
            return
        conns = state.users[client.username]
        del conns[conn]
        if not conns:
            del state.users[client.username]

    def open_by_listener(self) -> dict[str, int]:
        """Open connections per listener name (for metrics)."""
        return {name: listener.open for name, listener in self._listeners.items()}

    def stats(self) -> dict[str, int]:
        """Open connections, refusals by reason (``refused_<reason>``), addresses banned
        for flapping now."""
        state, now = self._state, self._clock()
        counts = {f"refused_{reason}": state.refused[reason] for reason in REFUSAL_REASONS}
        return {
            "connections_open": state.open,
            **counts,
            "flapping_banned": sum(until > now for until in state.banned_until.values()),
        }
