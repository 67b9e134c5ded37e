//! The `[stream]` export: a record for every accepted PUBLISH whose topic matches
//! the stream's filters and for each client lifecycle event, appended in Avro
//! (`export::avro`) to the current batch's two record lists (`export::ExportBatch`:
//! messages, events) as it happens, and handed out per batch (`take_stream`).
//!
//! - **Off** (`set_stream(None)`, the default): `stream` is `None`, one branch per
//!   PUBLISH and per event site, nothing else.
//! - **Matching**: the default filter `#` is one check (the topic does not start
//!   with `$` [MQTT-4.7.2-1]); other filters live in a `SubscriptionIndex` of their
//!   own (the broker's matcher, one pseudo-client), matched once per PUBLISH. A
//!   `$SYS/...` topic is never streamed, whatever the filters; the broker's own
//!   messages (`Engine::publish`) are not client PUBLISHes and are never streamed.
//! - **Ids**: 16 bytes, the boot id (the engine's start, wall clock microseconds,
//!   big-endian) then a sequence from 0 over both kinds (big-endian): unique per
//!   node across restarts while the clock moves forward.
//! - **Time**: the engine's millisecond clock plus the wall offset
//!   (`set_wall_clock`), in microseconds (millisecond precision).
//! - **Listener**: the name Python gives each connection as it opens
//!   (`set_listener`), for messages and for the events of a connected client.
//!   **Peer**: known only where Python authenticates the CONNECT (`set_peer`),
//!   for `connected` and `auth_refused`.
//! - **Acknowledgements** (`acked`: the file sink, Kafka with `after_kafka`): a
//!   PUBACK/PUBREC written while any stream batch is unconfirmed waits in
//!   the barrier for that batch as well as its journal batch; `stream_done(n)`
//!   confirms batches up to `n` and releases acks in arrival order [MQTT-4.6.0-2]
//!   (`persist::release_replies`). Not acked: nothing waits. The record bytes
//!   of batches handed out and not confirmed count in the memory budget
//!   (`session.memory_budget`), so while a sink cannot deliver (Kafka away with
//!   `after_kafka`) publishers, QoS 0 ones too, are held at the budget instead of
//!   the batches growing without bound.
//!
//! Batches are numbered from 1 like the journal's; `Event::StreamReady` is raised
//! once when a batch gets its first record (not per record).

use std::fmt;

use crate::codec::{Connect, Properties, Publish, ReasonCode, SubscriptionOptions};
use crate::export::avro::{Kind, Record};
use crate::export::{ExportBatch, RecordList};
use crate::topic::{MatchResult, ShareStrategy, SubscriptionIndex};

use super::message::Message;
use super::stats::DropReason;
use super::{Engine, Event};

/// What a message record's Kafka key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKey {
    Topic,
    Client,
    /// One topic level, 0-based (a device id); a topic with fewer levels uses the
    /// whole topic.
    Level(usize),
}

impl std::str::FromStr for StreamKey {
    type Err = StreamSettingError;

    /// `topic`, `client` or `level:N`.
    fn from_str(name: &str) -> Result<StreamKey, StreamSettingError> {
        match name {
            "topic" => Ok(StreamKey::Topic),
            "client" => Ok(StreamKey::Client),
            _ => name
                .strip_prefix("level:")
                .and_then(|n| n.parse().ok())
                .map(StreamKey::Level)
                .ok_or_else(|| {
                    StreamSettingError(format!(
                        "stream.key: expected \"topic\", \"client\" or \"level:N\", got {name:?}"
                    ))
                }),
        }
    }
}

/// A `[stream]` setting the engine cannot use; the text names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettingError(pub String);

impl fmt::Display for StreamSettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StreamSettingError {}

/// The `[stream]` settings the engine applies.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Topic filters whose messages are streamed; `["#"]` is every topic.
    pub filters: Vec<String>,
    /// Lifecycle events too.
    pub events: bool,
    /// The node's id, in every record.
    pub node: String,
    pub key: StreamKey,
    /// Hold PUBACK/PUBREC until `stream_done` covers the batch (see the header).
    pub acked: bool,
    /// The engine's start, wall clock microseconds: the first half of every id.
    pub boot_id_us: u64,
}

