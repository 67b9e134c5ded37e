"""A Sparkplug B plant for the ``sparkplug`` job's tests: payloads built by Eclipse Tahu's
Python client (``tahutils.tahu.sparkplug_b``, the reference implementation as the
``tahutils`` package ships it), in the order an edge node sends them, and the rows the
job must give for them.

Group ``plant1``, two edge nodes. ``edge1`` is born with aliases 1-3 and device ``pump1``
with 10-11, sends DATA by alias only (one metric without its datatype too, as the
specification recommends), loses one NDATA on the way (a seq gap), sends an alias it
never defined and a DDATA for a device with no DBIRTH, is reborn with new aliases (the
old alias 1 then names nothing, and ``pump1`` must be born again), receives its first
session's late will (an NDEATH with an older bdSeq: ends nothing), then its own NDEATH,
and sends once more after it. ``edge2`` uses alias 1 for another metric. Beside them:
a payload that is not Protobuf, a topic without an edge node (both quarantined), and
traffic the job leaves alone: a host's STATE, a command, a JSON reading.

Tahu numbers ``seq`` itself (an NBIRTH starts it at 0) and keeps ``bdSeq`` in its
module; :func:`plant` sets that to 0 first so the bdSeq metrics are known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tahutils.tahu.sparkplug_b as tahu
from tahutils.tahu.sparkplug_b import MetricDataType as T

GROUP = "plant1"
T_MS = 1_795_000_000_000  # the metrics' own timestamps: 2026-11-18T11:06:40Z and after
BAD_PAYLOAD = b"\xff\xff\xff\xff"  # wire type 7: no Protobuf message starts so


@dataclass(frozen=True)
class Sent:
    """One PUBLISH of the plant; ``lost``: built (Tahu counted its seq) but never sent."""

    topic: str
    payload: bytes
    lost: bool = False

    @property
    def edge_node(self) -> str:
        return self.topic.split("/")[3] if self.topic.count("/") >= 3 else ""


def _topic(message_type: str, edge_node: str, device: str | None = None) -> str:
    tail = f"/{device}" if device else ""
    return f"spBv1.0/{GROUP}/{message_type}/{edge_node}{tail}"


def _data(metrics: list[tuple[int, int, Any]], at: int) -> Any:
    payload = tahu.getDdataPayload()  # NDATA and DDATA alike: the next seq
    for alias, datatype, value in metrics:
        tahu.addMetric(payload, None, alias, datatype, value, T_MS + at)
    return payload


def _edge1() -> list[Sent]:
    first_will = tahu.getNodeDeathPayload()  # bdSeq 0: the first session's will
    birth = tahu.getNodeBirthPayload()  # seq 0, bdSeq 0
    tahu.addMetric(birth, "temperature", 1, T.Double, 20.5, T_MS)
    tahu.addMetric(birth, "count", 2, T.Int32, -7, T_MS)
    tahu.addMetric(birth, "status", 3, T.String, "ok", T_MS)
    pump_birth = tahu.getDeviceBirthPayload()  # seq 1
    tahu.addMetric(pump_birth, "rpm", 10, T.Int16, -1200, T_MS)
    tahu.addMetric(pump_birth, "running", 11, T.Boolean, False, T_MS)
    node_data = _data([(1, T.Double, 21.5), (2, T.Int32, -8)], 1000)  # seq 2
    node_data.metrics[0].ClearField("datatype")  # DATA need not repeat it: from the BIRTH
    pump_data = _data([(10, T.Int16, 1500), (11, T.Boolean, True)], 1000)  # seq 3
    lost = _data([(1, T.Double, 99.0)], 2000)  # seq 4: never reaches the broker
    after_gap = _data([(1, T.Double, 22.0)], 3000)  # seq 5
    undefined = _data([(99, T.Int32, 1)], 3000)  # seq 6: alias 99 was never born
    ghost = _data([(1, T.Double, 5.0)], 3000)  # seq 7: DDATA of a device never born
    will = tahu.getNodeDeathPayload()  # bdSeq 1
    rebirth = tahu.getNodeBirthPayload()  # seq 0, bdSeq 1: new aliases
    tahu.addMetric(rebirth, "temperature", 5, T.Double, 23.0, T_MS + 4000)
    tahu.addMetric(rebirth, "count", 6, T.Int32, 0, T_MS + 4000)
    reborn = _data([(5, T.Double, 23.5), (1, T.Double, 1.0)], 5000)  # seq 1
    pump_unborn = _data([(10, T.Int16, 7)], 5000)  # seq 2: pump1 not born since the NBIRTH
    dead = _data([(5, T.Double, 30.0)], 6000)  # seq 3, after the NDEATH
    node = _topic("NDATA", "edge1")
    pump = _topic("DDATA", "edge1", "pump1")
    return [
        Sent(_topic("NBIRTH", "edge1"), birth.SerializeToString()),
        Sent(_topic("DBIRTH", "edge1", "pump1"), pump_birth.SerializeToString()),
        Sent(node, node_data.SerializeToString()),
        Sent(pump, pump_data.SerializeToString()),
        Sent(node, lost.SerializeToString(), lost=True),
        Sent(node, after_gap.SerializeToString()),
        Sent(node, undefined.SerializeToString()),
        Sent(_topic("DDATA", "edge1", "ghost"), ghost.SerializeToString()),
        Sent(_topic("NBIRTH", "edge1"), rebirth.SerializeToString()),
        Sent(node, reborn.SerializeToString()),
        Sent(_topic("NDEATH", "edge1"), first_will.SerializeToString()),
        Sent(pump, pump_unborn.SerializeToString()),
        Sent(_topic("NDEATH", "edge1"), will.SerializeToString()),
        Sent(node, dead.SerializeToString()),
    ]


def _edge2() -> list[Sent]:
    tahu.getNodeDeathPayload()  # bdSeq 2
    birth = tahu.getNodeBirthPayload()  # seq 0, bdSeq 2
    tahu.addMetric(birth, "pressure", 1, T.Float, 1.25, T_MS)
    data = _data([(1, T.Float, 1.5)], 1000)  # seq 1
    return [
        Sent(_topic("NBIRTH", "edge2"), birth.SerializeToString()),
        Sent(_topic("NDATA", "edge2"), BAD_PAYLOAD),  # quarantined: no seq consumed
        Sent(_topic("NDATA", "edge2"), data.SerializeToString()),
    ]


def plant() -> list[Sent]:
    """Every PUBLISH, in order (edge1's, then edge2's, then the rest)."""
    tahu.bdSeq = 0
    return [
        *_edge1(),
        *_edge2(),
        Sent(f"spBv1.0/{GROUP}/NDATA", b"\x08\x00"),  # no edge node: quarantined
        Sent("spBv1.0/STATE/scada", b'{"online":true,"timestamp":1}'),  # a host: ignored
        Sent(_topic("NCMD", "edge1"), b""),  # a command to the node: ignored
        Sent("fleet/d1/temp", b'{"v": 21.5}'),  # not Sparkplug: ignored
    ]


# (edge node, device, message type, seq, name, alias, datatype, value): every metric row.
EXPECTED_METRICS = [
    ("edge1", None, "NBIRTH", 0, "bdSeq", None, "Int64", 0),
    ("edge1", None, "NBIRTH", 0, "temperature", 1, "Double", 20.5),
    ("edge1", None, "NBIRTH", 0, "count", 2, "Int32", -7),
    ("edge1", None, "NBIRTH", 0, "status", 3, "String", "ok"),
    ("edge1", "pump1", "DBIRTH", 1, "rpm", 10, "Int16", -1200),
    ("edge1", "pump1", "DBIRTH", 1, "running", 11, "Boolean", False),
    ("edge1", None, "NDATA", 2, "temperature", 1, "Double", 21.5),
    ("edge1", None, "NDATA", 2, "count", 2, "Int32", -8),
    ("edge1", "pump1", "DDATA", 3, "rpm", 10, "Int16", 1500),
    ("edge1", "pump1", "DDATA", 3, "running", 11, "Boolean", True),
    ("edge1", None, "NDATA", 5, "temperature", 1, "Double", 22.0),
    ("edge1", None, "NDATA", 6, None, 99, "Int32", 1),
    ("edge1", "ghost", "DDATA", 7, None, 1, "Double", 5.0),
    ("edge1", None, "NBIRTH", 0, "bdSeq", None, "Int64", 1),
    ("edge1", None, "NBIRTH", 0, "temperature", 5, "Double", 23.0),
    ("edge1", None, "NBIRTH", 0, "count", 6, "Int32", 0),
    ("edge1", None, "NDATA", 1, "temperature", 5, "Double", 23.5),
    ("edge1", None, "NDATA", 1, None, 1, "Double", 1.0),
    ("edge1", None, "NDEATH", None, "bdSeq", None, "Int64", 0),
    ("edge1", "pump1", "DDATA", 2, None, 10, "Int16", 7),
    ("edge1", None, "NDEATH", None, "bdSeq", None, "Int64", 1),
    ("edge1", None, "NDATA", 3, None, 5, "Double", 30.0),
    ("edge2", None, "NBIRTH", 0, "bdSeq", None, "Int64", 2),
    ("edge2", None, "NBIRTH", 0, "pressure", 1, "Float", 1.25),
    ("edge2", None, "NDATA", 1, "pressure", 1, "Float", 1.5),
]
# (edge node, message type, previous seq, seq, missing)
EXPECTED_GAPS = [("edge1", "NDATA", 3, 5, 1)]
# (edge node, device, message type, seq, reason, alias)
EXPECTED_STALE = [
    ("edge1", None, "NDATA", 6, "unknown_alias", 99),
    ("edge1", "ghost", "DDATA", 7, "no_birth", None),
    ("edge1", None, "NDATA", 1, "unknown_alias", 1),
    ("edge1", "pump1", "DDATA", 2, "no_birth", None),
    ("edge1", None, "NDATA", 3, "after_death", None),
]
# (topic, reason)
EXPECTED_QUARANTINE = [
    (f"spBv1.0/{GROUP}/NDATA/edge2", "payload_not_sparkplug"),
    (f"spBv1.0/{GROUP}/NDATA", "topic_not_sparkplug"),
]
