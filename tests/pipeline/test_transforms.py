"""The transforms on known records, in the shared local session, compared with
``assertDataFrameEqual``: topic patterns (and a bad one's error), JSON payloads (declared
schema, named fields, discovered numeric fields, bad payloads), window aggregates exact
to the reading, duplicate removal (record id; payload key for QoS 1 resends), the
quarantine's reasons, and the connection analytics of the sessions job."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from ferromq.pipeline.errors import PipelineError
from ferromq.pipeline.jobs import JobOptions, sessions, telemetry
from ferromq.pipeline.transforms import (
    TopicPattern,
    connection_counts,
    decode_payload,
    disconnect_reasons,
    drop_duplicates,
    explode_readings,
    flapping_clients,
    parse_topic,
    quarantined,
    session_durations,
    window_aggregates,
    with_reason,
)
from ferromq.pipeline.transforms.topic import MATCHES
from tests.pipeline.fleet import EVENTS, window_row
from tests.pipeline.stream_records import T0, as_collected, event, frame, message

PATTERN = "tenant/{tenant}/site/{site}/device/{device}/{metric}"


# ---- topic patterns -------------------------------------------------------------------


def test_topic_levels_become_columns(spark: SparkSession) -> None:
    records = frame(
        spark,
        [
            message("tenant/acme/site/s1/device/d7/temp", "1", 0),
            message("tenant/acme/site/s1/device/d7", "1", 0),  # a level short
            message("tenant/acme/site/s1/device/d7/temp/x", "1", 0),  # a level more
            message("tenant/acme/zone/s1/device/d7/temp", "1", 0),  # a literal differs
        ],
    )
    parsed = parse_topic(records, TopicPattern.parse(PATTERN))
    assertDataFrameEqual(
        parsed.select("topic", "tenant", "site", "device", "metric", MATCHES),
        [
            Row("tenant/acme/site/s1/device/d7/temp", "acme", "s1", "d7", "temp", True),
            Row("tenant/acme/site/s1/device/d7", None, None, None, None, False),
            Row("tenant/acme/site/s1/device/d7/temp/x", None, None, None, None, False),
            Row("tenant/acme/zone/s1/device/d7/temp", None, None, None, None, False),
        ],
    )


def test_wildcard_levels_match_as_in_mqtt(spark: SparkSession) -> None:
    records = frame(
        spark,
        [
            message("site/s1/dev9/temp", "1", 0),
            message("site/s1//temp", "1", 0),  # '+' matches an empty level
            message("site/s1/temp", "1", 0),
            message("fleet/a.b", "1", 0),  # '.' is literal text, not "any character"
            message("fleet/aXb/x/y", "1", 0),
        ],
    )
    plus = parse_topic(records, TopicPattern.parse("site/{site}/+/{metric}"))
    assertDataFrameEqual(
        plus.select("topic", "site", "metric"),
        [
            Row("site/s1/dev9/temp", "s1", "temp"),
            Row("site/s1//temp", "s1", "temp"),
            Row("site/s1/temp", None, None),
            Row("fleet/a.b", None, None),
            Row("fleet/aXb/x/y", None, None),
        ],
    )
    hash_ = parse_topic(records, TopicPattern.parse("fleet/{device}/#"))
    assertDataFrameEqual(
        hash_.where(F.col(MATCHES)).select("topic", "device"),
        [Row("fleet/a.b", "a.b"), Row("fleet/aXb/x/y", "aXb")],
    )


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("", "topic pattern is empty"),
        (
            "device/{device",
            "topic pattern 'device/{device': level 2 '{device': a level is literal text, "
            "{name} (a letter or _ then letters, digits or _), + or #",
        ),
        ("a/{1x}", "topic pattern 'a/{1x}': level 2 '{1x}': a level is literal text"),
        ("a/#/b", "topic pattern 'a/#/b': level 2 '#': '#' must be the last level"),
        ("{d}/{d}", "topic pattern '{d}/{d}': level 2 '{d}': {d} appears twice"),
        ("a/{time}", "topic pattern 'a/{time}': level 2 '{time}': 'time' is a column"),
        ("a/x+", "topic pattern 'a/x+': level 2 'x+': a level is literal text"),
    ],
)
def test_a_bad_pattern_is_one_line_naming_the_level(pattern: str, error: str) -> None:
    with pytest.raises(PipelineError) as raised:
        TopicPattern.parse(pattern)
    assert str(raised.value).startswith(error)
    assert "\n" not in str(raised.value)


# ---- payloads -------------------------------------------------------------------------


def _payloads(spark: SparkSession, *payloads: str | bytes) -> DataFrame:
    return frame(spark, [message(f"d/{n}", payload, n) for n, payload in enumerate(payloads)])


def _readings(decoded: DataFrame) -> DataFrame:
    return explode_readings(decoded).select("topic", "field", "value")


def test_numeric_fields_are_found_when_no_schema_is_given(spark: SparkSession) -> None:
    decoded = decode_payload(
        _payloads(
            spark,
            '{"temp": 21.5, "hum": 40, "unit": "C", "ok": true, "nested": {"x": 1}}',
            "17.25",  # a bare number: the reading "value"
            '{"volts": "3.3", "nan": "NaN", "big": 1e400}',  # a numeric string counts
        )
    )
    assertDataFrameEqual(
        _readings(decoded),
        [
            Row("d/0", "temp", 21.5),
            Row("d/0", "hum", 40.0),
            Row("d/1", "value", 17.25),
            Row("d/2", "volts", 3.3),
        ],
    )


def test_a_declared_schema_or_field_list_chooses_the_readings(spark: SparkSession) -> None:
    payloads = _payloads(spark, '{"temp": 21.5, "hum": 40, "ts": 1700000000}', '{"temp": "x"}')
    declared = decode_payload(payloads, schema="temp DOUBLE, hum INT, unit STRING")
    assertDataFrameEqual(_readings(declared), [Row("d/0", "temp", 21.5), Row("d/0", "hum", 40.0)])
    named = decode_payload(payloads, fields=["hum", "missing"])
    assertDataFrameEqual(_readings(named), [Row("d/0", "hum", 40.0)])
    keyed = decode_payload(payloads, exclude=["ts"])  # the dedupe key is not a reading
    assertDataFrameEqual(_readings(keyed), [Row("d/0", "temp", 21.5), Row("d/0", "hum", 40.0)])
    assertDataFrameEqual(
        declared.select("topic", "payload_error"),
        [Row("d/0", None), Row("d/1", "no_numeric_field")],
    )


def test_a_bad_declared_schema_is_one_line(spark: SparkSession) -> None:
    with pytest.raises(PipelineError, match=r"^--schema 'temp DUBLE': ") as raised:
        decode_payload(_payloads(spark, "{}"), schema="temp DUBLE")
    assert "\n" not in str(raised.value)
    with pytest.raises(PipelineError, match="no numeric field"):
        decode_payload(_payloads(spark, "{}"), schema="unit STRING")


def test_undecodable_payloads_have_a_reason_and_no_readings(spark: SparkSession) -> None:
    decoded = decode_payload(
        _payloads(
            spark,
            "{not json",
            b"\xff\xfe\x00",  # not UTF-8
            "[1, 2]",  # JSON, not an object
            '{"state": "on"}',
            '{"t": 1}',
        )
    )
    assertDataFrameEqual(
        decoded.select("topic", "payload_error", F.size("readings")),
        [
            Row("d/0", "payload_not_json", 0),
            Row("d/1", "payload_not_json", 0),
            Row("d/2", "payload_not_json", 0),
            Row("d/3", "no_numeric_field", 0),
            Row("d/4", None, 1),
        ],
    )


# ---- windows --------------------------------------------------------------------------

READINGS = [(0.5, 10.0), (2.0, 14.0), (4.25, 12.0), (9.99, 20.0), (10.0, 1.0), (15.0, 3.0)]


def _series(spark: SparkSession) -> DataFrame:
    records = frame(
        spark,
        [message("dev/d1/temp", f'{{"v": {value}}}', second) for second, value in READINGS]
        + [message("dev/d2/temp", '{"v": 100}', 1.0)],
    )
    parsed = parse_topic(records, TopicPattern.parse("dev/{device}/{metric}"))
    return explode_readings(decode_payload(parsed))


def _expected(device: str, start: float, length: float, values: list[float], last: float) -> Row:
    keys = {"device": device, "metric": "temp", "field": "v"}
    return window_row(keys, start, length, values, last)


def test_tumbling_window_aggregates_are_exact(spark: SparkSession) -> None:
    windows = window_aggregates(_series(spark), ("device", "metric"), "10 seconds")
    assertDataFrameEqual(
        windows,
        [
            _expected("d1", 0, 10, [10.0, 14.0, 12.0, 20.0], last=20.0),
            _expected("d1", 10, 10, [1.0, 3.0], last=3.0),
            _expected("d2", 0, 10, [100.0], last=100.0),
        ],
    )


def test_sliding_window_aggregates_are_exact(spark: SparkSession) -> None:
    windows = window_aggregates(_series(spark), ("device", "metric"), "10 seconds", "5 seconds")
    d1 = windows.where(F.col("device") == "d1")
    assertDataFrameEqual(
        d1,
        [
            _expected("d1", -5, 10, [10.0, 14.0, 12.0], last=12.0),
            _expected("d1", 0, 10, [10.0, 14.0, 12.0, 20.0], last=20.0),
            _expected("d1", 5, 10, [20.0, 1.0], last=1.0),
            _expected("d1", 10, 10, [1.0, 3.0], last=3.0),
            _expected("d1", 15, 10, [3.0], last=3.0),
        ],
    )


# ---- duplicates -----------------------------------------------------------------------


def test_a_record_seen_twice_counts_once(spark: SparkSession) -> None:
    first = message("d/1", '{"v": 1, "ts": 5}', 0)
    resent = message("d/1", '{"v": 1, "ts": 5}', 0, id=first.id)  # the same record again
    other = message("d/1", '{"v": 2, "ts": 6}', 1)
    unique = drop_duplicates(decode_payload(frame(spark, [first, resent, other])))
    assertDataFrameEqual(unique.select("id"), [Row(first.id), Row(other.id)])


def test_a_qos1_resend_counts_once_with_a_dedupe_key(spark: SparkSession) -> None:
    original = message("d/1", '{"v": 1, "ts": 5}', 0)
    resend = message("d/1", '{"v": 1, "ts": 5}', 0.2)  # new record id, same reading
    elsewhere = message("d/2", '{"v": 1, "ts": 5}', 0.3)  # another device, same ts
    untimed = [message("d/1", '{"v": 7}', 1), message("d/1", '{"v": 7}', 2)]  # no key
    records = decode_payload(frame(spark, [original, resend, elsewhere, *untimed]))
    assert drop_duplicates(records).count() == 5  # ids differ: nothing removed
    unique = drop_duplicates(records, ["ts"])
    assertDataFrameEqual(
        unique.select("topic", "payload"),
        [
            Row("d/1", b'{"v": 1, "ts": 5}'),
            Row("d/2", b'{"v": 1, "ts": 5}'),
            Row("d/1", b'{"v": 7}'),
            Row("d/1", b'{"v": 7}'),
        ],
    )


# ---- quarantine -----------------------------------------------------------------------


def test_bad_records_go_to_the_quarantine_with_their_reason(spark: SparkSession) -> None:
    good = message("dev/d1/temp", '{"v": 1}', 0)
    records = frame(
        spark,
        [
            good,
            message("other/d1", '{"v": 1}', 1),
            message("dev/d1/temp", "{oops", 2),
            message("dev/d1/state", '{"on": "yes"}', 3),
        ],
    )
    checked = with_reason(
        decode_payload(parse_topic(records, TopicPattern.parse("dev/{device}/{metric}")))
    )
    assertDataFrameEqual(
        quarantined(checked).select("topic", "payload", "reason", "date"),
        [
            Row("other/d1", b'{"v": 1}', "topic_mismatch", T0.date()),
            Row("dev/d1/temp", b"{oops", "payload_not_json", T0.date()),
            Row("dev/d1/state", b'{"on": "yes"}', "no_numeric_field", T0.date()),
        ],
    )
    assertDataFrameEqual(checked.where(F.col("reason").isNull()).select("id"), [Row(good.id)])


def test_the_telemetry_job_as_a_batch(spark: SparkSession) -> None:
    """The composition: dedupe before windows, bad records apart, keys from the pattern."""
    first = message("dev/d1/temp", "10", 1)
    records = frame(
        spark,
        [
            first,
            message("dev/d1/temp", "10", 1, id=first.id),  # counted once
            message("dev/d1/temp", "20", 2),
            message("dev/d1", "5", 3),  # quarantined
        ],
    )
    options = JobOptions(pattern=TopicPattern.parse("dev/{device}/{metric}"), window="1 minute")
    outputs = telemetry(records, options)
    assert sorted(outputs) == ["quarantine", "tumbling"]
    assertDataFrameEqual(
        outputs["tumbling"].select("device", "metric", "field", "count", "mean", "last"),
        [Row("d1", "temp", "value", 2, 15.0, 20.0)],
    )
    assertDataFrameEqual(
        outputs["quarantine"].select("topic", "reason"), [Row("dev/d1", "topic_mismatch")]
    )


# ---- sessions -------------------------------------------------------------------------


def test_connects_disconnects_and_reasons_per_window(spark: SparkSession) -> None:
    events = frame(spark, EVENTS)
    assertDataFrameEqual(
        connection_counts(events, "1 minute").select(
            "window_start", "client_id", "connects", "disconnects"
        ),
        [
            Row(as_collected(0), "a", 2, 2),
            Row(as_collected(0), "b", 3, 3),
            Row(as_collected(0), "c", 1, 0),
        ],
    )
    assertDataFrameEqual(
        disconnect_reasons(events, "1 minute").select("reason", "disconnects"),
        [Row("client_disconnect", 1), Row("keep_alive_timeout", 1), Row("socket_closed", 3)],
    )


def test_flapping_clients_have_n_disconnects_in_a_window(spark: SparkSession) -> None:
    events = frame(spark, EVENTS)
    flapping = flapping_clients(events, "1 minute", threshold=3)
    assertDataFrameEqual(flapping.select("client_id", "disconnects"), [Row("b", 3)])


def test_session_durations_pair_each_connect_with_its_disconnect(spark: SparkSession) -> None:
    events = frame(spark, EVENTS)
    durations = session_durations(events, "1 day")
    assertDataFrameEqual(
        durations.select(
            "client_id", "connected_at", "disconnected_at", "duration_seconds", "reason"
        ),
        [
            Row("a", as_collected(0), as_collected(30), 30.0, "client_disconnect"),
            Row("a", as_collected(40), as_collected(45), 5.0, "keep_alive_timeout"),
            Row("b", as_collected(5), as_collected(6), 1.0, "socket_closed"),
            Row("b", as_collected(7), as_collected(8), 1.0, "socket_closed"),
            Row("b", as_collected(9), as_collected(10), 1.0, "socket_closed"),
        ],
    )


def test_the_sessions_job_counts_a_resent_event_once(spark: SparkSession) -> None:
    connect = event("connected", "a", 0)
    again = event("connected", "a", 0)
    again.id = connect.id
    events = frame(spark, [connect, again, event("disconnected", "a", 3, "client_disconnect")])
    outputs = sessions(events, JobOptions(window="1 minute"))
    assertDataFrameEqual(
        outputs["connections"].select("client_id", "connects", "disconnects"), [Row("a", 1, 1)]
    )
    assertDataFrameEqual(outputs["durations"].select("duration_seconds"), [Row(3.0)])
