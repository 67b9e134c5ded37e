"""The JSON the admin API speaks: the schemas of its bodies and answers (which the
route table in :mod:`ferromq.admin.api` hands to the OpenAPI document and to the body
check) and the projections of the engine's typed results onto them.

Clients and sessions are two views of one engine record (``_core.SessionInfo``): a
client shows its connection (peer, protocol, keep alive, since when), a session its
persistence (client type, expiry, time left); both show the counts (subscriptions,
in flight, queued messages and bytes). Engine times become wall-clock timestamps or
seconds left here. Bytes (payloads, correlation data) travel as UTF-8 text when they
are, else base64, named by ``encoding``.
"""

from __future__ import annotations

import base64
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ferromq._core import RetainedMessage, SessionInfo, Subscription
from ferromq.admin.schema import (
    BASE64,
    BOOLEAN,
    MQTT_STRING,
    NUMBER,
    STRING,
    TOPIC_FILTER,
    TOPIC_NAME,
    Schema,
    array,
    integer,
    nullable,
    obj,
    string,
)
from ferromq.auth.provider import CLIENT_TYPES
from ferromq.bans import BAN_KINDS
from ferromq.cluster.figures import NODE_FIGURES
from ferromq.log import peer_text

if TYPE_CHECKING:
    from ferromq.broker import Broker


class AdminApi:
    """The handlers' view of one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    @property
    def now(self) -> int:
        return self.broker.hub.now()

    def wall_time(self, engine_ms: int) -> str:
        """An engine time as an ISO 8601 UTC timestamp."""
        unix = time.time() - (self.now - engine_ms) / 1000
        return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")

    def flush(self) -> None:
        self.broker.hub.flush()


_COUNTS: dict[str, Schema] = {
    "subscription_count": integer(0),
    "inflight": integer(0),
    "queued": integer(0),
    "queued_bytes": integer(0),
}
CLIENT = obj(
    {
        "client_id": STRING,
        "username": nullable(STRING),
        "connected": BOOLEAN,
        "peer": nullable(STRING),
        "protocol": nullable(integer(3, 5)),
        "keep_alive": nullable(integer(0)),
        "connected_at": nullable(STRING),
        **_COUNTS,
    },
    required=("client_id", "connected"),
)
SESSION = obj(
    {
        "client_id": STRING,
        "connected": BOOLEAN,
        "client_type": string(*CLIENT_TYPES),
        "expiry_interval": integer(0),
        "expires_in": nullable(integer(0)),
        **_COUNTS,
    },
    required=("client_id", "connected"),
)
SUBSCRIPTION = obj(
    {
        "filter": TOPIC_FILTER,
        "qos": integer(0, 2),
        "no_local": BOOLEAN,
        "retain_as_published": BOOLEAN,
        "retain_handling": integer(0, 2),
        "subscription_id": nullable(integer(1, 268_435_455)),
    },
    required=("filter",),
)
CLIENT_SUBSCRIPTION = obj(
    {"client_id": STRING, **SUBSCRIPTION["properties"]}, required=("client_id", "filter")
)
ENCODING = string("utf-8", "base64")
PROPERTIES = obj(
    {
        "content_type": MQTT_STRING,
        "response_topic": TOPIC_NAME,
        "correlation_data": STRING,
        "user_properties": obj({}, extra=MQTT_STRING, keys=MQTT_STRING),
        "message_expiry": integer(0, 4_294_967_295),
        "payload_format_indicator": integer(0, 1),
    }
)
RETAINED = obj(
    {
        "topic": STRING,
        "payload": STRING,
        "encoding": ENCODING,
        "qos": integer(0, 2),
        "properties": PROPERTIES,
    },
    required=("topic", "payload", "encoding", "qos"),
)
PUBLISH = {
    **obj(
        {
            "topic": TOPIC_NAME,
            "payload": STRING,
            "encoding": ENCODING,
            "qos": integer(0, 2),
            "retain": BOOLEAN,
            "properties": PROPERTIES,
        },
        required=("topic", "payload"),
    ),
    # With "encoding": "base64" the payload and the correlation data are base64.
    "if": {"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]},
    "then": {
        "properties": {
            "payload": BASE64,
            "properties": {"properties": {"correlation_data": BASE64}},
        }
    },
}
USER = obj(
    {"name": string(min_length=1), "client_type": string(*CLIENT_TYPES), "scheme": STRING},
    required=("name",),
)
NEW_USER = obj(
    {
        "name": string(min_length=1),
        "password": string(min_length=1),
        "client_type": string(*CLIENT_TYPES),
    },
    required=("name", "password"),
)
BAN_KIND = string(*BAN_KINDS)
BAN = obj({"kind": BAN_KIND, "value": string(min_length=1)}, required=("kind", "value"))
TRACE = obj({"enabled": BOOLEAN}, required=("enabled",))
LISTED_BAN = obj({**BAN["properties"], "source": string("config", "file")})
ACL = obj(
    {
        "file": nullable(STRING),
        "format": STRING,
        "default": STRING,
        "watch": integer(0),
        "rules": integer(0),
    }
)


PLUGIN = obj(
    {
        "name": STRING,
        "filters": array(STRING),
        "events": array(STRING),
        "intercepts": BOOLEAN,
        "running": BOOLEAN,
        "batches": integer(0),
        "messages": integer(0),
        "failures": integer(0),
        "restarts": integer(0),
        "skipped": integer(0),
        "last_error": nullable(STRING),
    }
)
BRIDGE = obj(
    {
        "name": STRING,
        "address": STRING,
        "connected": BOOLEAN,
        "connects": integer(0),
        "failures": integer(0),
        "last_error": nullable(STRING),
        "refused_filters": array(STRING),
    }
)
SHARD = obj(
    {
        "shard": integer(0),
        "ready": BOOLEAN,
        "error": STRING,
        "stats": nullable(obj({}, extra=integer())),
    },
    required=("shard", "ready", "stats"),
)
"""A shard: ready or not, its counters (``/stats``'s); ``error`` and null counters: it
did not answer."""


CLUSTER_TOTALS = obj({name: integer(0) for name in NODE_FIGURES})
"""A node's clients, messages and subscriptions as its heartbeat last said (empty for a
node that is not alive), or the alive nodes' added up."""
CLUSTER_NODE = obj(
    {
        "node_id": STRING,
        "node": STRING,
        "state": string("alive", "dead", "adopted"),
        "adopted_by": nullable(STRING),
        "started": NUMBER,
        "pid": integer(0),
        "mqtt": array(STRING),
        "admin": nullable(STRING),
        "version": STRING,
        "figures": CLUSTER_TOTALS,
    },
    required=(
        "node_id", "node", "state", "adopted_by", "started", "pid", "mqtt", "admin", "version",
    ),
)  # fmt: skip
"""A member of the cluster (``node_id``: a node of one shard, or ``<node>.<shard>``; ``node``:
the node it is a shard of): its state (alive while its heartbeat key lives; adopted: dead,
its sessions taken over by ``adopted_by``) and what it said of itself at join."""
CLUSTER = obj(
    {
        "node_id": STRING,
        "nodes": array(CLUSTER_NODE),
        "figures": obj(
            {
                "batches_sent": integer(0),
                "batches_received": integer(0),
                "bytes_sent": integer(0),
                "bytes_received": integer(0),
                "remote_filters": integer(0),
                "subscriptions_sent": integer(0),
                "kafka_healthy": BOOLEAN,
                "held_acks": integer(0),
            }
        ),
        "totals": CLUSTER_TOTALS,
    },
    required=("node_id", "nodes", "figures", "totals"),
)
"""This node's id, every node of the cluster, this node's cluster traffic."""


