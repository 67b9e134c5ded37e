"""QoS 2 exactly once across ``kill -9``, both directions, over real sockets.

A persistent QoS 2 publisher streams numbered messages to a persistent QoS 2
subscriber; both follow the protocol as a real client must across reconnects (the
publisher resends an unfinished flow's PUBLISH with DUP or its PUBREL, the
subscriber keeps the ids it PUBRECed until PUBREL so a DUP of one is not delivered
twice). The broker is killed with SIGKILL at the moments a crash used to break
exactly once, taking turns: just as the subscriber reads a PUBREL (before the
broker had stored the PUBREC behind it, a restart resent the PUBLISH [MQTT-4.3.3-6])
and just as it reads a new message (before the broker had stored the publisher's
packet id, the retransmission was routed again [MQTT-4.3.3-9]). After each restart
on the same store the stream goes on; at the end no message was delivered twice,
and every message the publisher saw PUBRECed arrived.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.conftest import RunningBroker
from tests.crash.clients import Publisher, Subscriber, Tally, pump, settle
from tests.integration.test_embedded_store import broker_on

LOOPS = ["uvloop", "asyncio"]
KILLS = 12
TOPIC = "qos2/stream"
FRESH_BEFORE_KILL = 100  # new messages delivered in a broker's life before it is killed


def stream_then_kill(
    broker: RunningBroker, publisher: Publisher, subscriber: Subscriber, kill_on: str
) -> None:
    """Stream until the subscriber has had ``FRESH_BEFORE_KILL`` new messages in this
    life and then reads a ``kill_on`` packet ("pubrel" or "new"), and SIGKILL the broker
    before the subscriber answers it (after 10 s, whatever it read)."""
    fresh = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stop_at = kill_on if fresh > FRESH_BEFORE_KILL else None
        arrived, stopped = pump(publisher, subscriber, publishing=True, stop_at=stop_at)
        fresh += arrived
        if stopped:
            break
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)


@pytest.mark.parametrize("loop", LOOPS)
def test_qos2_is_exactly_once_across_kill_9(tmp_path: Path, loop: str) -> None:
    store = tmp_path / "data"
    publisher = Publisher("qos2-publisher", TOPIC, qos=2, version=4)
    subscriber = Subscriber("qos2-subscriber", TOPIC, qos=2, version=4)
    for life in range(KILLS + 1):
        broker = broker_on(store, tmp_path, loop)
        try:
            subscriber.connect(broker.host, broker.port, subscribe=life == 0)
            publisher.connect(broker.host, broker.port)
            if life == KILLS:
                settle(publisher, subscriber, quiet=0.5)
            else:
                stream_then_kill(broker, publisher, subscriber, ("pubrel", "new")[life % 2])
        finally:
            broker.stop()
            for client in (publisher.client, subscriber.client):
                if client is not None:
                    client.close()

    tally = Tally.of(publisher, subscriber)
    assert not tally.duplicated, str(tally)
    assert not tally.lost, str(tally)
    assert tally.acknowledged > KILLS * FRESH_BEFORE_KILL, str(tally)
