"""The admin listener of a node (workers > 1): the supervisor serves it, the shards answer.

Shards do not open the configured admin listener; the supervisor does, and reports the
node through it. The design:

- **Each shard serves its own admin application** — today's broker routes, probes and
  metrics — on its private socket ``@ferromq-node-<supervisor pid>-admin-<K>``
  (:mod:`ferromq.shard.private`), checking the same bearer token as the configured
  listener, and it alone has the routes that apply a users or bans file another shard
  changed (:func:`ferromq.admin.server.bind_shard_admin`, which the shard's broker
  binds in place of the configured listener).
- **The supervisor's listener** (the configured host and port, TLS and token) serves the
  dashboard and the node's answers, built by asking the shards over those sockets
  (:class:`~ferromq.admin.shards.Shards`): the API's lists merged and paginated across
  shards, a client id's routes sent to its owner shard ``shard_of(client_id, count)``,
  publish and retained reads to one shard (the engines replicate retained messages and
  route publishes between themselves), counters summed
  (:mod:`ferromq.admin.node_api`); ``/metrics`` summed for the node plus every shard's
  series with a ``shard`` label (:mod:`ferromq.admin.node_metrics`); ``/readyz`` ready
  when every shard is, with per-shard detail (:mod:`ferromq.admin.node_health`).
  The OpenAPI document is the broker's: the node serves the same API.

``$SYS`` needs none of this (it is published with ``[admin]`` off too):
:mod:`ferromq.shard.sys_figures`. Import this module only with ``[admin] enabled`` (the
``admin`` extra).
"""

from __future__ import annotations

import os
from functools import partial

from aiohttp import web

from ferromq.admin.auth import load_token
from ferromq.admin.routes import NODE_MODULES, NodeRoutes, Routes
from ferromq.admin.server import AdminServer, admin_tls_context
from ferromq.admin.shards import Shards
from ferromq.config import AdminConfig, Config
from ferromq.shard.private import private_address
from ferromq.sockets import bind_sockets

__all__ = ["bind_node_admin"]


def _node_routes(shards: Shards, config: AdminConfig, app: web.Application) -> Routes:
    routes = NodeRoutes(app, shards, config)
    for register in NODE_MODULES:
        register(routes)

    async def start(app: web.Application) -> None:
        await shards.start()

    async def close(app: web.Application) -> None:
        await shards.close()

    app.on_startup.append(start)
    app.on_cleanup.append(close)
    return routes


def bind_node_admin(
    config: Config, shard_count: int, node: int | None = None
) -> AdminServer | None:
    """The node's admin listener over ``shard_count`` shards, bound and not yet serving
    (``node``: the supervisor's pid, by default this process's); None when ``[admin]``
    is off. Bound before the shards start, a port in use fails the node's start as a
    broker's does (:class:`~ferromq.sockets.ListenError`: exit 4; ``ConfigError``: a
    token file that cannot be read, exit 2) and a request made while the shards start
    waits in the backlog. Then ``await server.start()``, and ``await server.close()``
    at shutdown."""
    admin = config.admin
    if not admin.enabled:
        return None
    node = os.getpid() if node is None else node
    token = load_token(admin)
    tls = admin_tls_context(admin)
    sockets = bind_sockets("admin listener", admin.host, admin.port)
    addresses = [private_address(node, "admin", k) for k in range(shard_count)]
    shards = Shards(addresses, token, admin.shard_timeout)
    return AdminServer(partial(_node_routes, shards, admin), sockets, tls, token)
