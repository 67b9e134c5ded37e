//! Criterion benchmark of the stream's Kafka encoding alone, no Python:
//! `cargo bench -p ferromq-core --bench kafka_batch`.
//!
//! 10,000 stream records (keys like `site/42/device/1234`, a 200-byte value, the size
//! of an Avro message record with a small JSON payload) into Kafka record batches over
//! 6 partitions: partitioning (murmur2 per key), varints, copies and one CRC32C per
//! batch. Throughput is in records, so criterion's time per iteration divided by
//! 10,000 is the cost in ns per record. `partition_batches` writes plain Avro values,
//! `partition_batches_confluent` the same values behind the Confluent wire format's
//! 5-byte header (`[stream.kafka] registry`): the difference is that format's cost.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::export::kafka::{partition_batches, ValueFormat};
use ferromq_core::export::RecordList;

const RECORDS: usize = 10_000;

fn records(value_len: usize) -> RecordList {
    let mut list = RecordList::default();
    let value = vec![b'v'; value_len];
    for i in 0..RECORDS {
        let key = format!("site/{}/device/{}", i % 100, i % 1000);
        list.push(key.as_bytes(), &value, 1_700_000_000_000 + i as i64);
    }
    list
}

fn bench_kafka_batch(c: &mut Criterion) {
    let partitions = NonZeroU32::new(6).expect("non-zero");
    for value_len in [200, 1024] {
        let list = records(value_len);
        let mut group = c.benchmark_group(format!("kafka_batch_{value_len}B"));
        group.throughput(Throughput::Elements(RECORDS as u64));
        for (name, format) in [
            ("partition_batches", ValueFormat::Plain),
            (
                "partition_batches_confluent",
                ValueFormat::Confluent { schema_id: 1 },
            ),
        ] {
            group.bench_function(name, |b| {
                b.iter(|| {
                    black_box(partition_batches(
                        list.iter(),
                        partitions,
                        1_000_000,
                        format,
                    ))
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_kafka_batch);
criterion_main!(benches);
