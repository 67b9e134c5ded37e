"""Connection analytics from the event stream (records of kind ``connected`` and
``disconnected``, keyed by ``client_id``).

- :func:`connection_counts`: per window and client, connects and disconnects;
- :func:`disconnect_reasons`: per window and reason (``client_disconnect``,
  ``keep_alive_timeout``, ``taken_over``, ...), disconnects;
- :func:`flapping_clients`: per window, the clients with at least ``threshold``
  disconnects in it (a device in a reconnect loop, two devices sharing a client id);
- :func:`session_durations`: per connection that ended, its client, node, start, end,
  duration in seconds and disconnect reason.

A session's end is the first disconnect of the client at or after the connect and within
``max_duration``: in a stream, an interval join of connects with disconnects (both sides'
state bounded by the watermark and the interval), then the earliest per connect. The
previous connection of a client always ends before the next one starts (a takeover
disconnects the old one first [MQTT-3.1.4-3]), so the earliest disconnect after a
connect is its own. A session longer than ``max_duration`` is not reported. In a stream
Spark holds the join's output back by the interval (a disconnect may still arrive up to
``max_duration`` after its connect), so a duration row is written once the watermark is
``max_duration`` past the connect: the bound trades how long a session can be for how
soon it is reported (a back-fill, a batch, has neither delay nor state).

Windows are tumbling over the broker ``time``; ``date`` is the UTC date of the window
start (of the connect, for durations), the outputs' partition.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = [
    "CONNECTED",
    "DISCONNECTED",
    "connection_counts",
    "disconnect_reasons",
    "flapping_clients",
    "session_durations",
]

CONNECTED: Final = "connected"
DISCONNECTED: Final = "disconnected"


def _kind_is(kind: str) -> Column:
    return F.when(F.col("kind") == kind, 1).otherwise(0)


def _windowed(duration: str) -> tuple[Column, Column]:
    return F.window("time", duration).alias("window"), F.to_date(F.col("window.start"))


def connection_counts(events: DataFrame, duration: str) -> DataFrame:
    """Per ``duration`` window and client: ``connects``, ``disconnects``."""
    window, date = _windowed(duration)
    lifecycle = events.where(F.col("kind").isin(CONNECTED, DISCONNECTED))
    counted = lifecycle.groupBy(window, "client_id").agg(
        F.sum(_kind_is(CONNECTED)).alias("connects"),
        F.sum(_kind_is(DISCONNECTED)).alias("disconnects"),
    )
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "client_id",
        "connects",
        "disconnects",
        date.alias("date"),
    )


def disconnect_reasons(events: DataFrame, duration: str) -> DataFrame:
    """Per ``duration`` window and disconnect reason: ``disconnects``."""
    window, date = _windowed(duration)
    disconnects = events.where(F.col("kind") == DISCONNECTED)
    counted = disconnects.groupBy(window, "reason").agg(F.count("*").alias("disconnects"))
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "reason",
        "disconnects",
        date.alias("date"),
    )


def flapping_clients(events: DataFrame, duration: str, threshold: int) -> DataFrame:
    """The clients with at least ``threshold`` disconnects in a ``duration`` window."""
    counts = connection_counts(events, duration)
    return counts.where(F.col("disconnects") >= threshold)


def session_durations(events: DataFrame, max_duration: str) -> DataFrame:
    """Per ended connection: ``client_id``, ``node``, ``connected_at``,
    ``disconnected_at``, ``duration_seconds``, ``reason``."""
    connects = events.where(F.col("kind") == CONNECTED).select(
        F.col("id").alias("connect_id"),
        F.col("client_id"),
        F.col("node"),
        F.col("time").alias("connected_at"),
    )
    disconnects = events.where(F.col("kind") == DISCONNECTED).select(
        F.col("client_id").alias("ended_client_id"),
        F.col("time").alias("disconnected_at"),
        F.col("reason"),
    )
    joined = connects.join(
        disconnects,
        F.expr(
            "ended_client_id = client_id AND disconnected_at >= connected_at AND "
            f"disconnected_at <= connected_at + INTERVAL {max_duration}"
        ),
    )
    first = joined.groupBy("connect_id", "client_id", "node", "connected_at").agg(
        F.min_by(F.struct("disconnected_at", "reason"), F.col("disconnected_at")).alias("end")
    )
    return first.select(
        "client_id",
        "node",
        "connected_at",
        F.col("end.disconnected_at").alias("disconnected_at"),
        (
            (F.unix_micros(F.col("end.disconnected_at")) - F.unix_micros(F.col("connected_at")))
            / F.lit(1_000_000.0)
        ).alias("duration_seconds"),
        F.col("end.reason").alias("reason"),
        F.to_date(F.col("connected_at")).alias("date"),
    )
