//! The frames that leave a process: what a shard's bus ring carries to another shard
//! (`bus/`, `engine/shards.rs`) and what a cluster's Kafka topics carry between nodes
//! (`engine/cluster.rs`, `cluster/bus.py`). A reader may be another build: a shard
//! the supervisor restarted after an upgrade, a node of a cluster restarted on a newer
//! release. So every frame starts with the format version of its writer, and a reader
//! that meets a version it does not know stops rather than guess
//! ([`FrameVersionError`]: one line naming the frame and both versions).
//!
//! **Frame format, version 1** (`FRAME_VERSION`): `version u8 | body`.
//!
//! | frame | carried as | body |
//! |---|---|---|
//! | bus batch | one record of a bus ring | records in batch framing (`record.rs`) |
//! | node record | the value of a Kafka record in `<prefix>node.<node>` (key: the sender's node id, header `seen`) | records in batch framing |
//! | subscription value | the value of a key `<node>\0<filter>` of `<prefix>subscriptions` (a tombstone: absent) | empty: the key is present |
//!
//! A tick's records for one shard or node are cut into frames that a ring record or a
//! Kafka record takes whole, never between a message and the `ROUTE` or `RETAIN` that
//! names it ([`frame_batch`]), so each frame reads on its own. Version 0 would be a
//! frame without a version byte, as builds before frame versions wrote them; none
//! was released (a node's shards are one build unless the supervisor restarts one
//! after an upgrade, and no cluster was released), so no reader accepts it. Such a
//! frame starts with a record kind or, in the subscription topic, `'1'`, and is
//! refused as the version that byte names.

use bytes::{BufMut, Bytes, BytesMut};

use super::record::{JournalError, RETAIN, ROUTE};

/// The frame format this build writes, and the newest it reads.
pub const FRAME_VERSION: u8 = 1;

/// The value of a present key in the cluster's subscription topic.
pub const SUBSCRIPTION_VALUE: [u8; 1] = [FRAME_VERSION];

/// Which frame a reader met, for the line that refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    BusBatch,
    NodeRecord,
    SubscriptionValue,
}

impl FrameKind {
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::BusBatch => "bus batch from another shard",
            FrameKind::NodeRecord => "cluster node record",
            FrameKind::SubscriptionValue => "cluster subscription value",
        }
    }
}

/// A frame of a format version this build does not read (0: without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameVersionError {
    pub kind: FrameKind,
    pub version: u8,
}

impl std::fmt::Display for FrameVersionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in frame format version {}, but this build reads version {FRAME_VERSION}",
            self.kind.name(),
            self.version
        )
    }
}

impl std::error::Error for FrameVersionError {}

/// `records` (batch framing) as one frame.
pub fn framed(records: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(1 + records.len());
    frame.put_u8(FRAME_VERSION);
    frame.put_slice(records);
    frame.freeze()
}

/// `batch` (records as `take_bus` or `take_peer` give them) as frames of at most
/// `max_frame` bytes, cut between record groups. A single record too large for a frame
/// is an error: a bus ring cannot carry it (it is sized for the largest packet).
pub fn frame_batch(batch: Bytes, max_frame: usize) -> Result<Vec<Bytes>, JournalError> {
    let pieces = cut_batch(batch, max_frame.saturating_sub(1))?;
    Ok(pieces.iter().map(|piece| framed(piece)).collect())
}

/// The body of `frame` (a `kind` frame), or the version it was refused for.
pub fn open_frame(kind: FrameKind, frame: Bytes) -> Result<Bytes, FrameVersionError> {
    match frame.first() {
        Some(&version) if (1..=FRAME_VERSION).contains(&version) => Ok(frame.slice(1..)),
        other => Err(FrameVersionError {
            kind,
            version: other.copied().unwrap_or(0),
        }),
    }
}

