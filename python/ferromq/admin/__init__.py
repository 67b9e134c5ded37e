"""The admin listener: an aiohttp server in the broker's own event loop, off the MQTT
data path (``[admin]``, the ``admin`` extra).

:mod:`~ferromq.admin.server` binds it with the MQTT listeners and serves it once they
accept; :mod:`~ferromq.admin.auth` checks the bearer token; :mod:`~ferromq.admin.routes`
is the seam route modules register on (:mod:`~ferromq.admin.health`: ``/healthz`` and
``/readyz``; :mod:`~ferromq.admin.metrics`: Prometheus ``/metrics``;
:mod:`~ferromq.admin.api`: the REST API under ``/api/v1`` with its OpenAPI document;
:mod:`~ferromq.admin.dashboard`: the web dashboard's files at ``/``).
In a node of several shards (workers > 1) each shard serves this application on a
private socket and the supervisor serves the node's (:mod:`ferromq.node.admin`):
:mod:`~ferromq.admin.node_api`, :mod:`~ferromq.admin.node_metrics` and
:mod:`~ferromq.admin.node_health` answer by asking the shards
(:mod:`~ferromq.admin.shards`). Handlers run per request and read the engine then,
never per message.
"""

from ferromq.admin.server import AdminServer

__all__ = ["AdminServer"]
