"""The extension API: Python code inside the broker that sees client messages and
client events in batches, and may decide what happens to the messages (docs/plugins.md).

A plugin is a class (subclass :class:`Plugin`) found by ``[[plugins]] name``: an entry
point of the ``ferromq.plugins`` group, or ``module:Class``. It declares the topic
filters whose messages it sees (``filters``), the client events it wants (``events``)
and whether it *intercepts*: the messages of an intercepting plugin wait for its
verdict before they are routed or acknowledged; an observing plugin gets copies of
messages already routed. The engine matches the filters in Rust and hands each plugin
batches (one call per batch, never one per message); the plugin runs on a thread of its
own, supervised by :mod:`ferromq.plugin_host`.

This module is what a plugin imports; it holds no broker machinery.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from ferromq._core import PluginMessage

__all__ = [
    "DROP",
    "PASS",
    "BrokerAccess",
    "ClientEvent",
    "EventKind",
    "Message",
    "Plugin",
    "Reject",
    "Rewrite",
    "Verdict",
]

Message = PluginMessage
"""A client's PUBLISH: ``client_id``, ``username`` (or None), ``topic``, ``payload``
(bytes), ``qos``, ``retain``, and ``intercepted`` (it waits for a verdict)."""

EventKind = Literal["connected", "disconnected", "subscribed", "unsubscribed"]


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """A client connected, disconnected, subscribed or unsubscribed.

    ``filters`` holds the subscription's filters (granted or refused: ``granted`` has
    the SUBACK code of each, 0x80 and above refused) or the unsubscribed ones;
    ``reason`` says why a connection ended."""

    kind: EventKind
    client_id: str
    username: str | None = None
    filters: tuple[str, ...] = ()
    granted: tuple[int, ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Pass:
    """Route the message as it is."""


@dataclass(frozen=True, slots=True)
class Drop:
    """Route the message nowhere; the client's PUBACK/PUBREC says Success."""


@dataclass(frozen=True, slots=True)
class Reject:
    """Route the message nowhere; an MQTT 5 client's QoS 1/2 PUBLISH hears
    ``reason_code`` (0x80 and above; 0x87 Not authorized by default). MQTT 3.1.1 has no
    refusal in PUBACK/PUBREC: for it, and for QoS 0, this is a drop."""

    reason_code: int = 0x87

    def __post_init__(self) -> None:
        if not 0x80 <= self.reason_code <= 0xFF:
            raise ValueError(f"reason code 0x{self.reason_code:02X} is not an error (0x80-0xFF)")


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Route the message with this topic and/or payload instead (None keeps it)."""

    topic: str | None = None
    payload: bytes | None = None

    def __post_init__(self) -> None:
        if self.topic is not None:
            problem = topic_name_problem(self.topic)
            if problem:
                raise ValueError(f"rewrite topic {self.topic!r}: {problem}")


Verdict = Pass | Drop | Reject | Rewrite
PASS: Verdict = Pass()
DROP: Verdict = Drop()


def topic_name_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be a PUBLISH's topic name, or None."""
    if not topic:
        return "empty"
    if "+" in topic or "#" in topic:
        return "a topic name holds no wildcard"
    if "\0" in topic:
        return "a topic name holds no U+0000"
    if len(topic.encode("utf-8", "surrogatepass")) > 0xFFFF:
        return "longer than 65,535 bytes"
    return None


class BrokerAccess(Protocol):
    """What the broker offers a plugin (given to its constructor)."""

    @property
    def options(self) -> Mapping[str, object]:
        """The ``options`` table of the plugin's ``[[plugins]]`` entry."""
        ...

    @property
    def logger(self) -> logging.Logger:
        """A logger named ``ferromq.plugins.<name>``."""
        ...

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Publish a message as the broker (as ``$SYS`` messages are), from any thread.
        It is routed on the broker's loop, after the batch in progress is decided; an
        invalid topic name raises :class:`ValueError` here."""
        ...


class Plugin:
    """Subclass this. The class attributes say what the plugin sees; the methods run
    on the plugin's own thread, one call at a time, so a plugin keeps state in plain
    attributes without locks. An exception (or a batch that takes longer than
    ``[[plugins]] timeout``) is logged and counted, and the plugin is restarted: a new
    instance, after a backoff."""

    filters: ClassVar[Sequence[str]] = ()
    """Topic filters whose client messages the plugin sees (``#`` for all)."""
    events: ClassVar[Sequence[EventKind]] = ()
    """Client events the plugin sees."""
    intercepts: ClassVar[bool] = False
    """True: its messages wait for its verdicts (``on_messages``' return) before they
    are routed; False: it sees copies of messages already routed."""

    def __init__(self, broker: BrokerAccess) -> None:
        self.broker = broker

    def on_messages(self, messages: Sequence[Message]) -> Sequence[Verdict] | None:
        """A batch of messages, in the order they arrived. An intercepting plugin
        returns one verdict per message (or None: every message passes)."""
        return None

    def on_events(self, events: Sequence[ClientEvent]) -> None:
        """A batch of client events, in the order they happened."""

    def close(self) -> None:
        """The broker stops, or the plugin is restarted after a failure."""
