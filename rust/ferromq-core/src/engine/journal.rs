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
//! | 11 | Applied | client, node, offset u64: the client holds what node `node`'s cluster topic carried up to that Kafka offset (`engine/cluster.rs`) |
//! | 12 | Will | client, present u8, then when present: due at u64 (unix ms; 0 while its connection is open), will delay u32 (seconds), qos u8, retain u8, topic, properties blob (5.0 will properties), payload blob |
//!
//! A Message record precedes, in the same batch, every Enqueue or Retain naming it,
//! so each batch can be read on its own (the Redis store stores the message with
//! each reference, as TBMQ does). Message ids are unique within a process run;
//! readers resolve them at the point of use.
//!
//! **Stored log format, version 1** (`LOG_VERSION`; the embedded store's segment
//! files and snapshots). A file starts with the header `"FMQJ" | version u16 |
//! reserved u16 (0)`, then records framed `kind u8 | body length u32 | crc32c u32 |
//! body`, where the CRC32C (Castagnoli) covers the kind, the length and the body
//! (`log_records` turns a batch into this framing, in Rust, once per batch).
//! Version 0 is the format before headers: no header, batch framing, no CRC; files
//! of the release that wrote it are read as they are. A reader meets a header at any
//! record boundary (the segments of a log are read as one stream; `'F'` is no record
//! kind), takes the version from it, and refuses a version above its own.
//!
//! Recovery (`RecordReader::recovering`): a version 1 record whose kind, length or
//! CRC does not check out is damage; the reader scans forward byte by byte to the
//! next position where a header or a whole record with a matching CRC starts,
//! reports the skipped range (`Damage`) and goes on, so one flipped byte costs one
//! record and a zeroed block costs the records it covers. A record whose CRC matches
//! but whose body does not decode is skipped alone. Damage with nothing intact after
//! it is the torn tail a crash leaves: reading ends there (`valid_len`). Version 0
//! has no checksum, so damage there skips to the next header. Scanning computes a
//! CRC only where a known kind and a length that fits the data start, so skipping
//! garbage costs little more than reading it.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{Properties, PropertyContext, QoS, Reader, Will};

