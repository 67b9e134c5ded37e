//! The journal: the engine's durable state changes as one append-only stream of
//! records, which every store writes in its own way (docs/architecture.md,
//! "Durable store").
//!
//! The engine appends a record whenever state that must survive a crash changes for
//! a persistent session (Session Expiry Interval > 0) or a retained message. Python
//! takes the records in batches (`take`), writes them to the store and reports each
//! batch done (`Engine::journal_done`); a PUBACK/PUBREC waits for the batch that
//! holds everything journaled before it (durable before acknowledged). Records are
//! built in Rust and handed over as one buffer per batch: no Python per message.
//!
//! The writer (`Journal`) also numbers the batches and remembers the newest the store
//! confirmed. That bookkeeping stays with the writer because the numbers are how it
//! writes a message once per batch (`Written::Marks`) and how `take` cuts a batch; what
//! waits on a confirmation (held acknowledgements, rounds, SUBACKs) is the engine's
//! (`engine/persist.rs`, `engine/shards.rs`).
//!
//! Batch framing (what `take` and `Engine::snapshot` return, what the Redis and
//! Kafka stores read), little endian, one record after another:
//! `kind u8 | body length u32 | body`. Strings are `u16 length | UTF-8`, blobs
//! `u32 length | bytes`. Bodies by kind:
//!
//! | kind | record | body |
//! |---|---|---|
//! | 1 | Session | client, expiry interval u32, client type u8 (0 device, 1 application) |
//! | 2 | SessionEnd | client |
//! | 3 | Subscribe | client, filter, options u8 (SUBSCRIBE options byte), subscription id u32 (0 none) |
//! | 4 | Unsubscribe | client, filter |
//! | 5 | Message | message id u64, qos u8, retain u8, expires at u64 (unix ms, 0 never), topic, properties blob (5.0 encoding), payload blob |
//! | 6 | Enqueue | client, sequence u64, packet id u16, message id u64, qos u8, retain u8, count u8, subscription ids u32… |
//! | 7 | Ack | client, packet id u16 |
//! | 8 | Release | client, packet id u16 |
//! | 9 | InboundQos2 | client, packet id u16, held u8 |
//! | 10 | Retain | topic, message id u64 (0 clears) |
//! | 11 | Outbox | shard u16, shards u16, to u16, route u64, message id u64, share filter ("" none), publisher (the client whose QoS 2 PUBLISH it carries; since log version 3, "" when read from version 2), then for a route to another node of a cluster only: that node's id (`engine/cluster.rs`, "Crossing QoS 2"; never in a stored log: a cluster's store is Redis) |
//! | 12 | BusCursor | shard u16, shards u16, from u16, route u64 |
//! | 13 | Applied | client, node, offset u64: the client holds what node `node`'s cluster topic carried up to that Kafka offset (`engine/cluster.rs`) |
//! | 14 | Will | client, present u8, then when present: due at u64 (unix ms; 0 while its connection is open), will delay u32 (seconds), qos u8, retain u8, topic, properties blob (5.0 will properties), payload blob |
//! | 15 | (retired 2026-11-28: InboundReleased, which only the Redis store's load made, never in a stored log) |
//! | 16 | OutboxDone | publisher, route u64: shard `to` confirmed that `Outbox` route, so a store that keeps outboxes per publisher (Redis) drops it; written only for such a store, never in a stored log |
//!
//! `Outbox` and `BusCursor` are a node's shards' own (`engine/shards.rs`, "Exactly
//! once across the bus"): a QoS 2 message of a journaled publisher routed to shard
//! `to`, which this shard sends again until `to` confirms it, and the last route from
//! shard `from` whose effects this shard's store holds. Both name the shard that wrote
//! them and the node's number of shards; a shard of another layout ignores them.
//!
//! A Message record precedes, in the same batch, every Enqueue or Retain naming it,
//! so each batch can be read on its own (the Redis store stores the message with
//! each reference, as TBMQ does). Message ids are unique within a process run;
//! readers resolve them at the point of use.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{Properties, PropertyContext, QoS, Reader, Will};
use crate::engine::Message;

