//! Durability: the broker's promise ("acknowledged means durable, QoS 2 means exactly
//! once") written down as bytes, in one place beside the codec. Three parts, each a
//! format with its version:
//!
//! - [`record`]: the record vocabulary (the durable changes of sessions, messages and
//!   retained topics, and the bus-only records that route between shards and nodes),
//!   its encoding in batch framing and its decoding; the record writer (`Journal`).
//! - [`log`]: the stored log (`"FMQJ"`, a version, CRC32C per record) and the reader
//!   of every record stream, with its recovery from damage.
//! - [`frame`]: the frames that leave a process: bus ring batches between shards and
//!   the cluster's Kafka record values.
//! - [`barrier`]: every wait for a confirmation (journal batch, stream batch, bus
//!   round and its slots, Kafka round), one queue per kind of thing held, released
//!   per owner in order; the engine holds one `Barrier`.
//!
//! What the engine journals when, and `restore`, are the engine's
//! (`engine/persist.rs`); docs/architecture.md, "What is acknowledged when", says it
//! for every QoS, store and scale.

pub mod barrier;
pub mod frame;
pub mod log;
pub mod record;

pub use barrier::{Barrier, BusWait, Confirmations, Queue, Ticket};
pub use frame::{
    frame_batch, framed, open_frame, FrameKind, FrameVersionError, FRAME_VERSION,
    SUBSCRIPTION_VALUE,
};
pub use log::{
    log_header, log_records, log_version, Damage, RecordReader, LOG_HEADER_LEN, LOG_VERSION,
};
pub use record::{ClientType, Journal, JournalError, Record, StoredMessage};