use super::message::Message;

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
pub(crate) const APPLIED: u8 = 11;
pub(crate) const WILL: u8 = 12;
/// Bus only (engine/shards.rs), never in a stored log: deliver the message of the
/// preceding MESSAGE record to the receiving shard's subscribers.
pub(crate) const ROUTE: u8 = 64;
/// Bus only: what the sending shard sends after this replaces every subscription the
/// receiver holds from it (a shard that starts, or restarted).
pub(crate) const SYNC: u8 = 65;
/// Bus only: the sender (re)started; the receiver answers with a `SYNC` and its
/// subscriptions.
pub(crate) const HELLO: u8 = 66;
/// Bus only: deliver the preceding message to one member of the receiving shard's
/// part of a shared group (its `$share/` filter follows the message id).
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

    /// A message for the receiving shard's subscribers (bus only).
    pub fn route(&mut self, message: &Message, wall_offset: i64) {
        self.message(message, wall_offset);
        self.record(ROUTE, |b| b.put_u64_le(message.id));
    }

    /// `message` for one member of the shared group `share_filter` on the receiving
    /// shard.
    pub fn route_shared(&mut self, message: &Message, share_filter: &str, wall_offset: i64) {
        self.message(message, wall_offset);
        self.record(ROUTE_SHARED, |b| {
            b.put_u64_le(message.id);
            put_str(b, share_filter);
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

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u16_le(s.len() as u16);
    b.put_slice(s.as_bytes());
}

fn put_blob(b: &mut BytesMut, data: &[u8]) {
    b.put_u32_le(data.len() as u32);
    b.put_slice(data);
}

/// The stored log's magic: the first bytes of every file written in version 1 or later.
pub const LOG_MAGIC: [u8; 4] = *b"FMQJ";
/// The stored log format this build writes (and the newest it reads).
pub const LOG_VERSION: u16 = 1;
pub const LOG_HEADER_LEN: usize = 8;
const BATCH_FRAME: usize = 5;
const LOG_FRAME: usize = 9;

/// The header that starts every stored log file (`LOG_VERSION`). A header naming
/// version 0 switches a reader back to batch framing: a store whose bytes follow
/// another's stored log (the split store's Kafka records) starts with one.
pub fn log_header(version: u16) -> [u8; LOG_HEADER_LEN] {
    let mut header = [0; LOG_HEADER_LEN];
    header[..4].copy_from_slice(&LOG_MAGIC);
    header[4..6].copy_from_slice(&version.to_le_bytes());
    header
}

/// The format version of stored bytes from their header; 0 (the format before
/// headers) when they do not start with one.
pub fn log_version(head: &[u8]) -> u16 {
    match head {
        [m0, m1, m2, m3, v0, v1, _, _, ..] if [*m0, *m1, *m2, *m3] == LOG_MAGIC => {
            u16::from_le_bytes([*v0, *v1])
        }
        _ => 0,
    }
}

/// A batch (batch framing) in the stored log framing: each record with its CRC32C.
pub fn log_records(batch: &[u8]) -> Result<BytesMut, JournalError> {
    let mut out = BytesMut::with_capacity(batch.len() + batch.len() / 8);
    let mut at = 0;
    while at < batch.len() {
        let rest = &batch[at..];
        let len = batch_body_len(rest)?;
        let (head, body) = rest[..BATCH_FRAME + len].split_at(BATCH_FRAME);
        out.put_slice(head);
        out.put_u32_le(crc32c::crc32c_append(crc32c::crc32c(head), body));
        out.put_slice(body);
        at += BATCH_FRAME + len;
    }
    Ok(out)
}

fn batch_body_len(rest: &[u8]) -> Result<usize, JournalError> {
    if rest.len() < BATCH_FRAME {
        return Err(JournalError("record header cut short"));
    }
    let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    if rest.len() < BATCH_FRAME + len {
        return Err(JournalError("record body cut short"));
    }
    Ok(len)
}

/// A range of stored bytes recovery skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub offset: usize,
    pub len: usize,
    pub error: JournalError,
}

/// What starts at a record boundary.
enum Frame {
    Header(u16),
    /// Kind, body range, where the next frame starts.
    Record(u8, std::ops::Range<usize>, usize),
}

/// Read records one by one, in batch framing or in the stored log format (headers
/// switch it; see the module header). A plain reader ends at the first record it
/// cannot read (a torn write at a crash) with `Err`; a `recovering` one skips damage
/// it can resynchronise past and reports it (`damaged`). `valid_len` tells how many
/// bytes were read up to the end of the last whole record, so a log can be truncated
/// there.
pub struct RecordReader {
    data: Bytes,
    pos: usize,
    valid_len: usize,
    version: u16,
    recovering: bool,
    stopped: bool,
    damaged: Vec<Damage>,
}

impl RecordReader {
    pub fn new(data: Bytes) -> RecordReader {
        RecordReader {
            data,
            pos: 0,
            valid_len: 0,
            version: 0,
            recovering: false,
            stopped: false,
            damaged: Vec::new(),
        }
    }

    /// A reader that skips damaged records it can resynchronise past.
    pub fn recovering(data: Bytes) -> RecordReader {
        RecordReader {
            recovering: true,
            ..RecordReader::new(data)
        }
    }

    /// Bytes up to the end of the last whole record (or header) read.
    pub fn valid_len(&self) -> usize {
        self.valid_len
    }

    /// The ranges skipped so far.
    pub fn damaged(&self) -> &[Damage] {
        &self.damaged
    }

    /// The next record undecoded, as its kind and body: for a store that keeps
    /// bodies verbatim (the Redis store stores a Message body as it is).
    pub fn next_raw(&mut self) -> Option<Result<(u8, Bytes), JournalError>> {
        let frame = self.step()?;
        if frame.is_ok() {
            self.valid_len = self.pos;
        }
        Some(frame.map(|(_, kind, body)| (kind, body)))
    }

    /// The next frame's record (where it starts, kind, body), past headers and
    /// (recovering) damage.
    fn step(&mut self) -> Option<Result<(usize, u8, Bytes), JournalError>> {
        loop {
            if self.stopped || self.pos >= self.data.len() {
                return None;
            }
            let start = self.pos;
            match self.frame(start, self.version) {
                Ok(Frame::Header(version)) if version > LOG_VERSION => {
                    self.stopped = true;
                    return Some(Err(JournalError("unknown journal format version")));
                }
                Ok(Frame::Header(version)) => {
                    self.version = version;
                    self.pos += LOG_HEADER_LEN;
                    self.valid_len = self.pos;
                }
                Ok(Frame::Record(kind, body, next)) => {
                    self.pos = next;
                    return Some(Ok((start, kind, self.data.slice(body))));
                }
                Err(error) => {
                    if let Some(error) = self.skip_damage(start, error) {
                        return Some(Err(error));
                    }
                }
            }
        }
    }

    /// Damage at `start`: resynchronise past it (None), or end the reading with the
    /// error when not recovering or nothing intact follows.
    fn skip_damage(&mut self, start: usize, error: JournalError) -> Option<JournalError> {
        let resumed = if self.recovering {
            (start + 1..self.data.len()).find(|at| self.intact_at(*at))
        } else {
            None
        };
        match resumed {
            Some(at) => {
                self.damaged.push(Damage {
                    offset: start,
                    len: at - start,
                    error,
                });
                self.pos = at;
                None
            }
            None => {
                self.stopped = true;
                Some(error)
            }
        }
    }

    /// A header, or (in a checksummed version) a whole record, starts at `at`.
    fn intact_at(&self, at: usize) -> bool {
        match self.frame(at, self.version) {
            Ok(Frame::Header(version)) => version <= LOG_VERSION,
            Ok(Frame::Record(..)) => self.version >= 1,
            Err(_) => false,
        }
    }

    fn frame(&self, at: usize, version: u16) -> Result<Frame, JournalError> {
        let rest = &self.data[at..];
        if rest.first() == Some(&LOG_MAGIC[0]) {
            if rest.len() < LOG_HEADER_LEN {
                return Err(JournalError("log header cut short"));
            }
            if rest[..4] == LOG_MAGIC {
                return Ok(Frame::Header(log_version(rest)));
            }
        }
        if version == 0 {
            let len = batch_body_len(rest)?;
            return Ok(Frame::Record(
                rest[0],
                at + BATCH_FRAME..at + BATCH_FRAME + len,
                at + BATCH_FRAME + len,
            ));
        }
        if rest.len() < LOG_FRAME {
            return Err(JournalError("record header cut short"));
        }
        let kind = rest[0];
        if !(SESSION..=WILL).contains(&kind) {
            return Err(JournalError("unknown record kind"));
        }
        let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let body = rest
            .get(LOG_FRAME..LOG_FRAME.saturating_add(len))
            .ok_or(JournalError("record body cut short"))?;
        let stored = u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]);
        if crc32c::crc32c_append(crc32c::crc32c(&rest[..BATCH_FRAME]), body) != stored {
            return Err(JournalError("record checksum mismatch"));
        }
        Ok(Frame::Record(
            kind,
            at + LOG_FRAME..at + LOG_FRAME + len,
            at + LOG_FRAME + len,
        ))
    }
}