/// The stream's state: its filters, the batch being filled and the bookkeeping.
pub(super) struct Stream {
    config: StreamConfig,
    /// None for `#` alone (one check per PUBLISH).
    filters: Option<Box<(SubscriptionIndex, MatchResult)>>,
    sequence: u64,
    /// The batch being filled (from 1) and the newest one the sink confirmed.
    batch: u64,
    done: u64,
    messages: RecordList,
    events: RecordList,
    signalled: bool,
    /// Acked: each batch handed out and not confirmed, with its record bytes, and
    /// their sum, which the memory budget counts (`memory::memory_used`).
    unconfirmed: std::collections::VecDeque<(u64, u64)>,
    unconfirmed_bytes: u64,
}

impl Stream {
    fn new(config: StreamConfig) -> Result<Stream, StreamSettingError> {
        let filters = if config.filters.iter().all(|f| f == "#") && !config.filters.is_empty() {
            None
        } else {
            let mut index = SubscriptionIndex::new(ShareStrategy::default());
            for filter in &config.filters {
                let refused =
                    |why: &str| StreamSettingError(format!("stream.topics: {filter:?} {why}"));
                if filter.starts_with("$share/") {
                    return Err(refused("is a shared subscription, not a topic filter"));
                }
                index
                    .subscribe(0, filter, SubscriptionOptions::default(), None)
                    .map_err(|e| refused(&format!("is not a valid topic filter: {e}")))?;
            }
            Some(Box::new((index, MatchResult::new())))
        };
        Ok(Stream {
            config,
            filters,
            sequence: 0,
            batch: 1,
            done: 0,
            messages: RecordList::default(),
            events: RecordList::default(),
            signalled: false,
            unconfirmed: std::collections::VecDeque::new(),
            unconfirmed_bytes: 0,
        })
    }

    fn matches(&mut self, topic: &str) -> bool {
        match self.filters.as_deref_mut() {
            None => !topic.starts_with('$'),
            Some((index, result)) => {
                if topic.starts_with("$SYS") {
                    return false;
                }
                index.match_topic(topic, None, result);
                !result.is_empty()
            }
        }
    }

    fn next_id(&mut self) -> [u8; 16] {
        let mut id = [0; 16];
        id[..8].copy_from_slice(&self.config.boot_id_us.to_be_bytes());
        id[8..].copy_from_slice(&self.sequence.to_be_bytes());
        self.sequence += 1;
        id
    }

    fn message_key<'a>(&self, topic: &'a str, client_id: &'a str) -> &'a [u8] {
        match self.config.key {
            StreamKey::Topic => topic.as_bytes(),
            StreamKey::Client => client_id.as_bytes(),
            StreamKey::Level(n) => topic.split('/').nth(n).unwrap_or(topic).as_bytes(),
        }
    }

    /// Append `record` (its id and node filled in here) to the messages or events.
    fn push(&mut self, message: bool, key: &[u8], record: Record<'_>) {
        let id = self.next_id();
        let record = Record {
            id,
            node: &self.config.node,
            ..record
        };
        let list = if message {
            &mut self.messages
        } else {
            &mut self.events
        };
        list.push_with(key, record.time_us.div_euclid(1000), |buf| {
            record.encode(buf)
        });
    }

    fn pending(&self) -> bool {
        !self.messages.is_empty() || !self.events.is_empty()
    }

    /// The batch acknowledgements written now must wait for; None when nothing
    /// waits (not acked, or the sink has everything).
    pub(super) fn unconfirmed_batch(&self) -> Option<u64> {
        if !self.config.acked {
            return None;
        }
        let covering = if self.pending() {
            self.batch
        } else {
            self.batch - 1
        };
        (covering > self.done).then_some(covering)
    }

    /// True while batch `n` is not confirmed (0: no batch, never waits).
    pub(super) fn has_unconfirmed_at(&self, n: u64) -> bool {
        n > self.done
    }
}

