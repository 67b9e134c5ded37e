"""One log line per client event: connect, disconnect (with its reason), subscribe,
unsubscribe, and every packet of a traced client.

The engine reports these events (``ClientConnected``, ``ClientDisconnected``,
``Subscribed``, ``Unsubscribed``) only while told to (``Engine.set_client_events``,
on while the log level shows info: :func:`client_events_wanted`), so a broker logging
at warning makes no event and pays one branch per connect or subscribe. Traces
(``PacketTrace``) come only for the client ids named by ``[log] trace_clients`` or
:meth:`ferromq.broker.Broker.trace`; each traced packet is an event, a price only that
client's connection pays. Nothing here runs per message of any other client.

In a node of several shards (:mod:`ferromq.node`) a client's connection lives on the
shard that owns its client id, so that shard logs its events and its trace (lines
ending ``shard=K``, written by the supervisor: :mod:`ferromq.log`); a SIGHUP reaches
every shard, and ``ferromq ctl trace`` goes to the owner, so a trace starts wherever
the client is.

What the engine does not know is added here: the peer's address (``IOHub.peer``, the
PROXY header's client where there is one) and the listener's name. Lines, as text::

    INFO ferromq.client client connected client_id=dev-1 username=alice
         peer=127.0.0.1:50412 listener=default protocol=5.0 keep_alive=60
         clean_start=true session_expiry=0 session_present=false
    INFO ferromq.client client disconnected client_id=dev-1 reason=keep_alive_timeout
         reason_code="0x8D Keep Alive timeout"
    INFO ferromq.client subscribed client_id=dev-1 filter=sensors/# qos=1 granted=1
    INFO ferromq.client subscription refused client_id=dev-1 filter=a/# qos=1
         reason_code="0x87 Not authorized"
    INFO ferromq.client unsubscribed client_id=dev-1 filter=sensors/#
    INFO ferromq.trace packet in client_id=dev-1 type=publish packet_id=3 topic=a/b
         qos=1 payload_bytes=5 payload=hello
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, TypeAlias

from ferromq._core import (
    ClientConnected,
    ClientDisconnected,
    PacketTrace,
    Subscribed,
    Unsubscribed,
    reason_code_name,
)
from ferromq.log import log_event, peer_text

__all__ = ["ClientEvent", "ClientLog", "client_events_wanted"]

logger = logging.getLogger("ferromq.client")
trace_logger = logging.getLogger("ferromq.trace")

ClientEvent: TypeAlias = (
    ClientConnected | ClientDisconnected | Subscribed | Unsubscribed | PacketTrace
)

PROTOCOLS: Final = {3: "3.1", 4: "3.1.1", 5: "5.0"}
_FIRST_FAILURE: Final = 0x80  # SUBACK codes from here on refuse the filter


def client_events_wanted(level: str) -> bool:
    """Whether a log at ``level`` (a schema level) shows the client events."""
    return level in ("debug", "info")


def _code(code: int) -> str:
    return f"0x{code:02X} {reason_code_name(code)}"


def payload_text(preview: bytes, size: int) -> str:
    """A payload's first bytes for a log: the text when they are printable UTF-8, else
    hex; ``...`` marks a payload longer than the preview."""
    try:
        text = preview.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    shown = text if text.isprintable() and text else preview.hex()
    return shown + ("..." if size > len(preview) else "")


class ClientLog:
    """Logs the client events of one broker; ``peer`` and ``listener`` name a
    connection's client address and listener while it is open (None after)."""

    def __init__(
        self,
        peer: Callable[[int], tuple[str, int] | None],
        listener: Callable[[int], str | None],
    ) -> None:
        self._peer = peer
        self._listener = listener

    def on_event(self, event: ClientEvent) -> None:
        match event:
            case ClientConnected():
                peer = self._peer(event.conn)
                log_event(
                    logger,
                    logging.INFO,
                    "client connected",
                    client_id=event.client_id,
                    username=event.username,
                    peer=peer_text(peer) if peer else None,
                    listener=self._listener(event.conn),
                    protocol=PROTOCOLS.get(event.protocol, str(event.protocol)),
                    keep_alive=event.keep_alive,
                    clean_start=event.clean_start,
                    session_expiry=event.session_expiry,
                    session_present=event.session_present,
                )
            case ClientDisconnected():
                code = event.reason_code
                log_event(
                    logger,
                    logging.INFO,
                    "client disconnected",
                    client_id=event.client_id,
                    reason=event.reason,
                    reason_code=None if code is None else f"0x{code:02X} {event.reason_name}",
                )
            case Subscribed():
                for topic_filter, qos, code in event.filters:
                    if code < _FIRST_FAILURE:
                        log_event(
                            logger,
                            logging.INFO,
                            "subscribed",
                            client_id=event.client_id,
                            filter=topic_filter,
                            qos=qos,
                            granted=code,
                        )
                    else:
                        log_event(
                            logger,
                            logging.INFO,
                            "subscription refused",
                            client_id=event.client_id,
                            filter=topic_filter,
                            qos=qos,
                            reason_code=_code(code),
                        )
            case Unsubscribed():
                for topic_filter in event.filters:
                    log_event(
                        logger,
                        logging.INFO,
                        "unsubscribed",
                        client_id=event.client_id,
                        filter=topic_filter,
                    )
            case PacketTrace():
                self._trace(event)

    @staticmethod
    def _trace(event: PacketTrace) -> None:
        fields: dict[str, object] = {"client_id": event.client_id, "type": event.packet_type}
        if event.packet_id is not None:
            fields["packet_id"] = event.packet_id
        if event.topic is not None:
            fields["topic"] = event.topic
        if event.filters:
            fields["filters"] = ",".join(event.filters)
        if event.qos is not None:
            fields["qos"] = event.qos
        if event.reason_codes:
            fields["reason_codes"] = ",".join(f"0x{code:02X}" for code in event.reason_codes)
        if event.payload_size is not None and event.payload_preview is not None:
            fields["payload_bytes"] = event.payload_size
            fields["payload"] = payload_text(event.payload_preview, event.payload_size)
        direction = "in" if event.inbound else "out"
        log_event(trace_logger, logging.INFO, f"packet {direction}", **fields)
