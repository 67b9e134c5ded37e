"""The load generator (``ferromq bench``) against a real Mosquitto.

Checks what the generator reports, never how fast anything was: QoS 1 and 2 runs
account every message exactly once, fan-out and ``$share`` groups are accounted per
publisher, and a persistent subscriber that drops its connection mid-run sees the
broker's redeliveries counted as duplicates (QoS 1) or absorbed by the QoS 2
packet-id state, with nothing lost. Mosquitto is started by the harness's own
launcher (``benches/load/brokers.py``) on a free loopback port.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq import bench
from ferromq._core import BenchError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches" / "load"))
import brokers


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[brokers.RunningBroker]:
    spec = brokers.Mosquitto()
    reason = spec.missing()
    if reason is not None:
        pytest.skip(reason)
    broker = brokers.start(spec, tmp_path_factory.mktemp("mosquitto"))
    yield broker
    broker.stop()


def run(broker: brokers.RunningBroker, **config: Any) -> dict[str, Any]:
    base = {"port": broker.port, "warmup": 0, "threads": 1, "drain_timeout": 20}
    return bench.run({**base, **config})


def assert_exactly_once(report: dict[str, Any], expected: int) -> None:
    delivery = report["delivery"]
    assert report["clients"]["first_errors"] == []
    assert delivery["expected"] == expected
    assert delivery["received"] == expected
    assert (delivery["lost"], delivery["duplicates"], delivery["reordered"]) == (0, 0, 0)
    assert delivery["drain_complete"]


@pytest.mark.parametrize("protocol", [4, 5])
@pytest.mark.parametrize("qos", [1, 2])
def test_qos_runs_lose_and_duplicate_nothing(
    mosquitto: brokers.RunningBroker, qos: int, protocol: int
) -> None:
    report = run(
        mosquitto,
        scenario="p2p",
        pairs=4,
        pub_qos=qos,
        sub_qos=qos,
        protocol=protocol,
        count=1000,
        client_id_prefix=f"exact-q{qos}-v{protocol}",
    )
    assert_exactly_once(report, 4 * 1000)
    assert report["sent"] == 4 * 1000
    assert report["ack_latency_ms"]["count"] == 4 * 1000
    assert report["latency_ms"]["count"] == 4 * 1000


def test_fanout_counts_every_subscriber(mosquitto: brokers.RunningBroker) -> None:
    report = run(
        mosquitto,
        scenario="fanout",
        publishers=2,
        subscribers=3,
        pub_qos=1,
        sub_qos=1,
        count=300,
        client_id_prefix="fanout",
    )
    assert_exactly_once(report, 2 * 300 * 3)


def test_shared_group_is_accounted_as_one_audience(mosquitto: brokers.RunningBroker) -> None:
    report = run(
        mosquitto,
        scenario="sharedsub",
        publishers=2,
        subscribers=3,
        pub_qos=1,
        sub_qos=1,
        protocol=5,
        count=300,
        client_id_prefix="shared",
    )
    assert_exactly_once(report, 2 * 300)


def test_qos1_reconnect_redeliveries_are_duplicates_not_losses(
    mosquitto: brokers.RunningBroker,
) -> None:
    report = run(
        mosquitto,
        scenario="p2p",
        pairs=2,
        pub_qos=1,
        sub_qos=1,
        count=2000,
        persistent=True,
        subscriber_reconnect_after=300,
        client_id_prefix="reconnect-q1",
    )
    delivery = report["delivery"]
    assert report["clients"]["reconnects"] == 2
    assert delivery["lost"] == 0
    # Each subscriber dropped at least the delivery that triggered its reconnect
    # unacknowledged, so the persistent session redelivers it.
    assert delivery["duplicates"] >= 2
    assert delivery["received"] == delivery["expected"] + delivery["duplicates"]
    assert delivery["drain_complete"]


def test_qos2_reconnect_delivers_exactly_once(mosquitto: brokers.RunningBroker) -> None:
    report = run(
        mosquitto,
        scenario="p2p",
        pairs=2,
        pub_qos=2,
        sub_qos=2,
        protocol=5,
        count=2000,
        persistent=True,
        subscriber_reconnect_after=300,
        client_id_prefix="reconnect-q2",
    )
    assert report["clients"]["reconnects"] == 2
    assert_exactly_once(report, 2 * 2000)


def test_connection_storm_holds_every_client(mosquitto: brokers.RunningBroker) -> None:
    report = run(mosquitto, scenario="conn", clients=200, duration=0.5, client_id_prefix="storm")
    assert report["clients"]["connected"] == 200
    assert report["connect_latency_ms"]["count"] == 200


def test_a_broker_that_is_not_there_is_an_error() -> None:
    with pytest.raises(BenchError, match="could not connect"):
        bench.run({"port": brokers.free_port(), "pairs": 1, "duration": 1})


def test_invalid_config_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="loopback"):
        bench.run({"host": "192.0.2.1"})