/// A record's fields before the stream fills in id and node.
fn record(kind: Kind, time_us: i64) -> Record<'static> {
    Record::new([0; 16], kind, time_us, "")
}

impl Engine {
    /// Start the stream with `config`, or stop it (`None`). Records not yet taken
    /// are dropped with the old stream. Refuses filters that are not topic filters
    /// (the engine is left as it was).
    pub fn set_stream(&mut self, config: Option<StreamConfig>) -> Result<(), StreamSettingError> {
        self.stream = match config {
            None => None,
            Some(config) => Some(Box::new(Stream::new(config)?)),
        };
        // Acks that waited for the old stream wait for it no more.
        self.release_replies();
        Ok(())
    }

    /// The records since the last call as the next numbered batch; None when
    /// there are none (or the stream is off).
    pub fn take_stream(&mut self) -> Option<ExportBatch> {
        let stream = self.stream.as_deref_mut()?;
        stream.signalled = false;
        if !stream.pending() {
            return None;
        }
        let number = stream.batch;
        stream.batch += 1;
        if stream.config.acked {
            let bytes = (stream.messages.value_bytes() + stream.events.value_bytes()) as u64;
            stream.unconfirmed.push_back((number, bytes));
            stream.unconfirmed_bytes += bytes;
        }
        Some(ExportBatch {
            number,
            messages: stream.messages.take(),
            events: stream.events.take(),
        })
    }

    /// The sink has batch `n` and every batch before it: acknowledgements that
    /// waited for them (and for their journal batch) go out, in arrival order.
    pub fn stream_done(&mut self, n: u64) {
        let Some(stream) = self.stream.as_deref_mut() else {
            return;
        };
        stream.done = stream.done.max(n.min(stream.batch - 1));
        while let Some(&(number, bytes)) = stream.unconfirmed.front() {
            if number > stream.done {
                break;
            }
            stream.unconfirmed.pop_front();
            stream.unconfirmed_bytes -= bytes;
        }
        self.release_replies();
        self.release_memory_holds();
    }

    /// Record bytes of batches handed to an acked sink and not confirmed: memory
    /// the engine's budget counts, since their publishers wait for them.
    pub(super) fn stream_unconfirmed_bytes(&self) -> u64 {
        self.stream.as_ref().map_or(0, |s| s.unconfirmed_bytes)
    }

    /// The client's address for the `connected` and `auth_refused` records of the
    /// connection (Python knows it when it authenticates); ignored for another
    /// token or while the stream records no events.
    pub fn set_peer(&mut self, conn_id: super::ConnId, token: u64, peer: &str) {
        if !self.stream.as_ref().is_some_and(|s| s.config.events) {
            return;
        }
        if let Some(conn) = self.conn_mut(conn_id).filter(|c| c.token == token) {
            conn.peer = Some(peer.into());
        }
    }

    /// The listener `conn_id` came in on, for its records; ignored while the stream
    /// is off (one check per connection).
    pub fn set_listener(&mut self, conn_id: super::ConnId, name: &str) {
        if self.stream.is_none() {
            return;
        }
        if let Some(conn) = self.conn_mut(conn_id) {
            conn.listener = Some(name.into());
        }
    }

    /// `Event::StreamReady` once per batch, from `take_events`.
    pub(super) fn signal_stream(&mut self) {
        if let Some(stream) = self.stream.as_deref_mut() {
            if stream.pending() && !stream.signalled {
                stream.signalled = true;
                self.events.push(Event::StreamReady);
            }
        }
    }

    pub(super) fn stream_unconfirmed_batch(&self) -> Option<u64> {
        self.stream.as_ref().and_then(|s| s.unconfirmed_batch())
    }

    pub(super) fn stream_has_unconfirmed_at(&self, n: u64) -> bool {
        self.stream
            .as_ref()
            .is_some_and(|s| s.has_unconfirmed_at(n))
    }

    fn wall_us(&self, now: u64) -> i64 {
        (now as i64 + self.wall_offset) * 1000
    }

