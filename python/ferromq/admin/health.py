"""``/healthz`` and ``/readyz``: liveness and readiness probes with JSON bodies.

``/healthz`` answers 200 while the process serves requests at all (the event loop
runs). ``/readyz`` answers 200 when the broker can do its work — every MQTT listener
open and, with a store, its writer running and the last write or compaction
succeeded (:class:`~ferromq.storage.persister.StoreHealth`), with ``[stream]`` on, its
sink taking batches — and 503 otherwise, with
what is wrong in the body; so a broker whose Redis went away is taken out of a load
balancer once a write fails, and put back at the first success. Its ``cluster`` says
``off``, or this node's id and whether its cluster heartbeat reaches Redis (``ok`` or
``failing``): shown, not counted in readiness (a node cut off from the cluster still
serves its own clients).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from ferromq import __version__

if TYPE_CHECKING:
    from ferromq.admin.routes import AdminRoutes
    from ferromq.broker import Broker

__all__ = ["readiness", "register"]


def register(routes: AdminRoutes) -> None:
    broker = routes.broker

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "version": __version__, "uptime_seconds": broker.uptime()}
        )

    async def readyz(request: web.Request) -> web.Response:
        ready, body = readiness(broker)
        return web.json_response(body, status=200 if ready else 503)

    routes.add("GET", "/healthz", healthz, public=True)
    routes.add("GET", "/readyz", readyz, public=True)


def readiness(broker: Broker) -> tuple[bool, dict[str, object]]:
    """Whether ``broker`` is ready, and the body saying why."""
    health = broker.store_health
    store: dict[str, object] = (
        {"state": "none"}
        if health is None
        else {"state": health.state, "errors": health.errors, "last_error": health.last_error}
    )
    stream_health = broker.stream_health
    stream: dict[str, object] = (
        {"state": "off"}
        if stream_health is None
        else {
            "state": stream_health.state,
            "errors": stream_health.errors,
            "last_error": stream_health.last_error,
        }
    )
    cluster = broker.cluster
    cluster_state: dict[str, object] = (
        {"state": "off"}
        if cluster is None
        else {
            "state": "ok" if cluster.membership.healthy else "failing",
            "node_id": cluster.node_id,
        }
    )
    ready = broker.ready()
    return ready, {
        "status": "ready" if ready else "not ready",
        "listeners": broker.listeners_open(),
        "store": store,
        "stream": stream,
        "cluster": cluster_state,
    }