/// `batch` cut into pieces of at most `max` bytes, each cut before a record that starts
/// something: never between a message and the `ROUTE` or `RETAIN` that refers to it.
/// A single record over `max` is an error.
fn cut_batch(mut batch: Bytes, max: usize) -> Result<Vec<Bytes>, JournalError> {
    let mut pieces = Vec::new();
    // `at`: the next record; `group`: where the record group `at` belongs to began.
    let (mut at, mut group) = (0, 0);
    while at < batch.len() {
        if batch.len() - at < 5 {
            return Err(JournalError("bus record header cut off"));
        }
        let kind = batch[at];
        let len = u32::from_le_bytes(batch[at + 1..at + 5].try_into().expect("4 bytes")) as usize;
        let end = at + 5 + len;
        if end > batch.len() {
            return Err(JournalError("bus record cut off"));
        }
        if kind != ROUTE && kind != RETAIN {
            group = at;
        }
        if end > max {
            if group == 0 {
                return Err(JournalError("bus record larger than the ring takes"));
            }
            pieces.push(batch.split_to(group));
            (at, group) = (0, 0);
            continue;
        }
        at = end;
    }
    if !batch.is_empty() {
        pieces.push(batch);
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::record::MESSAGE;

    fn record(kind: u8, len: usize) -> Vec<u8> {
        let mut r = vec![kind];
        r.extend_from_slice(&(len as u32).to_le_bytes());
        r.extend(std::iter::repeat_n(kind, len));
        r
    }

    #[test]
    fn cuts_between_groups_never_inside_one() {
        let batch: Vec<u8> = [
            record(MESSAGE, 20),
            record(ROUTE, 8),
            record(MESSAGE, 20),
            record(ROUTE, 8),
        ]
        .concat();
        let pieces = cut_batch(Bytes::from(batch.clone()), 40).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].len(), 38);
        assert_eq!(pieces.concat(), batch);
        assert_eq!(
            cut_batch(Bytes::from(batch.clone()), 1000).unwrap().len(),
            1
        );
        assert!(cut_batch(Bytes::from(batch), 30).is_err());
    }

    #[test]
    fn frames_carry_the_version_first_and_read_back_whole() {
        let batch: Vec<u8> = [record(MESSAGE, 20), record(ROUTE, 8)].concat();
        let frames = frame_batch(Bytes::from(batch.clone()), 1000).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0][0], FRAME_VERSION);
        let body = open_frame(FrameKind::BusBatch, frames[0].clone()).unwrap();
        assert_eq!(body, batch);
        // The version byte counts against the frame's size.
        let pair = [batch.clone(), batch.clone()].concat();
        let frames = frame_batch(Bytes::from(pair), batch.len() + 1).unwrap();
        assert_eq!(frames.len(), 2);
        assert!(frames.iter().all(|f| f.len() == batch.len() + 1));
        assert!(frame_batch(Bytes::from(batch.clone()), batch.len()).is_err());
        assert_eq!(
            open_frame(
                FrameKind::SubscriptionValue,
                Bytes::from_static(&SUBSCRIPTION_VALUE)
            ),
            Ok(Bytes::new())
        );
    }

    #[test]
    fn a_newer_version_is_refused_with_one_line_naming_the_frame_and_both_versions() {
        let mut frame = framed(&record(MESSAGE, 4)).to_vec();
        frame[0] = FRAME_VERSION + 1;
        let refused = open_frame(FrameKind::NodeRecord, Bytes::from(frame)).unwrap_err();
        assert_eq!(
            refused,
            FrameVersionError {
                kind: FrameKind::NodeRecord,
                version: 2
            }
        );
        assert_eq!(
            refused.to_string(),
            "cluster node record in frame format version 2, but this build reads version 1"
        );
    }

    #[test]
    fn a_frame_without_a_version_is_refused() {
        // As a build before frame versions wrote them: the first record's kind first.
        let unversioned = record(MESSAGE, 4);
        assert_eq!(
            open_frame(FrameKind::BusBatch, Bytes::from(unversioned)),
            Err(FrameVersionError {
                kind: FrameKind::BusBatch,
                version: MESSAGE
            })
        );
        assert_eq!(
            open_frame(FrameKind::SubscriptionValue, Bytes::from_static(b"1"))
                .unwrap_err()
                .version,
            b'1'
        );
        for empty in [&[][..], &[0][..]] {
            let refused = open_frame(FrameKind::BusBatch, Bytes::copy_from_slice(empty));
            assert_eq!(refused.unwrap_err().version, 0);
        }
    }
}