def page_of(items: Schema) -> Schema:
    return obj({"items": array(items), "next": nullable(integer(0))}, required=("items", "next"))


def list_of(items: Schema) -> Schema:
    return obj({"items": array(items)}, required=("items",))


def client_json(api: AdminApi, info: SessionInfo) -> dict[str, object]:
    peer = None if info.conn is None else api.broker.hub.peer(info.conn)
    return {
        "client_id": info.client_id,
        "username": info.username,
        "connected": info.connected,
        "peer": peer_text(peer) if peer else None,
        "protocol": info.protocol,
        "keep_alive": info.keep_alive,
        "connected_at": None if info.connected_at is None else api.wall_time(info.connected_at),
        **_counts(info),
    }


def session_json(api: AdminApi, info: SessionInfo) -> dict[str, object]:
    expires_in = None if info.expires_at is None else max(0, (info.expires_at - api.now) // 1000)
    return {
        "client_id": info.client_id,
        "connected": info.connected,
        "client_type": info.client_type,
        "expiry_interval": info.expiry_interval,
        "expires_in": expires_in,
        **_counts(info),
    }


def _counts(info: SessionInfo) -> dict[str, object]:
    return {
        "subscription_count": info.subscriptions,
        "inflight": info.inflight,
        "queued": info.queued,
        "queued_bytes": info.queued_bytes,
    }


def subscription_json(sub: Subscription) -> dict[str, object]:
    return {key: getattr(sub, key) for key in SUBSCRIPTION["properties"]}


def _text(data: bytes) -> tuple[str, str]:
    """Bytes as JSON carries them: UTF-8 text when they are, else base64."""
    try:
        return data.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


def retained_json(message: RetainedMessage) -> dict[str, object]:
    payload, encoding = _text(message.payload)
    props = message.properties
    properties: dict[str, object] = {
        "content_type": props.content_type,
        "response_topic": props.response_topic,
        "correlation_data": None
        if props.correlation_data is None
        else base64.b64encode(props.correlation_data).decode(),
        "user_properties": dict(props.user_properties) or None,
        "message_expiry": props.message_expiry,
        "payload_format_indicator": props.payload_format_indicator,
    }
    return {
        "topic": message.topic,
        "payload": payload,
        "encoding": encoding,
        "qos": message.qos,
        "properties": {k: v for k, v in properties.items() if v is not None},
    }
