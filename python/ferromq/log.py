"""Structured logging: one line per event, as text for people or JSON for collectors.

An event is a message plus named fields. :func:`log_event` attaches the fields to the
stdlib ``LogRecord`` untouched; only a handler's formatter turns them into text, so a
disabled level costs one ``isEnabledFor`` check and never formats a value. Python logs
per *event* (connect, subscribe, batch), never per message (ARCHITECTURE.md).

Formats (UTC, millisecond precision)::

    text  2026-11-21T05:43:48.123Z INFO ferromq.broker client connected client_id=dev-1 port=1883
    json  {"ts": "2026-11-21T05:43:48.123Z", "level": "info", "logger": "ferromq.broker",
           "msg": "client connected", "client_id": "dev-1", "port": 1883}

A shard of a node puts ``shard=K`` on every line (:func:`tag_process`), so the lines of
a node's processes, which share its stderr or log file, say which shard wrote them.

A node writes one log: its supervisor owns the destination (opens the file and rotates
it, holds the syslog socket). A shard (:func:`log_as_shard`) formats each record for
that destination and writes it to its stderr, a pipe the supervisor reads, framed as
one line ``\x1f<level number> <the formatted text as a JSON string>`` (a traceback
stays one record); the supervisor hands it to its own handler as it is
(:func:`relay_line`), so two processes never rotate one file and syslog sees the
node's pid. Other text a shard writes on stderr (Python's last words) is relayed line
by line at ERROR.

Text values are bare when they are a single token and JSON-quoted otherwise (logfmt), so
a line splits unambiguously on spaces. In JSON, fields sit beside the fixed keys; a field
named like a fixed key is written with a trailing ``_`` rather than overwrite it.

Destinations (``[log] destination``): stderr; a file rotated at ``max_bytes`` keeping
``backups`` old files (``logging.handlers.RotatingFileHandler``); or syslog
(``SysLogHandler``, facility daemon, ident ``ferromq[pid]:``) on ``syslog_address``,
``/dev/log`` by default, which journald also serves. Syslog stamps its own time, so
text lines sent there leave the timestamp out. :func:`log_handler` builds the handler
and fails with a :class:`~ferromq.config.ConfigError` naming the key when the file or
socket cannot be opened, so a reload can build it before replacing anything.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import sys
import time
from types import CodeType, FrameType
from typing import Final, TextIO

from ferromq._core import logfmt
from ferromq.config import ConfigError, LogConfig

__all__ = [
    "LOG_INTERVAL",
    "JsonFormatter",
    "RateLimitedLog",
    "TextFormatter",
    "configure_logging",
    "install_handler",
    "log_as_shard",
    "log_error",
    "log_event",
    "log_handler",
    "peer_text",
    "relay_line",
    "tag_process",
]

_FIELDS_ATTR: Final = "ferromq_fields"  # the LogRecord attribute that carries the fields
_HANDLER_NAME: Final = "ferromq"  # marks the handler configure_logging installs, to replace it
_JSON_KEYS: Final = frozenset({"ts", "level", "logger", "msg", "exc"})
_RELAYED_ATTR: Final = "ferromq_relayed"  # a record holding a line a shard formatted
_RELAY_MARK: Final = "\x1f"


def log_event(logger: logging.Logger, level: int, message: str, **fields: object) -> None:
    """Log ``message`` with structured ``fields`` at ``level`` (``logging.INFO`` …).

    Nothing is formatted unless ``logger`` is enabled for ``level``; the fields reach the
    formatter as they are. The record is made by :func:`_record` for the frame that
    called this.
    """
    if logger.isEnabledFor(level):
        logger.handle(_record(logger.name, level, sys._getframe(1), message, fields))


# A record's attributes per call site (code object, line, logger, level), as a
# LogRecord made there holds them; see _record.
_templates: dict[tuple[CodeType, int, str, int], tuple[dict[str, object], float]] = {}


def _record(
    name: str, level: int, caller: FrameType, message: str, fields: dict[str, object]
) -> logging.LogRecord:
    """The record ``Logger.makeRecord`` would make for ``message`` logged from
    ``caller``, with ``fields`` attached, made as a copy of the call site's first
    record with the time set anew. ``LogRecord.__init__`` works out the file and module
    names from the path (``os.path`` calls) and the time fields for every record: a
    connection storm at ``info`` paid it twice per connection. The copy keeps what a
    record made on another thread would say of its thread, so it relies on
    :func:`configure_logging` having turned thread, process and task lookups off."""
    code = caller.f_code
    site = (code, caller.f_lineno, name, level)
    template = _templates.get(site)
    if template is None:
        first = logging.LogRecord(
            name, level, code.co_filename, caller.f_lineno, message, (), None, code.co_name
        )
        # relativeCreated counts from logging's start: kept as the offset from created
        template = _templates[site] = (
            dict(vars(first)),
            first.relativeCreated - first.created * 1000,
        )
    attributes_of_site, relative_offset = template
    record = logging.LogRecord.__new__(logging.LogRecord)
    attributes = record.__dict__
    attributes.update(attributes_of_site)
    created = time.time()
    attributes["created"] = created
    attributes["msecs"] = int((created - int(created)) * 1000) + 0.0
    attributes["relativeCreated"] = created * 1000 + relative_offset
    attributes["msg"] = message
    attributes[_FIELDS_ATTR] = fields
    return record


LOG_INTERVAL: Final = 10.0
"""Seconds between two lines of one :class:`RateLimitedLog`."""


class RateLimitedLog:
    """One event per :data:`LOG_INTERVAL` at most, for conditions an attacker can repeat
    (refused connections, failed handshakes); the next line says how many were held
    back (``since_last``)."""

    def __init__(self, logger: logging.Logger, level: int, message: str) -> None:
        self._logger = logger
        self._level = level
        self._message = message
        self._next_at = 0.0
        self._held_back = 0

    def __call__(self, now: float, **fields: object) -> None:
        if now < self._next_at:
            self._held_back += 1
            return
        log_event(self._logger, self._level, self._message, **fields, since_last=self._held_back)
        self._next_at = now + LOG_INTERVAL
        self._held_back = 0


def peer_text(peer: tuple[object, ...]) -> str:
    """A peer address as logs show it: ``host:port``, ``[host]:port`` for IPv6 (an IPv6
    peer is ``(host, port, flow, scope)``)."""
    host, port = str(peer[0]), peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def log_error(
    logger: logging.Logger, message: str, exc: BaseException | None, **fields: object
) -> None:
    """Log ``message`` at ERROR with ``fields``, and the traceback of ``exc`` if given."""
    if logger.isEnabledFor(logging.ERROR):
        logger.error(message, exc_info=exc, extra={_FIELDS_ATTR: fields}, stacklevel=2)


_second_text: list[tuple[int, str]] = [(-1, "")]  # the last second formatted, and its text


def _timestamp(record: logging.LogRecord) -> str:
    second = int(record.created)
    cached, text = _second_text[0]
    if second != cached:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_text[0] = (second, text)
    return f"{text}.{int(record.msecs):03d}Z"


_PROCESS_FIELDS: dict[str, object] = {}


def tag_process(**fields: object) -> None:
    """Put ``fields`` on every line this process logs from now on, last on the line
    (so a line reads as on one process up to them): a shard of a node tags its lines
    ``shard=K`` (:mod:`ferromq.shard`)."""
    _PROCESS_FIELDS.update(fields)


_RELAYING: list[bool] = [False]  # this process is a shard: its lines go to the supervisor


def log_as_shard(index: int) -> None:
    """This process is shard ``index`` of a node: tag its lines ``shard=K`` and send
    them to the supervisor through stderr from now on, whatever the destination."""
    tag_process(shard=index)
    _RELAYING[0] = True


def relay_line(line: str) -> None:
    """Write ``line``, read from a shard's stderr, through this process's handler: a
    framed record as the shard formatted it at its level, any other text at ERROR."""
    level, text = logging.ERROR, line
    if line.startswith(_RELAY_MARK):
        number, _, body = line[1:].partition(" ")
        with contextlib.suppress(ValueError):  # not framed after all: as it is
            level, text = int(number), str(json.loads(body))
    record = logging.LogRecord("ferromq.shard", level, "", 0, text, None, None)
    setattr(record, _RELAYED_ATTR, True)
    for handler in logging.getLogger().handlers:
        if handler.get_name() == _HANDLER_NAME:
            handler.handle(record)


class _RelayFormatter(logging.Formatter):
    """A shard's: the destination's formatting, framed as one line for the pipe."""

    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self._formatter = formatter

    def format(self, record: logging.LogRecord) -> str:
        text = json.dumps(self._formatter.format(record), ensure_ascii=False)
        return f"{_RELAY_MARK}{record.levelno} {text}"


def _relayed(record: logging.LogRecord) -> str | None:
    """The text of a line a shard formatted (:func:`relay_line`), else None."""
    return record.getMessage() if getattr(record, _RELAYED_ATTR, False) else None


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields: dict[str, object] = getattr(record, _FIELDS_ATTR, {})
    return {**fields, **_PROCESS_FIELDS} if _PROCESS_FIELDS else fields


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> <message> key=value ...``, traceback on the lines after;
    without ``<ts>`` for a destination that stamps its own (syslog)."""

    def __init__(self, timestamp: bool = True) -> None:
        super().__init__()
        self._timestamp = timestamp

    def format(self, record: logging.LogRecord) -> str:
        if (relayed := _relayed(record)) is not None:
            return relayed
        parts = [record.levelname, record.name, record.getMessage()]
        if self._timestamp:
            parts.insert(0, _timestamp(record))
        if fields := _fields(record):
            parts.append(logfmt(fields))  # compiled: a connect line's ten fields
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; values JSON cannot hold are written as ``str(value)``."""

    def format(self, record: logging.LogRecord) -> str:
        if (relayed := _relayed(record)) is not None:
            return relayed
        event: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            event[f"{key}_" if key in _JSON_KEYS else key] = value
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False, default=str)


def _syslog_address(text: str) -> str | tuple[str, int]:
    """A unix socket path, or ``host:port`` for UDP."""
    host, _, port = text.rpartition(":")
    if text.startswith("/") or not host or not port.isdigit():
        return text
    return host.strip("[]"), int(port)


def log_handler(config: LogConfig, stream: TextIO | None = None) -> logging.Handler:
    """The handler ``config`` describes (``stream`` stands for stderr), formatting in
    ``config.format``; a shard's writes to stderr for the supervisor whatever the
    destination. Raises :class:`ConfigError` when its file or socket cannot be
    opened."""
    handler: logging.Handler
    try:
        if _RELAYING[0]:
            handler = logging.StreamHandler(sys.stderr if stream is None else stream)
        elif config.destination == "file":
            assert config.file is not None, "the schema requires it"
            handler = logging.handlers.RotatingFileHandler(
                config.file, maxBytes=config.max_bytes, backupCount=config.backups, encoding="utf-8"
            )
        elif config.destination == "syslog":
            address = _syslog_address(config.syslog_address)
            handler = logging.handlers.SysLogHandler(
                address, logging.handlers.SysLogHandler.LOG_DAEMON
            )
            handler.ident = f"ferromq[{os.getpid()}]: "
        else:
            handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    except OSError as exc:
        key = "log.file" if config.destination == "file" else "log.syslog_address"
        target = config.file if config.destination == "file" else config.syslog_address
        raise ConfigError(f"{key}: cannot open {target}: {exc.strerror or exc}") from None
    handler.set_name(_HANDLER_NAME)
    formatter: logging.Formatter
    if config.format == "json":
        formatter = JsonFormatter()
    else:
        formatter = TextFormatter(timestamp=config.destination != "syslog")
    handler.setFormatter(_RelayFormatter(formatter) if _RELAYING[0] else formatter)
    return handler


def install_handler(handler: logging.Handler, level: str) -> None:
    """Make ``handler`` the root's one ferromq handler at ``level`` (a schema level),
    closing the one it replaces."""
    root = logging.getLogger()
    for installed in root.handlers[:]:
        if installed.get_name() == _HANDLER_NAME:
            root.removeHandler(installed)
            installed.close()
    root.addHandler(handler)
    root.setLevel(level.upper())  # the schema's levels are stdlib level names


def configure_logging(config: LogConfig, stream: TextIO | None = None) -> None:
    """Send every logger's records (the root's) where ``config`` says (``stream`` stands
    for stderr) in ``config.format`` at ``config.level``. Calling it again replaces the
    previous setup. Raises :class:`ConfigError` (see :func:`log_handler`).

    No line shows a record's thread, process or task, so records do not look them up
    (``logging``'s documented optimisation: a connection storm logs two lines per
    connection, and ``os.getpid`` and the thread's name were a tenth of each)."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    install_handler(log_handler(config, stream), config.level)
