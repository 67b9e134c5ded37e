"""The admin REST API (``/api/v1``): read and act on the running broker.

Every route is one row of :data:`ROUTES` (:class:`~ferromq.admin.openapi.Route`): the
handler, its parameters and the JSON schemas of its body and answer. :func:`register`
mounts the table on the admin listener (behind its bearer token) and the OpenAPI 3.1
document made from it is served at ``/api/v1/openapi.json``; request bodies are
checked against the same schemas (:func:`ferromq.admin.schema.check`). Errors are
``{"error": "..."}``: 400 a bad request, 403 denied by the ACL, 404 nothing of that
name, 409 a state that forbids it (a connected session, no users or bans file
configured, a user or ban that exists).

Queries go to the engine per request (``Engine.sessions``, ``retained_messages``, ...)
and are paginated there: a page is at most 1,000 items and a call examines a bounded
number of sessions, so a request never holds up message flow for long; lists answer
``{"items": [...], "next": cursor | null}`` and the next page is ``?cursor=<next>``.
Actions that change the engine (kick, delete a session, subscribe, publish, clear a
retained message) flush its output at once, as any event handler does. Nothing here
runs per message.

Users and bans are files (:mod:`ferromq.auth.users`, :mod:`ferromq.bans`): the API edits
them with the helpers the CLI uses and applies them at
once — users through a new provider chain (as SIGHUP builds it), bans through
``Admission.use`` (``Broker.apply_bans``), which closes connected clients a new ban
matches. ``POST /reload`` runs SIGHUP's reload.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ferromq import __version__
from ferromq._core import (
    ADMIN_MAX_PAGE,
    MessageProperties,
    NotAuthorized,
    SessionConflict,
    SessionInfo,
    UnknownClient,
)
from ferromq.admin.openapi import Param, Route, openapi_document
from ferromq.admin.schema import (
    BOOLEAN,
    STRING,
    TOPIC_FILTER,
    Schema,
    array,
    check,
    integer,
    nullable,
    obj,
    string,
)
from ferromq.admin.views import (
    ACL,
    BAN,
    BAN_KIND,
    BRIDGE,
    CLIENT,
    CLIENT_SUBSCRIPTION,
    CLUSTER,
    LISTED_BAN,
    NEW_USER,
    PLUGIN,
    PUBLISH,
    RETAINED,
    SESSION,
    SHARD,
    SUBSCRIPTION,
    TRACE,
    USER,
    AdminApi,
    client_json,
    list_of,
    page_of,
    retained_json,
    session_json,
    subscription_json,
)
from ferromq.auth import provider_from_config
from ferromq.auth.scram import ScramCredential
from ferromq.auth.users import UserRecord, add_user, delete_user, load_users
from ferromq.bans import BAN_KINDS, ban_entries, edit_ban_file
from ferromq.config import ConfigError, load_ban_file

if TYPE_CHECKING:
    from ferromq.admin.routes import AdminRoutes, RequestHandler

__all__ = [
    "APPLY_BANS",
    "APPLY_USERS",
    "PREFIX",
    "ROUTES",
    "ApiError",
    "error_response",
    "page_args",
    "register",
]

PREFIX = "/api/v1"


class ApiError(Exception):
    """An answer other than success: ``status`` and the one-line error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# --- request parts ------------------------------------------------------------------


def _query_int(request: web.Request, name: str, default: int, minimum: int, maximum: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{name}: expected an integer, got {text!r}") from None
    if not minimum <= value <= maximum:
        raise ApiError(400, f"{name}: expected {minimum} to {maximum}, got {value}")
    return value


def _query_bool(request: web.Request, name: str) -> bool | None:
    text = request.query.get(name)
    if text is None:
        return None
    if text not in ("true", "false"):
        raise ApiError(400, f"{name}: expected true or false, got {text!r}")
    return text == "true"


def _query_text(request: web.Request, name: str, required: bool = False) -> str | None:
    text = request.query.get(name)
    if required and not text:
        raise ApiError(400, f"{name}: required")
    return text


def _number(text: str) -> int | float:
    """A JSON number as JSON Schema counts it: 2.0 is the integer 2."""
    value = float(text)
    return int(value) if value.is_integer() else value


async def _body(request: web.Request, schema: Schema) -> dict[str, Any]:
    try:
        body = await request.json(loads=partial(json.loads, parse_float=_number))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "body: not JSON") from None
    check(body, schema)
    assert isinstance(body, dict), "the schema is an object's"
    return body