/// Who a persistent session belongs to (seed 000): devices queue in the device
/// store, application clients in the application store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientType {
    #[default]
    Device,
    Application,
}

crate::choice::named!(ClientType, "client type", [
    "device" => ClientType::Device,
    "application" => ClientType::Application,
]);

impl ClientType {
    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Result<ClientType, JournalError> {
        match code {
            0 => Ok(ClientType::Device),
            1 => Ok(ClientType::Application),
            _ => Err(JournalError("unknown client type")),
        }
    }
}

pub(crate) const SESSION: u8 = 1;
pub(crate) const SESSION_END: u8 = 2;
pub(crate) const SUBSCRIBE: u8 = 3;
pub(crate) const UNSUBSCRIBE: u8 = 4;
pub(crate) const MESSAGE: u8 = 5;
pub(crate) const ENQUEUE: u8 = 6;
pub(crate) const ACK: u8 = 7;
pub(crate) const RELEASE: u8 = 8;
pub(crate) const INBOUND_QOS2: u8 = 9;
pub(crate) const RETAIN: u8 = 10;
pub(crate) const OUTBOX: u8 = 11;
pub(crate) const BUS_CURSOR: u8 = 12;
pub(crate) const APPLIED: u8 = 13;
pub(crate) const WILL: u8 = 14;
pub(crate) const OUTBOX_DONE: u8 = 16;
/// Bus only (engine/shards.rs), never in a stored log: deliver the message of the
/// preceding MESSAGE record to the receiving shard's subscribers. Body: message id
/// u64, route u64 (the sender's number for this crossing, growing across its
/// restarts; a receiver applies each route once).
pub(crate) const ROUTE: u8 = 64;
/// Bus only: what the sending shard sends after this replaces every subscription the
/// receiver holds from it (a shard that starts, or restarted).
pub(crate) const SYNC: u8 = 65;
/// Bus only: the sender (re)started; the receiver answers with a `SYNC` and its
/// subscriptions.
pub(crate) const HELLO: u8 = 66;
/// Bus only: deliver the preceding message to one member of the receiving shard's
/// part of a shared group (its `$share/` filter follows the message id and route).
pub(crate) const ROUTE_SHARED: u8 = 67;
/// Bus only: the batch so far is round `n` of the sender's acknowledged rounds (it
/// carried a QoS 1/2 message); the receiver answers `BUS_ACK(n)` once its store has
/// what it made of the batch.
pub(crate) const BUS_ROUND: u8 = 68;
/// Bus only: the receiver's store has everything up to the sender's round `n`.
pub(crate) const BUS_ACK: u8 = 69;

/// A stored message as a record carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub id: u64,
    pub qos: QoS,
    pub retain: bool,
    /// Unix milliseconds; None never expires.
    pub expires_at: Option<u64>,
    pub topic: String,
    pub properties: Properties,
    pub payload: Bytes,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Session {
        client: String,
        expiry_interval: u32,
        client_type: ClientType,
    },
    SessionEnd {
        client: String,
    },
    Subscribe {
        client: String,
        filter: String,
        options: u8,
        subscription_id: u32,
    },
    Unsubscribe {
        client: String,
        filter: String,
    },
    Message(StoredMessage),
    Enqueue {
        client: String,
        sequence: u64,
        packet_id: u16,
        message_id: u64,
        qos: QoS,
        retain: bool,
        subscription_ids: Vec<u32>,
    },
    Ack {
        client: String,
        packet_id: u16,
    },
    Release {
        client: String,
        packet_id: u16,
    },
    InboundQos2 {
        client: String,
        packet_id: u16,
        held: bool,
    },
    Retain {
        topic: String,
        message_id: u64,
    },
    Outbox {
        shard: BusPlace,
        to: u16,
        route: u64,
        message_id: u64,
        share_filter: String,
        publisher: String,
        /// The cluster node it crosses to ("" for a shard of this node).
        to_node: String,
    },
    OutboxDone {
        publisher: String,
        route: u64,
    },
    BusCursor {
        shard: BusPlace,
        from: u16,
        route: u64,
    },
    Applied {
        client: String,
        node: String,
        offset: u64,
    },
    Will {
        client: String,
        will: Option<StoredWill>,
    },
}

