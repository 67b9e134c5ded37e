"""The Sparkplug B state machine without Spark (:mod:`ferromq.pipeline.sparkplug.decode`):
the plant's payloads (built by Eclipse Tahu's Python client) fed per edge node in order
give exactly the expected metric, gap, stale and quarantine rows; so do the same
payloads split into micro-batches with the state carried between them as a stream keeps
it; and the edge cases one at a time: seq wrapping at 256, duplicates, an old NDEATH,
values of every integer width, and the vendored schema against its ``.proto``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import tahutils.tahu.sparkplug_b as tahu
from tahutils.tahu.sparkplug_b import MetricDataType as T

from ferromq.pipeline.sparkplug import decode
from ferromq.pipeline.sparkplug.decode import EdgeNode, Metric, Rows, parse_topic
from ferromq.pipeline.sparkplug.descriptor import payload_type
from tests.pipeline.sparkplug_plant import (
    EXPECTED_GAPS,
    EXPECTED_METRICS,
    EXPECTED_QUARANTINE,
    EXPECTED_STALE,
    Sent,
    plant,
)


def value_of(metric: Metric) -> Any:
    values = [v for v in metric.value if v is not None]
    assert len(values) <= 1, metric
    return values[0] if values else None


def run(sent: list[Sent], cuts: tuple[int, ...] = ()) -> Rows:
    """The rows of the published messages, per edge node in order; with ``cuts``, each
    edge node's messages in batches, its state through JSON between them."""
    rows = Rows()
    states: dict[str, str] = {}
    published = [s for s in sent if not s.lost]
    bounds = [0, *cuts, len(published)]
    for start, end in itertools.pairwise(bounds):
        for message in published[start:end]:
            key = message.edge_node
            edge_node = EdgeNode.from_json(states[key]) if key in states else EdgeNode()
            edge_node.receive(rows, b"id", None, "n1", "c1", message.topic, message.payload)
            states[key] = edge_node.to_json()
    return rows


def tables(rows: Rows) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    metrics = [
        (
            m.message.edge_node_id, m.message.device_id, m.message.message_type,
            m.message.seq, m.name, m.alias, m.datatype, value_of(m),
        )
        for m in rows.metrics
        if m.message.message_type  # every row
    ]  # fmt: skip
    gaps = [
        (g.message.edge_node_id, g.message.message_type, g.previous_seq, g.message.seq, g.missing)
        for g in rows.gaps
    ]
    stale = [
        (s.message.edge_node_id, s.message.device_id, s.message.message_type, s.message.seq,
         s.reason, s.alias)
        for s in rows.stale
    ]  # fmt: skip
    quarantine = [(q.topic, q.reason) for q in rows.quarantine]
    return metrics, gaps, stale, quarantine


def sparkplug_only(sent: list[Sent]) -> list[Sent]:
    """What the job's JVM filter hands the state machine: the namespace, less STATE and
    commands."""
    return [
        s
        for s in sent
        if s.topic.startswith("spBv1.0/") and "/STATE/" not in s.topic and "/NCMD/" not in s.topic
    ]


def test_the_plant_gives_the_expected_rows() -> None:
    assert tables(run(sparkplug_only(plant()))) == (
        EXPECTED_METRICS, EXPECTED_GAPS, EXPECTED_STALE, EXPECTED_QUARANTINE,
    )  # fmt: skip


@pytest.mark.parametrize("cuts", [(1,), (3, 9), tuple(range(1, 19))])
def test_batches_with_the_state_between_give_the_same_rows(cuts: tuple[int, ...]) -> None:
    assert tables(run(sparkplug_only(plant()), cuts)) == tables(run(sparkplug_only(plant())))


def test_names_and_metric_times_resolve_through_the_birth() -> None:
    rows = run(sparkplug_only(plant()))
    data = next(m for m in rows.metrics if m.message.message_type == "NDATA")
    assert (data.name, data.datatype, data.is_null) == ("temperature", "Double", False)
    assert data.metric_time is not None and data.metric_time.isoformat() == (
        "2026-11-18T11:06:41+00:00"
    )
    assert data.message.payload_time is not None


def node_birth(*metrics: tuple[str, int, int, Any]) -> bytes:
    payload = tahu.getNodeBirthPayload()
    for name, alias, datatype, value in metrics:
        tahu.addMetric(payload, name, alias, datatype, value)
    return bytes(payload.SerializeToString())


_sent_at = itertools.count(1_795_000_000_000)


def node_data(seq: int, *metrics: tuple[int, int, Any]) -> bytes:
    """An NDATA with ``seq``, sent a millisecond after the one before (two built within
    one millisecond with one seq would be the same bytes: one message, sent twice)."""
    payload = tahu.getDdataPayload()
    payload.seq = seq
    payload.timestamp = next(_sent_at)
    for alias, datatype, value in metrics:
        tahu.addMetric(payload, None, alias, datatype, value)
    return bytes(payload.SerializeToString())


NBIRTH = "spBv1.0/g/NBIRTH/e"
NDATA = "spBv1.0/g/NDATA/e"
NDEATH = "spBv1.0/g/NDEATH/e"


def feed(*messages: tuple[str, bytes]) -> Rows:
    rows, edge_node = Rows(), EdgeNode()
    for topic, payload in messages:
        edge_node.receive(rows, None, None, None, None, topic, payload)
    return rows


