"""Structured logging: the text and JSON line formats, and no formatting when disabled."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from ferromq import log
from ferromq.config import LogConfig
from ferromq.log import configure_logging, log_as_shard, log_event, relay_line, tag_process

TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A fresh logging setup writing to a string; the root logger is restored after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    yield io.StringIO()
    root.handlers, root.level = handlers, level


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


class Loud:
    """A field value that counts how often something turned it into text."""

    def __init__(self) -> None:
        self.formatted = 0

    def __str__(self) -> str:
        self.formatted += 1
        return "loud"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return str(self)


def test_text_line(stream: io.StringIO) -> None:
    configure_logging(LogConfig(level="info", format="text"), stream)
    log_event(
        logging.getLogger("ferromq.broker"),
        logging.INFO,
        "client connected",
        client_id="dev-1",
        port=1883,
        clean=True,
        reason=None,
        note="two words",
        empty="",
    )
    [line] = lines(stream)
    assert re.fullmatch(
        TIMESTAMP + r" INFO ferromq\.broker client connected client_id=dev-1 port=1883 "
        r'clean=true reason=null note="two words" empty=""',
        line,
    ), line


def test_text_line_without_fields_and_with_percent_args(stream: io.StringIO) -> None:
    configure_logging(LogConfig(), stream)
    logging.getLogger("ferromq.x").warning("queue %s full", "q1")
    [line] = lines(stream)
    assert re.fullmatch(TIMESTAMP + r" WARNING ferromq\.x queue q1 full", line), line


def test_text_values_that_need_quotes(stream: io.StringIO) -> None:
    configure_logging(LogConfig(), stream)
    log_event(logging.getLogger("t"), logging.INFO, "m", a='say "hi"', b="k=v", c="line\nbreak")
    [line] = lines(stream)
    assert line.endswith(r' a="say \"hi\"" b="k=v" c="line\nbreak"')


def test_json_line(stream: io.StringIO) -> None:
    configure_logging(LogConfig(level="debug", format="json"), stream)
    log_event(
        logging.getLogger("ferromq.broker"),
        logging.DEBUG,
        "client connected",
        client_id="dev-1",
        port=1883,
        peer=("10.0.0.1", 5000),
        obj=Loud(),
        msg="a field named like a fixed key",
    )
    [line] = lines(stream)
    event = json.loads(line)
    assert re.fullmatch(TIMESTAMP, event.pop("ts"))
    assert event == {
        "level": "debug",
        "logger": "ferromq.broker",
        "msg": "client connected",
        "client_id": "dev-1",
        "port": 1883,
        "peer": ["10.0.0.1", 5000],
        "obj": "loud",
        "msg_": "a field named like a fixed key",
    }


def test_a_shard_tags_every_line(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log, "_PROCESS_FIELDS", {})  # this process's tags, restored after
    tag_process(shard=1)
    configure_logging(LogConfig(format="text"), stream)
    log_event(logging.getLogger("ferromq.broker"), logging.INFO, "listening", port=1883)
    logging.getLogger("ferromq.x").warning("plain")
    configure_logging(LogConfig(format="json"), stream)
    log_event(logging.getLogger("ferromq.broker"), logging.INFO, "listening", port=1883)
    text, plain, line = lines(stream)
    assert text.endswith(" INFO ferromq.broker listening port=1883 shard=1")
    assert plain.endswith(" WARNING ferromq.x plain shard=1")
    assert json.loads(line)["shard"] == 1


def test_json_exception(stream: io.StringIO) -> None:
    configure_logging(LogConfig(format="json"), stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("ferromq").exception("store failed")
    [line] = lines(stream)
    event = json.loads(line)
    assert event["level"] == "error"
    assert event["exc"].startswith("Traceback")
    assert "RuntimeError: boom" in event["exc"]


def test_text_exception_follows_the_line(stream: io.StringIO) -> None:
    configure_logging(LogConfig(), stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("ferromq").exception("store failed")
    first, *rest = lines(stream)
    assert first.endswith(" ERROR ferromq store failed")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: boom"


def test_disabled_level_formats_nothing(stream: io.StringIO) -> None:
    configure_logging(LogConfig(level="warning"), stream)
    value = Loud()
    log_event(logging.getLogger("ferromq.broker"), logging.INFO, "quiet", value=value)
    log_event(logging.getLogger("ferromq.broker"), logging.DEBUG, "quieter", value=value)
    assert stream.getvalue() == ""
    assert value.formatted == 0
    log_event(logging.getLogger("ferromq.broker"), logging.WARNING, "heard", value=value)
    assert value.formatted == 1
    assert lines(stream)[0].endswith(" WARNING ferromq.broker heard value=loud")


def ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if h.get_name() == "ferromq"]


def test_reconfiguring_replaces_the_handler(stream: io.StringIO) -> None:
    first = io.StringIO()
    configure_logging(LogConfig(format="json"), first)
    configure_logging(LogConfig(format="text"), stream)
    assert len(ours()) == 1
    logging.getLogger("ferromq").info("once")
    assert first.getvalue() == ""
    [line] = lines(stream)
    assert line.endswith(" INFO ferromq once")


def test_foreign_handlers_are_kept(stream: io.StringIO) -> None:
    foreign = logging.NullHandler()
    logging.getLogger().addHandler(foreign)
    configure_logging(LogConfig(), stream)
    configure_logging(LogConfig(), stream)
    assert foreign in logging.getLogger().handlers
    assert len(ours()) == 1


@pytest.mark.parametrize(
    ("level", "number"),
    [("debug", logging.DEBUG), ("info", logging.INFO), ("warning", logging.WARNING)],
)
def test_level_is_set_on_the_root(stream: io.StringIO, level: str, number: int) -> None:
    configure_logging(LogConfig(level=level), stream)
    assert logging.getLogger().level == number


def test_caller_is_the_record_location(stream: io.StringIO) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    configure_logging(LogConfig(), stream)
    logging.getLogger().addHandler(Keep())
    log_event(logging.getLogger("ferromq"), logging.INFO, "here")
    assert records[0].funcName == "test_caller_is_the_record_location"


def test_a_shards_records_reach_the_supervisors_handler_as_the_shard_formatted_them(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard writes each record framed on one line of its stderr, whatever the
    destination; the supervisor writes it through its own handler unchanged, at its
    level, a traceback and all; other text on the pipe goes out as it is."""
    monkeypatch.setattr(log, "_PROCESS_FIELDS", {})
    monkeypatch.setattr(log, "_RELAYING", [False])
    pipe = io.StringIO()
    log_as_shard(1)
    configure_logging(LogConfig(destination="syslog", syslog_address="/nonexistent"), pipe)
    log_event(logging.getLogger("ferromq.broker"), logging.WARNING, "slow", port=1883)
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        log.log_error(logging.getLogger("ferromq.store"), "failed", exc)
    framed = lines(pipe)
    assert len(framed) == 2, "a traceback stays in its record's line"

    monkeypatch.setattr(log, "_RELAYING", [False])  # the supervisor
    configure_logging(LogConfig(format="text"), stream)
    (supervisor,) = (h for h in logging.getLogger().handlers if h.get_name() == "ferromq")
    levels: list[int] = []

    def keep(record: logging.LogRecord) -> bool:
        levels.append(record.levelno)
        return True

    supervisor.addFilter(keep)
    for line in [*framed, "Fatal Python error: Aborted"]:
        relay_line(line)
    warning, error, *traceback, raw = lines(stream)
    assert warning == "WARNING ferromq.broker slow port=1883 shard=1", "syslog's, no time"
    assert error == "ERROR ferromq.store failed shard=1"
    assert traceback[-1] == "RuntimeError: boom"
    assert raw == "Fatal Python error: Aborted"
    assert levels == [logging.WARNING, logging.ERROR, logging.ERROR]
