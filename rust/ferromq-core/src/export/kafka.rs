//! Stream records as Kafka record batches (message format v2, "magic 2"), built here so
//! the Kafka sink hands aiokafka finished bytes and makes no Python object per record.
//!
//! Layout of one batch (Kafka protocol guide, "Record Batch"; all integers big-endian):
//!
//! ```text
//! baseOffset i64 = 0 (the broker assigns offsets) | batchLength i32 (bytes after it)
//! partitionLeaderEpoch i32 = -1 | magic i8 = 2 | crc u32 (CRC32C of attributes..end)
//! attributes i16 = 0 (no compression, create time, not transactional, no control)
//! lastOffsetDelta i32 | baseTimestamp i64 (the first record's) | maxTimestamp i64
//! producerId i64 = -1 | producerEpoch i16 = -1 | baseSequence i32 = -1 (not idempotent)
//! records i32 | records...
//! record: length varint | attributes i8 = 0 | timestampDelta varlong | offsetDelta varint
//!         keyLength varint | key | valueLength varint | value | headers varint = 0
//! ```
//!
//! Varints are zigzag-encoded (protobuf's), seven bits a byte, low bits first. A record's
//! size is counted before it is written (one pass, no buffer moved); the header's
//! lengths, timestamps and CRC are patched once the batch ends.
//!
//! Partitioning is the Java client's default for a keyed record, so consumers (and the
//! Spark jobs) see the same key in the same partition as any Java producer would put
//! it: `murmur2(key) & 0x7fffffff % partitions` (`Utils.toPositive`). Order holds per
//! partition, hence per key: records keep their stream order inside a partition.
//!
//! A Kafka broker refuses a batch above its `message.max.bytes` (1 MiB by default), and
//! a produce request carries one batch per partition, so [`partition_batches`] closes a
//! batch before it would pass `max_batch_bytes` (a single larger record still gets a
//! batch of its own, which the broker may refuse: the sink counts that as dropped).
//! Cost: one hash per record and one copy of its key and value; O(records + bytes).
//!
//! A record's value is the engine's Avro encoding as it is ([`ValueFormat::Plain`]), or
//! that encoding behind the Confluent wire format's header ([`ValueFormat::Confluent`]):
//! magic byte 0, then the schema id a schema registry gave `record-v1`, 4 bytes
//! big-endian. The header is built once per call and copied in front of each value, so
//! the registry's format costs 5 bytes and one small copy per record. A plain value
//! never starts with 0 (its first field, `schema_version` = 1, is the zigzag varint 2),
//! so a reader tells the two apart by the first byte.

use std::num::NonZeroU32;

use super::RecordRef;

/// Bytes of a batch before its first record.
pub const BATCH_HEADER_BYTES: usize = 61;
const MAGIC: u8 = 2;
const LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
/// The CRC covers everything from the attributes on.
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const COUNT_AT: usize = 57;

/// What comes before each record's Avro value in a Kafka record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueFormat {
    /// The Avro binary encoding alone (Spark's `from_avro` reads it as it is).
    #[default]
    Plain,
    /// The Confluent wire format: magic byte 0, the registry's schema id (big-endian
    /// 4 bytes), then the Avro binary encoding.
    Confluent { schema_id: u32 },
}

/// The Confluent wire format's magic byte.
pub const CONFLUENT_MAGIC: u8 = 0;
/// Bytes of the Confluent wire format's header.
pub const CONFLUENT_HEADER_BYTES: usize = 5;

/// A [`ValueFormat`]'s header bytes, built once and copied before every value.
#[derive(Debug, Clone, Copy, Default)]
struct ValueHeader {
    bytes: [u8; CONFLUENT_HEADER_BYTES],
    len: usize,
}

