//! The sans-IO broker engine: every connection's protocol state machine, sessions,
//! routing and retained messages, driven by bytes and time handed in from outside.
//!
//! Inputs: `open` a connection, `feed` it bytes, `tick` the clock, answer
//! `Authenticate` and `Auth` events with `continue_auth` / `complete_auth`, report
//! `connection_lost`. Outputs:
//! bytes per connection (`take_output`, one buffer per connection per call, which
//! is how the IO layer writes each connection once per loop tick) and a batch of
//! events for Python (`take_events`). A PUBLISH goes decode → route → per-subscriber
//! QoS state → encode inside this module with no callback out: Python runs per
//! event, never per message (docs/architecture.md, "The one rule").
//!
//! Layout. State: `connection` (per socket), `session` (outlives sockets), `queue`
//! (bounded per-session FIFO), `message` (one `Arc` per PUBLISH), `config` (the
//! limits Python fills in), `stats` (counters for $SYS and metrics). The handlers,
//! split by concern: `connect` (CONNECT, CONNACK, takeover, close, will), `auth`
//! (Python's CONNECT decision, AUTH exchanges, re-authentication), `announce` (the
//! CONNACK properties offered and the reason code for breaking each), `framing` (MQTT
//! over TCP/TLS or in WebSocket frames), `publish` (inbound QoS flows and routing),
//! `plugins` (messages set aside for a Python plugin's verdict, copies for observing
//! ones), `delivery` (outbound window, queue, resend), `alias_out` (broker → client topic
//! aliases), `subscribe` (SUBSCRIBE, UNSUBSCRIBE, retained on subscribe),
//! `retained_cursor` (retained messages a new subscription still has to receive),
//! `timers` (keep alive, expiry, will delay), `shared` (shared-group queues and
//! redistribution), `names` (names refused although they decode: Response Topic,
//! control characters), `diagnostics` (Reason Strings and User Properties the broker
//! sends, the client's Maximum Packet Size), `acl` (rules and each session's binding,
//! checked per message). The limits: `rate` and `users` (publish rates per client
//! and per user name), `hold` (reading less from a publisher), `memory` (the memory
//! budget), `retained_store` (retained payloads and their limits). Durability:
//! `persist` (the journal, the acknowledgements that wait for the store, restore and
//! snapshot), `split` (the journal split between a device and an application store),
//! `stream` (APPLICATION shared groups served through a Kafka consumer group). Scale:
//! `shards` (one of a node's shards, the bus), `cluster` (one node of a cluster),
//! `arrival` (a route or node topic record taken once per session). Around them:
//! `lifecycle` (why a connection ends, the client events logs are made of), `trace`
//! (per-client packet trace), `admin` (the admin API: paginated queries and operator
//! actions, bounded work per call), `export` (the `[stream]` records for the data
//! pipeline).
//!
//! Time is engine milliseconds (`now`), monotonic, from the caller.

mod acl;
mod admin;
mod alias_out;
mod announce;
mod application_groups;
mod arrival;
mod auth;
mod auto_subscribe;
mod bridge;
mod cluster;
mod config;
mod connect;
mod connection;
mod delivery;
mod diagnostics;
mod export;
mod framing;
mod hold;
mod lifecycle;
mod memory;
mod message;
mod names;
mod persist;
mod plugins;
mod publish;
mod queue;
mod rate;
mod retained_cursor;
mod retained_store;
mod rewrite;
mod session;
mod shards;
mod shared;
mod sparkplug;
mod split;
mod stats;
mod subscribe;
mod timers;
mod trace;
mod users;
mod validation;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

pub use admin::{
    AdminError, ConnectionInfo, Page, RetainedInfo, SessionFilter, SessionInfo, SubscriptionInfo,
    MAX_PAGE, SCAN_BUDGET,
};
pub use auto_subscribe::AutoSubscription;
pub use bridge::{BridgeLink, BridgeTopic};
pub use cluster::crossing_entries;
pub use config::{DropPolicy, EngineConfig, Features, PublishRateLimits, Redirect, RetainedLimits};
pub use export::{StreamConfig, StreamKey, StreamSettingError};
pub use framing::Framing;
pub use lifecycle::DisconnectReason;
pub use message::Message;
pub use persist::RestoreReport;
pub use plugins::{PluginFilters, PluginMessage, Verdict, OBSERVED_MAX};
pub use rewrite::{RewriteAction, RewriteRule};
pub use sparkplug::Sparkplug;
pub use split::{ApplicationOp, JournalSplit, Split};
pub use stats::{AuthFailures, DropReason, Drops, PacketCounts, Stats};
pub use trace::{PacketSummary, PREVIEW_BYTES};
pub use validation::{OnInvalid, ValidationRule};

