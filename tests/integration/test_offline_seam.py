"""Seed 002 end to end over real sockets: a producer sends 2,000 QoS 1 messages; a
QoS 1 subscriber with a persistent session drops at about 500 and returns at about
1,000. It receives all 2,000 in order, and nothing twice except DUP-flagged
redeliveries of messages it had not acknowledged."""

from __future__ import annotations

from tests.conftest import RunningBroker
from tests.support.seed_002 import seed_002


def test_no_loss_no_duplicates_across_reconnect(broker: RunningBroker) -> None:
    seed_002(broker, "seam-consumer")
