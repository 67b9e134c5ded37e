//! The cross-shard bus ring (issue 16's goal: ≤ 100 ns per message per hop in a batch).
//!
//! - `ring/one-thread`: push a batch of 64 records of 100 bytes, publish, drain: both
//!   sides' instructions with warm caches, no cross-core traffic.
//! - `ring/two-threads`: a producer thread and this thread as consumer, records of 100
//!   bytes in batches of 64: the real hop, cache lines moving between cores.
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::bus::ring::OwnedRegion;

const RECORD: usize = 100;
const BATCH: u64 = 64;
const CAPACITY: usize = 1 << 20;

fn one_thread(c: &mut Criterion) {
    let mut region = OwnedRegion::new(CAPACITY);
    let ring = region.ring();
    let (mut writer, mut reader) = (ring.writer(), ring.reader());
    let record = [7u8; RECORD];
    let mut group = c.benchmark_group("ring");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("one-thread", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                assert!(writer.push(black_box(&record)));
            }
            writer.publish();
            reader.drain(|r| {
                black_box(r);
            })
        })
    });
    group.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring");
    group.throughput(Throughput::Elements(1));
    group.bench_function("two-threads", |b| {
        b.iter_custom(|messages| {
            let mut region = OwnedRegion::new(CAPACITY);
            let ring = region.ring();
            let (mut writer, mut reader) = (ring.writer(), ring.reader());
            let started = Instant::now();
            let producer = std::thread::spawn(move || {
                let record = [7u8; RECORD];
                let mut sent = 0;
                while sent < messages {
                    let mut batch = 0;
                    while batch < BATCH && sent < messages && writer.push(&record) {
                        batch += 1;
                        sent += 1;
                    }
                    writer.publish();
                }
            });
            let mut received = 0;
            while received < messages {
                received += reader.drain(|r| {
                    black_box(r);
                }) as u64;
            }
            producer.join().expect("producer");
            let elapsed: Duration = started.elapsed();
            drop(region);
            elapsed
        })
    });
    group.finish();
}

criterion_group!(benches, one_thread, two_threads);
criterion_main!(benches);
