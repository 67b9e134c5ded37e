"""The crash matrix's cells and the check each runs (`test_matrix.py`,
`test_plugin_matrix.py`): a trial killed the cell's way, then what the subscriber's
application saw. `FERROMQ_CRASH_KILLS` sets the kills per cell (3 in the test
command; the long run sets hundreds), `FERROMQ_CRASH_SEED` the random moments (a
failure names its seed)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path

from tests.crash.trial import Trial

KILLS = int(os.environ.get("FERROMQ_CRASH_KILLS", "3"))
SEED = int(os.environ.get("FERROMQ_CRASH_SEED", "0"))
CELLS = [(1, "process"), (2, "supervisor"), (2, "shard"), (2, "group")]


def check(
    trial_of: Callable[..., Trial],
    tmp_path: Path,
    shards: int,
    kill: str,
    qos: int,
    version: int,
    store: str,
) -> None:
    seed = SEED + zlib.crc32(f"{store}{shards}{kill}{qos}{version}".encode())
    trial = trial_of(tmp_path, shards, qos, version, seed=seed)
    tally = trial.run(kill, KILLS)
    # the long run's figures (pytest -rA)
    print(f"{store}{shards}x {kill} QoS {qos} v{version}, {trial.kills} kills: {tally}")
    assert tally.acknowledged > KILLS * 30, tally
    assert not tally.lost, (
        f"lost after {trial.kills} kills (seed {seed}): {tally}; kills {trial.history}"
    )
    assert not tally.duplicated, (
        f"doubled after {trial.kills} kills (seed {seed}): {tally}; kills {trial.history}"
    )
