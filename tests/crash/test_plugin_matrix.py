"""The crash matrix's cells once more with every message waiting for an intercepting
plugin's verdict before it is routed and acknowledged (`[[plugins]]`,
engine/plugins.rs; tests/support/example_plugins.py, ``PassThrough``; MQTT 5.0): a kill
between the PUBLISH and the verdict must leave nothing behind, and none after it may
lose or double a message. A file of its own so that pytest's processes, a file each,
share the matrix."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.crash.cells import CELLS, check
from tests.crash.trial import Trial
from tests.support.slow import slow

# CI: QoS 2 on one shard and on a node of two whose process group is killed; the
# other six cells with FERROMQ_SLOW=1 (the matrix without a plugin runs them all).
IN_CI = {(1, "process", 2), (2, "group", 2)}
PLUGIN_CELLS = [
    (pytest.param if (shards, kill, qos) in IN_CI else slow)(
        shards, kill, qos, id=f"{shards}x-{kill}-qos{qos}"
    )
    for shards, kill in CELLS
    for qos in (1, 2)
]


@pytest.mark.parametrize(("shards", "kill", "qos"), PLUGIN_CELLS)
def test_with_a_plugin_nothing_acknowledged_is_lost_nothing_doubled(
    tmp_path: Path, shards: int, kill: str, qos: int
) -> None:
    trial_of = partial(Trial, plugin="tests.support.example_plugins:PassThrough")
    check(trial_of, tmp_path, shards, kill, qos, 5, store="plugin ")
