//! Counters for $SYS and metrics. Gauges that can be derived from state (sessions,
//! in-flight, queued, retained, subscriptions) are computed on demand by
//! [`super::Engine::stats`] instead of being kept in step on every change.
//!
//! Drops are counted by reason (`DropReason`, published as
//! `$SYS/broker/messages/dropped/<reason>`), their sum as `publish_dropped`.
//! Packets and their bytes are counted by type in each direction (`PacketCounts`:
//! one array increment where a frame is decoded or a packet encoded, paths that
//! already count), authentication refusals by reason (`AuthFailures`); Prometheus
//! reads them at scrape time (`ferromq.admin.metrics`).

use crate::codec::{PacketType, ProtocolVersion, ReasonCode};

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $variant:ident = $name:literal;)*) => {
        /// Why a delivery was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum DropReason { $($(#[$doc])* $variant,)* }

        impl DropReason {
            /// Every reason, in declaration order: the binding's `DROP_REASONS`, which
            /// metrics and `$SYS` read, so a reason added here is published there.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];

            /// The name `$SYS`, metrics and stream records use.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$variant => $name,)* }
            }
        }
    };
}

drop_reasons! {
    /// The session's or group's queue held `queue_limit` messages.
    QueueFull = "queue_full";
    /// The session's queue held `max_queued_bytes`.
    SessionBytes = "session_bytes";
    /// Its Message Expiry Interval passed before it was sent [MQTT-3.3.2-5].
    Expired = "expired";
    /// QoS 0 for an offline session (without `queue_qos0_offline`) or for a shared
    /// group with no member online.
    Qos0Offline = "qos0_offline";
    /// Larger than the client's Maximum Packet Size [MQTT-3.1.2-25].
    TooLarge = "too_large";
    /// Trimmed from a queue that did not drain while the memory budget held the
    /// publishers (`memory`).
    MemoryBudget = "memory_budget";
    /// The shared group it waited in ended, or had no member left.
    GroupEnded = "group_ended";
    /// Forwarded by a cluster node a session moved away from, to a node where the
    /// session no longer was (it moved on, or ended).
    SessionMoved = "session_moved";
}

/// Drops by reason; see `DropReason`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drops {
    pub queue_full: u64,
    pub session_bytes: u64,
    pub expired: u64,
    pub qos0_offline: u64,
    pub too_large: u64,
    pub group_ended: u64,
    pub session_moved: u64,
    pub memory_budget: u64,
}

impl Drops {
    /// The drops counted for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::QueueFull => self.queue_full,
            DropReason::SessionBytes => self.session_bytes,
            DropReason::Expired => self.expired,
            DropReason::Qos0Offline => self.qos0_offline,
            DropReason::TooLarge => self.too_large,
            DropReason::MemoryBudget => self.memory_budget,
            DropReason::GroupEnded => self.group_ended,
            DropReason::SessionMoved => self.session_moved,
        }
    }
}

/// MQTT packets and their bytes (whole frames, before any WebSocket framing) by
/// control packet type, indexed by the type's wire value (1..=15).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketCounts {
    pub packets: [u64; 16],
    pub bytes: [u64; 16],
}

impl PacketCounts {
    pub fn count(&mut self, kind: PacketType, bytes: usize) {
        self.packets[kind as usize] += 1;
        self.bytes[kind as usize] += bytes as u64;
    }
}

/// CONNECTs and re-authentications refused by authentication, by reason code:
/// 0x86 bad user name or password, 0x87 not authorized (a provider's refusal, an
/// exchange past its deadline), 0x8C bad authentication method, 0x88 server
/// unavailable (a provider that could not answer). Admission's refusals (0x8A,
/// 0x97) are counted by admission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthFailures {
    pub bad_credentials: u64,
    pub not_authorized: u64,
    pub bad_method: u64,
    pub unavailable: u64,
}

