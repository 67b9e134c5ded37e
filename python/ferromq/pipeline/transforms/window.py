"""Per-series window aggregates of readings: tumbling (``duration``) or sliding
(``duration`` every ``slide``) windows over the records' broker ``time``.

Per window and series (the ``keys``, e.g. the pattern's tenant, site, device and metric,
and the reading's ``field``): ``count``; ``rate``, readings per second of the window;
``min``, ``max``, ``mean``; ``stddev``, the population standard deviation (the window's
readings are all there is, so one reading has 0, not null); ``last``, the value with the
latest time (ties by record id, so the choice does not depend on the partitioning).

In a stream the watermark set on ``time`` upstream bounds the state, and append mode
writes each window once, after the watermark passes its end; a reading later than the
watermark is dropped (Spark counts it as ``numRowsDroppedByWatermark``, which the
progress log reports). ``date`` is the window start's UTC date, the output's partition.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["explode_readings", "window_aggregates"]


def explode_readings(frame: DataFrame) -> DataFrame:
    """One row per reading: ``field`` and ``value`` from the ``readings`` array."""
    reading = F.explode(F.col("readings")).alias("reading")
    exploded = frame.select("*", reading).drop("readings")
    return exploded.withColumns(
        {"field": F.col("reading.field"), "value": F.col("reading.value")}
    ).drop("reading")


def window_aggregates(
    readings: DataFrame,
    keys: Sequence[str],
    duration: str,
    slide: str | None = None,
) -> DataFrame:
    """The aggregates of ``readings`` (``time``, ``id``, ``field``, ``value`` and the
    ``keys``) per window and series."""
    window = F.window("time", duration, slide) if slide else F.window("time", duration)
    seconds = (F.unix_micros(F.col("window.end")) - F.unix_micros(F.col("window.start"))) / F.lit(
        1_000_000.0
    )
    grouped = readings.groupBy(window.alias("window"), *keys, "field").agg(
        F.count("value").alias("count"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.avg("value").alias("mean"),
        F.stddev_pop("value").alias("stddev"),
        F.max_by("value", F.struct("time", "id")).alias("last"),
    )
    return grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *keys,
        "field",
        "count",
        (F.col("count") / seconds).alias("rate"),
        "min",
        "max",
        "mean",
        "stddev",
        "last",
        F.to_date(F.col("window.start")).alias("date"),
    )
