"""The broker's one configuration schema: frozen dataclasses, loaded from TOML and the environment.

Every setting is declared once, as a dataclass field whose metadata holds its *kind*
(integer range, size, duration, boolean, choice, string). The kind is the only parser of
that setting: it reads the TOML value and the environment override alike, so both accept
the same spellings and fail with the same messages. Loading is three steps on immutable
values: defaults → the TOML document → ``FERROMQ_*`` overrides → cross-setting checks.

Errors are :class:`ConfigError` and name where the bad value came from and what is wrong,
so an operator can fix it without reading code::

    config file /etc/ferromq.toml: listeners[0].port: must be between 1 and 65535, got 70000
    limits.max_pakcet_size: unknown key, did you mean "max_packet_size"?
    FERROMQ_LIMITS__MAX_PACKET_SIZE: expected a size like 1048576 or "1MiB", got "big"

Spellings:

- sizes: an integer number of bytes or a string ``"<n><unit>"`` with unit ``B``, ``KB``,
  ``MB``, ``GB`` (powers of 1000) or ``KiB``, ``MiB``, ``GiB`` (powers of 1024), case-blind;
- durations: an integer number of seconds or ``"<n><unit>"`` with unit ``s``, ``m``, ``h``,
  ``d``; every duration is held as whole seconds;
- choices are case-blind and stored in their canonical lower-case spelling.

Environment: ``FERROMQ_<SECTION>__<KEY>=value`` overrides one key of a section
(``FERROMQ_LOG__LEVEL=debug``); ``FERROMQ_LISTEN=host:port`` (``[::1]:1883`` for IPv6)
overrides the first listener's address. Other ``FERROMQ_*`` variables without ``__`` are
not configuration and are ignored; an unknown ``FERROMQ_<X>__<Y>`` is an error, because a
misspelt override that silently does nothing is worse than a refusal to start.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar
from urllib.parse import urlsplit

from ferromq._core import SubscriptionIndex
from ferromq.codec import MAX_PACKET_SIZE
from ferromq.mosquitto_conf import toml_hint

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "AclConfig",
    "AdminConfig",
    "AuthConfig",
    "BanList",
    "BansConfig",
    "Config",
    "ConfigError",
    "KafkaConfig",
    "LimitsConfig",
    "ListenerConfig",
    "LogConfig",
    "Mqtt5Config",
    "RedirectConfig",
    "RedisConfig",
    "ServerConfig",
    "SessionConfig",
    "StorageConfig",
    "StreamConfig",
    "StreamFilesConfig",
    "StreamKafkaConfig",
    "SysConfig",
    "config_as_dict",
    "listener_path",
    "load_ban_file",
    "load_config",
    "override_first_listener",
    "override_workers",
    "parse_ban_list",
    "parse_duration",
    "parse_size",
    "render_toml",
    "toml_table",
    "toml_value",
]

ENV_PREFIX: Final = "FERROMQ_"
ENV_LISTEN: Final = "FERROMQ_LISTEN"

KiB: Final = 1024
MiB: Final = 1024 * KiB
HOUR: Final = 3600
DAY: Final = 24 * HOUR


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and the problem."""


# ---------------------------------------------------------------------------------------
# Sizes and durations: one parser each, shared by every key and the environment.

_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": KiB,
    "mib": MiB,
    "gib": 1024 * MiB,
}
_DURATION_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": HOUR, "d": DAY}
_QUANTITY: Final = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


def _parse_quantity(value: int | str, units: Mapping[str, int]) -> int:
    if isinstance(value, bool):  # bool is an int to Python, never a quantity to a user
        raise ValueError(value)
    if isinstance(value, int):
        return value
    match = _QUANTITY.fullmatch(value)
    if match is None or match[2].lower() not in units:
        raise ValueError(value)
    return int(match[1]) * units[match[2].lower()]


def parse_size(value: int | str) -> int:
    """Bytes in ``value``: ``1048576``, ``"1048576"``, ``"1MiB"``, ``"256KB"`` (256000).

    Raises ``ValueError`` for anything else; range checks belong to the setting.
    """
    return _parse_quantity(value, _SIZE_UNITS)


def parse_duration(value: int | str) -> int:
    """Whole seconds in ``value``: ``10``, ``"10"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"7d"``.

    Raises ``ValueError`` for anything else; range checks belong to the setting.
    """
    return _parse_quantity(value, _DURATION_UNITS)


# ---------------------------------------------------------------------------------------
# Kinds: how one setting is read from TOML and from an environment variable.


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _describe(value: object) -> str:
    """A TOML value as the user wrote it, with its TOML type, for type errors."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {_quote(value)}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value}"  # TOML dates and times


def _did_you_mean(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1)
    if close:
        return f", did you mean {_quote(close[0])}?"
    return f" (expected one of: {', '.join(sorted(candidates))})"


class _Kind(Protocol):
    def parse(self, value: object, where: str) -> object:
        """The setting's value from a TOML value, or ``ConfigError`` naming ``where``."""

    def parse_env(self, text: str, where: str) -> object:
        """The setting's value from an environment variable's text."""


def _check_range(value: int, low: int, high: int | None, where: str, shown: str) -> int:
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"{where}: must be {bounds}, got {shown}")
    return value


@dataclass(frozen=True)
class _Int:
    low: int
    high: int | None = None

    def parse(self, value: object, where: str) -> object:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_describe(value)}")
        return _check_range(value, self.low, self.high, where, str(value))

    def parse_env(self, text: str, where: str) -> object:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {_quote(text)}") from None
        return self.parse(value, where)


@dataclass(frozen=True)
class _Quantity:
    """A size or a duration: an integer or a string with a unit, held as an integer."""

    units: Mapping[str, int]
    example: str
    low: int
    high: int | None = None

    def parse(self, value: object, where: str) -> object:
        if not isinstance(value, int | str):
            raise ConfigError(f"{where}: expected {self.example}, got {_describe(value)}")
        try:
            amount = _parse_quantity(value, self.units)
        except ValueError:
            shown = _quote(value) if isinstance(value, str) else _describe(value)
            raise ConfigError(f"{where}: expected {self.example}, got {shown}") from None
        shown = f"{amount} ({_quote(value)})" if isinstance(value, str) else str(amount)
        return _check_range(amount, self.low, self.high, where, shown)

    def parse_env(self, text: str, where: str) -> object:
        return self.parse(text, where)  # the string spelling already accepts bare digits


MAX_U63: Final = (1 << 63) - 1


def _size(low: int, high: int | None = None) -> _Quantity:
    return _Quantity(_SIZE_UNITS, 'a size like 1048576 or "1MiB"', low, high)


def _duration(low: int, high: int | None = None) -> _Quantity:
    return _Quantity(_DURATION_UNITS, 'a duration like 10 or "10s", "5m", "1h"', low, high)


_ENV_BOOLEANS: Final = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


@dataclass(frozen=True)
class _Bool:
    def parse(self, value: object, where: str) -> object:
        if not isinstance(value, bool):
            raise ConfigError(
                f"{where}: expected a boolean (true or false), got {_describe(value)}"
            )
        return value

    def parse_env(self, text: str, where: str) -> object:
        try:
            return _ENV_BOOLEANS[text.strip().lower()]
        except KeyError:
            raise ConfigError(
                f"{where}: expected a boolean (true/false, 1/0, yes/no, on/off), got {_quote(text)}"
            ) from None


@dataclass(frozen=True)
class _Choice:
    options: tuple[str, ...]

    def parse(self, value: object, where: str) -> object:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_describe(value)}")
        choice = value.strip().lower()
        if choice in self.options:
            return choice
        supported = ", ".join(_quote(option) for option in self.options)
        raise ConfigError(f"{where}: expected one of {supported}, got {_quote(value)}")

    def parse_env(self, text: str, where: str) -> object:
        return self.parse(text, where)


@dataclass(frozen=True)
class _Text:
    allow_empty: bool = False  # for settings where "" means "off"

    def parse(self, value: object, where: str) -> object:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_describe(value)}")
        if not value.strip() and not (self.allow_empty and not value):
            raise ConfigError(f"{where}: must not be empty")
        return value

    def parse_env(self, text: str, where: str) -> object:
        return self.parse(text, where)


@dataclass(frozen=True)
class _Url(_Text):
    """An ``http://`` or ``https://`` URL with a host."""

    def parse(self, value: object, where: str) -> object:
        text = super().parse(value, where)
        assert isinstance(text, str)
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}: expected an http:// or https:// URL, got {_quote(text)}")
        return text


@dataclass(frozen=True)
class _TextList:
    """A list of strings; in the environment, comma-separated."""

    def parse(self, value: object, where: str) -> object:
        # A tuple is a default (TOML gives lists): defaults pass their own kind.
        if not isinstance(value, list | tuple) or not all(isinstance(i, str) for i in value):
            raise ConfigError(f"{where}: expected an array of strings, got {_describe(value)}")
        return tuple(dict.fromkeys(value))

    def parse_env(self, text: str, where: str) -> object:
        return self.parse([item.strip() for item in text.split(",") if item.strip()], where)


@dataclass(frozen=True)
class _Options:
    """A table of settings for someone else (a plugin): keys with strings, numbers,
    booleans or arrays of them, kept as sorted ``(key, value)`` pairs."""

    def parse(self, value: object, where: str) -> object:
        if isinstance(value, tuple):  # a default
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {_describe(value)}")
        for key, item in value.items():
            scalars = item if isinstance(item, list) else [item]
            if not all(isinstance(i, str | int | float | bool) for i in scalars):
                raise ConfigError(
                    f"{where}.{key}: expected a string, number, boolean or an array of them, "
                    f"got {_describe(item)}"
                )
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))

    def parse_env(self, text: str, where: str) -> object:
        raise ConfigError(f"{where}: set it in the config file")


def _frozen(item: object) -> object:
    return tuple(item) if isinstance(item, list) else item


@dataclass(frozen=True)
class _Names(_TextList):
    """A list of names from a fixed set, spelt exactly (MQTT method names are
    case-sensitive)."""

    options: tuple[str, ...] = ()

    def parse(self, value: object, where: str) -> object:
        names = super().parse(value, where)
        assert isinstance(names, tuple)
        for item in names:
            if item not in self.options:
                supported = ", ".join(_quote(option) for option in self.options)
                raise ConfigError(f"{where}: expected names among {supported}, got {_quote(item)}")
        return names