    /// An accepted PUBLISH of `session`'s client: a `message` record when its topic
    /// matches. Called once per PUBLISH routed (a repeated QoS 2 is not).
    pub(super) fn export_message(&mut self, session: u32, publish: &Publish, now: u64) {
        let time_us = self.wall_us(now);
        let (Some(stream), Some(Some(state))) = (
            self.stream.as_deref_mut(),
            self.sessions.get(session as usize),
        ) else {
            return;
        };
        if !stream.matches(publish.topic.as_str()) {
            return;
        }
        let mut r = record(Kind::Message, time_us);
        r.listener = state
            .conn
            .and_then(|c| self.conns.get(c as usize))
            .and_then(|c| c.as_ref()?.listener.as_deref());
        r.client_id = Some(&*state.client_id);
        r.username = state.username.as_deref();
        r.topic = Some(publish.topic.as_str());
        r.payload = Some(&publish.payload[..]);
        r.qos = Some(publish.qos as u8);
        r.retain = Some(publish.retain);
        r.properties = Some(&publish.properties);
        let key = stream.message_key(publish.topic.as_str(), &state.client_id);
        stream.push(true, key, r);
    }

    /// Append an event record built by `fill` for `client_id` (the key), when the
    /// stream records events.
    fn export_event<'a>(
        &mut self,
        kind: Kind,
        client_id: &'a str,
        now: u64,
        fill: impl FnOnce(&mut Record<'a>),
    ) {
        let time_us = self.wall_us(now);
        let Some(stream) = self.stream.as_deref_mut().filter(|s| s.config.events) else {
            return;
        };
        let mut r = record(kind, time_us);
        r.client_id = Some(client_id);
        fill(&mut r);
        stream.push(false, client_id.as_bytes(), r);
    }

    /// True when event records are being made (callers skip gathering fields).
    pub(super) fn exports_events(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.config.events)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn export_connected(
        &mut self,
        conn_id: super::ConnId,
        client_id: &str,
        username: Option<&str>,
        protocol: u8,
        keep_alive: u16,
        clean_start: bool,
        session_expiry: u32,
        now: u64,
    ) {
        let (peer, listener) = self
            .conn_mut(conn_id)
            .map_or((None, None), |c| (c.peer.take(), c.listener.clone()));
        self.export_event(Kind::Connected, client_id, now, |r| {
            r.username = username;
            r.peer = peer.as_deref();
            r.listener = listener.as_deref();
            r.protocol_version = Some(protocol);
            r.keep_alive = Some(keep_alive);
            r.clean_start = Some(clean_start);
            r.session_expiry = Some(session_expiry);
        });
    }

    pub(super) fn export_disconnected(
        &mut self,
        session: u32,
        reason: super::DisconnectReason,
        now: u64,
    ) {
        if !self.exports_events() {
            return;
        }
        let (client_id, username, listener) = self.names_of(session);
        self.export_event(Kind::Disconnected, &client_id, now, |r| {
            r.username = username.as_deref();
            r.listener = listener.as_deref();
            r.reason = Some(reason.name());
            r.reason_code = reason.code().map(|c| c as u8);
        });
    }

    /// One `subscribed` record per filter: the QoS granted, or the refusal's code.
    pub(super) fn export_subscribed(
        &mut self,
        session: u32,
        filters: &[(&str, ReasonCode)],
        now: u64,
    ) {
        if !self.exports_events() {
            return;
        }
        let (client_id, username, listener) = self.names_of(session);
        for &(filter, code) in filters {
            let granted = (code as u8) < 0x80;
            self.export_event(Kind::Subscribed, &client_id, now, |r| {
                r.username = username.as_deref();
                r.listener = listener.as_deref();
                r.listener = listener.as_deref();
                r.topic = Some(filter);
                r.qos = granted.then_some(code as u8);
                r.reason_code = Some(code as u8);
            });
        }
    }