use crate::codec::{Packet, QoS};
use crate::durability::record::Journal;
use crate::retain::RetainedIndex;
use crate::topic::{GroupRef, MatchResult, ShareStrategy, SubscriptionIndex};
use connection::{ConnState, Connection};
use retained_store::Origin;
use session::Session;

/// A connection handle, chosen by the engine; reused after `connection_lost`.
pub type ConnId = u32;

/// One delivery of a message to one session.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub message: Arc<Message>,
    /// The delivery QoS: the lower of the message's and the subscription's.
    pub qos: QoS,
    pub retain: bool,
    pub subscription_ids: Vec<u32>,
    /// The session's delivery sequence and the packet id derived from it, given by
    /// `deliver` to QoS 1/2 deliveries (0 until then and for QoS 0).
    pub sequence: u64,
    pub packet_id: u16,
    /// Read back from a store: it may have reached the client before the restart,
    /// so it is sent with DUP [MQTT-3.3.1-1].
    pub restored: bool,
    /// The shared group it came through: such a delivery goes back to the group
    /// when its member's connection ends unacknowledged (see `shared`).
    pub group: Option<GroupRef>,
    /// A application group's delivery: its consumer's token, reported when done with
    /// and never journaled (see `stream`).
    pub application_token: Option<u64>,
    /// In a cluster: how far into the subscription topic the node that matched the
    /// message had read (`cluster`: a moved session's stub forwards only what that
    /// node could not yet route to the session's new owner).
    pub seen: u64,
}

impl Outgoing {
    pub fn new(
        message: Arc<Message>,
        qos: QoS,
        retain: bool,
        subscription_ids: Vec<u32>,
    ) -> Outgoing {
        Outgoing {
            message,
            qos,
            retain,
            subscription_ids,
            sequence: 0,
            packet_id: 0,
            restored: false,
            group: None,
            application_token: None,
            seen: 0,
        }
    }
}