def _decode(text: str, encoding: str, what: str) -> bytes:
    if encoding == "utf-8":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ApiError(400, f"{what}: not base64") from None


_MAX_CURSOR = 2**63 - 1
_CURSOR = Param(
    "cursor", "query", integer(0, _MAX_CURSOR), "where the page starts: the last page's `next`"
)
_LIMIT = Param(
    "limit",
    "query",
    integer(1, ADMIN_MAX_PAGE),
    f"items per page (default 100, most {ADMIN_MAX_PAGE})",
)
_CLIENT_ID = Param("client_id", "path", string(min_length=1), "the client id")
_TOPIC = Param("topic", "path", string(min_length=1), "a topic name", pattern=r"[\s\S]+")
_SESSION_FILTERS = (
    _CURSOR,
    _LIMIT,
    Param("client_id_prefix", "query", STRING, "client ids starting with this"),
    Param("client_id_contains", "query", STRING, "client ids holding this"),
    Param("username", "query", STRING, "sessions of this user name (its last CONNECT's)"),
    Param("connected", "query", BOOLEAN, "true: connected clients only; false: offline ones"),
)


def page_args(request: web.Request) -> tuple[int, int]:
    """``cursor`` and ``limit`` (:data:`_CURSOR`, :data:`_LIMIT`)."""
    return (
        _query_int(request, "cursor", 0, 0, _MAX_CURSOR),
        _query_int(request, "limit", 100, 1, ADMIN_MAX_PAGE),
    )


def _session_page(api: AdminApi, request: web.Request) -> tuple[list[SessionInfo], int | None]:
    cursor, limit = page_args(request)
    page = api.broker.engine.sessions(
        cursor,
        limit,
        client_id_prefix=_query_text(request, "client_id_prefix"),
        client_id_contains=_query_text(request, "client_id_contains"),
        username=_query_text(request, "username"),
        connected=_query_bool(request, "connected"),
    )
    return list(page.items), page.next


def _session(api: AdminApi, client_id: str) -> SessionInfo:
    info = api.broker.engine.session(client_id)
    if info is None:
        raise ApiError(404, f"no session for client id {client_id!r}")
    return info


# --- handlers -----------------------------------------------------------------------


SessionView = Callable[[AdminApi, SessionInfo], dict[str, object]]
"""A projection of a session: a client's (:func:`client_json`) or a session's."""


def _listed(api: AdminApi, request: web.Request, view: SessionView) -> object:
    items, next_cursor = _session_page(api, request)
    return {"items": [view(api, info) for info in items], "next": next_cursor}


def _detailed(api: AdminApi, request: web.Request, view: SessionView) -> object:
    client_id = request.match_info["client_id"]
    subscriptions = api.broker.engine.subscriptions(client_id)
    return {
        **view(api, _session(api, client_id)),
        "subscriptions": [subscription_json(s) for s in subscriptions],
    }


async def list_clients(api: AdminApi, request: web.Request) -> object:
    return _listed(api, request, client_json)


async def show_client(api: AdminApi, request: web.Request) -> object:
    return _detailed(api, request, client_json)


async def kick_client(api: AdminApi, request: web.Request) -> object:
    client_id = request.match_info["client_id"]
    if not api.broker.engine.kick(client_id, api.now):
        raise ApiError(404, f"client {client_id!r} is not connected")
    api.flush()
    return None


async def list_sessions(api: AdminApi, request: web.Request) -> object:
    return _listed(api, request, session_json)


