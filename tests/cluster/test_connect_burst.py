"""A burst of CONNECTs on one node is served (docs/cluster.md, "Sessions"): each claims
its client id in Redis before its CONNACK, and more claims than the Redis client has
connections wait their turn rather than being refused (0x88 / return code 3).
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter

from tests.cluster.conftest import ClusterFactory

BURST = 600  # well past the Redis client's 100 connections


async def connack_codes(host: str, port: int, count: int) -> Counter[int]:
    """The return codes of ``count`` 3.1.1 persistent CONNECTs sent at once."""

    async def one(n: int) -> int:
        reader, writer = await asyncio.open_connection(host, port)
        client_id = f"burst-{n}".encode()
        body = b"\x00\x04MQTT\x04\x00\x00\x3c" + struct.pack("!H", len(client_id)) + client_id
        writer.write(bytes([0x10, len(body)]) + body)
        await writer.drain()
        connack = await asyncio.wait_for(reader.readexactly(4), 60)
        writer.close()
        return connack[3]

    return Counter(await asyncio.gather(*(one(n) for n in range(count))))


def test_a_burst_of_connects_on_one_node_is_served(cluster_factory: ClusterFactory) -> None:
    (node,) = cluster_factory(count=1).nodes
    assert asyncio.run(connack_codes(node.host, node.port, BURST)) == Counter({0: BURST})
