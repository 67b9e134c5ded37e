//! The broker's outgoing data stream (`[stream]`): records for every accepted PUBLISH
//! that matches the stream's filters and for client lifecycle events, in the Avro
//! schema `python/ferromq/stream/record-v1.avsc`, built here in batches so no Python
//! object is made per record.
//!
//! A [`RecordList`] holds one kind of record (messages or events) as three flat
//! buffers: the values end to end, the keys end to end, and per record its two end
//! offsets and its timestamp. Sinks read it record by record ([`RecordList::iter`]) and
//! write Kafka record batches ([`kafka`]) or Avro container blocks from it; nothing is
//! copied per record until the sink's own encoding.

pub mod avro;
pub mod kafka;

use bytes::{BufMut, BytesMut};

/// One batch of the stream as `Engine::take_stream` hands it out: numbered from 1,
/// in order; the sink reports it with `Engine::stream_done(number)`.
#[derive(Debug, Default, Clone)]
pub struct ExportBatch {
    pub number: u64,
    pub messages: RecordList,
    pub events: RecordList,
}

/// One record as a sink sees it: the Kafka key (topic, device or client id), the
/// Avro-encoded value, and the broker time in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub timestamp_ms: i64,
}

/// Where each record ends in the value and key buffers, and its time.
#[derive(Debug, Clone, Copy)]
struct Ends {
    value: usize,
    key: usize,
    timestamp_ms: i64,
}

/// Records of one kind, appended in order and read back in the same order.
#[derive(Debug, Default, Clone)]
pub struct RecordList {
    values: BytesMut,
    keys: BytesMut,
    ends: Vec<Ends>,
}

impl RecordList {
    /// Appends a record whose value is written by `encode` straight into the list's
    /// value buffer (no intermediate allocation per record).
    pub fn push_with(&mut self, key: &[u8], timestamp_ms: i64, encode: impl FnOnce(&mut BytesMut)) {
        encode(&mut self.values);
        self.keys.put_slice(key);
        self.ends.push(Ends {
            value: self.values.len(),
            key: self.keys.len(),
            timestamp_ms,
        });
    }

    /// Appends a record whose value is already encoded.
    pub fn push(&mut self, key: &[u8], value: &[u8], timestamp_ms: i64) {
        self.push_with(key, timestamp_ms, |buf| buf.put_slice(value));
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of all values together (what a sink writes, before its framing).
    pub fn value_bytes(&self) -> usize {
        self.values.len()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> + '_ {
        let mut value_start = 0;
        let mut key_start = 0;
        self.ends.iter().map(move |end| {
            let record = RecordRef {
                key: &self.keys[key_start..end.key],
                value: &self.values[value_start..end.value],
                timestamp_ms: end.timestamp_ms,
            };
            value_start = end.value;
            key_start = end.key;
            record
        })
    }

    /// Takes every record out, leaving the list empty with room for as many bytes
    /// and records again (the next batch is usually like the last), so a busy stream
    /// does not grow each batch's buffers from nothing by doubling and copying.
    pub fn take(&mut self) -> RecordList {
        let taken = std::mem::take(self);
        self.values.reserve(taken.values.len());
        self.keys.reserve(taken.keys.len());
        self.ends.reserve(taken.ends.len());
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_in_order_with_their_keys_values_and_times() {
        let mut list = RecordList::default();
        list.push(b"a/b", b"one", 10);
        list.push_with(b"", 11, |buf| buf.put_slice(b"two!"));
        list.push(b"c", b"", 12);
        let read: Vec<_> = list.iter().collect();
        assert_eq!(
            read,
            vec![
                RecordRef {
                    key: b"a/b",
                    value: b"one",
                    timestamp_ms: 10
                },
                RecordRef {
                    key: b"",
                    value: b"two!",
                    timestamp_ms: 11
                },
                RecordRef {
                    key: b"c",
                    value: b"",
                    timestamp_ms: 12
                },
            ]
        );
        assert_eq!(list.len(), 3);
        assert_eq!(list.value_bytes(), 7);
    }

    #[test]
    fn take_empties_the_list() {
        let mut list = RecordList::default();
        list.push(b"k", b"v", 1);
        let taken = list.take();
        assert!(list.is_empty());
        assert_eq!(taken.len(), 1);
        assert!(list.values.capacity() >= 1 && list.ends.capacity() >= 1);
    }
}
