//! `EngineSettings`: everything an `Engine` is built with, in one object.
//!
//! Every field is required and none has a default here: the defaults live in the
//! config schema only (`python/ferromq/config.py`), and `ferromq.engine.engine_settings`
//! is the one function that builds this from a `Config`. Names (`drop_policy`,
//! `share_strategy`) are parsed by `ferromq-core` (`FromStr`), and a bad value is a
//! `ValueError` from `errors.rs` naming the setting.

use ferromq_core::codec::QoS;
use ferromq_core::engine::{
    DropPolicy, EngineConfig, Features, PublishRateLimits, Redirect, RetainedLimits, Sparkplug,
};
use ferromq_core::topic::ShareStrategy;
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EngineSettings>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct EngineSettings {
    pub(crate) config: EngineConfig,
    pub(crate) share_strategy: ShareStrategy,
}

#[pymethods]
impl EngineSettings {
    #[new]
    #[pyo3(signature = (
        *,
        max_packet_size,
        max_inflight,
        receive_maximum,
        max_topic_alias,
        max_keepalive,
        connect_timeout_ms,
        queue_limit,
        drop_policy,
        queue_qos0_offline,
        max_session_expiry,
        persistent_session_expiry,
        max_client_id_length,
        allow_control_characters,
        authenticate,
        write_high_water,
        share_strategy,
        journal,
        application_client_prefixes,
        serve_application_groups,
        maximum_qos,
        retain_available,
        wildcard_subscription_available,
        subscription_identifiers_available,
        shared_subscription_available,
        assign_client_id,
        response_information_prefix,
        outbound_topic_aliases,
        validate_utf8_payload,
        max_queued_bytes,
        memory_budget,
        max_publish_rate,
        max_publish_bytes_rate,
        max_publish_rate_per_user,
        max_publish_bytes_rate_per_user,
        max_subscriptions_per_client,
        max_retained_messages,
        max_retained_bytes,
        max_retained_messages_per_user,
        max_retained_bytes_per_user,
        retained_max_expiry_ms,
        redirect_server_reference,
        redirect_permanent,
        client_events,
        sparkplug_aware,
        sparkplug_ndeath_timestamp,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_packet_size: u32,
        max_inflight: u16,
        receive_maximum: u16,
        max_topic_alias: u16,
        max_keepalive: u16,
        connect_timeout_ms: u64,
        queue_limit: u16,
        drop_policy: &str,
        queue_qos0_offline: bool,
        max_session_expiry: u32,
        persistent_session_expiry: u32,
        max_client_id_length: usize,
        allow_control_characters: bool,
        authenticate: bool,
        write_high_water: usize,
        share_strategy: &str,
        journal: bool,
        application_client_prefixes: Vec<String>,
        serve_application_groups: bool,
        maximum_qos: u8,
        retain_available: bool,
        wildcard_subscription_available: bool,
        subscription_identifiers_available: bool,
        shared_subscription_available: bool,
        assign_client_id: bool,
        response_information_prefix: String,
        outbound_topic_aliases: u16,
        validate_utf8_payload: bool,
        max_queued_bytes: u64,
        memory_budget: u64,
        max_publish_rate: u32,
        max_publish_bytes_rate: u64,
        max_publish_rate_per_user: u32,
        max_publish_bytes_rate_per_user: u64,
        max_subscriptions_per_client: u32,
        max_retained_messages: u64,
        max_retained_bytes: u64,
        max_retained_messages_per_user: u64,
        max_retained_bytes_per_user: u64,
        retained_max_expiry_ms: u64,
        redirect_server_reference: String,
        redirect_permanent: bool,
        client_events: bool,
        sparkplug_aware: bool,
        sparkplug_ndeath_timestamp: bool,
    ) -> PyResult<EngineSettings> {
        let features = Features {
            maximum_qos: QoS::from_u8(maximum_qos).ok_or_else(|| {
                errors::bad_argument(format!("maximum_qos must be 0, 1 or 2, got {maximum_qos}"))
            })?,
            retain_available,
            wildcard_subscription_available,
            subscription_identifiers_available,
            shared_subscription_available,
            assign_client_id,
            response_information_prefix,
            outbound_topic_aliases,
            validate_utf8_payload,
            // An empty server reference: no redirect.
            redirect: (!redirect_server_reference.is_empty()).then_some(Redirect {
                server_reference: redirect_server_reference,
                permanent: redirect_permanent,
            }),
        };
        let config = EngineConfig {
            max_packet_size,
            max_inflight,
            receive_maximum,
            max_topic_alias,
            max_keepalive,
            connect_timeout_ms,
            queue_limit,
            drop_policy: drop_policy
                .parse::<DropPolicy>()
                .map_err(|e| errors::unknown_name(&e))?,
            max_queued_bytes,
            memory_budget,
            publish_rate: PublishRateLimits {
                messages_per_client: max_publish_rate,
                bytes_per_client: max_publish_bytes_rate,
                messages_per_user: max_publish_rate_per_user,
                bytes_per_user: max_publish_bytes_rate_per_user,
            },
            max_subscriptions_per_client,
            retained_limits: RetainedLimits {
                max_messages: max_retained_messages,
                max_bytes: max_retained_bytes,
                max_messages_per_user: max_retained_messages_per_user,
                max_bytes_per_user: max_retained_bytes_per_user,
                max_expiry_ms: retained_max_expiry_ms,
            },
            queue_qos0_offline,
            max_session_expiry,
            persistent_session_expiry,
            max_client_id_length,
            allow_control_characters,
            authenticate,
            write_high_water,
            journal,
            application_client_prefixes,
            serve_application_groups,
            features,
            client_events,
            sparkplug: Sparkplug {
                aware: sparkplug_aware,
                ndeath_timestamp: sparkplug_ndeath_timestamp,
            },
        };
        Ok(EngineSettings {
            config,
            share_strategy: share_strategy
                .parse()
                .map_err(|e| errors::unknown_name(&e))?,
        })
    }
}
