"""Fixtures for the conformance tests, each under the loops of `support.LOOPS`: `broker`
with defaults, `permissive_broker` allowing control characters, and `limited_broker`
with small limits for the tests that need to reach them quickly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker

from .support import LOOPS

LIMITED_CONFIG = """
[limits]
connect_timeout = 1
max_packet_size = 256
receive_maximum = 2
max_topic_alias = 4
max_inflight = 4
max_client_id_length = 23

[session]
default_session_expiry_v311 = 1
max_session_expiry = 30
"""


@pytest.fixture(params=LOOPS)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param)
    yield running
    running.stop()


@pytest.fixture(params=LOOPS)
def permissive_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    """Control characters allowed, through the environment override."""
    env = {"FERROMQ_LIMITS__ALLOW_CONTROL_CHARACTERS": "true"}
    running = start_broker(tmp_path, request.param, env=env)
    yield running
    running.stop()


@pytest.fixture(params=LOOPS)
def limited_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, request.param, LIMITED_CONFIG)
    yield running
    running.stop()
