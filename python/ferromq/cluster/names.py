"""The names every member of a cluster agrees on (docs/cluster.md, "Names"): a member is
one shard of a node (the node itself when it runs one), Kafka topics
under ``cluster.topic_prefix``, Redis keys under ``redis.key_prefix`` (a client's owner
key inside the client's hash tag, as the Redis store's keys are, so it shares their slot
on a Redis Cluster)."""

from __future__ import annotations

from redis.asyncio import Redis, RedisCluster

from ferromq.config import Config
from ferromq.shard.identity import ShardIdentity

__all__ = [
    "MEMBER_SEPARATOR",
    "NODE_KEY_SEPARATOR",
    "adopted_key",
    "alive_key",
    "cluster_key_prefix",
    "cluster_member",
    "member_id",
    "members_key",
    "node_of",
    "node_topic",
    "owner_key",
    "redis_client",
    "reply_text",
    "subscription_key",
    "subscriptions_topic",
]

#: Between the node id and the filter in a subscription topic key (never in either).
NODE_KEY_SEPARATOR = "\0"


#: Between a node id and its shard's number in a member id (never in a node id).
MEMBER_SEPARATOR = "."


def member_id(node_id: str, shard: int, shards: int) -> str:
    """The member of the cluster that shard ``shard`` of ``shards`` of node ``node_id``
    is: the node itself when it runs one shard, else ``<node>.<shard>``."""
    return node_id if shards == 1 else f"{node_id}{MEMBER_SEPARATOR}{shard}"


def cluster_member(config: Config, shard: ShardIdentity | None) -> str:
    """The member a clustered broker is: its node, or its shard of the node."""
    if shard is None:
        return config.cluster.node_id
    return member_id(config.cluster.node_id, shard.index, shard.count)


def node_of(member: str) -> str:
    """The node a member is (a shard of)."""
    return member.partition(MEMBER_SEPARATOR)[0]


def subscriptions_topic(topic_prefix: str) -> str:
    """The compacted topic of every node's filters."""
    return f"{topic_prefix}subscriptions"


def node_topic(topic_prefix: str, node_id: str) -> str:
    """The topic other nodes route to ``node_id`` through (and its consumer group)."""
    return f"{topic_prefix}node.{node_id}"


def subscription_key(node_id: str, filter_: str) -> bytes:
    return f"{node_id}{NODE_KEY_SEPARATOR}{filter_}".encode()


def cluster_key_prefix(key_prefix: str) -> str:
    """Where membership, ownership sets and adoption marks live in Redis."""
    return f"{key_prefix}cluster:"


def members_key(kp: str) -> str:
    """The hash of every node's join record, under the cluster's prefix ``kp``."""
    return f"{kp}members"


def alive_key(kp: str, node_id: str) -> str:
    """The node's heartbeat (``PX`` ttl): it is alive while this exists."""
    return f"{kp}alive:{node_id}"


def last_beat_key(kp: str, node_id: str) -> str:
    """When the node last beat (unix ms; no expiry): whoever restores its sessions
    reads what it sent to other nodes from shortly before then."""
    return f"{kp}last_beat:{node_id}"


def adopted_key(kp: str, node_id: str) -> str:
    """The survivor that adopted a dead node's sessions."""
    return f"{kp}adopted:{node_id}"


def owner_key(key_prefix: str, client_id: str) -> str:
    """The client's owner node, beside its session keys (the Redis store's hash tag;
    ``rust/ferromq-core/src/store/redis.rs`` documents the tag's special cases)."""
    tag = client_id if client_id and not client_id.startswith("}") else "\0}" + client_id
    return f"{key_prefix}{{{tag}}}_owner"


def reply_text(value: str | bytes) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else value


def redis_client(config: Config) -> Redis | RedisCluster:
    """A client of the cluster's Redis (``cluster.redis``; a Redis Cluster with
    ``redis.cluster``), decoding replies as text."""
    redis = config.redis
    options = {
        "decode_responses": True,
        "socket_connect_timeout": redis.connect_timeout,
        "socket_timeout": redis.command_timeout,
    }
    if redis.cluster:
        return RedisCluster.from_url(config.cluster.redis, **options)
    return Redis.from_url(config.cluster.redis, **options)  # type: ignore[arg-type]