/// A QoS 2 route kept until its receiver confirms it (`Record::Outbox`): which
/// shard of how many keeps it, where it goes (a shard's slot, or a cluster node's
/// id), its number, the shared group it is for, and whose PUBLISH it carries.
#[derive(Debug, Clone, Copy)]
pub struct KeptRoute<'a> {
    pub shard: BusPlace,
    pub to: u16,
    pub to_node: Option<&'a str>,
    pub route: u64,
    pub share_filter: Option<&'a str>,
    pub publisher: &'a str,
}

/// Which shard of how many wrote a bus record into its journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusPlace {
    pub me: u16,
    pub shards: u16,
}

/// A connection's will as the store keeps it (the Will Delay Interval apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWill {
    /// When it is due (unix ms), once its connection is gone; 0 while connected.
    pub due_at: u64,
    pub delay_seconds: u32,
    pub will: Will,
}

/// A journal that cannot be read: a torn tail or a bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalError(pub &'static str);

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "journal: {}", self.0)
    }
}

impl std::error::Error for JournalError {}

/// The record writer and the batch bookkeeping.
#[derive(Debug)]
pub struct Journal {
    enabled: bool,
    buf: BytesMut,
    records: usize,
    /// The batch being filled; batches are numbered from 1.
    batch: u64,
    /// The newest batch the store confirmed.
    done: u64,
    /// Which messages this journal has written already (a message's record goes
    /// once before the records that name it).
    written: Written,
}

#[derive(Debug)]
enum Written {
    /// The live journal: each message's mark of the batch that last carried it.
    Marks,
    /// A journal whose batches are not the engine's (a snapshot): a set of ids.
    Set(HashSet<u64>),
    /// A shard's outbox (`engine/shards.rs`): every reference writes its message,
    /// since the receiver keeps messages only while it reads one batch.
    Never,
}

impl Journal {
    pub fn new(enabled: bool) -> Journal {
        Journal {
            enabled,
            buf: BytesMut::new(),
            records: 0,
            batch: 1,
            done: 0,
            written: Written::Marks,
        }
    }

    /// A journal for one-off output (a snapshot) that leaves the live journal's
    /// message marks alone.
    pub fn detached() -> Journal {
        Journal {
            written: Written::Set(HashSet::new()),
            ..Journal::new(true)
        }
    }