async def show_session(api: AdminApi, request: web.Request) -> object:
    return _detailed(api, request, session_json)


async def delete_session(api: AdminApi, request: web.Request) -> object:
    api.broker.engine.delete_session(request.match_info["client_id"], api.now)
    api.flush()
    return None


async def list_subscriptions(api: AdminApi, request: web.Request) -> object:
    subscriptions = api.broker.engine.subscriptions(request.match_info["client_id"])
    return {"items": [subscription_json(s) for s in subscriptions]}


async def add_subscription(api: AdminApi, request: web.Request) -> object:
    body = await _body(request, SUBSCRIPTION)
    client_id = request.match_info["client_id"]
    new = api.broker.engine.subscribe_for(
        client_id,
        body["filter"],
        body.get("qos", 0),
        api.now,
        no_local=body.get("no_local", False),
        retain_as_published=body.get("retain_as_published", False),
        retain_handling=body.get("retain_handling", 0),
        subscription_id=body.get("subscription_id"),
    )
    api.flush()
    return {"filter": body["filter"], "new": new}


async def remove_subscription(api: AdminApi, request: web.Request) -> object:
    client_id = request.match_info["client_id"]
    topic_filter = _query_text(request, "filter", required=True)
    assert topic_filter is not None
    if not api.broker.engine.unsubscribe_for(client_id, topic_filter):
        raise ApiError(404, f"client {client_id!r} has no subscription to {topic_filter!r}")
    api.flush()
    return None


async def list_all_subscriptions(api: AdminApi, request: web.Request) -> object:
    """The subscriptions of one page of sessions (the session filters and cursor), those
    whose filter holds ``filter_contains``: one engine call for the page, then one per
    session that has subscriptions, each O(its own)."""
    sessions, next_cursor = _session_page(api, request)
    part = _query_text(request, "filter_contains") or ""
    engine = api.broker.engine
    items = [
        {"client_id": info.client_id, **subscription_json(sub)}
        for info in sessions
        if info.subscriptions
        for sub in engine.subscriptions(info.client_id)
        if part in sub.filter
    ]
    return {"items": items, "next": next_cursor}


async def list_retained(api: AdminApi, request: web.Request) -> object:
    cursor, limit = page_args(request)
    topic_filter = _query_text(request, "filter") or "#"
    page = api.broker.engine.retained_messages(topic_filter, api.now, cursor, limit)
    return {"items": [retained_json(m) for m in page.items], "next": page.next}


async def show_retained(api: AdminApi, request: web.Request) -> object:
    topic = request.match_info["topic"]
    message = api.broker.engine.retained_message(topic, api.now)
    if message is None:
        raise ApiError(404, f"no retained message on {topic!r}")
    return retained_json(message)


async def delete_retained(api: AdminApi, request: web.Request) -> object:
    topic = request.match_info["topic"]
    if not api.broker.engine.clear_retained(topic):
        raise ApiError(404, f"no retained message on {topic!r}")
    return None


async def publish(api: AdminApi, request: web.Request) -> object:
    body = await _body(request, PUBLISH)
    encoding = body.get("encoding", "utf-8")
    props = body.get("properties", {})
    correlation = props.get("correlation_data")
    properties = MessageProperties(
        content_type=props.get("content_type"),
        response_topic=props.get("response_topic"),
        correlation_data=None
        if correlation is None
        else _decode(correlation, encoding, "properties.correlation_data"),
        user_properties=list(props.get("user_properties", {}).items()),
        message_expiry=props.get("message_expiry"),
        payload_format_indicator=props.get("payload_format_indicator"),
    )
    delivered = api.broker.engine.publish(
        body["topic"],
        _decode(body["payload"], encoding, "payload"),
        body.get("qos", 0),
        body.get("retain", False),
        api.now,
        properties,
    )
    api.flush()
    return {"delivered": delivered}