impl ValueHeader {
    fn new(format: ValueFormat) -> Self {
        match format {
            ValueFormat::Plain => ValueHeader::default(),
            ValueFormat::Confluent { schema_id } => {
                let mut bytes = [CONFLUENT_MAGIC; CONFLUENT_HEADER_BYTES];
                bytes[1..].copy_from_slice(&schema_id.to_be_bytes());
                ValueHeader {
                    bytes,
                    len: CONFLUENT_HEADER_BYTES,
                }
            }
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The 32-bit MurmurHash2 of Kafka's Java client (`Utils.murmur2`, seed `0x9747b28c`).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&first) = tail.first() {
        h ^= u32::from(first);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner gives a record with `key`.
pub fn partition_for(key: &[u8], partitions: NonZeroU32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) as u32 % partitions.get()
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn varint_len(n: i64) -> usize {
    let bits = 64 - (zigzag(n) | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, n: i64) {
    let mut v = zigzag(n);
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One record batch being written: records are appended in offset order, then
/// [`BatchWriter::finish`] fills in the header.
#[derive(Debug)]
pub struct BatchWriter {
    out: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    header: ValueHeader,
}

impl Default for BatchWriter {
    fn default() -> Self {
        BatchWriter::new(ValueFormat::Plain)
    }
}

impl BatchWriter {
    /// An empty batch whose record values are written in `format`.
    pub fn new(format: ValueFormat) -> Self {
        BatchWriter {
            out: vec![0; BATCH_HEADER_BYTES],
            count: 0,
            base_timestamp: 0,
            max_timestamp: i64::MIN,
            header: ValueHeader::new(format),
        }
    }

    /// An empty batch in the same value format as this one.
    fn next(&self) -> Self {
        BatchWriter {
            header: self.header,
            ..BatchWriter::default()
        }
    }

    /// Bytes so far (header included).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// No record yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// (timestamp delta, offset delta, body length) of `record` as the next record.
    fn deltas(&self, record: &RecordRef<'_>) -> (i64, i64, usize) {
        let base = if self.count == 0 {
            record.timestamp_ms
        } else {
            self.base_timestamp
        };
        let timestamp_delta = record.timestamp_ms.wrapping_sub(base);
        let offset_delta = i64::from(self.count);
        let value_len = self.header.len + record.value.len();
        let body = 1 // attributes
            + varint_len(timestamp_delta)
            + varint_len(offset_delta)
            + varint_len(record.key.len() as i64)
            + record.key.len()
            + varint_len(value_len as i64)
            + value_len
            + 1; // no headers
        (timestamp_delta, offset_delta, body)
    }

    /// The bytes `record` would add.
    pub fn record_len(&self, record: &RecordRef<'_>) -> usize {
        let (_, _, body) = self.deltas(record);
        varint_len(body as i64) + body
    }

    pub fn push(&mut self, record: &RecordRef<'_>) {
        let (timestamp_delta, offset_delta, body) = self.deltas(record);
        if self.count == 0 {
            self.base_timestamp = record.timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(record.timestamp_ms);
        self.out.reserve(varint_len(body as i64) + body);
        put_varint(&mut self.out, body as i64);
        self.out.push(0);
        put_varint(&mut self.out, timestamp_delta);
        put_varint(&mut self.out, offset_delta);
        put_varint(&mut self.out, record.key.len() as i64);
        self.out.extend_from_slice(record.key);
        put_varint(&mut self.out, (self.header.len + record.value.len()) as i64);
        self.out.extend_from_slice(self.header.as_slice());
        self.out.extend_from_slice(record.value);
        put_varint(&mut self.out, 0);
        self.count += 1;
    }

    /// The finished batch: header fields and CRC32C filled in (at least one record).
    pub fn finish(mut self) -> Vec<u8> {
        debug_assert!(self.count > 0, "a record batch holds at least one record");
        let out = &mut self.out;
        let length = (out.len() - LEADER_EPOCH_AT) as i32;
        out[LENGTH_AT..LEADER_EPOCH_AT].copy_from_slice(&length.to_be_bytes());
        out[LEADER_EPOCH_AT..MAGIC_AT].copy_from_slice(&(-1i32).to_be_bytes());
        out[MAGIC_AT] = MAGIC;
        let last_offset_delta = self.count - 1;
        out[LAST_OFFSET_DELTA_AT..BASE_TIMESTAMP_AT]
            .copy_from_slice(&last_offset_delta.to_be_bytes());
        out[BASE_TIMESTAMP_AT..MAX_TIMESTAMP_AT]
            .copy_from_slice(&self.base_timestamp.to_be_bytes());
        out[MAX_TIMESTAMP_AT..PRODUCER_ID_AT].copy_from_slice(&self.max_timestamp.to_be_bytes());
        out[PRODUCER_ID_AT..PRODUCER_EPOCH_AT].copy_from_slice(&(-1i64).to_be_bytes());
        out[PRODUCER_EPOCH_AT..BASE_SEQUENCE_AT].copy_from_slice(&(-1i16).to_be_bytes());
        out[BASE_SEQUENCE_AT..COUNT_AT].copy_from_slice(&(-1i32).to_be_bytes());
        out[COUNT_AT..BATCH_HEADER_BYTES].copy_from_slice(&self.count.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
        out[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        self.out
    }
}

/// One finished batch and the partition it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionBatch {
    pub partition: u32,
    pub records: usize,
    pub bytes: Vec<u8>,
}

/// `records` as Kafka batches by partition (ascending), records in their order within
/// each partition, a partition's records split into several batches where one would
/// pass `max_batch_bytes`, each value written in `format`.
pub fn partition_batches<'a>(
    records: impl IntoIterator<Item = RecordRef<'a>>,
    partitions: NonZeroU32,
    max_batch_bytes: usize,
    format: ValueFormat,
) -> Vec<PartitionBatch> {
    let mut by_partition: Vec<Vec<RecordRef<'a>>> = vec![Vec::new(); partitions.get() as usize];
    for record in records {
        by_partition[partition_for(record.key, partitions) as usize].push(record);
    }
    let mut batches = Vec::new();
    for (partition, records) in by_partition.iter().enumerate() {
        if records.is_empty() {
            continue;
        }
        // Sized once: a record is its key, its value and at most 25 bytes of framing
        // (the value format's header included).
        let need: usize = records
            .iter()
            .map(|r| r.key.len() + r.value.len() + 25)
            .sum();
        let mut writer = BatchWriter::new(format);
        writer.out.reserve(need.min(max_batch_bytes));
        let mut count = 0;
        for record in records {
            if !writer.is_empty() && writer.len() + writer.record_len(record) > max_batch_bytes {
                let next = writer.next();
                batches.push(PartitionBatch {
                    partition: partition as u32,
                    records: count,
                    bytes: std::mem::replace(&mut writer, next).finish(),
                });
                writer.out.reserve(max_batch_bytes);
                count = 0;
            }
            writer.push(record);
            count += 1;
        }
        batches.push(PartitionBatch {
            partition: partition as u32,
            records: count,
            bytes: writer.finish(),
        });
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ONE_MIB: usize = 1 << 20;

    fn partitions(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).expect("non-zero")
    }

    /// A decoded record: key, value, timestamp.
    type Decoded = (Vec<u8>, Vec<u8>, i64);

    /// A reader of what this module writes (and of any uncompressed v2 batch without
    /// headers): the records back, checking every header field and the CRC.
    fn decode(batch: &[u8]) -> Vec<Decoded> {
        fn varint(data: &[u8], at: &mut usize) -> i64 {
            let (mut value, mut shift) = (0u64, 0);
            loop {
                let byte = data[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return (value >> 1) as i64 ^ -((value & 1) as i64);
                }
                shift += 7;
            }
        }
        let be = |range: std::ops::Range<usize>| -> i64 {
            batch[range]
                .iter()
                .fold(0i64, |acc, &b| (acc << 8) | i64::from(b))
        };
        assert_eq!(be(0..8), 0, "base offset");
        assert_eq!(be(LENGTH_AT..12) as usize, batch.len() - 12, "batch length");
        assert_eq!(&batch[12..16], &[0xff; 4], "leader epoch -1");
        assert_eq!(batch[MAGIC_AT], 2, "magic");
        assert_eq!(be(CRC_AT..21) as u32, crc32c::crc32c(&batch[21..]), "crc");
        assert_eq!(be(21..23), 0, "attributes");
        assert_eq!(
            &batch[PRODUCER_ID_AT..COUNT_AT],
            &[0xff; 14],
            "no producer state"
        );
        let count = be(COUNT_AT..61) as usize;
        let base = be(BASE_TIMESTAMP_AT..35);
        let (mut at, mut records, mut max) = (BATCH_HEADER_BYTES, Vec::new(), i64::MIN);
        for offset in 0..count {
            let length = varint(batch, &mut at) as usize;
            let end = at + length;
            assert_eq!(batch[at], 0, "record attributes");
            at += 1;
            let timestamp = base + varint(batch, &mut at);
            assert_eq!(varint(batch, &mut at), offset as i64, "offset delta");
            let key_len = varint(batch, &mut at) as usize;
            let key = batch[at..at + key_len].to_vec();
            at += key_len;
            let value_len = varint(batch, &mut at) as usize;
            let value = batch[at..at + value_len].to_vec();
            at += value_len;
            assert_eq!(varint(batch, &mut at), 0, "no headers");
            assert_eq!(at, end, "record length");
            max = max.max(timestamp);
            records.push((key, value, timestamp));
        }
        assert_eq!(at, batch.len(), "nothing after the records");
        assert_eq!(
            be(LAST_OFFSET_DELTA_AT..27) as usize,
            count - 1,
            "last offset delta"
        );
        assert_eq!(be(MAX_TIMESTAMP_AT..43), max, "max timestamp");
        records
    }

    #[test]
    fn murmur2_matches_the_java_clients_utils_test() {
        // org.apache.kafka.common.utils.UtilsTest.testMurmur2
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn partition_is_the_positive_hash_modulo_the_count() {
        // -973932308 & 0x7fffffff = 1173551340
        assert_eq!(partition_for(b"21", partitions(6)), 1173551340 % 6);
        assert_eq!(partition_for(b"abc", partitions(1)), 0);
    }

    #[test]
    fn a_batch_is_byte_for_byte_the_one_aiokafka_builds() {
        // aiokafka 0.14: DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20) with
        // append(0, 1700000000123, b"a/b", b"one", []) and
        // append(1, 1700000000120, b"", b"two!", []), build().hex(). Read by hand:
        // header (length 0x49, crc c0bb99a5, last delta 1, base and max time
        // 0x18bcfe5687b, no producer, 2 records), then 0x18 = 12 bytes: attributes 0,
        // time delta 0, offset delta 0, key 0x06 = 3 "a/b", value 3 "one", 0 headers;
        // then 0x14 = 10 bytes: time delta 0x05 = -3, offset delta 0x02 = 1, key 0,
        // value 4 "two!", 0 headers.
        let expected = "000000000000000000000049ffffffff02c0bb99a50000000000010000018bcfe5687b\
                        0000018bcfe5687bffffffffffffffffffffffffffff000000021800000006612f62066f\
                        6e650014000502000874776f2100";
        let mut writer = BatchWriter::default();
        for (key, value, timestamp_ms) in [
            (&b"a/b"[..], &b"one"[..], 1_700_000_000_123),
            (&b""[..], &b"two!"[..], 1_700_000_000_120),
        ] {
            writer.push(&RecordRef {
                key,
                value,
                timestamp_ms,
            });
        }
        let batch = writer.finish();
        let hex: String = batch.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        assert_eq!(decode(&batch).len(), 2);
    }

    #[test]
    fn record_len_is_what_push_writes() {
        let mut writer = BatchWriter::default();
        let value = vec![7u8; 300];
        for n in 0..200i64 {
            let record = RecordRef {
                key: b"k",
                value: &value[..n as usize],
                timestamp_ms: 1_000 + n * 1_000_000,
            };
            let before = writer.len();
            let expected = writer.record_len(&record);
            writer.push(&record);
            assert_eq!(writer.len() - before, expected);
        }
    }

    #[test]
    fn a_partition_over_the_bound_gets_more_batches_in_order() {
        let value = vec![b'x'; 1000];
        let records: Vec<RecordRef<'_>> = (0..50)
            .map(|n| RecordRef {
                key: b"same",
                value: &value,
                timestamp_ms: n,
            })
            .collect();
        let batches = partition_batches(
            records.iter().copied(),
            partitions(4),
            10_000,
            ValueFormat::Plain,
        );
        assert!(batches.len() >= 5, "{} batches", batches.len());
        let mut times = Vec::new();
        for batch in &batches {
            assert!(batch.bytes.len() <= 10_000);
            assert_eq!(batch.partition, partition_for(b"same", partitions(4)));
            let decoded = decode(&batch.bytes);
            assert_eq!(decoded.len(), batch.records);
            times.extend(decoded.into_iter().map(|(_, _, t)| t));
        }
        assert_eq!(times, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn a_record_larger_than_the_bound_gets_a_batch_of_its_own() {
        let big = vec![0u8; 5000];
        let records = [
            RecordRef {
                key: b"k",
                value: b"small",
                timestamp_ms: 1,
            },
            RecordRef {
                key: b"k",
                value: &big,
                timestamp_ms: 2,
            },
        ];
        let batches = partition_batches(records, partitions(1), 1000, ValueFormat::Plain);
        assert_eq!(
            batches.iter().map(|b| b.records).collect::<Vec<_>>(),
            [1, 1]
        );
    }

    #[test]
    fn the_confluent_format_puts_magic_zero_and_the_schema_id_before_each_value() {
        let values: Vec<Vec<u8>> = (0..40u8).map(|n| vec![2, n, n]).collect();
        let records: Vec<RecordRef<'_>> = values
            .iter()
            .enumerate()
            .map(|(n, value)| RecordRef {
                key: if n % 2 == 0 { b"even" } else { b"odd" },
                value,
                timestamp_ms: n as i64,
            })
            .collect();
        let format = ValueFormat::Confluent {
            schema_id: 0x0102_0304,
        };
        // A small bound: partitions split into several batches, each one framed.
        let batches = partition_batches(records.iter().copied(), partitions(2), 200, format);
        assert!(batches.len() > 2, "{} batches", batches.len());
        let mut got: Vec<Vec<u8>> = Vec::new();
        for batch in &batches {
            for (_, value, _) in decode(&batch.bytes) {
                assert_eq!(value[..CONFLUENT_HEADER_BYTES], [0, 1, 2, 3, 4]);
                got.push(value[CONFLUENT_HEADER_BYTES..].to_vec());
            }
        }
        got.sort();
        let mut expected = values.clone();
        expected.sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn record_len_counts_the_confluent_header() {
        let mut writer = BatchWriter::new(ValueFormat::Confluent { schema_id: 7 });
        let plain = BatchWriter::default();
        let record = RecordRef {
            key: b"k",
            value: b"value",
            timestamp_ms: 1,
        };
        assert_eq!(
            writer.record_len(&record),
            plain.record_len(&record) + CONFLUENT_HEADER_BYTES
        );
        let before = writer.len();
        let expected = writer.record_len(&record);
        writer.push(&record);
        assert_eq!(writer.len() - before, expected);
    }

    proptest! {
        #[test]
        fn batches_hold_every_record_once_by_key_in_order(
            records in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12),
                 proptest::collection::vec(any::<u8>(), 0..300),
                 -1_000_000i64..1_000_000), 0..200),
            count in 1u32..8,
            max_batch_bytes in 100usize..ONE_MIB,
        ) {
            let refs = records.iter().map(|(key, value, timestamp_ms)| RecordRef {
                key, value, timestamp_ms: *timestamp_ms,
            });
            let batches = partition_batches(refs, partitions(count), max_batch_bytes, ValueFormat::Plain);
            let mut seen: Vec<Vec<Decoded>> = vec![Vec::new(); count as usize];
            let mut last_partition = 0;
            for batch in &batches {
                prop_assert!(batch.partition >= last_partition, "ascending partitions");
                last_partition = batch.partition;
                let decoded = decode(&batch.bytes);
                prop_assert_eq!(decoded.len(), batch.records);
                prop_assert!(batch.records == 1 || batch.bytes.len() <= max_batch_bytes);
                seen[batch.partition as usize].extend(decoded);
            }
            for (partition, got) in seen.iter().enumerate() {
                let expected: Vec<_> = records
                    .iter()
                    .filter(|(key, _, _)| partition_for(key, partitions(count)) as usize == partition)
                    .cloned()
                    .collect();
                prop_assert_eq!(got, &expected);
            }
        }
    }
}