    /// The outbox of one shard's bus ring: journal records, each message written
    /// with every record that refers to it.
    pub fn for_bus() -> Journal {
        Journal {
            written: Written::Never,
            ..Journal::new(true)
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Records waiting for `take`.
    pub fn pending_records(&self) -> usize {
        self.records
    }

    /// The batch that holds everything journaled so far, while the store has not
    /// confirmed it; None when the store has it all.
    pub fn unconfirmed_batch(&self) -> Option<u64> {
        let covering = if self.records > 0 {
            self.batch
        } else {
            self.batch - 1
        };
        (covering > self.done).then_some(covering)
    }

    /// The batch the next record joins.
    pub fn current_batch(&self) -> u64 {
        self.batch
    }

    /// True while batch `n` is not confirmed.
    pub fn has_unconfirmed_at(&self, n: u64) -> bool {
        n > self.done
    }

    /// The records since the last call, as batch `n`; None when there are none.
    pub fn take(&mut self) -> Option<(u64, Bytes)> {
        if self.records == 0 {
            return None;
        }
        let number = self.batch;
        self.batch += 1;
        self.records = 0;
        Some((number, self.buf.split().freeze()))
    }

    /// The store has batch `n` (and every batch before it).
    pub fn confirm(&mut self, n: u64) {
        self.done = self.done.max(n.min(self.batch - 1));
    }

    pub fn session(&mut self, client: &str, expiry_interval: u32, client_type: ClientType) {
        self.record(SESSION, |b| {
            put_str(b, client);
            b.put_u32_le(expiry_interval);
            b.put_u8(client_type.code());
        });
    }

    pub fn session_end(&mut self, client: &str) {
        self.record(SESSION_END, |b| put_str(b, client));
    }

    pub fn subscribe(&mut self, client: &str, filter: &str, options: u8, subscription_id: u32) {
        self.record(SUBSCRIBE, |b| {
            put_str(b, client);
            put_str(b, filter);
            b.put_u8(options);
            b.put_u32_le(subscription_id);
        });
    }

    pub fn unsubscribe(&mut self, client: &str, filter: &str) {
        self.record(UNSUBSCRIBE, |b| {
            put_str(b, client);
            put_str(b, filter);
        });
    }

    /// A delivery stored for a persistent session, with its message if this batch
    /// does not hold it yet. `wall_offset` turns engine time into unix time.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &mut self,
        client: &str,
        sequence: u64,
        packet_id: u16,
        message: &Message,
        qos: QoS,
        retain: bool,
        subscription_ids: &[u32],
        wall_offset: i64,
    ) {
        self.message(message, wall_offset);
        self.record(ENQUEUE, |b| {
            put_str(b, client);
            b.put_u64_le(sequence);
            b.put_u16_le(packet_id);
            b.put_u64_le(message.id);
            b.put_u8(qos as u8);
            b.put_u8(u8::from(retain));
            let count = subscription_ids.len().min(usize::from(u8::MAX));
            b.put_u8(count as u8);
            for id in &subscription_ids[..count] {
                b.put_u32_le(*id);
            }
        });
    }

    pub fn ack(&mut self, client: &str, packet_id: u16) {
        self.record(ACK, |b| {
            put_str(b, client);
            b.put_u16_le(packet_id);
        });
    }

    pub fn release(&mut self, client: &str, packet_id: u16) {
        self.record(RELEASE, |b| {
            put_str(b, client);
            b.put_u16_le(packet_id);
        });
    }

    pub fn inbound_qos2(&mut self, client: &str, packet_id: u16, held: bool) {
        self.record(INBOUND_QOS2, |b| {
            put_str(b, client);
            b.put_u16_le(packet_id);
            b.put_u8(u8::from(held));
        });
    }

    /// `client` holds the deliveries node `node`'s cluster topic carried up to
    /// Kafka offset `offset`.
    pub fn applied(&mut self, client: &str, node: &str, offset: u64) {
        self.record(APPLIED, |b| {
            put_str(b, client);
            put_str(b, node);
            b.put_u64_le(offset);
        });
    }

    /// `client`'s connection has `will` (`None`: it has none any more).
    pub fn will(&mut self, client: &str, will: Option<&StoredWill>) {
        self.record(WILL, |b| {
            put_str(b, client);
            b.put_u8(u8::from(will.is_some()));
            if let Some(stored) = will {
                b.put_u64_le(stored.due_at);
                b.put_u32_le(stored.delay_seconds);
                b.put_u8(stored.will.qos as u8);
                b.put_u8(u8::from(stored.will.retain));
                put_str(b, &stored.will.topic);
                let mut properties = Vec::new();
                stored.will.properties.encode(&mut properties);
                put_blob(b, &properties);
                put_blob(b, &stored.will.payload);
            }
        });
    }

    /// The retained message of a topic; `None` clears it.
    pub fn retain(&mut self, topic: &str, message: Option<&Message>, wall_offset: i64) {
        if let Some(message) = message {
            self.message(message, wall_offset);
        }
        self.record(RETAIN, |b| {
            put_str(b, topic);
            b.put_u64_le(message.map_or(0, |m| m.id));
        });
    }

    /// A message for the receiving shard's subscribers (bus only), or with
    /// `share_filter` for one member of that shared group there.
    pub fn route(
        &mut self,
        message: &Message,
        route: u64,
        share_filter: Option<&str>,
        wall_offset: i64,
    ) {
        self.message(message, wall_offset);
        let kind = if share_filter.is_some() {
            ROUTE_SHARED
        } else {
            ROUTE
        };
        self.record(kind, |b| {
            b.put_u64_le(message.id);
            b.put_u64_le(route);
            if let Some(filter) = share_filter {
                put_str(b, filter);
            }
        });
    }

    /// A QoS 2 message of a journaled publisher routed to another shard, kept until
    /// that shard confirms it (`Record::Outbox`).
    pub fn outbox(&mut self, kept: &KeptRoute, message: &Message, wall_offset: i64) {
        self.message(message, wall_offset);
        self.record(OUTBOX, |b| {
            put_place(b, kept.shard);
            b.put_u16_le(kept.to);
            b.put_u64_le(kept.route);
            b.put_u64_le(message.id);
            put_str(b, kept.share_filter.unwrap_or(""));
            put_str(b, kept.publisher);
            if let Some(node) = kept.to_node {
                put_str(b, node);
            }
        });
    }

    /// Publisher `publisher`'s route `route` was confirmed (`Record::OutboxDone`).
    pub fn outbox_done(&mut self, publisher: &str, route: u64) {
        self.record(OUTBOX_DONE, |b| {
            put_str(b, publisher);
            b.put_u64_le(route);
        });
    }

    /// The last route from shard `from` whose effects precede this record
    /// (`Record::BusCursor`).
    pub fn bus_cursor(&mut self, shard: BusPlace, from: u16, route: u64) {
        self.record(BUS_CURSOR, |b| {
            put_place(b, shard);
            b.put_u16_le(from);
            b.put_u64_le(route);
        });
    }

    /// A bus record carrying one round number (`BUS_ROUND`, `BUS_ACK`).
    pub fn bus_number(&mut self, kind: u8, n: u64) {
        self.record(kind, |b| b.put_u64_le(n));
    }

    /// A bus record with no body (`SYNC`, `HELLO`).
    pub fn bus_signal(&mut self, kind: u8) {
        self.record(kind, |_| {});
    }

    fn message(&mut self, message: &Message, wall_offset: i64) {
        let already = match &mut self.written {
            Written::Set(written) => !written.insert(message.id),
            Written::Marks => {
                message.journal_batch.swap(self.batch, Ordering::Relaxed) == self.batch
            }
            Written::Never => false,
        };
        if already {
            return;
        }
        self.record(MESSAGE, |b| {
            b.put_u64_le(message.id);
            b.put_u8(message.qos as u8);
            b.put_u8(u8::from(message.retain));
            b.put_u64_le(
                message
                    .expires_at
                    .map_or(0, |at| (at as i64 + wall_offset).max(1) as u64),
            );
            put_str(b, &message.topic);
            let mut properties = Vec::new();
            message.properties.encode(&mut properties);
            put_blob(b, &properties);
            put_blob(b, &message.payload);
        });
    }

    fn record(&mut self, kind: u8, body: impl FnOnce(&mut BytesMut)) {
        if !self.enabled {
            return;
        }
        self.buf.put_u8(kind);
        let at = self.buf.len();
        self.buf.put_u32_le(0);
        body(&mut self.buf);
        let len = (self.buf.len() - at - 4) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        self.records += 1;
    }
}

fn put_place(b: &mut BytesMut, place: BusPlace) {
    b.put_u16_le(place.me);
    b.put_u16_le(place.shards);
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u16_le(s.len() as u16);
    b.put_slice(s.as_bytes());
}

fn put_blob(b: &mut BytesMut, data: &[u8]) {
    b.put_u32_le(data.len() as u32);
    b.put_slice(data);
}

/// A Message record body's id and expiry (unix ms) without decoding the rest.
pub(crate) fn message_header(body: &[u8]) -> Result<(u64, Option<u64>), JournalError> {
    let header = body.get(..18).ok_or(JournalError("message cut short"))?;
    let id = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
    let expires_at = u64::from_le_bytes(header[10..18].try_into().expect("8 bytes"));
    Ok((id, Some(expires_at).filter(|at| *at != 0)))
}

pub(crate) fn decode_record(kind: u8, mut body: Bytes) -> Result<Record, JournalError> {
    let b = &mut body;
    let record = match kind {
        SESSION => Record::Session {
            client: get_str(b)?,
            expiry_interval: get_u32(b)?,
            client_type: ClientType::from_code(get_u8(b)?)?,
        },
        SESSION_END => Record::SessionEnd {
            client: get_str(b)?,
        },
        SUBSCRIBE => Record::Subscribe {
            client: get_str(b)?,
            filter: get_str(b)?,
            options: get_u8(b)?,
            subscription_id: get_u32(b)?,
        },
        UNSUBSCRIBE => Record::Unsubscribe {
            client: get_str(b)?,
            filter: get_str(b)?,
        },
        MESSAGE => {
            let id = get_u64(b)?;
            let qos = get_qos(b)?;
            let retain = get_u8(b)? != 0;
            let expires_at = Some(get_u64(b)?).filter(|at| *at != 0);
            let topic = get_str(b)?;
            let properties = get_blob(b)?;
            let properties = Properties::decode(
                &mut Reader::new(&properties, 0, properties.len()),
                PropertyContext::Publish,
            )
            .map_err(|_| JournalError("message properties do not decode"))?;
            Record::Message(StoredMessage {
                id,
                qos,
                retain,
                expires_at,
                topic,
                properties,
                payload: get_blob(b)?,
            })
        }
        ENQUEUE => {
            let client = get_str(b)?;
            let sequence = get_u64(b)?;
            let packet_id = get_u16(b)?;
            let message_id = get_u64(b)?;
            let qos = get_qos(b)?;
            let retain = get_u8(b)? != 0;
            let count = get_u8(b)?;
            let subscription_ids = (0..count).map(|_| get_u32(b)).collect::<Result<_, _>>()?;
            Record::Enqueue {
                client,
                sequence,
                packet_id,
                message_id,
                qos,
                retain,
                subscription_ids,
            }
        }
        ACK => Record::Ack {
            client: get_str(b)?,
            packet_id: get_u16(b)?,
        },
        RELEASE => Record::Release {
            client: get_str(b)?,
            packet_id: get_u16(b)?,
        },
        INBOUND_QOS2 => Record::InboundQos2 {
            client: get_str(b)?,
            packet_id: get_u16(b)?,
            held: get_u8(b)? != 0,
        },
        RETAIN => Record::Retain {
            topic: get_str(b)?,
            message_id: get_u64(b)?,
        },
        OUTBOX => Record::Outbox {
            shard: get_place(b)?,
            to: get_u16(b)?,
            route: get_u64(b)?,
            message_id: get_u64(b)?,
            share_filter: get_str(b)?,
            // Version 2 wrote no publisher.
            publisher: if b.has_remaining() {
                get_str(b)?
            } else {
                String::new()
            },
            to_node: if b.has_remaining() {
                get_str(b)?
            } else {
                String::new()
            },
        },
        OUTBOX_DONE => Record::OutboxDone {
            publisher: get_str(b)?,
            route: get_u64(b)?,
        },
        BUS_CURSOR => Record::BusCursor {
            shard: get_place(b)?,
            from: get_u16(b)?,
            route: get_u64(b)?,
        },
        APPLIED => Record::Applied {
            client: get_str(b)?,
            node: get_str(b)?,
            offset: get_u64(b)?,
        },
        WILL => {
            let client = get_str(b)?;
            let will = if get_u8(b)? != 0 {
                let due_at = get_u64(b)?;
                let delay_seconds = get_u32(b)?;
                let qos = get_qos(b)?;
                let retain = get_u8(b)? != 0;
                let topic = get_str(b)?;
                let properties = get_blob(b)?;
                let properties = Properties::decode(
                    &mut Reader::new(&properties, 0, properties.len()),
                    PropertyContext::Will,
                )
                .map_err(|_| JournalError("will properties do not decode"))?;
                Some(StoredWill {
                    due_at,
                    delay_seconds,
                    will: Will {
                        topic: topic
                            .try_into()
                            .map_err(|_| JournalError("will topic not UTF-8"))?,
                        payload: get_blob(b)?,
                        qos,
                        retain,
                        properties,
                    },
                })
            } else {
                None
            };
            Record::Will { client, will }
        }
        _ => return Err(JournalError("unknown record kind")),
    };
    if b.has_remaining() {
        return Err(JournalError("record longer than its fields"));
    }
    Ok(record)
}

fn need(b: &Bytes, n: usize) -> Result<(), JournalError> {
    if b.remaining() < n {
        Err(JournalError("field cut short"))
    } else {
        Ok(())
    }
}

fn get_u8(b: &mut Bytes) -> Result<u8, JournalError> {
    need(b, 1)?;
    Ok(b.get_u8())
}

fn get_u16(b: &mut Bytes) -> Result<u16, JournalError> {
    need(b, 2)?;
    Ok(b.get_u16_le())
}

fn get_u32(b: &mut Bytes) -> Result<u32, JournalError> {
    need(b, 4)?;
    Ok(b.get_u32_le())
}

fn get_u64(b: &mut Bytes) -> Result<u64, JournalError> {
    need(b, 8)?;
    Ok(b.get_u64_le())
}

fn get_place(b: &mut Bytes) -> Result<BusPlace, JournalError> {
    Ok(BusPlace {
        me: get_u16(b)?,
        shards: get_u16(b)?,
    })
}

fn get_qos(b: &mut Bytes) -> Result<QoS, JournalError> {
    QoS::from_u8(get_u8(b)?).ok_or(JournalError("bad QoS"))
}

pub(crate) fn get_str(b: &mut Bytes) -> Result<String, JournalError> {
    let len = usize::from(get_u16(b)?);
    need(b, len)?;
    String::from_utf8(b.split_to(len).to_vec()).map_err(|_| JournalError("string not UTF-8"))
}

fn get_blob(b: &mut Bytes) -> Result<Bytes, JournalError> {
    let len = get_u32(b)? as usize;
    need(b, len)?;
    Ok(b.split_to(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Property, Utf8Bytes};
    use crate::durability::log::RecordReader;

    fn message(id: u64) -> Message {
        let props = Properties(vec![Property::ContentType(Utf8Bytes::from_static("json"))]);
        let mut m = Message::from_publish("a/b", b"hi", QoS::AtLeastOnce, false, &props, None, 0);
        m.id = id;
        m
    }

    #[test]
    fn records_round_trip_and_messages_go_once_per_batch() {
        let mut j = Journal::new(true);
        let m = message(7);
        j.session("c", 60, ClientType::Application);
        j.subscribe("c", "a/#", 0b0000_0101, 3);
        j.enqueue("c", 70_000, 4466, &m, QoS::AtLeastOnce, false, &[3], 0);
        j.enqueue("d", 1, 2, &m, QoS::AtLeastOnce, false, &[], 0);
        j.ack("c", 4466);
        let (n, bytes) = j.take().unwrap();
        assert_eq!(n, 1);
        let records: Vec<Record> = RecordReader::new(bytes).map(Result::unwrap).collect();
        assert_eq!(records.len(), 6, "one Message record for two Enqueues");
        assert!(
            matches!(&records[2], Record::Message(s) if s.id == 7 && s.properties.0.len() == 1)
        );
        assert!(matches!(
            &records[3],
            Record::Enqueue {
                sequence: 70_000,
                packet_id: 4466,
                ..
            }
        ));
        // The next batch carries the message again: each batch reads on its own.
        j.enqueue("e", 1, 1, &m, QoS::AtLeastOnce, false, &[], 0);
        let (n, bytes) = j.take().unwrap();
        assert_eq!(n, 2);
        assert_eq!(RecordReader::new(bytes).count(), 2);
    }

    #[test]
    fn a_torn_tail_stops_the_reader_at_the_last_whole_record() {
        let mut j = Journal::new(true);
        j.session("c", 60, ClientType::Device);
        j.session_end("c");
        let (_, bytes) = j.take().unwrap();
        let torn = bytes.slice(..bytes.len() - 2);
        let mut reader = RecordReader::new(torn);
        assert!(reader.next().unwrap().is_ok());
        assert!(reader.next().unwrap().is_err());
        assert_eq!(reader.valid_len(), 5 + 2 + 1 + 4 + 1);
    }

    #[test]
    fn unconfirmed_tracks_taken_batches() {
        let mut j = Journal::new(true);
        assert_eq!(j.unconfirmed_batch(), None);
        j.session_end("c");
        assert_eq!(j.unconfirmed_batch(), Some(1));
        let (n, _) = j.take().unwrap();
        assert_eq!(j.unconfirmed_batch(), Some(1), "taken, not yet confirmed");
        j.session_end("d");
        assert_eq!(j.unconfirmed_batch(), Some(2));
        j.confirm(n);
        assert!(!j.has_unconfirmed_at(1));
        assert!(j.has_unconfirmed_at(2));
        let (n, _) = j.take().unwrap();
        j.confirm(n);
        assert_eq!(j.unconfirmed_batch(), None);
    }

    #[test]
    fn a_disabled_journal_records_nothing() {
        let mut j = Journal::new(false);
        j.session_end("c");
        assert!(j.take().is_none());
    }

    #[test]
    fn an_outbox_record_of_log_version_2_reads_with_no_publisher() {
        let kept = KeptRoute {
            shard: BusPlace { me: 1, shards: 2 },
            to: 0,
            to_node: None,
            route: 9,
            share_filter: None,
            publisher: "pub",
        };
        let mut j = Journal::new(true);
        j.outbox(&kept, &message(3), 0);
        let (_, data) = j.take().unwrap();
        let records: Vec<Record> = RecordReader::new(data.clone())
            .map(Result::unwrap)
            .collect();
        let Record::Outbox { publisher, .. } = &records[1] else {
            panic!("{records:?}");
        };
        assert_eq!(publisher, "pub");
        // Version 2 ended the body at the share filter: the same record, 5 bytes
        // ("pub" and its length) shorter.
        let start = data.len() - 5 - 29;
        let mut v2 = data[..data.len() - 5].to_vec();
        v2[start + 1..start + 5].copy_from_slice(&24u32.to_le_bytes());
        let records: Vec<Record> = RecordReader::new(v2.into()).map(Result::unwrap).collect();
        assert!(
            matches!(&records[1], Record::Outbox { route: 9, publisher, .. } if publisher.is_empty())
        );
    }

    #[test]
    fn a_route_to_another_node_names_it_and_one_to_a_shard_does_not() {
        let mut j = Journal::new(true);
        for to_node in [Some("node-b"), None] {
            let kept = KeptRoute {
                shard: BusPlace { me: 0, shards: 1 },
                to: 2,
                to_node,
                route: 7,
                share_filter: None,
                publisher: "pub",
            };
            j.outbox(&kept, &message(3), 0);
        }
        let (_, data) = j.take().unwrap();
        let nodes: Vec<String> = RecordReader::new(data)
            .map(Result::unwrap)
            .filter_map(|record| match record {
                Record::Outbox { to_node, .. } => Some(to_node),
                _ => None,
            })
            .collect();
        assert_eq!(nodes, ["node-b", ""]);
    }
}