def _users_file(api: AdminApi) -> Path:
    path = api.broker.config.auth.users_file
    if path is None:
        raise ApiError(409, "no users file: set [auth] users_file")
    return Path(path)


def _use_users(api: AdminApi) -> None:
    """Decide later CONNECTs with the users file as it is now (SIGHUP's chain)."""
    broker = api.broker
    if broker.auth is not None:
        chain = provider_from_config(broker.config.auth)
        if chain is not None:
            broker.use_provider(chain)


async def list_users(api: AdminApi, request: web.Request) -> object:
    path = _users_file(api)
    users = load_users(path) if path.exists() else {}
    return {
        "items": [
            {"name": name, "client_type": record.client_type, "scheme": record.scheme}
            for name, record in users.items()
        ]
    }


async def create_user(api: AdminApi, request: web.Request) -> object:
    body = await _body(request, NEW_USER)
    path = _users_file(api)
    if path.exists() and body["name"] in load_users(path):
        raise ApiError(409, f"user {body['name']!r} exists")
    try:  # PBKDF2: seconds of CPU, off the loop
        credential = await asyncio.to_thread(ScramCredential.derive, body["password"])
    except ValueError as exc:  # SASLprep refused a character
        raise ApiError(400, f"password: {exc}") from None
    add_user(path, body["name"], UserRecord(credential, body.get("client_type", "device")))
    _use_users(api)
    return {"name": body["name"]}


async def remove_user(api: AdminApi, request: web.Request) -> object:
    name = request.match_info["name"]
    path = _users_file(api)
    if not path.exists() or name not in load_users(path):
        raise ApiError(404, f"no user {name!r}")
    delete_user(path, name)
    _use_users(api)
    return None


async def show_acl(api: AdminApi, request: web.Request) -> object:
    acl = api.broker.config.acl
    rules = api.broker.acl_rules
    return {
        "file": acl.file,
        "format": acl.format,
        "default": acl.default,
        "watch": acl.watch,
        "rules": 0 if rules is None else len(rules),
    }


async def reload_acl(api: AdminApi, request: web.Request) -> object:
    error = api.broker.reload_acl()
    if error is not None:
        raise ApiError(400, error)
    return await show_acl(api, request)


async def list_bans(api: AdminApi, request: web.Request) -> object:
    bans = api.broker.config.bans
    items = [{"kind": k, "value": v, "source": "config"} for k, v in ban_entries(bans)]
    if bans.file is not None:
        items += [{"kind": k, "value": v, "source": "file"} for k, v in _file_bans(Path(bans.file))]
    return {"file": bans.file, "items": items}


def _bans_file(api: AdminApi) -> Path:
    path = api.broker.config.bans.file
    if path is None:
        raise ApiError(409, "no bans file: set [bans] file")
    return Path(path)


def _file_bans(path: Path) -> list[tuple[str, str]]:
    return ban_entries(load_ban_file(path)) if path.exists() else []


async def add_ban(api: AdminApi, request: web.Request) -> object:
    body = await _body(request, BAN)
    path = _bans_file(api)
    if (body["kind"], body["value"]) in _file_bans(path):
        raise ApiError(409, f"{body['kind']} {body['value']!r} is already banned")
    edit_ban_file(path, body["kind"], body["value"], add=True)
    api.broker.apply_bans()
    api.flush()
    return {"kind": body["kind"], "value": body["value"]}


async def remove_ban(api: AdminApi, request: web.Request) -> object:
    kind = _query_text(request, "kind", required=True)
    value = _query_text(request, "value", required=True)
    assert kind is not None and value is not None
    if kind not in BAN_KINDS:
        raise ApiError(400, f"kind: must be one of {', '.join(BAN_KINDS)}")
    path = _bans_file(api)
    if (kind, value) not in _file_bans(path):
        raise ApiError(404, f"{kind} {value!r} is not banned in {path}")
    edit_ban_file(path, kind, value, add=False)
    api.broker.apply_bans()
    return None


