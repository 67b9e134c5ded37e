"""The admin REST API of a node (``/api/v1``, workers > 1), answered by its shards.

The node serves :data:`ferromq.admin.api.ROUTES` — the same paths, parameters, answers
and OpenAPI document as one broker — and answers each route by asking the shards'
own admin applications (:class:`~ferromq.admin.shards.Shards`), by the route's kind
(:data:`HOW`):

- **owner**: a client id's routes (show, kick, delete a session, its subscriptions, its
  trace) go to the shard that owns the client id, ``shard_of(client_id, count)``, where
  its session lives; the shard's answer is the node's, status and all. A session a
  cluster member adopted from a dead one lives on the adopting shard, whatever its hash
  (docs/cluster.md): when the owner shard has no such session (404), the other shards
  are asked in turn, and the first that has it answers.
- **pages**: clients and sessions are merged across shards: a page starts at the shard
  and shard cursor its ``cursor`` encodes (``shard_cursor * count + shard``) and is
  filled from the next shards when one is exhausted, until ``limit`` sessions
  (``/subscriptions``, whose items are subscriptions: until ``limit`` subscribed
  sessions). Following ``next`` lists every session of the node once.
- **any**: publish, retained messages (replicated on every shard), users, ACL and
  bans (files every shard reads), and ``/cluster`` (every member, each shard one,
  read from Redis; the cluster traffic is shard 0's) go to shard 0, or the next
  shard while it restarts (a publish's ``delivered`` is that shard's count, where each
  other shard with subscribers counts once). Changes to the users and bans files are
  made there, then every other shard applies the file
  (:data:`~ferromq.admin.api.APPLY_USERS`, :data:`~ferromq.admin.api.APPLY_BANS`).
- **every**: clearing a retained message, reloading the ACL and the configuration go to
  every shard (the first refusal is the answer; a retained message is cleared if any
  shard held it).
- **each**: ``/shards`` lists every shard's own item (ready, counters), a shard that
  does not answer as not ready with the error.
- **sum**: ``/stats`` adds the shards' counters (retained messages, which every shard
  holds: the largest; :func:`~ferromq.sys_topics.node_stats`), ``/listeners`` their connections,
  ``/trace`` joins their lists.

A shard that does not answer makes the node's answer 503 naming it. Per request,
never per message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from ferromq import __version__
from ferromq._core import shard_of
from ferromq.admin.api import (
    APPLY_BANS,
    APPLY_USERS,
    PREFIX,
    ROUTES,
    ApiError,
    error_response,
    page_args,
)
from ferromq.admin.openapi import openapi_document
from ferromq.admin.shards import ShardAnswer, Shards, ShardUnreachable
from ferromq.sys_topics import node_stats

if TYPE_CHECKING:
    from ferromq.admin.routes import NodeRoutes, RequestHandler

__all__ = ["HOW", "decode_cursor", "encode_cursor", "register"]

NodeHandler = Callable[[Shards, web.Request], Awaitable[web.StreamResponse]]


def encode_cursor(shard: int, shard_cursor: int, count: int) -> int:
    """The node's cursor of ``shard_cursor`` on ``shard``."""
    return shard_cursor * count + shard


def decode_cursor(cursor: int, count: int) -> tuple[int, int]:
    """``(shard, shard_cursor)`` of a node's cursor."""
    shard_cursor, shard = divmod(cursor, count)
    return shard, shard_cursor


async def _body(request: web.Request) -> bytes | None:
    return await request.read() if request.body_exists else None


def _relay(answer: ShardAnswer) -> web.Response:
    """A shard's answer as the node's."""
    if not answer.body:
        return web.Response(status=answer.status)
    return web.Response(body=answer.body, status=answer.status, content_type=answer.content_type)


async def _forward(shards: Shards, shard: int, request: web.Request) -> ShardAnswer:
    return await shards.call(shard, request.method, request.raw_path, body=await _body(request))