impl Iterator for RecordReader {
    type Item = Result<Record, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (start, kind, body) = match self.step()? {
                Ok(frame) => frame,
                Err(error) => return Some(Err(error)),
            };
            match decode_record(kind, body) {
                Ok(record) => {
                    self.valid_len = self.pos;
                    return Some(Ok(record));
                }
                // Its CRC matched: the record is as written (whole, so never cut off
                // as a torn tail); only this one is lost.
                Err(error) if self.recovering && self.version >= 1 => {
                    self.valid_len = self.pos;
                    self.damaged.push(Damage {
                        offset: start,
                        len: self.pos - start,
                        error,
                    });
                }
                Err(error) => {
                    self.pos = start;
                    if let Some(error) = self.skip_damage(start, error) {
                        return Some(Err(error));
                    }
                }
            }
        }
    }
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

    /// Three retained messages as a stored log file: header, then CRC framing.
    fn stored_log() -> (Vec<u8>, Vec<usize>) {
        let mut j = Journal::new(true);
        for (n, topic) in ["r/a", "r/b", "r/c"].iter().enumerate() {
            let mut m = message(n as u64 + 1);
            m.topic = (*topic).try_into().unwrap();
            j.retain(topic, Some(&m), 0);
        }
        let (_, batch) = j.take().unwrap();
        let mut log = log_header(LOG_VERSION).to_vec();
        log.extend_from_slice(&log_records(&batch).unwrap());
        // Where each record starts.
        let mut starts = Vec::new();
        let mut at = LOG_HEADER_LEN;
        while at < log.len() {
            starts.push(at);
            at += LOG_FRAME + u32::from_le_bytes(log[at + 1..at + 5].try_into().unwrap()) as usize;
        }
        (log, starts)
    }

    fn retained_topics(data: Vec<u8>) -> (Vec<String>, RecordReader) {
        let mut reader = RecordReader::recovering(Bytes::from(data));
        let topics = reader
            .by_ref()
            .filter_map(|r| match r {
                Ok(Record::Retain { topic, .. }) => Some(topic),
                _ => None,
            })
            .collect();
        (topics, reader)
    }

    #[test]
    fn a_stored_log_reads_back_with_its_header_and_checksums() {
        let (log, _) = stored_log();
        assert_eq!(&log[..4], b"FMQJ");
        assert_eq!(log_version(&log), LOG_VERSION);
        assert_eq!(
            log_version(b"\x01\x00"),
            0,
            "no header: the format before headers"
        );
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(topics, ["r/a", "r/b", "r/c"]);
        assert_eq!(reader.valid_len(), log.len());
        assert!(reader.damaged().is_empty());
    }

    #[test]
    fn a_flipped_byte_costs_one_record_and_is_reported_at_its_offset() {
        let (mut log, starts) = stored_log();
        // Records go Message, Retain per topic: flip a payload byte of r/b's message.
        let flipped = starts[3] - 3;
        log[flipped] ^= 0x40;
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(
            topics,
            ["r/a", "r/b", "r/c"],
            "the Retain records are intact"
        );
        assert_eq!(
            reader.damaged(),
            &[Damage {
                offset: starts[2],
                len: starts[3] - starts[2],
                error: JournalError("record checksum mismatch"),
            }]
        );
        assert_eq!(
            reader.valid_len(),
            log.len(),
            "nothing after the damage is cut"
        );
    }

    #[test]
    fn damage_with_nothing_intact_after_it_is_a_torn_tail() {
        let (mut log, starts) = stored_log();
        log[starts[5]] = 0;
        let (topics, reader) = retained_topics(log);
        assert_eq!(topics, ["r/a", "r/b"]);
        assert_eq!(
            reader.damaged().len(),
            0,
            "damage at the very end is a torn tail"
        );
        assert_eq!(reader.valid_len(), starts[5]);
    }

    #[test]
    fn a_zeroed_block_costs_the_records_it_covers_and_reading_resumes_after_it() {
        let (mut log, starts) = stored_log();
        log[starts[0] + 3..starts[3] + 2].fill(0);
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(topics, ["r/c"]);
        assert_eq!(reader.damaged().len(), 1);
        assert_eq!(reader.damaged()[0].offset, starts[0]);
        assert_eq!(reader.damaged()[0].len, starts[4] - starts[0]);
        assert_eq!(reader.valid_len(), log.len());
    }

    #[test]
    fn a_whole_record_that_does_not_decode_is_skipped_alone_and_never_cut() {
        let (log, _) = stored_log();
        let bad = log_records(&[SESSION, 1, 0, 0, 0, 0xff]).unwrap();
        let middle = [&log[..], &bad, &log[LOG_HEADER_LEN..]].concat();
        let (topics, reader) = retained_topics(middle);
        assert_eq!(topics.len(), 6);
        assert_eq!(
            reader.damaged(),
            &[Damage {
                offset: log.len(),
                len: bad.len(),
                error: JournalError("field cut short"),
            }]
        );
        let last = [&log[..], &bad].concat();
        let (_, reader) = retained_topics(last.clone());
        assert_eq!(reader.valid_len(), last.len());
    }

    #[test]
    fn a_torn_tail_of_a_stored_log_ends_reading_at_the_last_whole_record() {
        let (log, starts) = stored_log();
        let (topics, reader) = retained_topics(log[..log.len() - 3].to_vec());
        assert_eq!(topics, ["r/a", "r/b"]);
        assert!(reader.damaged().is_empty());
        assert_eq!(reader.valid_len(), starts[5]);
    }

    #[test]
    fn segments_of_both_versions_read_as_one_stream_and_a_newer_version_is_refused() {
        let mut j = Journal::new(true);
        j.session("old", 60, ClientType::Device);
        let (_, version0) = j.take().unwrap();
        let (log, _) = stored_log();
        // Old segment, new segment, then batch framing again after a version 0 header.
        let all = [&version0[..], &log, &log_header(0), &version0[..]].concat();
        let mut reader = RecordReader::recovering(Bytes::from(all));
        assert_eq!(reader.by_ref().filter(Result::is_ok).count(), 8);
        assert!(reader.damaged().is_empty());

        let mut newer = log.clone();
        newer[4] = 9;
        let mut reader = RecordReader::recovering(Bytes::from(newer));
        assert_eq!(
            reader.next(),
            Some(Err(JournalError("unknown journal format version")))
        );
        assert_eq!(reader.next(), None);
        assert_eq!(reader.valid_len(), 0);
    }

    #[test]
    fn damage_in_a_version_0_segment_skips_to_the_next_segment() {
        let mut j = Journal::new(true);
        j.session("old", 60, ClientType::Device);
        j.session_end("old");
        let (_, version0) = j.take().unwrap();
        let mut old = version0.to_vec();
        old[0] = 0x7f;
        let (log, _) = stored_log();
        let (topics, reader) = retained_topics([&old[..], &log].concat());
        assert_eq!(topics, ["r/a", "r/b", "r/c"]);
        assert_eq!(reader.damaged()[0].offset, 0);
        assert_eq!(reader.damaged()[0].len, old.len());
    }

    #[test]
    fn a_disabled_journal_records_nothing() {
        let mut j = Journal::new(false);
        j.session_end("c");
        assert!(j.take().is_none());
    }
}
