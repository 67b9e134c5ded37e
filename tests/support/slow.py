"""The slow suites' switch: ``FERROMQ_SLOW=1`` (scripts/test.sh) runs what CI leaves out
to stay within its budget; the closing notes report those runs.

``slow(...)`` is a parameter set that runs only then, skipped (with the reason) in CI's
run, so a parametrized test keeps its cheapest cells in CI and the rest of its matrix
behind the switch."""

from __future__ import annotations

import os
from typing import Any

import pytest

SLOW = os.environ.get("FERROMQ_SLOW") == "1"


def slow(*values: Any, id: str | None = None) -> Any:
    """``pytest.param(*values)`` that runs only with FERROMQ_SLOW=1."""
    return pytest.param(
        *values, id=id, marks=pytest.mark.skipif(not SLOW, reason="FERROMQ_SLOW=1 runs it")
    )