async def owner(shards: Shards, request: web.Request) -> web.StreamResponse:
    first = shard_of(request.match_info["client_id"], shards.count)
    answer = await _forward(shards, first, request)
    if answer.status != web.HTTPNotFound.status_code:
        return _relay(answer)
    for shard in range(shards.count):
        if shard == first:
            continue
        try:
            elsewhere = await _forward(shards, shard, request)
        except ShardUnreachable:
            continue
        if elsewhere.status != web.HTTPNotFound.status_code:
            return _relay(elsewhere)
    return _relay(answer)


async def _first(shards: Shards, request: web.Request) -> ShardAnswer:
    """The answer of the first shard that answers (shard 0 unless it is restarting).
    Raises the last :class:`ShardUnreachable`."""
    body = await _body(request)
    for shard in range(shards.count):
        try:
            return await shards.call(shard, request.method, request.raw_path, body=body)
        except ShardUnreachable as exc:
            unreachable = exc
    raise unreachable


async def any_shard(shards: Shards, request: web.Request) -> web.StreamResponse:
    return _relay(await _first(shards, request))


def _then_apply(path: str) -> NodeHandler:
    """One shard changes a file; the others apply it (one that does not answer reads
    it when it starts again)."""

    async def change(shards: Shards, request: web.Request) -> web.StreamResponse:
        answer = await _first(shards, request)
        if answer.ok:
            others = [shard for shard in range(shards.count) if shard != answer.shard]
            for applied in await shards.each("POST", path, only=others):
                if isinstance(applied, ShardAnswer) and not applied.ok:
                    return _relay(applied)
        return _relay(answer)

    return change


async def every(shards: Shards, request: web.Request) -> web.StreamResponse:
    body = await _body(request)
    answers = await shards.every(request.method, request.raw_path, body=body)
    refused = [answer for answer in answers if not answer.ok]
    return _relay(refused[0] if refused else answers[0])


async def clear_retained(shards: Shards, request: web.Request) -> web.StreamResponse:
    answers = await shards.every(request.method, request.raw_path)
    cleared = [answer for answer in answers if answer.ok]
    return _relay(cleared[0] if cleared else answers[0])


def _page(items: list[Any], following: int | None) -> web.Response:
    return web.json_response({"items": items, "next": following})


def _sessions_in(items: list[Any]) -> int:
    """Sessions a page of clients or sessions holds."""
    return len(items)


def _subscribers_in(items: list[Any]) -> int:
    """Sessions a page of subscriptions holds (one at least: the shard examined one)."""
    return max(1, len({item["client_id"] for item in items}))


def _pages(spent: Callable[[list[Any]], int]) -> NodeHandler:
    """A session listing merged across shards: a page continues on the next shard while
    ``spent(items)`` sessions leave room under ``limit``."""

    async def listing(shards: Shards, request: web.Request) -> web.StreamResponse:
        cursor, limit = page_args(request)
        count = shards.count
        shard, shard_cursor = decode_cursor(cursor, count)
        items: list[Any] = []
        while True:
            room = limit - (spent(items) if items else 0)
            query = {**request.query, "cursor": str(shard_cursor), "limit": str(room)}
            answer = await shards.call(shard, "GET", request.rel_url.raw_path, query)
            if not answer.ok:
                return _relay(answer)
            page = answer.json()
            items += page["items"]
            if page["next"] is not None:
                return _page(items, encode_cursor(shard, page["next"], count))
            if shard + 1 == count:
                return _page(items, None)
            shard, shard_cursor = shard + 1, 0
            if items and spent(items) >= limit:
                return _page(items, encode_cursor(shard, 0, count))

    return listing


async def stats(shards: Shards, request: web.Request) -> web.StreamResponse:
    answers = await shards.every("GET", request.raw_path)
    return web.json_response(node_stats([answer.json() for answer in answers]))


async def listeners(shards: Shards, request: web.Request) -> web.StreamResponse:
    answers = [answer.json()["items"] for answer in await shards.every("GET", request.raw_path)]
    items = answers[0]
    for item in items:
        item["connections"] = sum(
            other["connections"]
            for shard in answers
            for other in shard
            if other["name"] == item["name"]
        )
    return web.json_response({"items": items})