async def trace_client(api: AdminApi, request: web.Request) -> object:
    body = await _body(request, TRACE)
    client_id = request.match_info["client_id"]
    api.broker.trace(client_id, body["enabled"])
    return {"client_id": client_id, "enabled": body["enabled"]}


async def list_traced(api: AdminApi, request: web.Request) -> object:
    return {"items": api.broker.traced()}


async def list_listeners(api: AdminApi, request: web.Request) -> object:
    open_now = api.broker.admission.open_by_listener()
    return {
        "items": [
            {
                "name": listener.name,
                "protocol": listener.protocol,
                "host": listener.host,
                "port": listener.port,
                "path": listener.path if listener.protocol in ("ws", "wss") else None,
                "connections": open_now.get(listener.name, 0),
            }
            for listener in api.broker.config.listeners
        ]
    }


async def list_plugins(api: AdminApi, request: web.Request) -> object:
    plugins = api.broker.plugins
    return {"items": [] if plugins is None else plugins.describe()}


async def list_bridges(api: AdminApi, request: web.Request) -> object:
    bridges = api.broker.bridges
    return {"items": [] if bridges is None else bridges.describe()}


async def show_stats(api: AdminApi, request: web.Request) -> object:
    return api.broker.stats()


async def list_shards(api: AdminApi, request: web.Request) -> object:
    """This broker as a shard: one item (a node's lists every shard's)."""
    broker = api.broker
    index = 0 if broker.shard is None else broker.shard.index
    return {"items": [{"shard": index, "ready": broker.ready(), "stats": broker.stats()}]}


async def show_cluster(api: AdminApi, request: web.Request) -> object:
    """The nodes of this node's cluster (:mod:`ferromq.cluster.report`)."""
    cluster = api.broker.cluster
    if cluster is None:
        raise ApiError(404, "not clustered")
    from ferromq.cluster.report import cluster_report  # a clustered node has redis

    report = await cluster_report(cluster)
    if report.error is not None:
        raise ApiError(503, report.error)
    return report.to_json()


async def reload(api: AdminApi, request: web.Request) -> object:
    reloader = api.broker.reloader
    if reloader is None:
        raise ApiError(409, "this broker has no configuration to reload")
    reloader.reload()
    return None


async def openapi(api: AdminApi, request: web.Request) -> object:
    return openapi_document(ROUTES, PREFIX, __version__)


