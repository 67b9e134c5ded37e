"""The engine's Python entry points refuse bad input with ValueError, never a panic."""

from __future__ import annotations

import pytest

from ferromq._core import DamagedRange, Engine, Persist, journal_header, journal_log_records
from ferromq.config import Config
from ferromq.engine import engine_from_config


@pytest.fixture
def engine() -> Engine:
    return engine_from_config(Config())


@pytest.mark.parametrize(
    ("topic", "problem"),
    [("a/+", "wildcard"), ("", "empty"), ("a\0b", r"U\+0000")],
)
def test_publish_refuses_an_invalid_topic(engine: Engine, topic: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        engine.publish(topic, b"x")


def test_publish_reaches_no_one_without_subscribers(engine: Engine) -> None:
    assert engine.publish("a/b", b"x", qos=1) == 0


def test_an_unknown_client_type_is_refused_with_the_names_that_exist(engine: Engine) -> None:
    with pytest.raises(
        ValueError, match='unknown client type "devices"; expected one of: device, application'
    ):
        engine.complete_auth(1, 1, 0, 0, client_type="devices")


def test_events_are_typed_objects(engine: Engine) -> None:
    # A retained message is journaled (the default config has a store): one Persist.
    engine.publish("a/b", b"x", retain=True)
    (event,) = engine.take_events()
    assert isinstance(event, Persist)


def test_restore_reports_what_it_read_back(engine: Engine) -> None:
    engine.publish("a/b", b"x", retain=True)
    snapshot = engine.snapshot()
    report = engine_from_config(Config()).restore(snapshot, 0)
    assert (report.retained, report.sessions, report.valid_len, report.error) == (
        1,
        0,
        len(snapshot),
        None,
    )


def test_restore_reports_a_damaged_record_as_a_typed_range(engine: Engine) -> None:
    for topic in ("a", "b", "c"):
        engine.publish(topic, b"x" * 20, retain=True)
    stored = bytearray(journal_header() + journal_log_records(engine.snapshot()))
    stored[len(stored) // 2] ^= 0xFF  # inside the second record
    report = engine_from_config(Config()).restore(bytes(stored), 0)
    assert report.retained == 2
    (damaged,) = report.damaged
    assert isinstance(damaged, DamagedRange)
    assert damaged.offset < len(stored) // 2 < damaged.offset + damaged.length
    assert damaged.error == "record checksum mismatch"
