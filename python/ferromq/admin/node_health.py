"""``/healthz`` and ``/readyz`` of a node (workers > 1), from its shards' probes.

``/healthz`` answers 200 while the supervisor serves (it restarts a shard that dies),
with the node's version, uptime and shard count. ``/readyz`` asks every shard's
``/readyz`` at once: the node is ready when every shard is, and its body has the
broker's shape (an MQTT listener is open when every shard that answered has it open;
the store, the stream and the cluster are shown as the first shard whose state is not
good shows them, else as shard 0's) plus ``shards``: each shard's own answer with its index, or
``"status": "unreachable"`` and why.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ferromq import __version__
from ferromq.admin.shards import ShardAnswer, ShardUnreachable

if TYPE_CHECKING:
    from ferromq.admin.routes import NodeRoutes

__all__ = ["node_readiness", "register"]

_GOOD = ("ok", "none", "off")


def register(routes: NodeRoutes) -> None:
    shards = routes.shards
    started = time.monotonic()

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "version": __version__,
                "uptime_seconds": int(time.monotonic() - started),
                "shards": shards.count,
            }
        )

    async def readyz(request: web.Request) -> web.Response:
        ready, body = node_readiness(await shards.each("GET", "/readyz"))
        return web.json_response(body, status=200 if ready else 503)

    routes.add("GET", "/healthz", healthz, public=True)
    routes.add("GET", "/readyz", readyz, public=True)


def _state(answered: list[dict[str, Any]], key: str) -> object:
    """The first shard's ``key`` whose state is not good, else the first's."""
    states = [shard[key] for shard in answered if key in shard]
    troubled = [state for state in states if state.get("state") not in _GOOD]
    return (troubled or states or [{"state": "unknown"}])[0]


def node_readiness(answers: list[ShardAnswer | ShardUnreachable]) -> tuple[bool, dict[str, object]]:
    """Whether the node is ready, and the body saying why, from every shard's answer."""
    shards: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, ShardUnreachable):
            shards.append({"shard": answer.shard, "status": "unreachable", "error": str(answer)})
        else:
            shards.append({"shard": answer.shard, **answer.json()})
    answered = [shard for shard in shards if "listeners" in shard]
    names = dict.fromkeys(name for shard in answered for name in shard["listeners"])
    ready = all(isinstance(a, ShardAnswer) and a.status == 200 for a in answers)
    return ready, {
        "status": "ready" if ready else "not ready",
        "listeners": {
            name: all(shard["listeners"].get(name, False) for shard in answered) for name in names
        },
        "store": _state(answered, "store"),
        "stream": _state(answered, "stream"),
        "cluster": _state(answered, "cluster"),
        "shards": shards,
    }
