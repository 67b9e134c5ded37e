"""Sparkplug B messages into metric rows, per edge node, in stream order: pure Python
(protobuf only), no Spark, so it is tested on its own and the Spark job
(:mod:`.frames`) only feeds it each edge node's records in order.

A topic is ``spBv1.0/<group_id>/<message_type>/<edge_node_id>[/<device_id>]``: a device
id with ``DBIRTH``, ``DDATA``, ``DDEATH``, none with ``NBIRTH``, ``NDATA``, ``NDEATH``
(Sparkplug 3.0 §4.1). The payload is a ``Payload`` of Tahu's ``sparkplug_b.proto``
(:mod:`.descriptor`).

:class:`EdgeNode` is one edge node's state, fed its messages in order by
:meth:`EdgeNode.receive`, which returns the rows each gives:

- **metrics**: one row per metric of every BIRTH, DATA and DEATH. A DATA metric carries an
  alias and no name [tck-id-payloads-alias-data-cmd-requirement]; its name, and its
  datatype, which a DATA metric should not carry [tck-id-payloads-metric-datatype-not-req],
  come from the last BIRTH of its node or device. A BIRTH replaces that map; an NBIRTH
  also forgets every device's BIRTH (the edge node must send each DBIRTH again after its
  NBIRTH [tck-id-operational-behavior-edge-node-birth-sequence]). A metric whose name
  cannot be resolved has a null ``name``.
- **gaps**: ``seq`` is one counter per edge node over all its messages but NDEATH,
  0..255 then 0 again [tck-id-payloads-sequence-num-incrementing]; an NBIRTH sets it
  anew. A message whose seq is not the previous one plus one (mod 256) is a gap row:
  ``previous_seq``, ``seq`` and ``missing``, the count of numbers skipped. Before the
  first NBIRTH seen there is no previous seq, so no gap.
- **stale**: a DATA that cannot be trusted to name its metrics: ``no_birth`` (no BIRTH
  of its node or device seen, or none since the node's NBIRTH), ``after_death`` (a DEATH
  since that BIRTH: NDEATH ends the node and its devices, DDEATH the device), one row per
  message; ``unknown_alias`` (the BIRTH defined no such alias), one row per metric.
- **quarantine**: ``topic_not_sparkplug`` (namespace right, the rest not),
  ``payload_not_sparkplug`` (not a ``Payload``, or a seq missing or above 255 where one
  is required).

An NDEATH carries the ``bdSeq`` of the session whose will it is; one whose bdSeq is not
the live NBIRTH's is an older connection's will arriving late and ends nothing
[tck-id-operational-behavior-edge-node-termination-host-action-ndeath-node-offline].

Duplicates: a message whose payload bytes equal one of the edge node's last 255 (a
record the broker sent twice, a QoS 1 retransmission the broker recorded anew) gives no
row; without this, each copy would be a gap of 255 and its metrics counted twice. Two
different messages of one edge node differ in seq or in their timestamp (milliseconds,
which every message but NDEATH must carry [tck-id-payloads-timestamp-in-UTC]), so
nothing real is dropped.

Values: the datatype chooses one typed column (``int_value``: the Int and UInt types, the
signed ones sign-extended from their width, as encoders store them either way;
``float_value``: Float and Double; ``boolean_value``; ``string_value``: String, Text,
UUID, and DataSet, Template, PropertySet as protobuf JSON; ``bytes_value``: Bytes, File
and the packed arrays; ``datetime_value``: DateTime, milliseconds). A UInt64 above
2^63 - 1 does not fit a long: its decimal text is in ``string_value``. ``is_null`` says
the metric was sent as null (every value column null).

Cost: one protobuf parse per message and O(1) dictionary work per metric; the state is
O(aliases + devices) per edge node, plus the 255 duplicate digests.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple

from ferromq.pipeline.sparkplug.descriptor import datatype_names, payload_type

__all__ = [
    "DATA",
    "NAMESPACE",
    "NOT_SPARKPLUG_PAYLOAD",
    "NOT_SPARKPLUG_TOPIC",
    "Birth",
    "EdgeNode",
    "Gap",
    "Message",
    "Metric",
    "Quarantined",
    "Rows",
    "Stale",
    "Topic",
    "parse_topic",
]

NAMESPACE: Final = "spBv1.0"
NBIRTH: Final = "NBIRTH"
NDATA: Final = "NDATA"
NDEATH: Final = "NDEATH"
DBIRTH: Final = "DBIRTH"
DDATA: Final = "DDATA"
DDEATH: Final = "DDEATH"
NODE_TYPES: Final = frozenset({NBIRTH, NDATA, NDEATH})
DEVICE_TYPES: Final = frozenset({DBIRTH, DDATA, DDEATH})
DATA: Final = frozenset({NDATA, DDATA})
SEQ_MODULUS: Final = 256
BD_SEQ: Final = "bdSeq"

NOT_SPARKPLUG_TOPIC: Final = "topic_not_sparkplug"
NOT_SPARKPLUG_PAYLOAD: Final = "payload_not_sparkplug"
NO_BIRTH: Final = "no_birth"
AFTER_DEATH: Final = "after_death"
UNKNOWN_ALIAS: Final = "unknown_alias"

_RECENT: Final = SEQ_MODULUS - 1
_LONG_MAX: Final = 2**63 - 1
_SIGNED_BITS: Final = {"Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64}


class Topic(NamedTuple):
    group_id: str
    message_type: str
    edge_node_id: str
    device_id: str | None


def parse_topic(topic: str) -> Topic | None:
    """The parts of a Sparkplug B topic; None when it is not one of the six message types
    with the levels that type needs (non-empty)."""
    levels = topic.split("/")
    if len(levels) not in (4, 5) or levels[0] != NAMESPACE or not all(levels):
        return None
    message_type = levels[2]
    if len(levels) == 4 and message_type in NODE_TYPES:
        return Topic(levels[1], message_type, levels[3], None)
    if len(levels) == 5 and message_type in DEVICE_TYPES:
        return Topic(levels[1], message_type, levels[3], levels[4])
    return None


class Value(NamedTuple):
    int_value: int | None = None
    float_value: float | None = None
    boolean_value: bool | None = None
    string_value: str | None = None
    bytes_value: bytes | None = None
    datetime_value: datetime | None = None


_NULL: Final = Value()


def _time(millis: int | None) -> datetime | None:
    if millis is None:
        return None
    return datetime.fromtimestamp(millis / 1000, timezone.utc)


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def metric_value(metric: Any, datatype: str | None) -> Value:
    """The value of a protobuf ``Metric`` in the typed column of the protobuf field that
    holds it; the datatype says how to read an integer (signed width, or a DateTime)."""
    if metric.is_null:
        return _NULL
    kind = metric.WhichOneof("value")
    if kind is None:
        return _NULL
    raw = getattr(metric, kind)
    if kind in ("int_value", "long_value"):
        if datatype in _SIGNED_BITS:
            return Value(int_value=_signed(raw, _SIGNED_BITS[datatype]))
        if datatype == "DateTime":
            return Value(datetime_value=_time(raw))
        return Value(int_value=raw) if raw <= _LONG_MAX else Value(string_value=str(raw))
    if kind in ("float_value", "double_value"):
        return Value(float_value=float(raw))
    if kind == "boolean_value":
        return Value(boolean_value=bool(raw))
    if kind == "string_value":
        return Value(string_value=raw)
    if kind == "bytes_value":
        return Value(bytes_value=bytes(raw))
    if kind in ("dataset_value", "template_value"):
        from google.protobuf.json_format import MessageToJson

        return Value(string_value=MessageToJson(raw, indent=None))
    return _NULL


class Message(NamedTuple):
    """What every row of one message repeats."""

    record_id: bytes | None
    time: Any  # the broker's time, passed through as the source gives it
    group_id: str
    edge_node_id: str
    device_id: str | None
    message_type: str
    seq: int | None
    payload_time: datetime | None


class Metric(NamedTuple):
    message: Message
    name: str | None
    alias: int | None
    datatype: str | None
    metric_time: datetime | None
    is_null: bool
    value: Value


class Gap(NamedTuple):
    message: Message
    previous_seq: int
    missing: int


class Stale(NamedTuple):
    message: Message
    reason: str
    alias: int | None


class Quarantined(NamedTuple):
    record_id: bytes | None
    time: Any
    node: str | None
    client_id: str | None
    topic: str | None
    payload: bytes | None
    reason: str


@dataclass
class Rows:
    metrics: list[Metric] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    stale: list[Stale] = field(default_factory=list)
    quarantine: list[Quarantined] = field(default_factory=list)


@dataclass
class Birth:
    """The metrics a BIRTH defined (alias → name and datatype; name → datatype), and
    whether a DEATH came after it."""

    aliases: dict[int, tuple[str, int]] = field(default_factory=dict)
    datatypes: dict[str, int] = field(default_factory=dict)
    alive: bool = True

    @classmethod
    def of(cls, metrics: Iterable[Any]) -> Birth:
        birth = cls()
        for metric in metrics:
            if not metric.HasField("name"):
                continue  # a BIRTH names every metric [tck-id-payloads-name-birth-data-requirement]
            birth.datatypes[metric.name] = metric.datatype
            if metric.HasField("alias"):
                birth.aliases[metric.alias] = (metric.name, metric.datatype)
        return birth

    def to_json(self) -> dict[str, Any]:
        aliases = {str(alias): list(entry) for alias, entry in self.aliases.items()}
        return {"aliases": aliases, "datatypes": self.datatypes, "alive": self.alive}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Birth:
        aliases = {
            int(alias): (name, datatype) for alias, (name, datatype) in data["aliases"].items()
        }
        return cls(aliases, dict(data["datatypes"]), bool(data["alive"]))


@dataclass
class EdgeNode:
    """One edge node's state between its messages (and between a stream's batches,
    :meth:`to_json`)."""

    seq: int | None = None
    bd_seq: int | None = None
    node: Birth | None = None
    devices: dict[str, Birth] = field(default_factory=dict)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=_RECENT))

    def to_json(self) -> str:
        return json.dumps(
            {
                "seq": self.seq,
                "bd_seq": self.bd_seq,
                "node": self.node.to_json() if self.node else None,
                "devices": {name: birth.to_json() for name, birth in self.devices.items()},
                "recent": list(self.recent),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> EdgeNode:
        data = json.loads(text)
        return cls(
            data["seq"],
            data["bd_seq"],
            Birth.from_json(data["node"]) if data["node"] else None,
            {name: Birth.from_json(birth) for name, birth in data["devices"].items()},
            deque(data["recent"], maxlen=_RECENT),
        )

    def receive(
        self,
        rows: Rows,
        record_id: bytes | None,
        time: Any,
        node: str | None,
        client_id: str | None,
        topic: str | None,
        payload: bytes | None,
    ) -> None:
        """Add the rows of one record (a message of this edge node, in stream order)."""

        def quarantine(reason: str) -> None:
            rows.quarantine.append(
                Quarantined(record_id, time, node, client_id, topic, payload, reason)
            )

        parts = parse_topic(topic) if topic is not None else None
        if parts is None:
            return quarantine(NOT_SPARKPLUG_TOPIC)
        payload = payload or b""
        try:
            decoded = payload_type().FromString(payload)
        except Exception:  # protobuf's DecodeError, and its C parser's variants
            return quarantine(NOT_SPARKPLUG_PAYLOAD)
        has_seq = decoded.HasField("seq")
        if (parts.message_type != NDEATH and not has_seq) or (has_seq and decoded.seq > 255):
            return quarantine(NOT_SPARKPLUG_PAYLOAD)
        digest = hashlib.blake2b(payload, digest_size=8).hexdigest()
        if digest in self.recent:
            return None  # a copy of a message already counted
        self.recent.append(digest)
        message = Message(
            record_id,
            time,
            parts.group_id,
            parts.edge_node_id,
            parts.device_id,
            parts.message_type,
            decoded.seq if has_seq else None,
            _time(decoded.timestamp) if decoded.HasField("timestamp") else None,
        )
        self._sequence(rows, message)
        birth = self._lifecycle(rows, message, decoded.metrics)
        names = datatype_names()
        for metric in decoded.metrics:
            name = metric.name if metric.HasField("name") else None
            alias = metric.alias if metric.HasField("alias") else None
            datatype = metric.datatype if metric.HasField("datatype") else None
            if birth is not None:
                if name is None and alias is not None:
                    known = birth.aliases.get(alias)
                    if known is None:
                        rows.stale.append(Stale(message, UNKNOWN_ALIAS, alias))
                    else:
                        name, birth_datatype = known
                        datatype = datatype if datatype is not None else birth_datatype
                elif datatype is None and name is not None:
                    datatype = birth.datatypes.get(name)
            type_name = names.get(datatype, "Unknown") if datatype is not None else None
            rows.metrics.append(
                Metric(
                    message,
                    name,
                    alias,
                    type_name,
                    _time(metric.timestamp) if metric.HasField("timestamp") else None,
                    metric.is_null,
                    metric_value(metric, type_name),
                )
            )
        return None

    def _sequence(self, rows: Rows, message: Message) -> None:
        seq = message.seq
        if message.message_type == NDEATH or seq is None:
            return  # NDEATH is the will, registered at connect: it has no seq
        if message.message_type != NBIRTH and self.seq is not None:
            expected = (self.seq + 1) % SEQ_MODULUS
            if seq != expected:
                missing = (seq - expected) % SEQ_MODULUS
                rows.gaps.append(Gap(message, self.seq, missing))
        self.seq = seq

    def _lifecycle(self, rows: Rows, message: Message, metrics: Iterable[Any]) -> Birth | None:
        """Apply a BIRTH or DEATH; for a DATA, the live BIRTH that names its metrics
        (None, and a stale row, when there is none)."""
        kind, device = message.message_type, message.device_id
        if kind == NBIRTH:
            self.node = Birth.of(metrics)
            self.devices = {}
            self.bd_seq = _bd_seq(metrics)
        elif kind == NDEATH:
            bd_seq = _bd_seq(metrics)
            if self.node is not None and (bd_seq is None or bd_seq == self.bd_seq):
                self.node.alive = False
                for device_birth in self.devices.values():
                    device_birth.alive = False
        elif kind == DBIRTH:
            assert device is not None
            self.devices[device] = Birth.of(metrics)
        elif kind == DDEATH:
            assert device is not None
            if device in self.devices:
                self.devices[device].alive = False
        else:
            birth = self.node if kind == NDATA else self.devices.get(device or "")
            if birth is None:
                rows.stale.append(Stale(message, NO_BIRTH, None))
            elif not birth.alive or (self.node is not None and not self.node.alive):
                rows.stale.append(Stale(message, AFTER_DEATH, None))
            else:
                return birth
        return None


def _bd_seq(metrics: Iterable[Any]) -> int | None:
    for metric in metrics:
        if metric.name == BD_SEQ and metric.WhichOneof("value") in ("int_value", "long_value"):
            return int(_signed(getattr(metric, metric.WhichOneof("value")), 64))
    return None