def test_seq_wraps_after_255_without_a_gap_and_counts_what_is_missing() -> None:
    birth = node_birth(("x", 1, T.Int32, 0))
    data = [node_data(seq, (1, T.Int32, seq)) for seq in (1, 2, *range(3, 256), 0, 1, 4, 2)]
    rows = feed((NBIRTH, birth), *((NDATA, payload) for payload in data))
    assert [(g.previous_seq, g.message.seq, g.missing) for g in rows.gaps] == [
        (1, 4, 2),
        (4, 2, 253),  # out of order: as far as seq can tell, 253 missing
    ]


def test_a_copy_of_a_message_gives_no_row() -> None:
    birth = node_birth(("x", 1, T.Int32, 0))
    first, second = node_data(1, (1, T.Int32, 10)), node_data(2, (1, T.Int32, 20))
    rows = feed((NBIRTH, birth), (NDATA, first), (NDATA, first), (NDATA, second))
    assert rows.gaps == []
    assert [value_of(m) for m in rows.metrics if m.name != "bdSeq"] == [0, 10, 20]


def test_an_older_sessions_ndeath_ends_nothing() -> None:
    old_will = tahu.getNodeDeathPayload().SerializeToString()
    will = tahu.getNodeDeathPayload().SerializeToString()
    birth = node_birth(("x", 1, T.Int32, 0))  # carries the second will's bdSeq
    rows = feed(
        (NBIRTH, birth),
        (NDEATH, old_will),
        (NDATA, node_data(1, (1, T.Int32, 1))),
        (NDEATH, will),
        (NDATA, node_data(2, (1, T.Int32, 2))),
    )
    assert [(s.message.seq, s.reason) for s in rows.stale] == [(2, "after_death")]


def test_integer_widths_and_other_datatypes() -> None:
    big = 2**64 - 5
    birth = node_birth(
        ("i8", 1, T.Int8, -5), ("i16", 2, T.Int16, -300), ("i32", 3, T.Int32, -70000),
        ("i64", 4, T.Int64, -(2**40)), ("u32", 5, T.UInt32, 2**32 - 1),
        ("u64", 6, T.UInt64, big), ("f", 7, T.Float, 0.5), ("t", 8, T.DateTime, 1_000),
        ("b", 9, T.Bytes, b"\x00\x01"), ("u", 10, T.UUID, "abc"),
    )  # fmt: skip
    rows = feed((NBIRTH, birth))
    values = {m.name: value_of(m) for m in rows.metrics}
    assert values["i8"] == -5 and values["i16"] == -300 and values["i32"] == -70000
    assert values["i64"] == -(2**40) and values["u32"] == 2**32 - 1
    assert values["u64"] == str(big)  # above a long: its decimal text
    assert values["f"] == 0.5 and values["b"] == b"\x00\x01" and values["u"] == "abc"
    assert values["t"].isoformat() == "1970-01-01T00:00:01+00:00"
    # Java's Tahu stores a negative Int8 sign-extended to 32 bits, Python's in 8: both read.
    metric = payload_type()().metrics.add()
    metric.int_value = 2**32 - 5
    assert decode.metric_value(metric, "Int8").int_value == -5


def test_a_null_metric() -> None:
    payload = tahu.getNodeBirthPayload()
    tahu.addNullMetric(payload, "x", 1, T.Double)
    payload.metrics[-1].datatype = T.Double
    payload.metrics[-1].is_null = True
    (_, metric) = feed((NBIRTH, payload.SerializeToString())).metrics
    assert metric.is_null and value_of(metric) is None and metric.datatype == "Double"


@pytest.mark.parametrize(
    ("topic", "payload", "reason"),
    [
        ("spBv1.0/g/NDATA/e/extra", node_data(1), "topic_not_sparkplug"),
        ("spBv1.0/g/DDATA/e", node_data(1), "topic_not_sparkplug"),  # no device
        ("spBv1.0//NDATA/e", node_data(1), "topic_not_sparkplug"),
        ("spBv1.0/g/NDATA/e", b"\xff", "payload_not_sparkplug"),
        ("spBv1.0/g/NDATA/e", b"", "payload_not_sparkplug"),  # no seq
        ("spBv1.0/g/NDATA/e", b"\x18\x80\x02", "payload_not_sparkplug"),  # seq 256
    ],
)
def test_quarantined(topic: str, payload: bytes, reason: str) -> None:
    rows = feed((topic, payload))
    assert [(q.topic, q.reason) for q in rows.quarantine] == [(topic, reason)]
    assert not (rows.metrics or rows.gaps or rows.stale)


def test_parse_topic() -> None:
    assert parse_topic("spBv1.0/g/DBIRTH/e/d") == ("g", "DBIRTH", "e", "d")
    assert parse_topic("spBv1.0/g/NDATA/e") == ("g", "NDATA", "e", None)
    assert parse_topic("spBv1.0/g/NCMD/e") is None
    assert parse_topic("spBv1.0/STATE/host") is None


def test_the_descriptor_has_every_field_of_the_proto() -> None:
    """The vendored ``.proto`` and the descriptor built from it agree (no protoc here)."""
    proto = (Path(decode.__file__).parent / "sparkplug_b.proto").read_text()
    line = r"^\s*(?:(?:optional|repeated)\s+)?(?:[\w.]+\s+)?(\w+)\s*=\s*(\d+);"  # field or enum
    declared = set(re.findall(line, proto, re.MULTILINE))
    payload = payload_type().DESCRIPTOR
    found: set[tuple[str, str]] = set()

    def walk(message: Any) -> None:
        found.update((f.name, str(f.number)) for f in message.fields)
        for nested in message.nested_types:
            walk(nested)

    walk(payload)
    enums = payload.file.enum_types_by_name["DataType"].values
    found.update((value.name, str(value.number)) for value in enums)
    assert declared == found
