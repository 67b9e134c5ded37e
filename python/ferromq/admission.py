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

**A node of several shards** (:mod:`ferromq.node`; each shard runs its own
:class:`Admission`): the limits are the node's. The counts they rest on — open
connections broker-wide, per listener, per address and per user, each listener's
connect-rate bucket, each address's flapping window and its ban — live in the node's
shared table (``ferromq._core.NodeCounters``, a memfd the supervisor makes and every
shard maps; lock-free, see rust/ferromq-core/src/bus/admission.rs), so a limit counts
every shard's connections at once. A connection is counted once, by the shard that holds
it: a shard that hands a connection to its client id's owner gives its slots back as it
hands it, and the owner takes them over without deciding again
(:meth:`Admission.adopted`; in between, for the duration of the hand-over, a limit may
let one more in). A shard started again after dying gives back what its predecessor held.
A key the table has no room for is not tracked: its limit is not applied (logged once per
shard). Refusals, ``connections_open`` and the flapping bans are counted by the shard that
refused, holds or banned (``$SYS`` is per shard; the node's admin sums them). With one
shard none of this exists: the counts are this process's.

Run-time changes (:meth:`Admission.use`, on SIGHUP and for a later admin API): new
limits and bans apply to the next connection; the connected clients a new ban matches
are returned, for the gate to close with DISCONNECT 0x98 Administrative action (0x8A
Banned exists for CONNACK only, §3.14.2.1).

Costs: a ban lookup is one set lookup per distinct prefix length in the ban list (an
address is masked to each length and looked up), so it does not grow with the number of
bans. Memory: a count per address with an open connection, a flapping window per
address seen within ``flapping_window`` (swept once per window) and an entry per
temporary ban (in a node, a slot per key in the shared table, kept for its life).
IPv6 addresses are counted one by one, like IPv4 ones (a client holding
a /64 can spread over it; ban the network).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_network
from pathlib import Path
from socket import AF_INET, AF_INET6, inet_pton
from typing import Final, Literal, TypeAlias, get_args

from ferromq._core import NodeCounters
from ferromq.config import (
    BanList,
    BansConfig,
    Config,
    LimitsConfig,
    ListenerConfig,
    listener_path,
    load_ban_file,
)
from ferromq.log import log_event

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

logger = logging.getLogger("ferromq.admission")

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
_V4_MAPPED: Final = bytes(10) + b"\xff\xff"  # ::ffff:0:0/96


def parse_address(host: str) -> Address | None:
    """The IP address of a peer's host (an IPv4-mapped IPv6 address as IPv4, an IPv6
    scope id such as ``%eth0`` dropped), or None for what is not an IP address.

    Once per accepted connection: the C parser (``inet_pton``) and the packed
    constructors, not ``ip_address``, whose pure-Python parsing took 8 % of a shard's
    CPU in a connection storm (py-spy, 2026-11-28)."""
    try:
        return IPv4Address(inet_pton(AF_INET, host))
    except (OSError, ValueError):
        pass
    try:
        packed = inet_pton(AF_INET6, host.partition("%")[0])
    except (OSError, ValueError):
        return None
    if packed[:12] == _V4_MAPPED:
        return IPv4Address(packed[12:])
    return IPv6Address(packed)


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

    name: str
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
    counted: bool
    """Holding a slot of the node's count of its user (a node of several shards)."""


_Limit: TypeAlias = tuple[str, int, Refusal]
"""A count's key in the node's table, its limit (0: none) and the refusal at it."""

_BANNED_NOW: Final = 2
"""``NodeCounters.flapping``: this connect banned the address."""


class _NodeCounts:
    """The node's counts in its shared table (a node of several shards; see the module
    header). A key the table has no room for counts as below its limit."""

    def __init__(self, counters: NodeCounters) -> None:
        self._counters = counters
        self._logged = False

    def take(self, key: str, limit: int) -> bool:
        """Count one more of ``key`` unless it is at ``limit``."""
        taken = self._counters.take(key, limit)
        return self._untracked(key) if taken is None else taken

    def take_all(self, limits: list[_Limit]) -> Refusal | None:
        """Count one more of every key, or none of them and the first refusal."""
        taken: list[str] = []
        for key, limit, refusal in limits:
            if not self.take(key, limit):
                self.give_all(taken)
                return refusal
            taken.append(key)
        return None

    def give_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._counters.give(key)

    def rate(self, listener: str, rate: int, now: float) -> bool:
        """A token from the listener's connect-rate bucket."""
        key = f"rate:{listener}"
        taken = self._counters.rate(key, rate, now)
        return self._untracked(key) if taken is None else taken

    def flapping(self, address: Address, now: float, limits: LimitsConfig) -> int:
        """0 not flapping, 1 serving a ban, :data:`_BANNED_NOW` banned by this connect."""
        key = f"flapping:{address}"
        state = self._counters.flapping(
            key,
            f"banned:{address}",
            now,
            limits.flapping_max_connects,
            limits.flapping_window,
            limits.flapping_ban,
        )
        if state is None:
            self._untracked(key)
            return 0
        return state

    def _untracked(self, key: str) -> bool:
        if not self._logged:
            self._logged = True
            log_event(
                logger,
                logging.WARNING,
                "node counters full: a key is not tracked, its limit not applied",
                key=key,
            )
        return True


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
        self,
        config: Config,
        bans: Bans,
        clock: Callable[[], float] = time.monotonic,
        counters: NodeCounters | None = None,
    ) -> None:
        """``counters``: the node's shared table, in a node of several shards (then
        ``clock`` must be the system's monotonic clock, which every shard reads)."""
        self._clock = clock
        self._node = None if counters is None else _NodeCounts(counters)
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
            config.name,
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
        if listener.bucket is not None and not self._rate(listener, listener.bucket[0], now):
            return Refusal("connect_rate", listener.bucket[1])
        if self._node is not None:
            refusal = self._node.take_all(self._limits_of(listener, address))
            if refusal is not None:
                return refusal
        else:
            most, rule = listener.max_connections
            if most and listener.open >= most:
                return Refusal("listener_max_connections", rule)
            if limits.max_connections and state.open >= limits.max_connections:
                return Refusal(
                    "max_connections", f"limits.max_connections = {limits.max_connections}"
                )
            most, rule = listener.max_connections_per_address
            if address is not None and most and state.per_address[address] >= most:
                return Refusal("max_connections_per_address", rule)
        self._opened(listener, address)
        return None

    def _rate(self, listener: _Listener, bucket: _Bucket, now: float) -> bool:
        if self._node is None:
            return bucket.take(now)
        return self._node.rate(listener.name, bucket.rate, now)

    def _limits_of(self, listener: _Listener, address: Address | None) -> list[_Limit]:
        """The node's counts a connection on ``listener`` from ``address`` takes."""
        most, rule = listener.max_connections
        broker_most = self._limits.max_connections
        limits: list[_Limit] = [
            (f"listener:{listener.name}", most, Refusal("listener_max_connections", rule)),
            (
                "broker",
                broker_most,
                Refusal("max_connections", f"limits.max_connections = {broker_most}"),
            ),
        ]
        if address is not None:
            most, rule = listener.max_connections_per_address
            limits.append(
                (f"address:{address}", most, Refusal("max_connections_per_address", rule))
            )
        return limits

    def _opened(self, listener: _Listener, address: Address | None) -> None:
        """This shard holds one more connection (its own counts)."""
        state = self._state
        listener.open += 1
        state.open += 1
        if address is not None:
            state.per_address[address] += 1

    def adopted(self, listener: str, host: str) -> None:
        """A connection another shard of the node admitted and handed to this one (its
        client id's owner) takes its slots here without being decided again; it holds
        them until :meth:`released`."""
        entry, address = self._listeners[listener], parse_address(host)
        if self._node is not None:
            self._node.take_all(
                [(key, 0, refusal) for key, _, refusal in self._limits_of(entry, address)]
            )
        self._opened(entry, address)

    def _flapping(self, address: Address, now: float) -> bool:
        """Whether ``address`` is banned for flapping, counting this connection."""
        state, limits = self._state, self._limits
        if now >= state.next_sweep:
            self._sweep(now)
        if self._node is not None:
            flapping = self._node.flapping(address, now, limits)
            if flapping == _BANNED_NOW:
                state.banned_until[address] = now + limits.flapping_ban  # for stats()
            return flapping != 0
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
        state, entry = self._state, self._listeners[listener]
        entry.open -= 1
        state.open -= 1
        address = parse_address(host)
        if self._node is not None:
            self._node.give_all(key for key, _, _ in self._limits_of(entry, address))
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
        counted = False
        if banned is not None:
            refusal = Refusal("banned", f"bans: {banned}")
        elif username is not None and self._limits.max_connections_per_user:
            limit = self._limits.max_connections_per_user
            others = self._state.users.get(username, {})
            # The session's owner shard holds the connection it takes over.
            taken_over = client_id in others.values()
            if self._node is not None:
                counted = self._node.take(f"user:{username}", limit + taken_over)
                over = not counted
            else:
                over = len(others) - taken_over >= limit
            if over:
                refusal = Refusal(
                    "max_connections_per_user", f"limits.max_connections_per_user = {limit}"
                )
        if refusal is not None:
            self._state.refused[refusal.reason] += 1
            return refusal
        self.closed(conn)  # a connection id reused before its close was seen
        self._state.clients[conn] = _Client(token, client_id, username, address, counted)
        if username is not None:
            self._state.users.setdefault(username, {})[conn] = client_id
        return None

    def closed(self, conn: int) -> None:
        """Connection ``conn`` has ended (whether or not its CONNECT was admitted)."""
        state = self._state
        client = state.clients.pop(conn, None)
        if client is None or client.username is None:
            return
        if client.counted and self._node is not None:
            self._node.give_all((f"user:{client.username}",))
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
