//! Counters for $SYS and metrics. Gauges that can be derived from state (sessions,
//! in-flight, queued, retained, subscriptions) are computed on demand by
//! [`super::Engine::stats`] instead of being kept in step on every change.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub publish_received: u64,
    pub publish_sent: u64,
    /// Deliveries dropped: queue full, expired, over the client's packet size, QoS 0
    /// for an offline session or a shared group with no member online, the queue of
    /// a shared group that ended.
    pub publish_dropped: u64,
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
    /// retained messages not sent; subscriptions removed by new rules.
    pub acl_denied_publish: u64,
    pub acl_denied_subscribe: u64,
    pub acl_denied_read: u64,
    pub acl_revoked: u64,
    /// Live gauges, kept by connect and close.
    pub clients_connected: u64,
    pub clients_maximum: u64,
    /// Gauges, filled in by `Engine::stats`.
    pub clients_disconnected: u64,
    pub messages_inflight: u64,
    pub messages_queued: u64,
    /// Messages held in shared-group queues.
    pub shared_queued: u64,
    pub retained_messages: u64,
    pub subscriptions: u64,
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
        stats.shared_queued = self.group_queues.len() as u64;
        stats.retained_messages = self.retained_messages.len() as u64;
        stats.subscriptions = self.index.len() as u64;
        stats
    }
}
