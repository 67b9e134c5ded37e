"""The engine as the configuration describes it.

:func:`engine_settings` is the one mapping from the config schema
(:mod:`ferromq.config`, where every default lives) to the ``EngineSettings`` the
compiled engine is built with; the binding's ``EngineSettings`` requires every field,
so a setting has no second default in Rust or here. Conversions that are the engine's
business happen here once: seconds to milliseconds, "0 means never" to the engine's
``0xFFFFFFFF``, the storage choice to ``journal`` and ``serve_application_groups``, the
log level to ``client_events``. :func:`engine_from_config` also starts the ``[stream]``
export (``Engine.set_stream``) when it is enabled.
"""

from __future__ import annotations

import socket
import time

from ferromq._core import Engine, EngineSettings
from ferromq._protocol import MqttProtocol
from ferromq.admission import checks_connect
from ferromq.auth.certificate import certificate_identities_needed
from ferromq.client_log import client_events_wanted
from ferromq.config import Config
from ferromq.stream.sink import holds_acks

__all__ = ["decides_connect_in_python", "engine_from_config", "engine_settings", "stream_node"]

NEVER_EXPIRES = 0xFFFF_FFFF


def decides_connect_in_python(config: Config) -> bool:
    """Whether the engine hands every CONNECT to Python (the ``AuthGate``): an
    authentication provider, certificates as user names or named by ACL rules, or
    admission checks at CONNECT (bans, ``limits.max_connections_per_user``), or a
    cluster (each CONNECT claims its client id, :mod:`ferromq.cluster.ownership`). Otherwise
    the engine accepts CONNECTs itself, with no Python per CONNECT."""
    return (
        bool(config.auth.chain())
        or certificate_identities_needed(config)
        or checks_connect(config)
        or bool(config.cluster.node_id)
    )


def engine_settings(config: Config) -> EngineSettings:
    limits, session, mqtt5 = config.limits, config.session, config.mqtt5
    return EngineSettings(
        max_packet_size=limits.max_packet_size,
        max_inflight=limits.max_inflight,
        receive_maximum=limits.receive_maximum,
        max_topic_alias=limits.max_topic_alias,
        max_keepalive=limits.max_keepalive,
        connect_timeout_ms=limits.connect_timeout * 1000,
        queue_limit=session.queue_limit,
        drop_policy=session.drop_policy,
        max_queued_bytes=session.max_queued_bytes,
        memory_budget=session.memory_budget,
        queue_qos0_offline=session.queue_qos0_offline,
        max_session_expiry=session.max_session_expiry or NEVER_EXPIRES,
        persistent_session_expiry=session.default_session_expiry_v311 or NEVER_EXPIRES,
        max_client_id_length=limits.max_client_id_length,
        allow_control_characters=limits.allow_control_characters,
        write_high_water=limits.write_buffer_high_water,
        share_strategy=session.share_strategy,
        journal=config.storage.backend != "memory",
        application_client_prefixes=list(config.storage.application_client_prefixes),
        serve_application_groups=config.storage.application_store == "kafka",
        authenticate=decides_connect_in_python(config),
        max_publish_rate=limits.max_publish_rate,
        max_publish_bytes_rate=limits.max_publish_bytes_rate,
        max_publish_rate_per_user=limits.max_publish_rate_per_user,
        max_publish_bytes_rate_per_user=limits.max_publish_bytes_rate_per_user,
        max_subscriptions_per_client=limits.max_subscriptions_per_client,
        max_retained_messages=limits.max_retained_messages,
        max_retained_bytes=limits.max_retained_bytes,
        max_retained_messages_per_user=limits.max_retained_messages_per_user,
        max_retained_bytes_per_user=limits.max_retained_bytes_per_user,
        retained_max_expiry_ms=limits.retained_max_expiry * 1000,
        maximum_qos=mqtt5.maximum_qos,
        retain_available=mqtt5.retain_available,
        wildcard_subscription_available=mqtt5.wildcard_subscription_available,
        subscription_identifiers_available=mqtt5.subscription_identifiers_available,
        shared_subscription_available=mqtt5.shared_subscription_available,
        assign_client_id=mqtt5.assign_client_id,
        response_information_prefix=mqtt5.response_information_prefix,
        outbound_topic_aliases=mqtt5.outbound_topic_aliases,
        validate_utf8_payload=mqtt5.validate_utf8_payload,
        redirect_server_reference=config.redirect.server_reference,
        redirect_permanent=config.redirect.permanent,
        client_events=client_events_wanted(config.log.level),
        sparkplug_aware=config.sparkplug.aware,
        sparkplug_ndeath_timestamp=config.sparkplug.ndeath_timestamp,
    )


def stream_node(config: Config) -> str:
    """The node id in stream records and file names: ``[stream] node`` or the host name."""
    return config.stream.node or socket.gethostname()


def engine_from_config(config: Config) -> Engine:
    engine = Engine(engine_settings(config))
    stream = config.stream
    if stream.enabled:
        engine.set_stream(
            topics=list(stream.topics),
            events=stream.events,
            node=stream_node(config),
            key=stream.key,
            acked=holds_acks(stream),
            boot_id=time.time_ns() // 1000,
        )
    return engine


def hand_to_engine(protocol: MqttProtocol, data: bytes) -> None:
    """Give ``protocol``'s engine connection bytes read before it took the transport
    (a WebSocket upgrade's, the shard router's, a bridge's handshake), as if read now."""
    rest = memoryview(data)
    while rest:
        buffer = protocol.get_buffer(len(rest))
        size = min(len(buffer), len(rest))
        buffer[:size] = rest[:size]
        protocol.buffer_updated(size)
        rest = rest[size:]
