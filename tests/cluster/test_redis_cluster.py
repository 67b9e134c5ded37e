"""The routing and takeover tests again on a 3-master Redis Cluster (issue 17, Tests):
the same test functions, collected here with this module's ``cluster``, three nodes
whose sessions, ownership and membership live in the session's real Redis Cluster
(``[redis] cluster = true``, ``cluster.redis`` naming one of its masters)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.conftest import Cluster, start_cluster
from tests.cluster.test_routing import (
    test_paho_scenario_with_clients_on_different_nodes,
    test_publish_on_a_is_received_on_b_and_c,
    test_shared_subscription_delivers_each_message_once_across_nodes,
)
from tests.cluster.test_takeover import test_takeover_across_nodes_moves_the_session
from tests.support import services

__all__ = [
    "test_paho_scenario_with_clients_on_different_nodes",
    "test_publish_on_a_is_received_on_b_and_c",
    "test_shared_subscription_delivers_each_message_once_across_nodes",
    "test_takeover_across_nodes_moves_the_session",
]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_cluster: services.RedisCluster,
) -> Iterator[Cluster]:
    running = start_cluster(
        tmp_path_factory.mktemp("cluster-on-redis-cluster"),
        kafka_bootstrap,
        redis_cluster.url,
        redis_cluster=True,
    )
    yield running
    running.stop()
