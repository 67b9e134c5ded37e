"""Topic levels into columns, by a pattern such as
``tenant/{tenant}/site/{site}/device/{device}/{metric}``.

A pattern is ``/``-separated levels, each one of:

- literal text: the topic's level must be exactly that;
- ``{name}``: any non-empty level, kept in the column ``name``;
- ``+``: any one level, not kept; ``#`` (last only): any remaining levels, none
  included, not kept — MQTT's wildcards, with their meaning [MQTT-4.7.1-2], [MQTT-4.7.1-3].

:meth:`TopicPattern.parse` compiles it to one anchored regular expression, which Spark
evaluates in the JVM (``rlike``, ``regexp_extract``): no Python runs per record. Worked
example: ``site/{site}/+/{metric}`` becomes ``^site/([^/]+)/[^/]*/([^/]+)$``; the topic
``site/s1/dev9/temp`` gives ``site = "s1"``, ``metric = "temp"``; ``site/s1/temp`` does not
match (``topic_matches`` false, the captures null), and the job quarantines it.

A bad pattern is a :class:`~ferromq.pipeline.errors.PipelineError` naming the level.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ferromq.pipeline.errors import PipelineError

__all__ = ["MATCHES", "RESERVED_COLUMNS", "TopicPattern", "parse_topic"]

MATCHES: Final = "topic_matches"
# Columns the telemetry job's rows and outputs already have; a level cannot take them.
RESERVED_COLUMNS: Final = frozenset(
    {
        "id", "kind", "time", "node", "listener", "client_id", "username", "topic",
        "payload", "qos", "retain", "field", "value", "count", "rate", "min", "max",
        "mean", "stddev", "last", "window_start", "window_end", "date", "reason",
        MATCHES,
    }
)  # fmt: skip
_NAME: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CAPTURE: Final = "([^/]+)"
_ANY_LEVEL: Final = "[^/]*"


@dataclass(frozen=True)
class TopicPattern:
    text: str
    names: tuple[str, ...]
    regex: str  # Java and Python regular expression syntax alike

    @classmethod
    def parse(cls, text: str) -> TopicPattern:
        if not text:
            raise PipelineError("topic pattern is empty")
        levels = text.split("/")
        parts: list[str] = []
        names: list[str] = []
        for number, level in enumerate(levels, 1):
            where = f"topic pattern {text!r}: level {number} {level!r}"
            named = _NAME.fullmatch(level)
            if named:
                name = named.group(1)
                if name in names:
                    raise PipelineError(f"{where}: {{{name}}} appears twice")
                if name in RESERVED_COLUMNS:
                    raise PipelineError(f"{where}: {name!r} is a column the job already has")
                names.append(name)
                parts.append(_CAPTURE)
            elif level == "+":
                parts.append(_ANY_LEVEL)
            elif level == "#":
                if number != len(levels):
                    raise PipelineError(f"{where}: '#' must be the last level")
                parts.append("#")
            elif "{" in level or "}" in level or "+" in level or "#" in level:
                raise PipelineError(
                    f"{where}: a level is literal text, {{name}} (a letter or _ then "
                    "letters, digits or _), + or #"
                )
            else:
                parts.append(re.escape(level))
        return cls(text, tuple(names), _anchored(parts))

    def __str__(self) -> str:
        return self.text


def _anchored(parts: Sequence[str]) -> str:
    if parts[-1] != "#":
        return "^" + "/".join(parts) + "$"
    # '#' also matches the parent level: "a/#" matches "a" [MQTT-4.7.1-2].
    head = "/".join(parts[:-1])
    return f"^{head}(?:/.*)?$" if head else "^.*$"


def parse_topic(frame: DataFrame, pattern: TopicPattern, topic: str = "topic") -> DataFrame:
    """``frame`` plus a column per ``{name}`` of ``pattern`` (null when the topic does not
    match) and ``topic_matches`` (false also for a null topic)."""
    matches = F.coalesce(F.col(topic).rlike(pattern.regex), F.lit(False))
    captures = {
        name: F.when(matches, F.regexp_extract(F.col(topic), pattern.regex, group))
        for group, name in enumerate(pattern.names, 1)
    }
    return frame.withColumns({**captures, MATCHES: matches})