/// What Python is asked to do, in batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Decide a CONNECT: answer with [`Engine::complete_auth`], or with
    /// [`Engine::continue_auth`] when it carries an Authentication Method.
    Authenticate {
        conn: ConnId,
        /// The connection's token, to bring back in the answer.
        token: u64,
        client_id: String,
        username: Option<String>,
        password: Option<Vec<u8>>,
        protocol: u8,
        clean_start: bool,
        /// The CONNECT carries a will (a cluster stores it even for a clean session).
        has_will: bool,
        /// Authentication Method and Data (MQTT 5 enhanced authentication).
        method: Option<String>,
        data: Option<Vec<u8>>,
    },
    /// The client's AUTH in an exchange: 0x18 (continue) with its data, or 0x19
    /// (`reauthenticate`: a connected client starts again with the same method).
    /// Answered like `Authenticate`.
    Auth {
        conn: ConnId,
        token: u64,
        reauthenticate: bool,
        data: Option<Vec<u8>>,
    },
    /// Close the transport once its pending output is written.
    Close { conn: ConnId },
    /// The broker refused or ended a connection for `reason` (bad input, a protocol
    /// violation, a refused CONNECT, keep alive): logged once by Python.
    Rejected {
        conn: ConnId,
        reason: crate::codec::ReasonCode,
        detail: &'static str,
    },
    /// The journal has records: take them (`take_journal`) and store them. Sent
    /// once per batch, not per record.
    Persist,
    /// A member of an application group came online for it or stopped
    /// (engine/application_groups.rs): start or stop its consumer.
    ApplicationMember {
        client: String,
        share_filter: String,
        online: bool,
    },
    /// The `[stream]` export has records (`export`): take them (`take_stream`) and
    /// hand them to the sink. Sent once per batch, not per record.
    StreamReady,
    /// Streamed deliveries were done with: take their tokens (`take_application_done`).
    /// Sent once until taken.
    ApplicationDone,
    /// Plugins have messages (`plugins`): take them (`take_plugin_batch`). Sent once
    /// until taken.
    PluginReady,
    /// The connection's input is no longer held (`hold`): read its transport again.
    ResumeReading { conn: ConnId },
    /// Call [`Engine::wake`] at engine time `at` (a held connection's rate refills).
    Wake { at: u64 },
    /// A CONNECT was accepted and its session bound (`lifecycle`; only with
    /// `client_events`): the user name authentication settled on, the keep alive and
    /// session expiry in force (after the broker's caps).
    ClientConnected {
        conn: ConnId,
        client_id: String,
        username: Option<String>,
        protocol: u8,
        keep_alive: u16,
        clean_start: bool,
        session_expiry: u32,
        session_present: bool,
    },
    /// A connected client's connection ended, and why (only with `client_events`).
    ClientDisconnected {
        conn: ConnId,
        client_id: String,
        reason: DisconnectReason,
    },
    /// A SUBSCRIBE was answered: each filter with the QoS asked for and its SUBACK
    /// code (only with `client_events`).
    Subscribed {
        conn: ConnId,
        client_id: String,
        filters: Vec<(String, u8, crate::codec::ReasonCode)>,
    },
    /// An UNSUBSCRIBE was answered (only with `client_events`).
    Unsubscribed {
        conn: ConnId,
        client_id: String,
        filters: Vec<String>,
    },
    /// A client's PUBLISH failed a `[[validation.rules]]` schema (`validation`):
    /// logged by Python, at most once a second per rule; `unlogged` failures of
    /// that rule came since the last one logged.
    PayloadInvalid {
        client_id: String,
        topic: String,
        rule: usize,
        filter: String,
        problem: String,
        action: &'static str,
        unlogged: u64,
    },
    /// A packet read from (`inbound`) or written to a traced client (`trace`).
    Trace {
        conn: ConnId,
        client_id: String,
        inbound: bool,
        packet: PacketSummary,
    },
}

pub struct Engine {
    config: EngineConfig,
    conns: Vec<Option<Connection>>,
    free_conns: Vec<ConnId>,
    sessions: Vec<Option<Session>>,
    free_sessions: Vec<u32>,
    by_client_id: HashMap<Box<str>, u32>,
    index: SubscriptionIndex,
    matches: MatchResult,
    retained: RetainedIndex,
    retained_messages: retained_store::RetainedStore,
    next_retained_id: u64,
    /// Messages of shared groups waiting for a member that can take them.
    group_queues: shared::GroupQueues,
    /// Shared groups served through the application store's consumer groups.
    application_groups: application_groups::ApplicationGroups,
    /// Connections with output waiting for `take_output`, each once.
    dirty: Vec<ConnId>,
    events: Vec<Event>,
    stats: Stats,
    next_assigned_id: u64,
    assigned_id_prefix: Box<str>,
    journal: Journal,
    /// Set when the engine is one of a node's shards (`shards.rs`).
    shards: Option<shards::Shards>,
    /// Every wait for a confirmation (`durability::barrier`): acknowledgements and
    /// SUBACKs per connection, sessions holding deliveries of a message whose packet
    /// id is not stored yet (`Message::held_for_batch`), BUS_ACKs owed to shards.
    barrier: crate::durability::Barrier<ConnId, persist::Reply>,
    /// The store applies a batch per client, not whole (Redis; the embedded log
    /// is whole): a shard then keeps its bus cursors per session (`shards.rs`).
    store_per_client: bool,
    /// Connections whose deliveries stopped at the engine's write high-water mark:
    /// drained again once `take_output` has emptied their buffer.
    refill: Vec<ConnId>,
    /// The latest engine time an input brought, for work that `journal_done` and
    /// `take_output` release (they carry no time of their own).
    clock: u64,
    persist_signalled: bool,
    /// Pending records that raise `Persist` again (a store's batch size); 0 never.
    journal_flush_records: usize,
    persist_full_signalled: bool,
    /// Unix milliseconds minus engine milliseconds, for expiry times in the journal.
    wall_offset: i64,
    /// `[auto_subscribe]`'s subscriptions, made at every CONNECT (`auto_subscribe`).
    auto_subscriptions: Vec<auto_subscribe::AutoSubscription>,
    rewrite_rules: Vec<rewrite::RewriteRule>,
    validation_rules: Vec<validation::ValidationRule>,
    bridges: Vec<bridge::OpenBridge>,
    plugins: plugins::Plugins,
    next_token: u64,
    /// The property list of outbound aliased PUBLISHes, reused (`alias_out`).
    alias_scratch: Vec<crate::codec::Property>,
    /// Bytes in every delivery queue (`memory`), shared with the queues.
    ledger: memory::Ledger,
    /// Bytes encoded into connections' output and not yet taken (`memory`).
    output_bytes: u64,
    /// Per user name limits' state (`users`).
    users: users::Users,
    /// Connections whose input is held (`hold`), and how many of them for memory.
    held: Vec<ConnId>,
    memory_held: usize,
    /// When the first of the connections now held for memory was held.
    memory_held_since: u64,
    /// The earliest `Event::Wake` asked for and not yet delivered (`hold`).
    wake_at: Option<u64>,
    /// The access-control rules (`acl`).
    acl: acl::AclState,
    /// Client ids whose packets are traced (`trace`).
    traced: std::collections::HashSet<Box<str>>,
    /// The `[stream]` export (`export`); None while off.
    stream: Option<Box<export::Stream>>,
}