    pub(super) fn export_unsubscribed(&mut self, session: u32, filters: &[&str], now: u64) {
        if !self.exports_events() {
            return;
        }
        let (client_id, username, listener) = self.names_of(session);
        for &filter in filters {
            self.export_event(Kind::Unsubscribed, &client_id, now, |r| {
                r.username = username.as_deref();
                r.listener = listener.as_deref();
                r.listener = listener.as_deref();
                r.topic = Some(filter);
            });
        }
    }

    pub(super) fn export_session_expired(&mut self, session: u32, now: u64) {
        if !self.exports_events() {
            return;
        }
        let (client_id, username, listener) = self.names_of(session);
        self.export_event(Kind::SessionExpired, &client_id, now, |r| {
            r.username = username.as_deref();
            r.listener = listener.as_deref();
        });
    }

    pub(super) fn export_will(&mut self, client_id: &str, message: &Message, now: u64) {
        self.export_event(Kind::WillPublished, client_id, now, |r| {
            message_fields(r, message);
        });
    }

    /// A delivery of `message` to `session` (None: a shared group's queue) dropped
    /// for `reason`.
    pub(super) fn export_dropped(
        &mut self,
        reason: DropReason,
        session: Option<u32>,
        message: &Message,
        now: u64,
    ) {
        if !self.exports_events() {
            return;
        }
        let (client_id, username, listener) = session.map(|s| self.names_of(s)).unwrap_or_default();
        self.export_event(Kind::Dropped, &client_id, now, |r| {
            if session.is_none() {
                r.client_id = None;
            }
            r.username = username.as_deref();
            r.listener = listener.as_deref();
            message_fields(r, message);
            r.reason = Some(reason.name());
        });
    }

    /// Count a delivery of `message` dropped for `reason`, and record it.
    pub(super) fn count_dropped(
        &mut self,
        reason: DropReason,
        session: Option<u32>,
        message: &Message,
        now: u64,
    ) {
        self.stats.count_drop(reason, 1);
        self.export_dropped(reason, session, message, now);
    }

    /// A CONNECT refused by authentication (the engine's own 0x8C, Python's
    /// answer through `complete_auth`, an exchange past its deadline).
    /// `connect` is the CONNECT when it is not (yet) the connection's state.
    pub(super) fn export_auth_refused(
        &mut self,
        conn_id: super::ConnId,
        connect: Option<&Connect>,
        reason: ReasonCode,
        now: u64,
    ) {
        if !self.exports_events() {
            return;
        }
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let peer = conn.peer.take();
        let listener = conn.listener.clone();
        let connect = match (connect, &conn.state) {
            (Some(connect), _) => Some(connect),
            (None, super::ConnState::Authenticating(connect)) => Some(&**connect),
            _ => None,
        };
        let client_id = connect.map_or_else(String::new, |c| c.client_id.as_str().to_owned());
        let username = connect.and_then(|c| c.username.as_ref().map(|u| u.as_str().to_owned()));
        self.export_event(Kind::AuthRefused, &client_id, now, |r| {
            r.username = username.as_deref();
            r.listener = listener.as_deref();
            r.peer = peer.as_deref();
            r.reason = Some(reason.name());
            r.reason_code = Some(reason as u8);
        });
    }

    /// Client id and user name of a live session, for an event record.
    /// A session's client id, user name and its connection's listener (None while
    /// it has no connection).
    fn names_of(&self, session: u32) -> (String, Option<String>, Option<String>) {
        self.sessions
            .get(session as usize)
            .and_then(Option::as_ref)
            .map_or_else(Default::default, |s| {
                let listener = s
                    .conn
                    .and_then(|c| self.conns.get(c as usize))
                    .and_then(|c| c.as_ref()?.listener.as_deref().map(str::to_owned));
                (
                    s.client_id.to_string(),
                    s.username.as_deref().map(str::to_owned),
                    listener,
                )
            })
    }
}

/// A message's topic, payload, QoS, retain flag and v5 properties.
fn message_fields<'a>(r: &mut Record<'a>, message: &'a Message) {
    r.topic = Some(message.topic.as_str());
    r.payload = Some(&message.payload[..]);
    r.qos = Some(message.qos as u8);
    r.retain = Some(message.retain);
    r.properties = Some(&message.properties as &Properties);
}