impl AuthFailures {
    /// Count a refusal with `reason` if it is an authentication failure.
    pub fn count(&mut self, reason: ReasonCode) {
        let counter = match reason {
            ReasonCode::BadUserNameOrPassword => &mut self.bad_credentials,
            ReasonCode::NotAuthorized => &mut self.not_authorized,
            ReasonCode::BadAuthenticationMethod => &mut self.bad_method,
            ReasonCode::ServerUnavailable => &mut self.unavailable,
            _ => return,
        };
        *counter += 1;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    /// By type: frames decoded, packets encoded.
    pub received: PacketCounts,
    pub sent: PacketCounts,
    pub auth_failed: AuthFailures,
    pub publish_received: u64,
    pub publish_sent: u64,
    /// Deliveries dropped: queue full, expired, over the client's packet size, QoS 0
    /// for an offline session or a shared group with no member online, the queue of
    /// a shared group that ended.
    pub publish_dropped: u64,
    pub dropped: Drops,
    /// PUBLISH packets over a publish rate: v5 connections ended with 0x96, 3.x
    /// connections held (`hold`).
    pub publish_rate_exceeded: u64,
    /// Times a publisher's input was held because the memory budget was exceeded.
    pub publishers_paused: u64,
    /// SUBSCRIBE filters refused for `max_subscriptions_per_client`.
    pub subscriptions_refused: u64,
    /// Retained messages not stored for a retained limit (`retained_store`).
    pub retained_refused: u64,
    /// Shared-group deliveries sent back to their group because their member's
    /// connection ended before it acknowledged them (or while they were queued).
    pub shared_released: u64,
    pub connections_opened: u64,
    pub protocol_errors: u64,
    /// Connections closed for sending no whole CONNECT within the connect timeout
    /// (silent sockets, slowloris).
    pub connect_timeouts: u64,
    pub sessions_expired: u64,
    /// ACL denials (engine/acl.rs): PUBLISHes and wills, SUBSCRIBE filters,
    /// retained messages not sent; messages withheld from a subscription that
    /// reaches only some topics; subscriptions removed by new rules.
    pub acl_denied_publish: u64,
    pub acl_denied_subscribe: u64,
    pub acl_denied_read: u64,
    pub acl_withheld: u64,
    pub acl_revoked: u64,
    /// Auto-subscriptions not made: a placeholder without a value, or refused by
    /// the ACL or the quota (`auto_subscribe`).
    pub auto_subscribe_skipped: u64,
    /// Topics and filters a `[[rewrite.rules]]` rule changed (`rewrite`).
    pub topics_rewritten: u64,
    /// Client PUBLISHes whose payload a `[[validation.rules]]` schema refused.
    pub payloads_invalid: u64,
    /// Client PUBLISHes an intercepting plugin dropped or rejected (`plugins`).
    pub plugin_dropped: u64,
    /// Observed copies not kept for plugins, over `plugins::OBSERVED_MAX` waiting.
    pub plugin_overflow: u64,
    /// Live gauges, kept by connect and close.
    pub clients_connected: u64,
    pub clients_maximum: u64,
    /// Gauges, filled in by `Engine::stats`.
    /// Connected clients by protocol: MQTT 3.1, 3.1.1, 5.0.
    pub clients_connected_by_version: [u64; 3],
    pub clients_disconnected: u64,
    pub messages_inflight: u64,
    pub messages_queued: u64,
    /// Messages held in shared-group queues.
    pub shared_queued: u64,
    pub retained_messages: u64,
    /// Bytes (topic + payload) of clients' retained messages (`retained_store`).
    pub retained_bytes: u64,
    pub subscriptions: u64,
    /// Bytes the memory budget counts (`memory`), the part of them in queues, and
    /// connections whose input is held.
    pub memory_used: u64,
    pub queued_bytes: u64,
    pub connections_held: u64,
}

impl Stats {
    /// Count `n` deliveries dropped for `reason`.
    pub fn count_drop(&mut self, reason: DropReason, n: u64) {
        self.publish_dropped += n;
        let counter = match reason {
            DropReason::QueueFull => &mut self.dropped.queue_full,
            DropReason::SessionBytes => &mut self.dropped.session_bytes,
            DropReason::Expired => &mut self.dropped.expired,
            DropReason::Qos0Offline => &mut self.dropped.qos0_offline,
            DropReason::TooLarge => &mut self.dropped.too_large,
            DropReason::GroupEnded => &mut self.dropped.group_ended,
            DropReason::SessionMoved => &mut self.dropped.session_moved,
            DropReason::MemoryBudget => &mut self.dropped.memory_budget,
        };
        *counter += n;
    }
}

impl super::Engine {
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        for session in self.sessions.iter().flatten() {
            if session.conn.is_none() {
                stats.clients_disconnected += 1;
            }
            stats.messages_inflight += session.inflight.len() as u64;
            stats.messages_queued += session.queue.len() as u64;
        }
        for conn in self.conns.iter().flatten() {
            if matches!(conn.state, super::ConnState::Connected { .. }) {
                let version = match conn.version {
                    ProtocolVersion::V3_1 => 0,
                    ProtocolVersion::V3_1_1 => 1,
                    ProtocolVersion::V5 => 2,
                };
                stats.clients_connected_by_version[version] += 1;
            }
        }
        stats.shared_queued = self.group_queues.len() as u64;
        stats.retained_messages = self.retained_messages.len() as u64;
        stats.retained_bytes = self.retained_messages.bytes();
        // Filters other shards hold here for their subscribers are not subscriptions.
        let remote = self
            .shards
            .as_ref()
            .map_or(0, |shards| shards.remote_filters());
        stats.subscriptions = (self.index.len() - remote) as u64;
        stats.memory_used = self.memory_used();
        stats.queued_bytes = self.ledger.get();
        stats.connections_held = self.held.len() as u64;
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drop_reason_has_its_own_counter_and_name() {
        let mut stats = Stats::default();
        for (n, &reason) in DropReason::ALL.iter().enumerate() {
            stats.count_drop(reason, n as u64 + 1);
        }
        for (n, &reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(stats.dropped.get(reason), n as u64 + 1, "{}", reason.name());
        }
        let names: std::collections::HashSet<_> =
            DropReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), DropReason::ALL.len());
        let total = DropReason::ALL.len() as u64;
        assert_eq!(stats.publish_dropped, total * (total + 1) / 2);
    }
}