@dataclass(frozen=True)
class _Networks(_TextList):
    """A list of IPv4 / IPv6 addresses or CIDR networks (``10.0.0.0/8``, ``2001:db8::/32``),
    kept as written; a network with host bits set is refused, as likely a typo."""

    def parse(self, value: object, where: str) -> object:
        networks = super().parse(value, where)
        assert isinstance(networks, tuple)
        for item in networks:
            try:
                ipaddress.ip_network(item)
            except ValueError as exc:
                raise ConfigError(
                    f"{where}: {_quote(item)} is not an IPv4 or IPv6 address or network: {exc}"
                ) from None
        return networks


@dataclass(frozen=True)
class _Workers:
    """``"auto"`` or a count of processes (in the environment, the same spellings)."""

    high: int

    def parse(self, value: object, where: str) -> object:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        count = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= self.high:
            return count
        shown = _quote(value) if isinstance(value, str) else _describe(value)
        raise ConfigError(
            f'{where}: expected "auto" or an integer between 1 and {self.high}, got {shown}'
        )

    def parse_env(self, text: str, where: str) -> object:
        return self.parse(text, where)


def _setting(default: object, kind: _Kind) -> Any:
    """A schema field: its default and the one kind that parses it."""
    return field(default=default, metadata={"kind": kind})


# A sub-table of a section (``[stream.files]``): ``field(default_factory=..., metadata=
# _SUB_TABLE)``; its keys are settings of their own, in the environment
# ``FERROMQ_STREAM__FILES__DIRECTORY``.
_SUB_TABLE: Final = {"table": True}


# A list of sub-tables (``[[rewrite.rules]]``): ``_tables(ItemClass)``, a tuple of
# ``ItemClass`` entries each loaded from its defaults; not settable from the environment.
def _tables(item: type[DataclassInstance]) -> Any:
    return field(default=(), metadata={"tables": item})


def _is_table(of: Field[Any]) -> bool:
    return bool(of.metadata.get("table"))


def _table_list_item(of: Field[Any]) -> type[DataclassInstance] | None:
    item: type[DataclassInstance] | None = of.metadata.get("tables")
    return item


def _kind(of: Field[Any]) -> _Kind:
    kind: _Kind = of.metadata["kind"]
    return kind


# ---------------------------------------------------------------------------------------
# The schema.


@dataclass(frozen=True)
class ListenerConfig:
    """One ``[[listeners]]`` entry: an address the broker accepts connections on."""

    name: str = _setting("default", _Text())
    """Unique among listeners; names the listener in logs, metrics and ``$SYS``."""
    host: str = _setting("127.0.0.1", _Text())
    """Loopback by default: exposing a broker is a decision, not an accident."""
    port: int = _setting(1883, _Int(1, 65535))
    protocol: str = _setting("tcp", _Choice(("tcp", "tls", "ws", "wss")))
    """``tcp``, ``tls``, ``ws`` (MQTT over WebSocket) or ``wss`` (WebSocket over TLS, with
    the TLS keys below)."""
    max_connections: int = _setting(0, _Int(0))
    """Connections open at once on this listener; one more is closed at accept, before
    a byte is read, and counted in ``$SYS/broker/clients/refused/``. 0 means unlimited."""
    max_connections_per_address: int | None = _setting(None, _Int(0))
    """Overrides ``limits.max_connections_per_address`` for connections accepted here
    (the count per address spans every listener); unset: the ``[limits]`` value."""
    max_connect_rate: int | None = _setting(None, _Int(0))
    """Overrides ``limits.max_connect_rate`` for this listener; unset: the ``[limits]``
    value."""
    # TLS (protocol = "tls" only), named as Mosquitto names them; see ferromq.tls.
    certfile: str = _setting("", _Text(allow_empty=True))
    """PEM certificate (chain) the listener presents; required with ``tls``."""
    keyfile: str = _setting("", _Text(allow_empty=True))
    """PEM private key of ``certfile``, unencrypted; required with ``tls``."""
    cafile: str = _setting("", _Text(allow_empty=True))
    """PEM CA certificates client certificates must chain to."""
    crlfile: str = _setting("", _Text(allow_empty=True))
    """PEM certificate revocation lists of those CAs: a revoked client certificate fails
    the handshake, and when a reload brings a new list, a connected client whose
    certificate it revokes is disconnected. Needs ``require_certificate``."""
    watch: int = _setting(10, _duration(0))
    """Seconds between checks of ``certfile``, ``keyfile``, ``cafile`` and ``crlfile``
    for a change (one ``stat`` each), applied as a SIGHUP applies them; 0: SIGHUP only."""
    require_certificate: bool = _setting(False, _Bool())
    """Refuse, at the handshake, a client without a valid certificate from ``cafile``."""
    use_identity_as_username: bool = _setting(False, _Bool())
    """The client certificate's identity replaces the CONNECT's user name; no password
    is needed. Needs ``require_certificate``."""
    identity_source: str = _setting("cn", _Choice(("cn", "san_dns", "san_uri", "san_email")))
    """Where the identity is read: the subject's Common Name or the first Subject
    Alternative Name of a type."""
    ciphers: str = _setting("", _Text(allow_empty=True))
    """OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's defaults)."""
    tls_version: str = _setting("1.2", _Choice(("1.2", "1.3")))
    """Lowest TLS version accepted."""
    # WebSocket (protocol = "ws" or "wss" only); see ferromq.websocket_upgrade.
    path: str = _setting("/mqtt", _Text())
    """The HTTP path a WebSocket upgrade must ask for (any other gets 404)."""
    origins: tuple[str, ...] = _setting((), _TextList())
    """``Origin`` values an upgrade may carry, e.g. ``["https://app.example"]``; an upgrade
    from another origin gets 403. Empty: any origin, or none."""
    # PROXY protocol, on any listener; see ferromq.proxy_protocol.
    proxy_protocol: bool = _setting(False, _Bool())
    """Every connection starts with a PROXY protocol v1 or v2 header (HAProxy, a cloud
    load balancer) whose client address the broker uses; one without is closed."""
    proxy_trusted: tuple[str, ...] = _setting((), _Networks())
    """Addresses or CIDRs (``10.0.0.0/8``) the PROXY header is accepted from; a
    connection from elsewhere is closed before a byte is read. Empty: any."""


def listener_path(index: int, config: ListenerConfig) -> str:
    """How errors and logs name a listener: its key path and its name."""
    return f"listeners[{index}] ({config.name})"


_WEBSOCKET_ONLY: Final = ("path", "origins")
_PROXY_ONLY: Final = ("proxy_trusted",)
_TLS_ONLY: Final = tuple(
    f.name
    for f in fields(ListenerConfig)
    if f.name
    not in (
        "name",
        "host",
        "port",
        "protocol",
        "max_connections",
        "proxy_protocol",
        *_WEBSOCKET_ONLY,
        *_PROXY_ONLY,
        "max_connections_per_address",
        "max_connect_rate",
    )
)
TLS_PROTOCOLS: Final = ("tls", "wss")
"""Listener protocols that run TLS (and take the TLS keys)."""
WEBSOCKET_PROTOCOLS: Final = ("ws", "wss")
"""Listener protocols that carry MQTT over WebSocket."""


MAX_WORKERS: Final = 1024


@dataclass(frozen=True)
class ServerConfig:
    """``[server]``: the processes of the node (docs/shards.md)."""

    workers: int | str = _setting("auto", _Workers(MAX_WORKERS))
    """Shard processes, each with its own event loop and engine on one core: a count,
    or ``"auto"``, one per CPU the process may run on (its affinity mask, capped by the
    cgroup's CPU quota). Above 1, ``ferromq serve`` is a supervisor that starts them and
    restarts one that dies."""
    shutdown_timeout: int = _setting(20, _duration(1, HOUR))
    """Seconds a graceful stop (SIGTERM, SIGINT; for a shard, its supervisor stopping or
    gone) may take. A broker or shard still stopping then logs what it waits for and
    exits with status 1, as it does at once on a second SIGTERM or SIGINT; nothing
    acknowledged is lost (acknowledgements wait for the store). The supervisor kills a
    shard still running shortly after. Keep it under systemd's TimeoutStopSec."""