async def plugins(shards: Shards, request: web.Request) -> web.StreamResponse:
    """Every shard runs every plugin: one item per plugin, its figures added up,
    running while it runs on every shard, the last error any shard saw."""
    answers = [answer.json()["items"] for answer in await shards.every("GET", request.raw_path)]
    items = answers[0]
    for n, item in enumerate(items):
        each = [shard[n] for shard in answers]
        for key in ("batches", "messages", "failures", "restarts", "skipped"):
            item[key] = sum(one[key] for one in each)
        item["running"] = all(one["running"] for one in each)
        item["last_error"] = next((one["last_error"] for one in each if one["last_error"]), None)
    return web.json_response({"items": items})


async def bridges(shards: Shards, request: web.Request) -> web.StreamResponse:
    """Each bridge runs on the shard owning its client id: the shards' lists joined."""
    answers = await shards.every("GET", request.raw_path)
    items = sorted((item for a in answers for item in a.json()["items"]), key=lambda i: i["name"])
    return web.json_response({"items": items})


async def traced(shards: Shards, request: web.Request) -> web.StreamResponse:
    answers = await shards.every("GET", request.raw_path)
    items = sorted({client_id for answer in answers for client_id in answer.json()["items"]})
    return web.json_response({"items": items})


async def shard_list(shards: Shards, request: web.Request) -> web.StreamResponse:
    items: list[Any] = []
    for answer in await shards.each("GET", request.raw_path):
        if isinstance(answer, ShardAnswer) and answer.ok:
            items += answer.json()["items"]
        else:
            error = str(answer) if isinstance(answer, ShardUnreachable) else answer.body.decode()
            items.append({"shard": answer.shard, "ready": False, "error": error, "stats": None})
    return web.json_response({"items": items})


async def openapi(shards: Shards, request: web.Request) -> web.StreamResponse:
    return web.json_response(openapi_document(ROUTES, PREFIX, __version__))


HOW: Final[dict[str, NodeHandler]] = {
    "openapi": openapi,
    "list_clients": _pages(_sessions_in),
    "list_sessions": _pages(_sessions_in),
    "list_all_subscriptions": _pages(_subscribers_in),
    "show_client": owner,
    "kick_client": owner,
    "list_subscriptions": owner,
    "add_subscription": owner,
    "remove_subscription": owner,
    "show_session": owner,
    "delete_session": owner,
    "trace_client": owner,
    "list_retained": any_shard,
    "show_retained": any_shard,
    "publish": any_shard,
    "list_users": any_shard,
    "show_acl": any_shard,
    "list_bans": any_shard,
    "create_user": _then_apply(APPLY_USERS),
    "remove_user": _then_apply(APPLY_USERS),
    "add_ban": _then_apply(APPLY_BANS),
    "remove_ban": _then_apply(APPLY_BANS),
    "delete_retained": clear_retained,
    "reload_acl": every,
    "reload": every,
    "show_stats": stats,
    "list_listeners": listeners,
    "list_plugins": plugins,
    "list_bridges": bridges,
    "list_traced": traced,
    "list_shards": shard_list,
    "show_cluster": any_shard,
}
"""How the node answers each route of :data:`~ferromq.admin.api.ROUTES`, by its
operation id."""


def _endpoint(shards: Shards, how: NodeHandler) -> RequestHandler:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            return await how(shards, request)
        except ApiError as exc:
            return error_response(exc.status, str(exc))
        except ShardUnreachable as exc:
            return error_response(503, str(exc))

    return handle


def register(routes: NodeRoutes) -> None:
    """Mount :data:`ROUTES` under :data:`PREFIX`, each answered as :data:`HOW` says."""
    missing: Sequence[str] = [r.operation_id for r in ROUTES if r.operation_id not in HOW]
    assert not missing, f"routes the node does not answer: {missing}"
    for route in ROUTES:
        endpoint = _endpoint(routes.shards, HOW[route.operation_id])
        routes.add(route.method, PREFIX + route.aiohttp_path, endpoint)
