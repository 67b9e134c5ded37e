"""Generated fleets for the pipeline benches: ``devices`` devices each publishing JSON
readings ``{"v": value, "seq": n}`` on ``fleet/<device>/temp``, as stream records of
``record-v1.avsc`` (:mod:`tests.pipeline.stream_records`, from the repository root)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.pipeline, from the root
from tests.pipeline.stream_records import Record, message

PATTERN = "fleet/{device}/{metric}"


def readings(
    count: int, devices: int, start: float = 0.0, spacing: float = 0.001
) -> Iterator[Record]:
    """``count`` readings, round robin over the devices, ``spacing`` seconds apart."""
    for n in range(count):
        device = n % devices
        payload = json.dumps({"v": (n * 7919) % 1000 / 10, "seq": n})
        yield message(f"fleet/d{device}/temp", payload, start + n * spacing)
