"""The crash matrix: exactly once across `kill -9`, on one shard and on a node of two.

Every cell streams numbered QoS 1 or QoS 2 messages, MQTT 3.1.1 or 5.0, from a
persistent publisher to a persistent subscriber owned by the other shard (so every
message crosses the bus), kills the broker the cell's way at random moments
(`trial.py`), and checks what the subscriber's application saw: no acknowledged message
lost, no QoS 2 message twice, no QoS 1 message twice except as a DUP redelivery.

Every cell runs on the Redis store too (MQTT 5.0), where a batch is applied per client
rather than whole (`store/redis.rs`, "Order"; `docs/shards.md`, "Exactly once across the
bus").

Every cell runs once more with every message waiting for a plugin's verdict in
`test_plugin_matrix.py` (a file of its own, so the suite's processes share the cells).

Every cell runs once more with the subscriber an APPLICATION client whose queue is in
Kafka (`storage.application_store = "kafka"`, `storage/split.py`), on the embedded store
and on Redis as the primary store (MQTT 5.0).

`FERROMQ_CRASH_KILLS` sets the kills per cell (3 in the test command; the long run sets
hundreds), `FERROMQ_CRASH_SEED` the random moments (a failure names its seed).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.crash.cells import CELLS, check
from tests.crash.trial import Trial
from tests.support.slow import slow

# Every cell at QoS 1 and 2 on 5.0; on 3.1.1 the process and the process group killed
# in CI, the supervisor alone and one shard with FERROMQ_SLOW=1.
VERSIONS = {4: "3.1.1", 5: "5.0"}
VERSIONED_CELLS = [
    (slow if (version, kill) in {(4, "supervisor"), (4, "shard")} else pytest.param)(
        shards, kill, qos, version, id=f"{shards}x-{kill}-qos{qos}-{VERSIONS[version]}"
    )
    for shards, kill in CELLS
    for qos in (1, 2)
    for version in VERSIONS
]


@pytest.mark.parametrize(("shards", "kill", "qos", "version"), VERSIONED_CELLS)
def test_nothing_acknowledged_is_lost_nothing_doubled(
    tmp_path: Path, shards: int, kill: str, qos: int, version: int
) -> None:
    check(Trial, tmp_path, shards, kill, qos, version, store="")


@pytest.mark.parametrize("qos", [1, 2], ids=["qos1", "qos2"])
@pytest.mark.parametrize(("shards", "kill"), CELLS, ids=[f"{n}x-{k}" for n, k in CELLS])
def test_on_redis_nothing_acknowledged_is_lost_nothing_doubled(
    tmp_path: Path, redis_url: str, shards: int, kill: str, qos: int
) -> None:
    check(partial(Trial, redis_url=redis_url), tmp_path, shards, kill, qos, 5, store="redis ")


@pytest.mark.parametrize("qos", [1, 2], ids=["qos1", "qos2"])
@pytest.mark.parametrize(("shards", "kill"), CELLS, ids=[f"{n}x-{k}" for n, k in CELLS])
@pytest.mark.parametrize("primary", ["embedded", "redis"])
def test_on_kafka_nothing_acknowledged_is_lost_nothing_doubled(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kafka_bootstrap: str,
    primary: str,
    shards: int,
    kill: str,
    qos: int,
) -> None:
    redis_url = request.getfixturevalue("redis_url") if primary == "redis" else None
    trial_of = partial(Trial, kafka_bootstrap=kafka_bootstrap, redis_url=redis_url)
    store = "kafka " if primary == "embedded" else "redis+kafka "
    check(trial_of, tmp_path, shards, kill, qos, 5, store=store)