@dataclass(frozen=True)
class LimitsConfig:
    """``[limits]``: per-connection protocol limits, announced to v5 clients in CONNACK."""

    # The floor of 64 bytes is where a v5 CONNECT with a short client id still fits; a typo
    # such as "1B" for "1KiB" must fail here, not refuse every client at CONNECT.
    max_packet_size: int = _setting(MiB, _size(64, MAX_PACKET_SIZE))
    """Largest packet accepted or sent; v5 Maximum Packet Size [MQTT-3.2.2-15]."""
    max_inflight: int = _setting(1024, _Int(1, 65535))
    """Unacknowledged QoS 1/2 deliveries per client: the whole window for 3.1.1 clients,
    the cap on a v5 client's Receive Maximum. The broker writes each connection once
    per loop tick, so a window refills at most once per tick: 1024 lets one subscriber
    take ~700k msg/s on fan-in where 32 held it near 11k (benches/load/RESULTS.md)."""
    receive_maximum: int = _setting(1024, _Int(1, 65535))
    """Receive Maximum the broker announces: QoS 1/2 PUBLISHes a v5 client may have
    unacknowledged towards the broker [MQTT-3.3.4-9]."""
    max_topic_alias: int = _setting(64, _Int(0, 65535))
    """Topic Alias Maximum announced to v5 clients; 0 disables topic aliases."""
    max_keepalive: int = _setting(0, _duration(0, 65535))
    """Cap on the client's Keep Alive (v5: sent as Server Keep Alive); 0 means no cap."""
    connect_timeout: int = _setting(10, _duration(1))
    """A connection that has not sent CONNECT this long after accept is closed."""
    write_buffer_high_water: int = _setting(MiB, _size(1))
    """Unsent bytes per connection above which delivery to it pauses (slow consumers)."""
    max_client_id_length: int = _setting(65535, _Int(23, 65535))
    """Longest client id accepted; a server must accept 1 to 23 bytes [MQTT-3.1.3-5]."""
    max_connections: int = _setting(0, _Int(0))
    """Connections open at once on all listeners together; one more is closed at accept
    and counted in ``$SYS/broker/clients/refused/``. 0 means unlimited."""
    max_connections_per_address: int = _setting(0, _Int(0))
    """Connections open at once from one source address (on all listeners together); one
    more is closed at accept, before a byte is read. 0 means unlimited."""
    max_connections_per_user: int = _setting(0, _Int(0))
    """Connections open at once authenticated as one user name; one more is refused at
    CONNECT after authentication: v5 CONNACK 0x97 Quota exceeded, 3.1.1 return code 3
    Server unavailable (the user is not wrong, the service is full for it). A CONNECT
    taking over the user's session of the same client id is not counted twice. 0 means
    unlimited; set, every CONNECT is decided in Python (:mod:`ferromq.admission`)."""
    max_connect_rate: int = _setting(0, _Int(0))
    """New connections per second one listener accepts (a token bucket holding one
    second's worth); more are closed at accept. 0 means unlimited."""
    flapping_max_connects: int = _setting(0, _Int(0))
    """Connections one address may open within ``flapping_window``; the next one bans the
    address for ``flapping_ban``: its connections are closed at accept, before a byte is
    read (EMQX's flapping detection). 0 turns it off."""
    flapping_window: int = _setting(60, _duration(1))
    """The window ``flapping_max_connects`` counts in."""
    flapping_ban: int = _setting(300, _duration(1))
    """How long a flapping address stays banned."""
    max_publish_rate: int = _setting(0, _Int(0, 0xFFFF_FFFF))
    """PUBLISH packets per second one connection may send (a token bucket holding one
    second's worth). Above it an MQTT 5.0 client is disconnected with 0x96 (Message rate
    too high) and a 3.1/3.1.1 client, which has no code for it, is throttled: the broker
    stops reading it until the bucket refills, so its messages arrive later, none lost.
    0 means no limit. (Before issue 13 every client was disconnected, v5 with 0x97.)"""
    max_publish_bytes_rate: int = _setting(0, _size(0, MAX_U63))
    """PUBLISH bytes (topic + payload) per second one connection may send, a second
    token bucket handled as ``max_publish_rate``; 0 means no limit."""
    max_publish_rate_per_user: int = _setting(0, _Int(0, 0xFFFF_FFFF))
    """PUBLISH packets per second all connections of one user name may send together
    (one bucket per user name; connections without a user name are not counted);
    handled as ``max_publish_rate``. 0 means no limit."""
    max_publish_bytes_rate_per_user: int = _setting(0, _size(0, MAX_U63))
    """PUBLISH bytes per second all connections of one user name may send together;
    0 means no limit."""
    max_subscriptions_per_client: int = _setting(0, _Int(0, 0xFFFF_FFFF))
    """Subscriptions one session may hold; a SUBSCRIBE filter beyond it is refused
    with 0x97 Quota exceeded (3.1.1: 0x80), replacing a held filter is allowed.
    0 means no limit."""
    max_retained_messages: int = _setting(0, _Int(0, MAX_U63))
    """Retained messages the broker keeps in all. A retained PUBLISH beyond it is not
    stored (the topic's existing retained message stays): an MQTT 5.0 QoS 1/2 publisher
    gets PUBACK/PUBREC 0x97 Quota exceeded and the message is not delivered, others are
    delivered live and only not retained; counted in
    ``$SYS/broker/retained messages/refused``. 0 means no limit."""
    max_retained_bytes: int = _setting(0, _size(0, MAX_U63))
    """Bytes (topic + payload) of all retained messages, enforced as
    ``max_retained_messages``; 0 means no limit."""
    max_retained_messages_per_user: int = _setting(0, _Int(0, MAX_U63))
    """Retained messages one user name may own (the last publisher of each topic owns
    it); enforced as ``max_retained_messages``. 0 means no limit."""
    max_retained_bytes_per_user: int = _setting(0, _size(0, MAX_U63))
    """Bytes of the retained messages one user name owns; 0 means no limit."""
    retained_max_expiry: int = _setting(0, _duration(0, MAX_U63 // 1000))
    """Longest a retained message is kept (from its PUBLISH), whatever its Message Expiry
    Interval says or if it has none; live delivery is unaffected. 0 means no cap."""
    allow_control_characters: bool = _setting(False, _Bool())
    """Accept control characters (U+0001-U+001F, U+007F-U+009F) in client ids, user names,
    topic names and topic filters. The spec says they SHOULD NOT be sent and lets a server
    refuse them (MQTT 5.0 1.5.4); they end up in logs, metrics labels and ACL rules, so by
    default they are refused: CONNACK 0x85 (client id) / 0x86 (user name) / 0x90 (will
    topic), PUBACK 0x90 or DISCONNECT 0x90 (topic name), SUBACK/UNSUBACK 0x8F for that
    filter; 3.1.1 gets the matching return code or is disconnected."""


@dataclass(frozen=True)
class SessionConfig:
    """``[session]``: what the broker keeps for clients while they are away."""

    queue_limit: int = _setting(1000, _Int(1, 65535))
    """Messages queued per session beyond the in-flight window."""
    max_queued_bytes: int = _setting(0, _size(0, MAX_U63))
    """Bytes queued per session (topic + payload + about 100 bytes of bookkeeping per
    message), beside ``queue_limit``; over it ``drop_policy`` applies and the drops are
    counted in ``$SYS/broker/messages/dropped/session_bytes``. 0 means no bound."""
    memory_budget: int = _setting(0, _size(0, MAX_U63))
    """Bytes of all queued deliveries, unsent output and the ``[stream]`` batches a sink
    that holds acknowledgements (files, Kafka ``after_kafka``) has not confirmed,
    together. Above it the broker reads less from publishers: a connection that sends a
    PUBLISH is not read again until the total is back at three quarters of the budget,
    so publishers slow to what the subscribers take instead of the broker queueing what
    it would drop. A publisher with
    deliveries of its own pending is not paused. 0 means no budget."""
    drop_policy: str = _setting("drop_oldest", _Choice(("drop_oldest", "refuse_newest")))
    """When the queue is full: ``drop_oldest`` evicts the oldest message, ``refuse_newest``
    discards the arriving one. Either way a queued QoS 0 message is dropped first, before
    any QoS 1/2 message is touched, because QoS 0 never promised delivery."""
    queue_qos0_offline: bool = _setting(False, _Bool())
    """Queue QoS 0 messages for disconnected persistent sessions (off: they are dropped,
    as most brokers do)."""
    share_strategy: str = _setting(
        "round_robin", _Choice(("round_robin", "random", "hash_client", "hash_topic", "sticky"))
    )
    """How a shared group (``$share/{group}/{filter}``) picks the member for a message:
    in turn, at random, by a hash of the publisher's client id or of the topic (so one
    publisher's or one topic's messages keep their order at one member), or ``sticky``
    (the last member while it can take more). A group streamed through Kafka spreads its
    messages over its partitions in turn, or by topic under ``hash_topic``."""
    max_session_expiry: int = _setting(0, _duration(0, 0xFFFF_FFFF))
    """Cap on a v5 client's Session Expiry Interval (sent back in CONNACK when lowered);
    0 means no cap, so a client asking for 0xFFFFFFFF keeps its session forever."""
    default_session_expiry_v311: int = _setting(7 * DAY, _duration(0, 0xFFFF_FFFF))
    """How long a 3.1.1 session with CleanSession=0 outlives its connection. The 3.1.1
    protocol has no expiry, so abandoned devices would accumulate forever; 7 days by
    default, 0 means never (the protocol's literal behaviour)."""


@dataclass(frozen=True)
class StorageConfig:
    """``[storage]``: where persistent sessions and retained messages are kept
    (docs/architecture.md, "Durable store")."""

    backend: str = _setting("embedded", _Choice(("embedded", "redis", "memory")))
    """``embedded``: a write-ahead log under ``path``, no service to run; ``redis``: a
    Redis server (``[redis]``), TBMQ's layout; ``memory``: nothing survives the process
    (no acknowledgement waits for a disk)."""
    path: str = _setting("ferromq-data", _Text())
    """Directory of the embedded store, relative to the working directory unless
    absolute."""
    fsync: str = _setting("batch", _Choice(("batch", "interval", "off")))
    """``batch``: every batch is on disk before its PUBACK/PUBREC go out, so ``kill -9``
    loses no acknowledged message; ``interval``: synced every ``fsync_interval``;
    ``off``: left to the OS (a process crash loses nothing, a machine crash may)."""
    fsync_interval: int = _setting(1, _duration(1))
    """Seconds between syncs with ``fsync = "interval"``."""
    flush_interval_ms: int = _setting(0, _Int(0, 1000))
    """Milliseconds the persister waits after the first record before writing a batch,
    to gather more into it; 0 writes at once (batches still form while a write runs).
    The Redis store uses ``redis.flush_interval_ms`` instead."""
    compact_after: int = _setting(64 * MiB, _size(0))
    """The embedded log is rewritten as a snapshot of the live state once it has grown
    since the last snapshot by this much or by that snapshot's size, whichever is more
    (so rewrites stay proportional to writes); 0 never compacts."""
    application_client_prefixes: tuple[str, ...] = _setting((), _TextList())
    """Client ids starting with one of these are APPLICATION clients, the rest DEVICE
    clients (TBMQ's split; an environment override takes a comma-separated list)."""
    application_store: str = _setting("primary", _Choice(("primary", "kafka")))
    """Where APPLICATION clients' queued and in-flight messages go: ``primary``, the
    store above, or ``kafka``, a topic per client (``[kafka]``); their sessions and
    subscriptions stay in the primary store either way."""


@dataclass(frozen=True)
class KafkaConfig:
    """``[kafka]``: the Kafka cluster of ``storage.application_store = "kafka"``."""

    bootstrap_servers: str = _setting("127.0.0.1:9092", _Text())
    """Comma-separated ``host:port`` list."""
    topic_prefix: str = _setting("ferromq.app.", _Text())
    """Each application client's topic is this prefix and its sanitised client id; its
    cursor is the consumer group ``<prefix>cursor.<client id>``."""
    partitions: int = _setting(1, _Int(1, 10000))
    """Partitions of a new topic; a client's records all go to partition 0 (one
    ordered queue)."""
    replication_factor: int = _setting(1, _Int(1, 32767))
    acks: str = _setting("all", _Choice(("all", "1", "0")))
    """Producer acks: ``all`` (with the idempotent producer) loses nothing a broker of the
    ISR had; ``1`` and ``0`` trade that for latency."""
    request_timeout: int = _setting(10, _duration(1, 3600))
    """Seconds a Kafka request may take before the write fails and is retried."""
    shared_partitions: int = _setting(4, _Int(1, 10000))
    """Partitions of a shared group's topic (``<prefix>share.<group>.<filter>``): a
    shared group an application client subscribes to is served through a Kafka consumer
    group, so at most this many of its members receive at once."""
    shared_prefetch: int = _setting(64, _Int(1, 65535))
    """Messages of a shared group's topic handed to one member and not yet acknowledged
    by it; the member's consumer polls for more as they are."""


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``: this node as one of many on Kafka and Redis, with no links between
    nodes (docs/cluster.md). Set ``node_id`` to join; the sessions then live in Redis at
    ``redis`` (``storage.backend`` becomes ``"redis"``, ``[redis]`` still tunes it) and the
    nodes route to each other through Kafka at ``kafka``."""

    node_id: str = _setting("", _Text(allow_empty=True))
    """This node's name in the cluster, unique and stable across its restarts (letters,
    digits, ``_`` and ``-``); empty (the default): not clustered."""
    kafka: str = _setting("", _Text(allow_empty=True))
    """The Kafka bootstrap servers, a comma-separated ``host:port`` list."""
    redis: str = _setting("", _Text(allow_empty=True))
    """The Redis holding sessions, ownership and membership:
    ``redis://[user:password@]host:port/db``; any one node of a Redis Cluster with
    ``redis.cluster = true``."""
    topic_prefix: str = _setting("ferromq.cluster.", _Text())
    """Put before the cluster's Kafka topics (``<prefix>subscriptions``,
    ``<prefix>node.<node id>``); clusters sharing a Kafka need different ones."""
    lease: int = _setting(5, _duration(2, HOUR))
    """How long a member's heartbeat (one every fifth of it) keeps it alive in Redis. A
    member that cannot renew it for four fifths of it (cut off from Redis, frozen)
    closes every connection and exits 3 before another member may adopt its clients;
    another member adopts a member dead this long. Longer rides out longer Redis
    outages; shorter moves a dead node's clients sooner (docs/cluster.md,
    "Partitions")."""


@dataclass(frozen=True)
class Mqtt5Config:
    """``[mqtt5]``: the optional MQTT features the broker offers, announced to v5 clients
    in CONNACK (only where they differ from the protocol's default) and enforced for every
    client: a v5 client breaking one gets the matching reason code, a 3.1.1 client a
    downgraded grant, SUBACK 0x80 or a closed connection."""

    maximum_qos: int = _setting(2, _Int(0, 2))
    """Highest QoS accepted on PUBLISH (above it: DISCONNECT 0x9B) and granted on SUBSCRIBE
    (higher requests are granted this)."""
    retain_available: bool = _setting(True, _Bool())
    """Off: a retained PUBLISH ends the connection (DISCONNECT 0x9A), a retained will is
    refused at CONNECT."""
    wildcard_subscription_available: bool = _setting(True, _Bool())
    """Off: a filter with ``+`` or ``#`` gets SUBACK 0xA2."""
    subscription_identifiers_available: bool = _setting(True, _Bool())
    """Off: a SUBSCRIBE with a Subscription Identifier ends the connection (0xA1)."""
    shared_subscription_available: bool = _setting(True, _Bool())
    """Off: a ``$share/`` filter gets SUBACK 0x9E."""
    assign_client_id: bool = _setting(True, _Bool())
    """Give a client that connects with an empty client id one made by the broker (v5:
    Assigned Client Identifier); off: such a CONNECT is refused (0x85)."""
    response_information_prefix: str = _setting("", _Text(allow_empty=True))
    """Response Information for clients that request it: this prefix followed by the
    client id (``"reply/"`` gives ``reply/<client id>``); empty: never sent."""
    outbound_topic_aliases: int = _setting(16, _Int(0, 65535))
    """Most topic aliases the broker uses towards one v5 client (never above the client's
    Topic Alias Maximum); the least recently used is reassigned when all are taken.
    0 turns broker-to-client aliases off."""
    validate_utf8_payload: bool = _setting(False, _Bool())
    """Check that a payload whose Payload Format Indicator is 1 is UTF-8; when it is not,
    QoS 1/2 get PUBACK/PUBREC 0x99 and the message is not routed, QoS 0 ends the
    connection (DISCONNECT 0x99)."""


@dataclass(frozen=True)
class RedirectConfig:
    """``[redirect]``: send every client to another broker (MQTT 5.0 §4.11)."""

    server_reference: str = _setting("", _Text(allow_empty=True))
    """Where to go, e.g. ``"mqtt2.example.com:1883"``; empty (the default): no redirect.
    Set: every v5 CONNECT is answered with CONNACK 0x9C (Use another server) or 0x9D
    (Server moved) carrying it as Server Reference; 3.1.1 clients get return code 0x03."""
    permanent: bool = _setting(False, _Bool())
    """0x9D (Server moved) instead of 0x9C (Use another server)."""


@dataclass(frozen=True)
class RedisConfig:
    """``[redis]``: the Redis store, used with ``storage.backend = "redis"``
    (:mod:`ferromq.storage.redis`)."""

    url: str = _setting("redis://127.0.0.1:6379/0", _Text())
    """``redis://[user:password@]host:port/db`` (``rediss://`` for TLS)."""
    cluster: bool = _setting(False, _Bool())
    """A Redis Cluster: ``url`` names any one node (database 0), the store reads the slot
    map from it and writes each client's keys to the primary serving their slot, with
    the URL's user, password, TLS and timeouts."""
    key_prefix: str = _setting("ferromq:", _Text())
    """Put before every key, outside the ``{client}`` hash tag."""
    batch_size: int = _setting(500, _Int(1, 1_000_000))
    """Journal records that make a batch go out at once instead of at the timer."""
    flush_interval_ms: int = _setting(3, _Int(0, 1000))
    """Milliseconds after the first record before a batch goes out (Lettuce-style:
    by size or by time, whichever comes first)."""
    message_ttl: int = _setting(7 * DAY, _duration(0))
    """Lifetime of a stored message in Redis (shortened to its own expiry); 0 keeps it
    until delivered."""
    max_messages_per_client: int = _setting(10_000, _Int(1, 65535))
    """Stored messages per client; the oldest beyond it are trimmed. At most 65535: a
    message is keyed by its packet id. Must hold ``session.queue_limit`` plus
    ``limits.max_inflight`` (checked at start)."""
    connect_timeout: int = _setting(5, _duration(1))
    command_timeout: int = _setting(10, _duration(1))
    """A batch Redis has not answered in this long counts as failed and is retried."""


@dataclass(frozen=True)
class BanList:
    """Who may not connect: the keys of ``[bans]`` and of a bans file
    (:mod:`ferromq.admission`)."""

    client_ids: tuple[str, ...] = _setting((), _TextList())
    """Client ids refused at CONNECT (v5 CONNACK 0x8A Banned, 3.1.1 return code 5)."""
    usernames: tuple[str, ...] = _setting((), _TextList())
    """User names (as authenticated) refused at CONNECT, as client ids are."""
    addresses: tuple[str, ...] = _setting((), _Networks())
    """IPv4 / IPv6 addresses or CIDR networks closed at accept, before a byte is read."""


@dataclass(frozen=True)
class BansConfig(BanList):
    """``[bans]``: the ban list written here, plus the one in ``file``; both are read
    again on SIGHUP, and connections a new ban matches are closed (v5 DISCONNECT 0x98
    Administrative action). Any ban configured makes every CONNECT decided in Python."""

    file: str | None = _setting(None, _Text())
    """A TOML file with the same three keys, edited by ``ferromq bans add | remove``
    (relative paths are from the working directory); it must exist."""

    def configured(self) -> bool:
        return self.file is not None or bool(self.client_ids or self.usernames or self.addresses)


@dataclass(frozen=True)
class AdminConfig:
    """``[admin]``: the admin HTTP listener (:mod:`ferromq.admin`): ``/healthz``,
    ``/readyz``, Prometheus ``/metrics``; needs the ``admin`` extra."""

    enabled: bool = _setting(False, _Bool())
    """Serve the admin listener (off by default)."""
    host: str = _setting("127.0.0.1", _Text())
    """Loopback by default; any other address needs ``token`` or ``token_file``."""
    port: int = _setting(8080, _Int(1, 65535))
    token: str | None = _setting(None, _Text())
    """The bearer token every request must carry (``Authorization: Bearer <token>``);
    unset on a loopback host: no authentication."""
    token_file: str | None = _setting(None, _Text())
    """A file holding the token (one line; a final newline is ignored), instead of
    ``token``."""
    metrics_public: bool = _setting(False, _Bool())
    """``/healthz``, ``/readyz`` and ``/metrics`` answer without the token (for probes
    and a Prometheus without credentials); everything else still needs it."""
    certfile: str = _setting("", _Text(allow_empty=True))
    """PEM certificate (chain): set with ``keyfile``, the listener speaks HTTPS."""
    keyfile: str = _setting("", _Text(allow_empty=True))
    """PEM private key of ``certfile``, unencrypted."""
    shard_timeout: int = _setting(5, _duration(1, 300))
    """How long a node of shards' admin listener waits for a shard to answer one request
    before it answers 503 naming the shard (and ``/metrics`` shows it down)."""

    def loopback(self) -> bool:
        """``host`` reaches this machine only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name: it may resolve to anything


@dataclass(frozen=True)
class AutoSubscribeConfig:
    """``[auto_subscribe]``: subscriptions every client is given at CONNECT
    (:mod:`ferromq.auto_subscribe`)."""

    topics: tuple[str, ...] = _setting((), _TextList())
    """Topic filters, with the ACL's placeholders: ``%c`` the client id, ``%u`` the
    user name, ``%C`` the certificate identity, ``%{claim}`` a JWT claim. One whose
    placeholder has no value for a client is skipped for that client; the ACL and
    ``limits.max_subscriptions_per_client`` apply as to a SUBSCRIBE."""
    qos: int = _setting(1, _Int(0, 2))
    """The QoS of each (capped by ``mqtt5.maximum_qos``)."""


@dataclass(frozen=True)
class RewriteRuleConfig:
    """One ``[[rewrite.rules]]`` entry (:mod:`ferromq.rewrite`)."""

    action: str = _setting("all", _Choice(("publish", "subscribe", "all")))
    """What it rewrites: the topic of a PUBLISH and a will (``publish``), the filter of a
    SUBSCRIBE and UNSUBSCRIBE (``subscribe``), or both (``all``)."""
    source: str = _setting("", _Text())
    """A topic filter: the rule applies to topics (or filters) it matches. The first
    rule whose ``source`` matches decides."""
    re: str = _setting("", _Text())
    """A regular expression over the whole topic; its groups are ``$1``, ``$2``... in
    ``to``. When it does not match, the topic stays as it is."""
    to: str = _setting("", _Text())
    """The new topic: ``$N`` the expression's groups, ``$$`` a ``$``, and the ACL's
    placeholders ``%c``, ``%u``, ``%C``, ``%{claim}``."""


@dataclass(frozen=True)
class RewriteConfig:
    """``[rewrite]``: topic rewrite rules (:mod:`ferromq.rewrite`; docs/rewrite.md)."""

    rules: tuple[RewriteRuleConfig, ...] = _tables(RewriteRuleConfig)
    """The rules, ``[[rewrite.rules]]`` in order."""


@dataclass(frozen=True)
class ValidationRuleConfig:
    """One ``[[validation.rules]]`` entry (:mod:`ferromq.validation`)."""

    filter: str = _setting("", _Text())
    """A topic filter: a client PUBLISH on a topic it matches must pass ``schema``.
    Every matching rule is checked, in order; the first that fails decides."""
    schema: str = _setting("", _Text())
    """The schema file: a JSON Schema (``format = "json"``) or an Avro schema, ``.avsc``
    (``format = "avro"``). Read at start and on SIGHUP."""
    format: str = _setting("json", _Choice(("json", "avro")))
    """What the payloads are: JSON text checked against a JSON Schema, or one Avro
    binary datum checked against an Avro schema."""
    on_failure: str = _setting("reject", _Choice(("drop", "reject", "disconnect")))
    """``drop``: not routed, acknowledged as usual; ``reject``: not routed, a v5 QoS 1/2
    PUBLISH hears 0x99 Payload format invalid (3.1.1 and QoS 0: dropped);
    ``disconnect``: the connection is closed (v5: 0x99) and its will published."""


@dataclass(frozen=True)
class ValidationConfig:
    """``[validation]``: payload schemas checked at ingress (:mod:`ferromq.validation`;
    docs/validation.md)."""

    rules: tuple[ValidationRuleConfig, ...] = _tables(ValidationRuleConfig)
    """The rules, ``[[validation.rules]]`` in order."""


@dataclass(frozen=True)
class BridgeTopicConfig:
    """One ``[[bridges.topics]]`` entry: ``pattern`` under ``local_prefix`` here is
    ``pattern`` under ``remote_prefix`` on the remote broker."""

    pattern: str = _setting("", _Text())
    """A topic filter (``sensors/#``), without the prefixes."""
    direction: str = _setting("out", _Choice(("out", "in", "both")))
    """``out``: local messages go to the remote broker; ``in``: the remote broker's come
    here (the bridge subscribes there); ``both``."""
    qos: int = _setting(1, _Int(0, 2))
    """The QoS of the subscription on the receiving side (here for ``out``, there for
    ``in``): messages travel at most at it."""
    local_prefix: str = _setting("", _Text(allow_empty=True))
    """Put before ``pattern`` here (``edge/``)."""
    remote_prefix: str = _setting("", _Text(allow_empty=True))
    """Put before ``pattern`` on the remote broker (``sites/berlin/``)."""


@dataclass(frozen=True)
class BridgeConfig:
    """One ``[[bridges]]`` entry: a connection to another MQTT broker
    (:mod:`ferromq.bridge`; docs/bridges.md)."""

    name: str = _setting("", _Text())
    """Names the bridge in logs and metrics, and its default client id."""
    address: str = _setting("", _Text())
    """The remote broker, ``host:port`` (``[::1]:1883`` for IPv6), or a WebSocket URL,
    ``ws://host:port/path`` or ``wss://host:port/path`` (TLS; the path defaults to
    ``/mqtt``)."""
    version: str = _setting("5", _Choice(("5", "3.1.1")))
    """The MQTT version spoken to the remote broker."""
    client_id: str = _setting("", _Text(allow_empty=True))
    """The bridge's client id there and its session's here (default
    ``ferromq-bridge-{name}``); its session is persistent on both sides."""
    username: str = _setting("", _Text(allow_empty=True))
    """User name for the remote broker (none when empty)."""
    password: str = _setting("", _Text(allow_empty=True))
    """Password for the remote broker (none when empty)."""
    tls: bool = _setting(False, _Bool())
    """Connect with TLS, verifying the remote's certificate (against ``cafile`` or the
    system's CAs) and host name; a ``wss://`` address implies it."""
    cafile: str = _setting("", _Text(allow_empty=True))
    """PEM CA certificates the remote's certificate is verified against."""
    certfile: str = _setting("", _Text(allow_empty=True))
    """PEM client certificate for the remote broker, with ``keyfile``."""
    keyfile: str = _setting("", _Text(allow_empty=True))
    """PEM private key of ``certfile``."""
    keepalive: int = _setting(60, _duration(1, 65535))
    """Seconds between the bridge's PINGREQs; the connection is dropped when nothing
    arrives for 1.5 times that."""
    remote_session_expiry: int = _setting(86400, _duration(0, 0xFFFF_FFFF))
    """MQTT 5: how long the remote broker keeps the bridge's session (its ``in``
    subscriptions and what they queue) while the bridge is away."""
    try_private: bool = _setting(True, _Bool())
    """MQTT 3.1.1: announce a bridge (Mosquitto's bridge flag on the protocol level), so
    a Mosquitto remote does not send the bridge's own messages back. MQTT 5 uses No
    Local instead."""
    reconnect_min: int = _setting(1, _duration(1))
    """Seconds before the first reconnection attempt; doubled after each failure."""
    reconnect_max: int = _setting(60, _duration(1))
    """The longest wait between attempts."""
    max_queued_bytes: int = _setting(0, _size(0, MAX_U63))
    """Bytes of ``out`` messages kept for the remote broker while it is away or slow
    (QoS 1/2; QoS 0 only with ``session.queue_qos0_offline``); over it
    ``session.drop_policy`` applies. 0: ``session.max_queued_bytes``."""
    topics: tuple[BridgeTopicConfig, ...] = _tables(BridgeTopicConfig)
    """The topics, ``[[bridges.topics]]``."""


@dataclass(frozen=True)
class PluginConfig:
    """One ``[[plugins]]`` entry: a Python plugin (:mod:`ferromq.plugins`; docs/plugins.md)."""

    name: str = _setting("", _Text())
    """The plugin: an entry point of the ``ferromq.plugins`` group, or ``module:Class``.
    Names it in logs and metrics."""
    options: tuple[tuple[str, object], ...] = _setting((), _Options())
    """Settings for the plugin (``options = { table = "readings" }``), given to it as a
    mapping."""
    timeout: int = _setting(5, _duration(1, HOUR))
    """Seconds a batch may take; a plugin that takes longer has failed (it is
    restarted)."""
    on_failure: str = _setting("pass", _Choice(("pass", "drop")))
    """What an intercepting plugin's messages get while it fails or restarts: routed
    (``pass``) or dropped (``drop``)."""


@dataclass(frozen=True)
class SparkplugConfig:
    """``[sparkplug]``: Sparkplug B "Aware" (Sparkplug 3.0 §10; docs/sparkplug.md)."""

    aware: bool = _setting(False, _Bool())
    """Republish every NBIRTH and DBIRTH as a retained message on
    ``$sparkplug/certificates/`` + its topic, so a host application that connects
    later reads each node's and device's last birth at once."""
    ndeath_timestamp: bool = _setting(True, _Bool())
    """With ``aware``: set an NDEATH's payload timestamp to the time the broker sends it
    (a will was composed at CONNECT, perhaps hours before)."""


@dataclass(frozen=True)
class SysConfig:
    """``[sys]``: the ``$SYS/`` broker statistics topics."""

    interval: int = _setting(10, _duration(0))
    """Seconds between ``$SYS`` publications; 0 disables ``$SYS``."""


@dataclass(frozen=True)
class LogConfig:
    """``[log]``: see :mod:`ferromq.log`."""

    level: str = _setting("info", _Choice(("debug", "info", "warning", "error")))
    """``info`` logs each connect, disconnect (with its reason), subscribe and
    unsubscribe; ``warning`` and above leave them out at no cost to the broker."""
    format: str = _setting("text", _Choice(("text", "json")))
    """``text``: one human line per event; ``json``: one JSON object per line."""
    destination: str = _setting("stderr", _Choice(("stderr", "file", "syslog")))
    """``stderr``; ``file`` (``file``, rotated at ``max_bytes``); ``syslog`` (the local
    syslog socket ``syslog_address``, which journald reads too)."""
    file: str | None = _setting(None, _Text())
    """The log file, with ``destination = "file"``."""
    max_bytes: int = _setting(10 * MiB, _size(1 * KiB))
    """Size at which the log file is rotated (``file`` becomes ``file.1`` ...)."""
    backups: int = _setting(5, _Int(1, 1000))
    """Rotated files kept beside the log file (``file.1`` the newest)."""
    syslog_address: str = _setting("/dev/log", _Text())
    """With ``destination = "syslog"``: a unix datagram socket path, or ``host:port``
    for syslog over UDP."""
    trace_clients: tuple[str, ...] = _setting((), _TextList())
    """Client ids whose every packet is logged (at info, with the client id): type,
    packet id, topic, QoS, payload size and its first bytes. Applied again on SIGHUP;
    other clients' packets cost nothing more."""


AUTH_PROVIDERS: Final = ("users_file", "jwt", "http", "hook")


@dataclass(frozen=True)
class AuthConfig:
    """``[auth]``: who may connect (:mod:`ferromq.auth`). With no provider every
    CONNECT is accepted inside the engine, with no Python per CONNECT."""

    users_file: str | None = _setting(None, _Text())
    """TOML file of SCRAM-SHA-256 credentials written by ``ferromq users add``
    (relative paths are from the working directory)."""
    allow_anonymous: bool | None = _setting(None, _Bool())
    """Accept a CONNECT without user name and password that no provider takes;
    default: true without providers, false with some."""
    methods: tuple[str, ...] = _setting(("SCRAM-SHA-256",), _Names(("SCRAM-SHA-256",)))
    """MQTT 5 enhanced authentication methods the users file offers; a method no
    provider runs is refused with 0x8C."""
    providers: tuple[str, ...] = _setting((), _Names(AUTH_PROVIDERS))
    """The providers asked in order, each answering accept, reject or "not mine" (then
    the next is asked): ``users_file``, ``jwt``, ``http``, ``hook``. Default: ``["users_file"]``
    when ``users_file`` is set, else none."""
    jwt_key_file: str | None = _setting(None, _Text())
    """The ``jwt`` provider's key: a PEM public key (RSA, EC, Ed25519) or a file holding
    an HMAC secret (without a final newline); or use ``jwt_jwks_url``. The token is the
    CONNECT password."""
    jwt_jwks_url: str | None = _setting(None, _Url())
    """The ``jwt`` provider's keys as a JSON Web Key Set fetched from this URL."""
    jwt_jwks_refresh: int = _setting(300, _duration(1))
    """How often the JWK set is fetched again (an unknown ``kid`` also fetches it, at
    most every 10 s)."""
    jwt_username_claim: str = _setting("sub", _Text())
    """The claim that must equal the CONNECT user name (and names the client without
    one)."""
    jwt_client_type_claim: str = _setting("client_type", _Text())
    """The claim holding the client type, ``"device"`` (when absent) or
    ``"application"``."""
    jwt_acl_claim: str = _setting("acl", _Text())
    """The claim holding the client's ACL rules (kept with the identity)."""
    jwt_audience: str | None = _setting(None, _Text())
    """When set, the ``aud`` a token must carry."""
    jwt_issuer: str | None = _setting(None, _Text())
    """When set, the ``iss`` a token must carry."""
    http_url: str | None = _setting(None, _Url())
    """The ``http`` provider: the authentication service each CONNECT is POSTed to
    (JSON; :mod:`ferromq.auth.http_service`)."""
    http_timeout: int = _setting(5, _duration(1, 60))
    """Seconds the service has to answer; then the client is refused 0x88."""
    http_cache_ttl: int = _setting(60, _duration(0))
    """Seconds an allow or deny answer is reused for the same user name, password and
    client id; 0 asks the service every time."""
    hook: str | None = _setting(None, _Text())
    """The ``hook`` provider: ``"module:attribute"`` or the name of an entry point in
    the group ``ferromq.auth_providers``; a provider object (async
    ``authenticate(request)``), or a class or factory called without arguments."""

    def chain(self) -> tuple[str, ...]:
        """The providers in the order they are asked."""
        if self.providers:
            return self.providers
        return ("users_file",) if self.users_file is not None else ()


@dataclass(frozen=True)
class AclConfig:
    """``[acl]``: what clients may publish, subscribe to and read (:mod:`ferromq.acl`,
    docs/acl.md). Unset, every client may do everything, as before ACLs existed."""

    file: str | None = _setting(None, _Text())
    """The rules file, read at start and again on SIGHUP (and when it changes, with
    ``watch``); relative paths are from the working directory."""
    format: str = _setting("toml", _Choice(("toml", "mosquitto")))
    """``toml``: ``[[rules]]`` tables; ``mosquitto``: Mosquitto's ``acl_file``."""
    default: str = _setting("allow", _Choice(("allow", "deny")))
    """The answer when no rule matches (Mosquitto's ``acl_file`` behaves as ``deny``)."""
    wildcards: str = _setting("withhold", _Choice(("withhold", "refuse")))
    """A subscription whose filter reaches both allowed and denied topics (``#``
    beside a denied ``a/secret``): ``withhold`` grants it and checks each message as
    it is delivered, as Mosquitto and EMQX do; ``refuse`` refuses it (SUBACK 0x87)."""
    watch: int = _setting(0, _duration(0))
    """Seconds between checks of the rules file for a change, applied like a SIGHUP;
    0 (the default): only SIGHUP reloads it."""


@dataclass(frozen=True)
class StreamFilesConfig:
    """``[stream.files]``: the embedded sink, rolling Avro files
    (:mod:`ferromq.stream.files`)."""

    directory: str = _setting("", _Text(allow_empty=True))
    """Where ``messages/`` and ``events/`` are written; empty: ``<storage.path>/stream``."""
    roll_bytes: int = _setting(64 * MiB, _size(1 * KiB))
    """A file is closed and a new one begun once it holds this many bytes."""
    roll_seconds: int = _setting(60, _duration(1))
    """... or once it has been open this long (a file with records only)."""
    retention_seconds: int = _setting(7 * DAY, _duration(0))
    """Closed files older than this are deleted, oldest first; 0 keeps them."""
    retention_bytes: int = _setting(0, _size(0))
    """Closed files beyond this many bytes in all (per kind) are deleted, oldest
    first; 0: no size bound."""


@dataclass(frozen=True)
class StreamKafkaConfig:
    """``[stream.kafka]``: the Kafka sink (:mod:`ferromq.stream.kafka_sink`)."""

    bootstrap_servers: str = _setting("", _Text(allow_empty=True))
    """Comma-separated ``host:port`` list; empty: ``kafka.bootstrap_servers``."""
    messages_topic: str = _setting("ferromq.messages", _Text())
    events_topic: str = _setting("ferromq.events", _Text())
    partitions: int = _setting(6, _Int(1, 10000))
    """Partitions of the topics ferromq creates."""
    delivery: str = _setting("async", _Choice(("async", "after_kafka")))
    """``after_kafka``: a QoS 1/2 publisher's PUBACK/PUBREC waits for Kafka's ack of
    its record; ``async``: never waits, records spill to disk while Kafka is away."""
    spill_directory: str = _setting("", _Text(allow_empty=True))
    """Where ``async`` records wait for Kafka; empty: ``<storage.path>/stream-spill``."""
    spill_max_bytes: int = _setting(1024 * MiB, _size(0))
    """Bound of the spill; what overflows is dropped and counted."""
    linger_ms: int = _setting(5, _Int(0, 1000))
    """``async``: how long records gather before the broker hands them to the sink
    (Kafka's ``linger.ms``): fewer, larger sends."""
    registry: str | None = _setting(None, _Url())
    """A Confluent-compatible schema registry (Confluent's, Apicurio's
    ``/apis/ccompat/v7``, Karapace): at start ``record-v1`` is registered under
    ``registry_subject`` and every record value is written in the Confluent wire format
    (magic byte 0, the schema id, the Avro body). Unset: plain Avro values."""
    registry_subject: str = _setting("{topic}-value", _Text())
    """The subject ``record-v1`` is registered under; ``{topic}`` is each topic's name
    (the default is Confluent's TopicNameStrategy)."""
    registry_username: str = _setting("", _Text(allow_empty=True))
    """HTTP basic authentication for the registry (none when empty)."""
    registry_password: str = _setting("", _Text(allow_empty=True))
    """The password with ``registry_username``."""


STREAM_KEY: Final = re.compile(r"topic|client|level:\d{1,4}")


@dataclass(frozen=True)
class StreamConfig:
    """``[stream]``: every accepted PUBLISH and client lifecycle event as a record of
    ``ferromq/stream/record-v1.avsc`` for the data pipeline (docs/stream.md)."""

    enabled: bool = _setting(False, _Bool())
    sink: str = _setting("files", _Choice(("files", "kafka")))
    """``files``: rolling Avro files (``[stream.files]``); ``kafka``: topics
    (``[stream.kafka]``)."""
    topics: tuple[str, ...] = _setting(("#",), _TextList())
    """Topic filters whose messages are streamed; ``$SYS`` topics never are."""
    events: bool = _setting(True, _Bool())
    """Lifecycle events (connected, disconnected, subscribed ...) too."""
    node: str = _setting("", _Text(allow_empty=True))
    """The node id in every record; empty: the host name."""
    key: str = _setting("topic", _Text())
    """A message record's key: ``topic``, ``client`` (the client id) or ``level:N``
    (topic level N from 0, a device id: per-device order)."""
    files: StreamFilesConfig = field(default_factory=StreamFilesConfig, metadata=_SUB_TABLE)
    kafka: StreamKafkaConfig = field(default_factory=StreamKafkaConfig, metadata=_SUB_TABLE)


@dataclass(frozen=True)
class Config:
    """The whole configuration; every section has production defaults."""

    listeners: tuple[ListenerConfig, ...] = (ListenerConfig(),)
    bridges: tuple[BridgeConfig, ...] = _tables(BridgeConfig)
    plugins: tuple[PluginConfig, ...] = _tables(PluginConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    mqtt5: Mqtt5Config = field(default_factory=Mqtt5Config)
    redirect: RedirectConfig = field(default_factory=RedirectConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    sys: SysConfig = field(default_factory=SysConfig)
    sparkplug: SparkplugConfig = field(default_factory=SparkplugConfig)
    auto_subscribe: AutoSubscribeConfig = field(default_factory=AutoSubscribeConfig)
    rewrite: RewriteConfig = field(default_factory=RewriteConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    log: LogConfig = field(default_factory=LogConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    acl: AclConfig = field(default_factory=AclConfig)
    bans: BansConfig = field(default_factory=BansConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


# The top-level arrays of tables besides ``[[listeners]]``, each set in the file only.
_TABLE_LISTS: Final = ("bridges", "plugins")
_SECTIONS: Final = tuple(
    f.name for f in fields(Config) if f.name not in ("listeners", *_TABLE_LISTS)
)
_SERVER_WORKERS: Final = next(f for f in fields(ServerConfig) if f.name == "workers")

# ---------------------------------------------------------------------------------------
# Loading.

_Table = TypeVar("_Table", bound="DataclassInstance")


def _load_table(base: _Table, raw: object, path: str) -> _Table:
    """``base`` with the keys of the TOML table ``raw`` (found at ``path``) applied."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a table, got {_describe(raw)}")
    settings = {f.name: f for f in fields(base)}
    values: dict[str, object] = {}
    for key, value in raw.items():
        where = f"{path}.{key}"
        if key not in settings:
            raise ConfigError(f"{where}: unknown key{_did_you_mean(key, list(settings))}")
        item = _table_list_item(settings[key])
        if _is_table(settings[key]):
            values[key] = _load_table(getattr(base, key), value, where)
        elif item is not None:
            values[key] = _load_table_list(item, value, where)
        else:
            values[key] = _kind(settings[key]).parse(value, where)
    return replace(base, **values)


def _load_table_list(item: type[_Table], raw: object, path: str) -> tuple[_Table, ...]:
    """The entries of the TOML array of tables ``raw`` (``[[path]]``), each ``item``
    with its keys applied."""
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: expected an array of tables ([[{path}]]), got {_describe(raw)}")
    return tuple(_load_table(item(), entry, f"{path}[{n}]") for n, entry in enumerate(raw))


def require(table: DataclassInstance, where: str, *keys: str) -> None:
    """Raise :class:`ConfigError` ``{where}.{key}: required`` for the first of ``keys``
    left empty in ``table`` (an entry of an array of tables, whose required keys have
    an empty default)."""
    for key in keys:
        if not getattr(table, key):
            raise ConfigError(f"{where}.{key}: required")


def _load_listeners(raw: object) -> tuple[ListenerConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError(
            f"listeners: expected an array of tables ([[listeners]]), got {_describe(raw)}"
        )
    if not raw:
        raise ConfigError("listeners: at least one listener is required")
    return tuple(
        _load_table(ListenerConfig(), item, f"listeners[{index}]") for index, item in enumerate(raw)
    )


def _apply_document(config: Config, document: Mapping[str, object]) -> Config:
    for key, raw in document.items():
        if key == "listeners":
            config = replace(config, listeners=_load_listeners(raw))
        elif key == "bridges":
            config = replace(config, bridges=_load_table_list(BridgeConfig, raw, key))
        elif key == "plugins":
            config = replace(config, plugins=_load_table_list(PluginConfig, raw, key))
        elif key in _SECTIONS:
            config = replace(config, **{key: _load_table(getattr(config, key), raw, key)})
        else:
            names = ["listeners", *_TABLE_LISTS, *_SECTIONS]
            raise ConfigError(f"{key}: unknown key{_did_you_mean(key, names)}")
    return config


def parse_ban_list(table: Mapping[str, object], source: str) -> BanList:
    """The bans of a TOML table read from ``source`` (``bans file /etc/bans.toml``).
    Raises :class:`ConfigError` naming ``source`` and the key."""
    try:
        return _load_table(BanList(), table, "")
    except ConfigError as exc:  # the key path starts with the empty table path: ".key"
        raise ConfigError(f"{source}: {str(exc).removeprefix('.')}") from None


def load_ban_file(path: Path) -> BanList:
    """The bans of a bans file (``[bans] file``). Raises :class:`ConfigError`."""
    return parse_ban_list(_read_document(path, "bans file"), f"bans file {path}")


def _read_document(path: Path, what: str = "config file") -> dict[str, Any]:
    where = f"{what} {path}"
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a directory") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte offset {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = toml_hint(text) if what == "config file" else None
        if hint is not None:
            raise ConfigError(f"{where}: {hint}") from None
        # tomllib keeps the position only in the message: "... (at line 3, column 5)".
        problem, _, position = str(exc).rpartition(" (at ")
        if not problem:
            raise ConfigError(f"{where}: invalid TOML: {exc}") from None
        raise ConfigError(f"{where} at {position.rstrip(')')}: invalid TOML: {problem}") from None


def _env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}__{key.upper()}"


def _apply_listen(config: Config, text: str) -> Config:
    host, _, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an unbracketed IPv6 address: the port is ambiguous
    if not host or not port:
        raise ConfigError(
            f"{ENV_LISTEN}: expected host:port like 0.0.0.0:1883 or [::1]:1883, got {_quote(text)}"
        )
    return _set_first_listener(config, {"host": (host, ENV_LISTEN), "port": (port, ENV_LISTEN)})


def _set_first_listener(config: Config, texts: Mapping[str, tuple[str, str]]) -> Config:
    """``config`` with keys of the first listener set from text: key -> (text, where it
    came from, for errors)."""
    first = config.listeners[0]
    settings = {f.name: f for f in fields(first)}
    values: dict[str, Any] = {  # each kind yields its field's type
        key: _kind(settings[key]).parse_env(text, where) for key, (text, where) in texts.items()
    }
    return replace(config, listeners=(replace(first, **values), *config.listeners[1:]))


def override_first_listener(config: Config, host: str | None, port: str | None) -> Config:
    """The command line's ``--bind HOST`` and ``--port PORT`` (Mosquitto's ``-p``): they
    replace the first listener's host and port, after the file and the environment;
    other listeners stay as configured. Raises :class:`ConfigError` naming the option."""
    texts = {
        key: (text, option)
        for key, text, option in (("host", host, "--bind"), ("port", port, "--port"))
        if text is not None
    }
    return _check(_set_first_listener(config, texts)) if texts else config


def override_workers(config: Config, workers: str | None) -> Config:
    """The command line's ``--workers N|auto``, over the file and the environment.
    Raises :class:`ConfigError` naming the option."""
    if workers is None:
        return config
    value: Any = _kind(_SERVER_WORKERS).parse_env(workers, "--workers")  # the kind's type
    return replace(config, server=replace(config.server, workers=value))


def _apply_override(config: Config, name: str, text: str) -> Config:
    section, _, key = name.removeprefix(ENV_PREFIX).lower().partition("__")
    if section in _TABLE_LISTS:
        raise ConfigError(f"{name}: {section} are a list of tables; set them in the config file")
    if section == "listeners":
        raise ConfigError(
            f"{name}: listeners are a list and cannot be overridden key by key; "
            f"use {ENV_LISTEN}=host:port or the config file"
        )
    if section not in _SECTIONS:
        known = [_env_name(s, f.name) for s in _SECTIONS for f in fields(getattr(config, s))]
        raise ConfigError(f"{name}: unknown section {_quote(section)}{_did_you_mean(name, known)}")
    table = getattr(config, section)
    return replace(config, **{section: _override_key(table, section, key, name, text)})


def _override_key(table: _Table, path: str, key: str, name: str, text: str) -> _Table:
    """``table`` (at ``path``) with ``key`` (``files__directory`` for a sub-table's
    key) set from the environment variable ``name``."""
    settings = {f.name: f for f in fields(table)}
    head, _, rest = key.partition("__")
    if rest and head in settings and _is_table(settings[head]):
        inner = _override_key(getattr(table, head), f"{path}.{head}", rest, name, text)
        return replace(table, **{head: inner})
    if key in settings and _table_list_item(settings[key]) is not None:
        raise ConfigError(f"{name}: {path}.{key} is a list of tables; set it in the config file")
    if key not in settings or _is_table(settings[key]):
        known = [
            _env_name(path.replace(".", "__"), other)
            for other, of in settings.items()
            if not _is_table(of) and _table_list_item(of) is None
        ]
        raise ConfigError(f"{name}: unknown key {path}.{key}{_did_you_mean(name, known)}")
    value = _kind(settings[key]).parse_env(text, name)
    return replace(table, **{key: value})


def _apply_environ(config: Config, environ: Mapping[str, str]) -> Config:
    # Sorted, so that with several bad variables the same one is reported every run.
    for name in sorted(environ):
        if name == ENV_LISTEN:
            config = _apply_listen(config, environ[name])
        elif name.startswith(ENV_PREFIX) and "__" in name:
            config = _apply_override(config, name, environ[name])
    return config


def _check_auth(auth: AuthConfig) -> None:
    if not auth.chain() and auth.allow_anonymous is False:
        raise ConfigError(
            "auth.allow_anonymous: false with no auth.users_file would refuse every client; "
            "set auth.users_file or auth.providers"
        )
    sources = {  # each provider's settings, exactly one of which it needs
        "users_file": {"users_file": auth.users_file},
        "jwt": {"jwt_key_file": auth.jwt_key_file, "jwt_jwks_url": auth.jwt_jwks_url},
        "http": {"http_url": auth.http_url},
        "hook": {"hook": auth.hook},
    }
    for name, settings in sources.items():
        given = [key for key, value in settings.items() if value is not None]
        if name in auth.chain() and len(given) != 1:
            keys = " or ".join(f"auth.{key}" for key in settings)
            raise ConfigError(f'auth.providers: "{name}" needs {keys}, exactly one')
        if given and name not in auth.chain():
            raise ConfigError(f'auth.{given[0]}: set, but "{name}" is not in auth.providers')


def _check(config: Config) -> Config:
    """Rules that span settings, checked once file and environment are both applied."""
    names: dict[str, int] = {}
    addresses: dict[tuple[str, int], int] = {}
    for index, listener in enumerate(config.listeners):
        if listener.name in names:
            raise ConfigError(
                f"listeners[{index}].name: {_quote(listener.name)} is already the name of "
                f"listeners[{names[listener.name]}]; listener names must be unique"
            )
        address = (listener.host, listener.port)
        if address in addresses:
            raise ConfigError(
                f"listeners[{index}]: {listener.host}:{listener.port} is already used by "
                f"listeners[{addresses[address]}]"
            )
        names[listener.name] = index
        addresses[address] = index
        _check_tls(index, listener)
        _check_only_for(
            index,
            listener,
            _WEBSOCKET_ONLY,
            listener.protocol in WEBSOCKET_PROTOCOLS,
            'protocol = "ws" or "wss"',
        )
        _check_only_for(
            index, listener, _PROXY_ONLY, listener.proxy_protocol, "proxy_protocol = true"
        )
        if not listener.path.startswith("/"):
            raise ConfigError(
                f"listeners[{index}].path: must start with /, got {_quote(listener.path)}"
            )
    _check_auth(config.auth)
    _check_log(config.log)
    _check_admin(config.admin)
    _check_stream(config.stream)
    config = _join_cluster(config)
    session = config.session
    if session.queue_limit + config.limits.max_inflight >= 0xFFFF:
        raise ConfigError(
            f"session.queue_limit ({session.queue_limit}) + limits.max_inflight "
            f"({config.limits.max_inflight}) must stay below 65535: every queued or "
            "in-flight QoS 1/2 message holds one of a session's 65535 packet ids"
        )
    held = session.queue_limit + config.limits.max_inflight
    kept = config.redis.max_messages_per_client
    if config.storage.backend == "redis" and held > kept:
        raise ConfigError(
            f"session.queue_limit ({session.queue_limit}) + limits.max_inflight "
            f"({config.limits.max_inflight}) is above redis.max_messages_per_client ({kept}), "
            "the messages the Redis store keeps per client: a session holding more would "
            "lose the oldest when it is restored or moves to another node; raise "
            "redis.max_messages_per_client or lower the others"
        )
    cap = session.max_session_expiry
    if cap and not 0 < session.default_session_expiry_v311 <= cap:
        raise ConfigError(
            f"session.default_session_expiry_v311: {session.default_session_expiry_v311} "
            f"(0 = never) exceeds session.max_session_expiry ({cap}); lower it or raise the cap"
        )
    if config.storage.application_store == "kafka" and config.storage.backend == "memory":
        raise ConfigError(
            'storage.application_store: "kafka" needs a durable primary store '
            '(storage.backend = "memory" keeps no sessions to restore)'
        )
    if _KAFKA_TOPIC_CHARS.fullmatch(config.kafka.topic_prefix) is None:
        raise ConfigError(
            f"kafka.topic_prefix: {_quote(config.kafka.topic_prefix)} must be at most 100 of "
            "the characters Kafka allows in topic names: a-z A-Z 0-9 . _ -"
        )
    return config


_NODE_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _join_cluster(config: Config) -> Config:
    """A clustered node's settings: its sessions in Redis at ``cluster.redis``, each of its
    shards a member of the cluster (docs/cluster.md); unchanged when not clustered."""
    cluster = config.cluster
    if not cluster.node_id:
        for key in ("kafka", "redis"):
            if getattr(cluster, key):
                raise ConfigError(f"cluster.{key}: set, but cluster.node_id is empty")
        return config
    if _NODE_ID.fullmatch(cluster.node_id) is None:
        raise ConfigError(
            f"cluster.node_id: {_quote(cluster.node_id)} must be 1 to 64 letters, digits, _ or -"
        )
    for key, what in (("kafka", "Kafka bootstrap servers"), ("redis", "a Redis URL")):
        if not getattr(cluster, key):
            raise ConfigError(f"cluster.{key}: a clustered node needs {what}")
    if _KAFKA_TOPIC_CHARS.fullmatch(cluster.topic_prefix) is None:
        raise ConfigError(
            f"cluster.topic_prefix: {_quote(cluster.topic_prefix)} must be at most 100 of "
            "the characters Kafka allows in topic names: a-z A-Z 0-9 . _ -"
        )
    if config.storage.backend == "memory":
        raise ConfigError(
            'storage.backend: "memory" cannot hold a cluster\'s sessions; a clustered '
            "node keeps them in Redis (cluster.redis)"
        )
    return replace(
        config,
        storage=replace(config.storage, backend="redis"),
        redis=replace(config.redis, url=cluster.redis),
    )


def _check_log(log: LogConfig) -> None:
    if log.destination == "file" and log.file is None:
        raise ConfigError('log.file: required with log.destination = "file"')
    if log.file is not None and log.destination != "file":
        raise ConfigError(
            f'log.file: set, but log.destination is {_quote(log.destination)}; set it to "file"'
        )


def _check_admin(admin: AdminConfig) -> None:
    if admin.token is not None and admin.token_file is not None:
        raise ConfigError("admin.token_file: set beside admin.token; give one of them")
    no_token = admin.token is None and admin.token_file is None
    if admin.enabled and not admin.loopback() and no_token:
        raise ConfigError(
            f"admin.token: required when admin.host ({_quote(admin.host)}) is not a "
            "loopback address; set admin.token or admin.token_file"
        )
    if bool(admin.certfile) != bool(admin.keyfile):
        given, missing = ("certfile", "keyfile") if admin.certfile else ("keyfile", "certfile")
        raise ConfigError(f"admin.{missing}: required with admin.{given} (HTTPS needs both)")


def _check_stream(stream: StreamConfig) -> None:
    if STREAM_KEY.fullmatch(stream.key) is None:
        raise ConfigError(
            f'stream.key: expected "topic", "client" or "level:N" (N a topic level from 0), '
            f"got {_quote(stream.key)}"
        )
    if not stream.topics:
        raise ConfigError('stream.topics: at least one topic filter is required (["#"]: all)')
    kafka = stream.kafka
    rest = kafka.registry_subject.replace("{topic}", "")
    if "{" in rest or "}" in rest:
        raise ConfigError(
            f"stream.kafka.registry_subject: {_quote(kafka.registry_subject)} may hold "
            "{topic} and no other placeholder"
        )
    if kafka.registry_password and not kafka.registry_username:
        raise ConfigError(
            "stream.kafka.registry_username: required with stream.kafka.registry_password"
        )
    for index, topic_filter in enumerate(stream.topics):
        if topic_filter.startswith("$share/"):
            raise ConfigError(
                f"stream.topics[{index}]: {_quote(topic_filter)} is a shared subscription, "
                "not a topic filter"
            )
        try:
            SubscriptionIndex().subscribe(0, topic_filter)
        except ValueError:
            raise ConfigError(
                f"stream.topics[{index}]: {_quote(topic_filter)} is not a valid topic filter"
            ) from None


def _check_only_for(
    index: int, listener: ListenerConfig, keys: tuple[str, ...], applies: bool, needs: str
) -> None:
    """Keys that mean something only when ``applies`` must keep their defaults otherwise."""
    if applies:
        return
    default = ListenerConfig()
    for key in keys:
        if getattr(listener, key) != getattr(default, key):
            raise ConfigError(
                f"listeners[{index}].{key}: only with {needs} (this listener is "
                f"protocol = {_quote(listener.protocol)}, proxy_protocol = "
                f"{str(listener.proxy_protocol).lower()})"
            )


def _check_tls(index: int, listener: ListenerConfig) -> None:
    where = f"listeners[{index}]"
    if listener.protocol not in TLS_PROTOCOLS:
        default = ListenerConfig()
        for key in _TLS_ONLY:
            if getattr(listener, key) != getattr(default, key):
                raise ConfigError(
                    f'{where}.{key}: only for protocol = "tls" or "wss" (this listener is '
                    f"{_quote(listener.protocol)})"
                )
        return
    for key in ("certfile", "keyfile"):
        if not getattr(listener, key):
            raise ConfigError(
                f"{where}.{key}: required with protocol = {_quote(listener.protocol)}"
            )
    if listener.require_certificate and not listener.cafile:
        raise ConfigError(
            f"{where}.cafile: required with require_certificate = true "
            "(the CAs client certificates must chain to)"
        )
    if listener.crlfile and not listener.require_certificate:
        raise ConfigError(
            f"{where}.crlfile: needs require_certificate = true "
            "(only verified client certificates are checked against it)"
        )
    if listener.use_identity_as_username and not listener.require_certificate:
        raise ConfigError(
            f"{where}.use_identity_as_username: needs require_certificate = true "
            "(an identity must come from a verified certificate)"
        )


_KAFKA_TOPIC_CHARS: Final = re.compile(r"[a-zA-Z0-9._-]{0,100}")


def load_config(path: Path | None, environ: Mapping[str, str]) -> Config:
    """The effective configuration: defaults, then the TOML file at ``path`` (if any),
    then ``FERROMQ_*`` overrides from ``environ``. Raises :class:`ConfigError`."""
    config = Config()
    if path is not None:
        document = _read_document(path)
        try:
            config = _apply_document(config, document)
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    return _check(_apply_environ(config, environ))


# ---------------------------------------------------------------------------------------
# Showing the effective configuration (``ferromq check-config``).


def config_as_dict(config: Config) -> dict[str, Any]:
    """Plain data (lists, dicts, scalars) in schema order, ready for ``json.dumps``."""
    data = asdict(config)
    data["listeners"] = list(data["listeners"])
    data["bridges"] = list(data["bridges"])
    data["plugins"] = [{**entry, "options": dict(entry["options"])} for entry in data["plugins"]]
    return data


def toml_value(value: object) -> str:
    """``value`` (a boolean, string, integer or list of them) as TOML."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return _quote(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return f"[{', '.join(toml_value(item) for item in value)}]"
    if isinstance(value, Mapping):  # an inline table (a plugin's options)
        return "{" + ", ".join(f"{_quote(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def toml_table(header: str, table: Mapping[str, object]) -> list[str]:
    """The lines of one TOML table; None values are left out (TOML has no null)."""
    lines = (f"{key} = {toml_value(value)}" for key, value in table.items() if value is not None)
    return [header, *lines, ""]


def render_toml(config: Config) -> str:
    """The configuration as a TOML document that :func:`load_config` reads back unchanged."""
    data = config_as_dict(config)
    lines: list[str] = []
    for key in ("listeners", *_TABLE_LISTS):
        for entry in data.pop(key):
            lines += _toml_table_entry(key, entry)
    for section, table in data.items():
        lines += _toml_tables(section, table)
    return "\n".join(lines)


def _is_table_array(value: object) -> bool:
    """Whether ``value`` is a non-empty array of tables (an empty one is written as
    ``key = []``)."""
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(item, Mapping) for item in value)
    )


def _toml_tables(path: str, table: Mapping[str, object]) -> list[str]:
    """``table`` as ``[path]`` followed by its sub-tables as ``[path.name]`` and its
    arrays of tables as ``[[path.name]]``."""
    inner = {key: value for key, value in table.items() if isinstance(value, Mapping)}
    arrays = {key: value for key, value in table.items() if _is_table_array(value)}
    plain = {key: value for key, value in table.items() if key not in inner | arrays}
    lines = toml_table(f"[{path}]", plain)
    for key, value in inner.items():
        lines += _toml_tables(f"{path}.{key}", value)
    for key, entries in arrays.items():
        for entry in entries:  # type: ignore[attr-defined]  # checked by _is_table_array
            lines += _toml_table_entry(f"{path}.{key}", entry)
    return lines


def _toml_table_entry(path: str, entry: Mapping[str, object]) -> list[str]:
    """One entry of the array of tables ``[[path]]``, then its own arrays of tables."""
    arrays = {key: value for key, value in entry.items() if _is_table_array(value)}
    lines = toml_table(f"[[{path}]]", {k: v for k, v in entry.items() if k not in arrays})
    for key, entries in arrays.items():
        for inner in entries:  # type: ignore[attr-defined]  # checked by _is_table_array
            lines += _toml_table_entry(f"{path}.{key}", inner)
    return lines
