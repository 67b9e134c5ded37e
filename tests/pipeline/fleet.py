"""A known fleet's stream for the end-to-end tests, and the telemetry tables it must give.

Devices publish readings on ``fleet/{device}/{metric}`` as ``{"v": value, "seq": n}``;
the stream also holds a record written twice (a batch the broker resent), a reading a
device resent under a new record id (a QoS 1 retransmission: removed by ``--dedupe-key
seq``), a record whose topic does not match and one whose payload is not JSON (both
quarantined), and finally a reading ten minutes later that moves the watermark past
every window of the readings (its own window stays open, so it is not in the output).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

from pyspark.sql import Row

from tests.pipeline.stream_records import T0, Record, as_collected, event, message

PATTERN = "fleet/{device}/{metric}"
WINDOW_SECONDS = 10
JOB_OPTIONS = [
    "--pattern", PATTERN, "--window", f"{WINDOW_SECONDS} seconds",
    "--watermark", "5 seconds", "--dedupe-key", "seq",
]  # fmt: skip
# (device, metric, seconds after T0, value)
READINGS = [
    ("d1", "temp", 0.5, 20.0),
    ("d1", "temp", 3.0, 22.5),
    ("d1", "temp", 9.5, 21.0),
    ("d1", "temp", 12.0, 25.0),
    ("d2", "hum", 1.0, 40.0),
    ("d2", "hum", 2.0, 41.0),
    ("d2", "hum", 14.0, 39.5),
]
# Lifecycle events: client a twice connected and disconnected, b three times in ten
# seconds (flapping), c still connected.
EVENTS = [
    event("connected", "a", 0),
    event("disconnected", "a", 30, "client_disconnect"),
    event("connected", "a", 40),
    event("disconnected", "a", 45, "keep_alive_timeout"),
    event("connected", "b", 5),
    event("disconnected", "b", 6, "socket_closed"),
    event("connected", "b", 7),
    event("disconnected", "b", 8, "socket_closed"),
    event("connected", "b", 9),
    event("disconnected", "b", 10, "socket_closed"),
    event("connected", "c", 50),  # still connected
    event("subscribed", "c", 51),
]
QUARANTINED = {"fleet/d1": "topic_mismatch", "fleet/d2/hum": "payload_not_json"}


def reading(device: str, metric: str, at: float, value: float, seq: int) -> Record:
    return message(f"fleet/{device}/{metric}", json.dumps({"v": value, "seq": seq}), at)


def fleet_records() -> tuple[list[Record], list[Record]]:
    """The stream in two parts (two files, or two rounds of producing); then the tick."""
    readings = [reading(*values, seq) for seq, values in enumerate(READINGS)]
    resent_batch = Record(**{**readings[0].__dict__})  # the same record id again
    retransmitted = reading(*READINGS[1], seq=1)  # new id, same seq: a QoS 1 resend
    retransmitted.at += 0.1
    bad = [message("fleet/d1", '{"v": 1}', 4.0), message("fleet/d2/hum", "{oops", 5.0)]
    first = readings[:4] + bad[:1]
    second = [resent_batch, retransmitted, *readings[4:], bad[1], tick()]
    return first, second


def tick() -> Record:
    return message("fleet/d9/temp", json.dumps({"v": 0, "seq": 0}), 600.0)


def window_row(
    keys: dict[str, str], start: float, length: float, values: list[float], last: float
) -> Row:
    """The telemetry row of a window of ``length`` seconds from ``start`` after T0."""
    return Row(
        window_start=as_collected(start),
        window_end=as_collected(start + length),
        **keys,
        count=len(values),
        rate=len(values) / length,
        min=min(values),
        max=max(values),
        mean=statistics.fmean(values),
        stddev=statistics.pstdev(values),
        last=last,
        date=T0.date(),
    )


def expected_windows() -> list[Row]:
    """The tumbling windows of ``READINGS``, each reading once."""
    windows: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for device, metric, at, value in READINGS:
        windows[device, metric, int(at // WINDOW_SECONDS) * WINDOW_SECONDS].append(value)
    return [
        window_row(
            {"device": device, "metric": metric, "field": "v"},
            start,
            WINDOW_SECONDS,
            values,
            last=values[-1],
        )
        for (device, metric, start), values in windows.items()
    ]
