//! The frames that leave a process: the batches a shard's bus ring carries to another
//! shard (`bus/`, `engine/shards.rs`), which a cluster's node topics carry between
//! nodes as Kafka record values (`engine/cluster.rs`, `cluster/bus.py`). A batch is
//! records in batch framing (`record.rs`), cut here into pieces a ring or a Kafka
//! record takes whole.

use bytes::Bytes;

use super::record::{JournalError, RETAIN, ROUTE};

/// `batch` (records as `take_bus` gives them) cut into pieces of at most `max` bytes
/// for a bus ring, each cut before a record that starts something: never between a
/// message and the `ROUTE` or `RETAIN` that refers to it. A single record over `max`
/// is an error: the ring cannot carry it (the ring is sized for the largest packet).
pub fn split_bus_batch(mut batch: Bytes, max: usize) -> Result<Vec<Bytes>, JournalError> {
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
        let pieces = split_bus_batch(Bytes::from(batch.clone()), 40).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].len(), 38);
        assert_eq!(pieces.concat(), batch);
        assert_eq!(
            split_bus_batch(Bytes::from(batch.clone()), 1000)
                .unwrap()
                .len(),
            1
        );
        assert!(split_bus_batch(Bytes::from(batch), 30).is_err());
    }
}
