//! The engine's limits and session settings, filled in by Python from the config file
//! (`ferromq.engine.engine_settings`): the defaults live in `config.py` only.

pub use super::announce::{Features, Redirect};
pub use super::sparkplug::Sparkplug;

/// What to drop when a session's queue is full. QoS 0 messages always go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DropPolicy {
    /// Make room by dropping the oldest queued message.
    #[default]
    DropOldest,
    /// Keep the queue as it is and drop the new message.
    RefuseNewest,
}

crate::choice::named!(DropPolicy, "drop policy", [
    "drop_oldest" => DropPolicy::DropOldest,
    "refuse_newest" => DropPolicy::RefuseNewest,
]);

/// Publish rates (`rate`), each 0 for none: per connection and per user name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishRateLimits {
    pub messages_per_client: u32,
    pub bytes_per_client: u64,
    pub messages_per_user: u32,
    pub bytes_per_user: u64,
}

impl PublishRateLimits {
    pub fn per_user(&self) -> bool {
        self.messages_per_user > 0 || self.bytes_per_user > 0
    }
}

/// Retained-message limits (`retained_store`), each 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetainedLimits {
    pub max_messages: u64,
    pub max_bytes: u64,
    pub max_messages_per_user: u64,
    pub max_bytes_per_user: u64,
    /// Longest a retained message is kept, in milliseconds.
    pub max_expiry_ms: u64,
}

impl RetainedLimits {
    pub fn per_user(&self) -> bool {
        self.max_messages_per_user > 0 || self.max_bytes_per_user > 0
    }
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest packet accepted, in bytes, checked from the length header.
    pub max_packet_size: u32,
    /// In-flight window per session: the 3.1.1 value, and the cap on a v5 client's
    /// Receive Maximum.
    pub max_inflight: u16,
    /// The Receive Maximum the broker announces to v5 clients (inbound QoS 2 window).
    pub receive_maximum: u16,
    /// Topic Alias Maximum announced to v5 clients; 0 disables inbound aliases.
    pub max_topic_alias: u16,
    /// Largest keep alive accepted in seconds; 0 accepts any. v5 clients are told the
    /// capped value through Server Keep Alive.
    pub max_keepalive: u16,
    /// Milliseconds a new connection has to send CONNECT.
    pub connect_timeout_ms: u64,
    /// Messages queued per session beyond the in-flight window (at most 65,535).
    pub queue_limit: u16,
    pub drop_policy: DropPolicy,
    /// Bytes queued per session (`queue`, `memory::delivery_bytes`); 0: no bound.
    pub max_queued_bytes: u64,
    /// Bytes of queued deliveries and unsent output above which publishers are read
    /// less (`memory`); 0: no budget.
    pub memory_budget: u64,
    pub publish_rate: PublishRateLimits,
    /// Subscriptions one session may hold; 0: any number.
    pub max_subscriptions_per_client: u32,
    pub retained_limits: RetainedLimits,
    /// Queue QoS 0 messages for offline persistent sessions.
    pub queue_qos0_offline: bool,
    /// Cap on a v5 Session Expiry Interval in seconds; `u32::MAX` means no cap.
    pub max_session_expiry: u32,
    /// Session expiry for 3.1.1 clients with clean session 0, in seconds
    /// (`u32::MAX`: never).
    pub persistent_session_expiry: u32,
    /// Longest client identifier accepted.
    pub max_client_id_length: usize,
    /// Accept control characters (U+0001..U+001F, U+007F..U+009F) in client ids, user
    /// names, topic names and topic filters; refused by default (see `names`).
    pub allow_control_characters: bool,
    /// Ask Python to authenticate every CONNECT (an `Authenticate` event); when false
    /// every CONNECT is accepted inside the engine.
    pub authenticate: bool,
    /// Output bytes buffered for a connection above which it counts as not writable.
    pub write_high_water: usize,
    /// Journal durable state for a store, and hold QoS 1/2 acknowledgements until
    /// the store confirms it (durability/record.rs); off keeps everything in memory.
    pub journal: bool,
    /// Client identifiers starting with one of these are APPLICATION clients; the
    /// rest are DEVICE clients (seed 000).
    pub application_client_prefixes: Vec<String>,
    /// Serve shared groups of APPLICATION clients through the application store's
    /// consumer groups (engine/application_groups.rs): on when that store is Kafka.
    pub serve_application_groups: bool,
    /// What the broker offers and announces in CONNACK (see `announce`).
    pub features: Features,
    /// Report each connect, disconnect, subscribe and unsubscribe as an event
    /// (`lifecycle`): on while Python logs them (at info).
    pub client_events: bool,
    /// Sparkplug B "Aware" (`sparkplug`): birth certificates, NDEATH timestamps.
    pub sparkplug: Sparkplug,
}

/// The Rust tests' fixture (feature `test-fixtures`, on for this crate's own tests),
/// not a production default: the broker's settings, defaults included, come only from
/// Python's config schema (`python/ferromq/config.py`) through the binding's
/// `EngineSettings`, whose every field is required.
#[cfg(any(test, feature = "test-fixtures"))]
impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            max_packet_size: 1024 * 1024,
            max_inflight: 1024,
            receive_maximum: 1024,
            max_topic_alias: 64,
            max_keepalive: 0,
            connect_timeout_ms: 10_000,
            queue_limit: 1000,
            drop_policy: DropPolicy::DropOldest,
            max_queued_bytes: 0,
            memory_budget: 0,
            publish_rate: PublishRateLimits::default(),
            max_subscriptions_per_client: 0,
            retained_limits: RetainedLimits::default(),
            queue_qos0_offline: false,
            max_session_expiry: u32::MAX,
            persistent_session_expiry: 7 * 24 * 3600,
            max_client_id_length: 65_535,
            allow_control_characters: false,
            authenticate: false,
            write_high_water: 1024 * 1024,
            journal: false,
            application_client_prefixes: Vec::new(),
            serve_application_groups: false,
            features: Features::default(),
            client_events: false,
            sparkplug: Sparkplug::default(),
        }
    }
}