ROUTES: tuple[Route, ...] = (
    Route("GET", "/openapi.json", "This document", openapi, answer={"type": "object"}),
    Route(
        "GET",
        "/clients",
        "List clients (sessions with their connection)",
        list_clients,
        params=_SESSION_FILTERS,
        answer=page_of(CLIENT),
    ),
    Route(
        "GET",
        "/clients/{client_id}",
        "A client and its subscriptions",
        show_client,
        params=(_CLIENT_ID,),
        answer=obj({**CLIENT["properties"], "subscriptions": array(SUBSCRIPTION)}),
        errors=(404,),
    ),
    Route(
        "DELETE",
        "/clients/{client_id}",
        "Kick a client: v5 DISCONNECT 0x98 Administrative action; its will is published",
        kick_client,
        params=(_CLIENT_ID,),
        status=204,
        errors=(404,),
    ),
    Route(
        "GET",
        "/clients/{client_id}/subscriptions",
        "A client's subscriptions",
        list_subscriptions,
        params=(_CLIENT_ID,),
        answer=list_of(SUBSCRIPTION),
        errors=(404,),
    ),
    Route(
        "POST",
        "/clients/{client_id}/subscriptions",
        "Subscribe a client as its SUBSCRIBE would (ACL checked, retained sent)",
        add_subscription,
        params=(_CLIENT_ID,),
        body=SUBSCRIPTION,
        status=201,
        answer=obj({"filter": STRING, "new": BOOLEAN}),
        errors=(403, 404, 409),
    ),
    Route(
        "DELETE",
        "/clients/{client_id}/subscriptions",
        "Unsubscribe a client from `filter`",
        remove_subscription,
        params=(_CLIENT_ID, Param("filter", "query", TOPIC_FILTER, "the filter", True)),
        status=204,
        errors=(404,),
    ),
    Route(
        "GET",
        "/sessions",
        "List sessions",
        list_sessions,
        params=_SESSION_FILTERS,
        answer=page_of(SESSION),
    ),
    Route(
        "GET",
        "/sessions/{client_id}",
        "A session: expiry, queue depth, in-flight, subscriptions",
        show_session,
        params=(_CLIENT_ID,),
        answer=obj({**SESSION["properties"], "subscriptions": array(SUBSCRIPTION)}),
        errors=(404,),
    ),
    Route(
        "DELETE",
        "/sessions/{client_id}",
        "End an offline session (a connected one: kick it first)",
        delete_session,
        params=(_CLIENT_ID,),
        status=204,
        errors=(404, 409),
    ),
    Route(
        "GET",
        "/subscriptions",
        "Subscriptions of a page of sessions (the sessions' filters and cursor; `limit` "
        "counts sessions), those whose filter holds `filter_contains`",
        list_all_subscriptions,
        params=(
            *_SESSION_FILTERS,
            Param("filter_contains", "query", STRING, "topic filters holding this"),
        ),
        answer=page_of(CLIENT_SUBSCRIPTION),
    ),
    Route(
        "GET",
        "/retained",
        "List retained messages matching `filter` (default `#`), oldest first",
        list_retained,
        params=(Param("filter", "query", TOPIC_FILTER, "a topic filter"), _CURSOR, _LIMIT),
        answer=page_of(RETAINED),
    ),
    Route(
        "GET",
        "/retained/{topic}",
        "The retained message of a topic",
        show_retained,
        params=(_TOPIC,),
        answer=RETAINED,
        errors=(404,),
    ),
    Route(
        "DELETE",
        "/retained/{topic}",
        "Clear the retained message of a topic",
        delete_retained,
        params=(_TOPIC,),
        status=204,
        errors=(404,),
    ),
    Route(
        "POST",
        "/publish",
        "Publish as the broker (QoS 0/1/2, retain, v5 properties)",
        publish,
        body=PUBLISH,
        answer=obj({"delivered": integer(0)}),
    ),
    Route(
        "GET",
        "/users",
        "Users of the users file",
        list_users,
        answer=list_of(USER),
        errors=(409,),
    ),
    Route(
        "POST",
        "/users",
        "Add a user (SCRAM-SHA-256 credential); applies to the next CONNECTs",
        create_user,
        body=NEW_USER,
        status=201,
        answer=obj({"name": STRING}),
        errors=(409,),
    ),
    Route(
        "DELETE",
        "/users/{name}",
        "Delete a user; applies to the next CONNECTs",
        remove_user,
        params=(Param("name", "path", string(min_length=1), "the user name"),),
        status=204,
        errors=(404, 409),
    ),
    Route(
        "GET",
        "/acl",
        "The ACL in force: file, format, default, rule count",
        show_acl,
        answer=ACL,
    ),
    Route(
        "POST",
        "/acl/reload",
        "Read the ACL rules file again and apply it to every session",
        reload_acl,
        answer=ACL,
        errors=(400,),
    ),
    Route(
        "GET",
        "/bans",
        "Bans from [bans] and its file",
        list_bans,
        answer=obj({"file": nullable(STRING), "items": array(LISTED_BAN)}, required=("items",)),
    ),
    Route(
        "POST",
        "/bans",
        "Ban a client id, user name or address in the bans file; matching clients are closed",
        add_ban,
        body=BAN,
        status=201,
        answer=BAN,
        errors=(409,),
    ),
    Route(
        "DELETE",
        "/bans",
        "Lift a ban of the bans file",
        remove_ban,
        params=(
            Param("kind", "query", BAN_KIND, "client_id, username or address", True),
            Param("value", "query", string(min_length=1), "the banned value", True),
        ),
        status=204,
        errors=(409,),
    ),
    Route(
        "POST",
        "/clients/{client_id}/trace",
        "Log every packet of a client (logger ferromq.trace), now and on its later "
        "connections, or stop",
        trace_client,
        params=(_CLIENT_ID,),
        body=TRACE,
        answer=obj({"client_id": STRING, "enabled": BOOLEAN}),
    ),
    Route(
        "GET",
        "/trace",
        "The client ids traced now",
        list_traced,
        answer=list_of(STRING),
    ),
    Route(
        "GET",
        "/listeners",
        "Listeners and their open connections",
        list_listeners,
        answer=list_of(
            obj(
                {
                    "name": STRING,
                    "protocol": STRING,
                    "host": STRING,
                    "port": integer(1, 65535),
                    "path": nullable(STRING),
                    "connections": integer(0),
                }
            )
        ),
    ),
    Route(
        "GET",
        "/plugins",
        "The [[plugins]]: what each sees, whether it runs, its batches and failures",
        list_plugins,
        answer=list_of(PLUGIN),
    ),
    Route(
        "GET",
        "/bridges",
        "The [[bridges]]: each one's remote address, connection and failures",
        list_bridges,
        answer=list_of(BRIDGE),
    ),
    Route(
        "GET",
        "/stats",
        "The broker's counters ($SYS's and more)",
        show_stats,
        answer=obj({}, extra=integer()),
    ),
    Route(
        "GET",
        "/shards",
        "Each shard of the node (one without `[server] workers`): ready, and its counters",
        list_shards,
        answer=list_of(SHARD),
    ),
    Route(
        "GET",
        "/cluster",
        "The nodes of the cluster (`[cluster]`) and their state, this node's cluster traffic",
        show_cluster,
        answer=CLUSTER,
        errors=(404, 503),
    ),
    Route(
        "POST",
        "/reload",
        "Reload the configuration, as SIGHUP does",
        reload,
        status=204,
        errors=(409,),
    ),
)


_STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (ApiError, 0),  # its own status
    (UnknownClient, 404),
    (SessionConflict, 409),
    (NotAuthorized, 403),
    (ConfigError, 400),  # users and bans files: a name that exists, an unreadable file
    (ValueError, 400),  # the engine's argument checks, SchemaError
)


def error_response(status: int, message: str) -> web.Response:
    """An error answer: ``{"error": message}``."""
    return web.json_response({"error": message}, status=status)


def _endpoint(api: AdminApi, route: Route) -> RequestHandler:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            answer = await route.handler(api, request)
        except Exception as exc:
            for kind, status in _STATUS_OF:
                if isinstance(exc, kind):
                    code = exc.status if isinstance(exc, ApiError) else status
                    return error_response(code, str(exc))
            raise
        if answer is None:
            return web.Response(status=204)
        return web.json_response(answer, status=route.status)

    handle.__name__ = route.operation_id
    return handle


APPLY_BANS = "/shard/apply/bans"
APPLY_USERS = "/shard/apply/users"
"""A shard's own routes (its private socket only, not in the document): apply the bans
or users file another shard changed for the node (:mod:`ferromq.admin.node_api`)."""


def register(routes: AdminRoutes) -> None:
    """Mount :data:`ROUTES` under :data:`PREFIX` (:data:`ferromq.admin.routes.MODULES`),
    and on a shard's socket :data:`APPLY_BANS` and :data:`APPLY_USERS`."""
    api = AdminApi(routes.broker)
    for route in ROUTES:
        routes.add(route.method, PREFIX + route.aiohttp_path, _endpoint(api, route))
    if not routes.shard:
        return

    async def apply_bans(request: web.Request) -> web.Response:
        api.broker.apply_bans()
        api.flush()
        return web.Response(status=204)

    async def apply_users(request: web.Request) -> web.Response:
        _use_users(api)
        return web.Response(status=204)

    routes.add("POST", APPLY_BANS, apply_bans)
    routes.add("POST", APPLY_USERS, apply_users)