/// A connection's output buffer up to this capacity is handed out whole by
/// `take_output` (`take_written`).
const SMALL_OUTPUT: usize = 64;

/// The bytes written to `out`, taken. A buffer that never grew past a few control
/// packets (CONNACK, SUBACK, PINGRESP) goes whole and `out` is left without an
/// allocation: `split` would leave its few spare bytes, and the shared header it
/// adds, with every idle connection (`docs/memory.md`). A larger buffer is split, so
/// a busy connection keeps its capacity for the next writes.
fn take_written(out: &mut BytesMut) -> BytesMut {
    if out.capacity() <= SMALL_OUTPUT {
        std::mem::take(out)
    } else {
        out.split()
    }
}

impl Engine {
    pub fn new(config: EngineConfig, share_strategy: ShareStrategy) -> Engine {
        Engine {
            conns: Vec::new(),
            free_conns: Vec::new(),
            sessions: Vec::new(),
            free_sessions: Vec::new(),
            by_client_id: HashMap::new(),
            index: SubscriptionIndex::new(share_strategy),
            matches: MatchResult::new(),
            retained: RetainedIndex::new(),
            retained_messages: retained_store::RetainedStore::default(),
            next_retained_id: 1,
            group_queues: shared::GroupQueues::default(),
            application_groups: application_groups::ApplicationGroups::default(),
            dirty: Vec::new(),
            events: Vec::new(),
            stats: Stats::default(),
            next_assigned_id: 1,
            assigned_id_prefix: "ferromq-".into(),
            journal: Journal::new(config.journal),
            shards: None,
            barrier: Default::default(),
            store_per_client: false,
            refill: Vec::new(),
            clock: 0,
            persist_signalled: false,
            journal_flush_records: 0,
            persist_full_signalled: false,
            wall_offset: 0,
            auto_subscriptions: Vec::new(),
            rewrite_rules: Vec::new(),
            validation_rules: Vec::new(),
            bridges: Vec::new(),
            plugins: plugins::Plugins::default(),
            next_token: 1,
            alias_scratch: Vec::new(),
            ledger: memory::Ledger::default(),
            output_bytes: 0,
            users: users::Users::default(),
            held: Vec::new(),
            memory_held: 0,
            memory_held_since: 0,
            wake_at: None,
            acl: acl::AclState::default(),
            traced: std::collections::HashSet::new(),
            stream: None,
            config,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Register an accepted socket; it must send CONNECT within the connect timeout.
    pub fn open(&mut self, now: u64) -> ConnId {
        self.open_framed(now, Framing::Mqtt)
    }

    /// `open`, for a connection whose bytes carry MQTT in `framing` (`framing.rs`).
    pub fn open_framed(&mut self, now: u64, framing: Framing) -> ConnId {
        self.clock = now;
        let id = self.free_conns.pop().unwrap_or(self.conns.len() as ConnId);
        let mut conn = Connection::new(
            self.config.max_packet_size,
            now,
            self.config.connect_timeout_ms,
            self.next_token,
        );
        if framing == Framing::WebSocket {
            conn.websocket = Some(Box::new(framing::WebSocket::new(
                self.config.max_packet_size,
            )));
        }
        self.next_token += 1;
        if id as usize == self.conns.len() {
            self.conns.push(Some(conn));
        } else {
            self.conns[id as usize] = Some(conn);
        }
        self.stats.connections_opened += 1;
        id
    }

    /// Decode and handle every complete packet at the front of `data`; returns how
    /// many bytes were used (the caller keeps the rest for the next call). After a
    /// decode error the connection is closed and all of `data` counts as used.
    pub fn feed(&mut self, conn_id: ConnId, data: &[u8], now: u64) -> usize {
        self.clock = now;
        let Some(conn) = self
            .conns
            .get_mut(conn_id as usize)
            .and_then(Option::as_mut)
        else {
            return data.len();
        };
        if conn.is_closed() {
            return data.len();
        }
        if conn.websocket.is_some() {
            return self.feed_websocket(conn_id, data, now);
        }
        let received = &mut self.stats.received;
        let (packets, consumed, error) = conn
            .decoder
            .decode_slice_with(data, |kind, len| received.count(kind, len));
        if self.handle_decoded(conn_id, packets, consumed, error, now) {
            consumed
        } else {
            data.len()
        }
    }

    /// Handle the packets one read decoded (`consumed` bytes of them), then its decode
    /// error if any: false when that error closed the connection.
    fn handle_decoded(
        &mut self,
        conn_id: ConnId,
        packets: Vec<Packet>,
        consumed: usize,
        error: Option<crate::codec::DecodeError>,
        now: u64,
    ) -> bool {
        let Some(conn) = self.conn_mut(conn_id) else {
            return false;
        };
        // Keep alive counts whole Control Packets [MQTT-3.1.2-24]: bytes of a packet
        // still arriving do not keep a connection alive.
        if !packets.is_empty() {
            conn.last_received = now;
        }
        self.stats.bytes_received += consumed as u64;
        for packet in packets {
            let (traced, held) = match self.conn_mut(conn_id) {
                None => break,
                Some(conn) if conn.is_closed() => break,
                Some(conn) => (conn.traced, conn.hold.is_some()),
            };
            if traced {
                self.trace_packet(conn_id, true, PacketSummary::of(&packet));
            }
            if held && !hold::passes_hold(&packet) {
                // Its input is held (`hold`): the packet waits its turn.
                if let Some(conn) = self.conn_mut(conn_id) {
                    conn.parked.push_back(packet);
                }
            } else {
                self.handle_packet(conn_id, packet, now);
            }
            self.stats.packets_received += 1;
        }
        if let Some(err) = error {
            self.stats.protocol_errors += 1;
            if err == crate::codec::NEWER_PROTOCOL_LEVEL {
                if let Some(conn) = self.conn_mut(conn_id) {
                    conn.version = crate::codec::ProtocolVersion::V5; // refused as 5.0 does: 0x84
                }
            }
            self.refuse_with(conn_id, err.reason, err.detail, now);
            return false;
        }
        true
    }

    /// The socket is gone (closed by the peer, an error, or after a `Close` event).
    /// An unannounced end counts as abnormal: the will is published.
    ///
    /// The id is free from here on, so no event naming it may stay queued: a `Close`
    /// that Python has not taken yet would otherwise close the next socket `open`
    /// hands this id to (a reconnect in the same loop tick).
    pub fn connection_lost(&mut self, conn_id: ConnId, now: u64) {
        if self.conn_mut(conn_id).is_some_and(|c| !c.is_closed()) {
            self.close_connection(conn_id, DisconnectReason::SocketClosed, now);
        }
        self.events.retain(|event| match event {
            Event::Authenticate { conn, .. }
            | Event::Auth { conn, .. }
            | Event::Close { conn }
            | Event::ResumeReading { conn } => *conn != conn_id,
            // Still worth logging after the socket is gone; it acts on nothing.
            Event::Rejected { .. }
            | Event::Wake { .. }
            | Event::Persist
            | Event::ApplicationMember { .. }
            | Event::ApplicationDone
            | Event::StreamReady
            | Event::PluginReady
            | Event::ClientConnected { .. }
            | Event::ClientDisconnected { .. }
            | Event::Subscribed { .. }
            | Event::Unsubscribed { .. }
            | Event::Trace { .. }
            | Event::PayloadInvalid { .. } => true,
        });
        self.barrier.replies.forget(conn_id);
        self.held.retain(|&held| held != conn_id);
        if let Some(slot) = self.conns.get_mut(conn_id as usize) {
            if let Some(conn) = slot.take() {
                self.output_bytes -= conn.out.len() as u64;
                self.free_conns.push(conn_id);
            }
        }
    }

    /// The transport's write buffer went above (false) or back below (true) its
    /// high-water mark. A connection that is not writable gets its deliveries queued.
    pub fn set_writable(&mut self, conn_id: ConnId, writable: bool, now: u64) {
        self.clock = now;
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        conn.writable = writable;
        if let (true, Some(session)) = (writable, conn.session()) {
            self.drain_queue(session, now);
        }
    }

    /// Publish a message from the broker itself ($SYS); returns the sessions reached.
    pub fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        now: u64,
    ) -> usize {
        let properties = crate::codec::Properties::new();
        self.publish_with_properties(topic, payload, qos, retain, &properties, now)
    }

    /// `publish` with MQTT 5.0 properties (the admin API): forwarded to v5
    /// subscribers as a client's would be (`Message::from_publish`).
    pub fn publish_with_properties(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        properties: &crate::codec::Properties,
        now: u64,
    ) -> usize {
        let message = Message::from_publish(topic, payload, qos, retain, properties, None, now);
        let message = Arc::new(message);
        if retain {
            // The broker's own retained messages ($SYS) are outside the limits.
            self.store_retained(&message, Origin::Broker, now);
        }
        let topic = message.topic.clone();
        self.fan_out(message, now) + self.remote_matches_beyond_routes(&topic)
    }

    /// Each dirty connection's pending output, once, as one buffer. A connection
    /// whose deliveries stopped at the write high-water mark gets the next ones
    /// into its emptied buffer, for the next call (paced by the socket: a paused
    /// transport makes it unwritable until it resumes).
    pub fn take_output(&mut self, mut write: impl FnMut(ConnId, Bytes)) {
        for conn_id in std::mem::take(&mut self.dirty) {
            if let Some(conn) = self
                .conns
                .get_mut(conn_id as usize)
                .and_then(Option::as_mut)
            {
                conn.flush_queued = false;
                // The MQTT bytes leave the engine's count, framed or not.
                self.output_bytes -= conn.out.len() as u64;
                let bytes = match conn.websocket.as_deref_mut() {
                    None if conn.out.is_empty() => continue,
                    None => take_written(&mut conn.out).freeze(),
                    // The MQTT bytes are copied behind the frame header; the buffer
                    // goes, as a TCP connection's does, so an idle one keeps none.
                    Some(ws) => ws.wrap(&take_written(&mut conn.out)),
                };
                if !bytes.is_empty() {
                    self.stats.bytes_sent += bytes.len() as u64;
                    write(conn_id, bytes);
                }
            }
        }
        for conn_id in std::mem::take(&mut self.refill) {
            let Some(conn) = self.conn_mut(conn_id) else {
                continue;
            };
            conn.refill_queued = false;
            if let Some(session) = conn.session() {
                self.drain_queue(session, self.clock);
            }
        }
        self.release_memory_holds();
    }

    pub fn has_output(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        let pending = self.journal.pending_records();
        if pending > 0 && !self.persist_signalled {
            self.persist_signalled = true;
            self.events.push(Event::Persist);
        } else if self.journal_is_full(pending) {
            // The batch reached the store's size: write it now, not at the timer.
            self.persist_full_signalled = true;
            self.events.push(Event::Persist);
        }
        self.signal_stream();
        std::mem::take(&mut self.events)
    }

    /// Stop: v5 clients get DISCONNECT 0x8B, wills are published, sessions are kept.
    pub fn shutdown(&mut self, now: u64) {
        for conn_id in 0..self.conns.len() as ConnId {
            if self.conn_mut(conn_id).is_some_and(|c| !c.is_closed()) {
                self.disconnect_with(conn_id, crate::codec::ReasonCode::ServerShuttingDown);
                self.close_connection(conn_id, DisconnectReason::ServerShutdown, now);
            }
        }
    }

    fn conn_mut(&mut self, conn_id: ConnId) -> Option<&mut Connection> {
        self.conns
            .get_mut(conn_id as usize)
            .and_then(Option::as_mut)
    }

    fn session_mut(&mut self, session: u32) -> Option<&mut Session> {
        self.sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
    }

    /// Encode `packet` into the connection's output. False when the connection is
    /// gone or the packet exceeds the client's Maximum Packet Size [MQTT-3.1.2-25]
    /// even without its Reason String and User Properties (`diagnostics`).
    fn write(&mut self, conn_id: ConnId, packet: &Packet) -> bool {
        let Some(conn) = self
            .conns
            .get_mut(conn_id as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if conn.is_closed() {
            return false;
        }
        let before = conn.out.len();
        if !diagnostics::encode_fitting(packet, conn.version, &mut conn.out, conn.client_max_packet)
        {
            return false;
        }
        let written = conn.out.len() - before;
        self.output_bytes += written as u64;
        self.stats.sent.count(packet.packet_type(), written);
        if !conn.flush_queued {
            conn.flush_queued = true;
            self.dirty.push(conn_id);
        }
        if conn.traced {
            self.trace_packet(conn_id, false, PacketSummary::of(packet));
        }
        true
    }

    /// List the connection among those `take_output` flushes, once.
    fn mark_dirty(&mut self, conn_id: ConnId) {
        if let Some(conn) = self.conn_mut(conn_id) {
            if !conn.flush_queued {
                conn.flush_queued = true;
                self.dirty.push(conn_id);
            }
        }
    }

    fn handle_packet(&mut self, conn_id: ConnId, packet: Packet, now: u64) {
        use crate::codec::ReasonCode;
        let state = match self.conn_mut(conn_id) {
            Some(conn) => &mut conn.state,
            None => return,
        };
        match (state, packet) {
            (ConnState::AwaitingConnect { .. }, Packet::Connect(connect)) => {
                self.handle_connect(conn_id, *connect, now)
            }
            (ConnState::Authenticating(_), packet) => {
                self.handle_while_authenticating(conn_id, packet, now)
            }
            (ConnState::Connected { session }, packet) => {
                let session = *session;
                self.handle_connected(conn_id, session, packet, now)
            }
            (ConnState::AwaitingConnect { .. } | ConnState::Closed, _) => {
                self.refuse(conn_id, ReasonCode::ProtocolError, now)
            }
        }
    }

    fn handle_connected(&mut self, conn_id: ConnId, session: u32, packet: Packet, now: u64) {
        use crate::codec::ReasonCode;
        match packet {
            Packet::Publish(publish) => self.handle_publish(conn_id, session, publish, now),
            Packet::PubAck(ack) => self.handle_puback(session, ack.packet_id, now),
            Packet::PubRec(ack) => self.handle_pubrec(conn_id, session, ack, now),
            Packet::PubRel(ack) => self.handle_pubrel(conn_id, session, ack.packet_id),
            Packet::PubComp(ack) => self.handle_pubcomp(session, ack.packet_id, now),
            Packet::Subscribe(subscribe) => self.handle_subscribe(conn_id, session, subscribe, now),
            Packet::Unsubscribe(unsubscribe) => {
                self.handle_unsubscribe(conn_id, session, unsubscribe)
            }
            Packet::PingReq => {
                self.write(conn_id, &Packet::PingResp);
            }
            // The answer to the PINGREQ Python sends on a bridge (`bridge`).
            Packet::PingResp if self.conn_mut(conn_id).is_some_and(|c| c.bridge) => {}
            Packet::Disconnect(disconnect) => {
                self.handle_disconnect(conn_id, session, disconnect, now)
            }
            Packet::Auth(auth) => self.handle_reauth(conn_id, auth, now),
            // A second CONNECT [MQTT-3.1.0-2] and packets only a server sends are
            // protocol errors.
            _ => self.refuse(conn_id, ReasonCode::ProtocolError, now),
        }
    }
}
