//! The cross-shard bus ring (issue 16's goal: ≤ 100 ns per message per hop in a batch).
//!
//! - `ring/one-thread`: push a batch of 64 records of 100 bytes, publish, drain: both
//!   sides' instructions with warm caches, no cross-core traffic.
//! - `ring/two-threads`: a producer thread and this thread as consumer, records of 100
//!   bytes in batches of 64: the real hop, cache lines moving between cores.
//! - `route/local` and `route/cross-shard`: 64 QoS 0 PUBLISHes of 100 bytes to one
//!   subscriber, on its own shard and from the other shard (the records written,
//!   taken and applied by `bus_receive`, without the ring). The difference is what a
//!   message pays for crossing shards beyond the ring's copy.
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::bus::ring::OwnedRegion;
use ferromq_core::codec::QoS;
use ferromq_core::engine::{Engine, EngineConfig};
use ferromq_core::topic::ShareStrategy;

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

/// CONNECT (3.1.1, clean session, client id "s") and SUBSCRIBE t/x at QoS 0.
const SUBSCRIBER: &[u8] = &[
    0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, 1, b's', //
    0x82, 8, 0, 1, 0, 3, b't', b'/', b'x', 0,
];

fn shard(me: u16) -> Engine {
    let mut engine = Engine::new(EngineConfig::default(), ShareStrategy::RoundRobin);
    engine.set_shards(me, 2);
    engine
}

fn with_subscriber(engine: &mut Engine) {
    let conn = engine.open(0);
    assert_eq!(engine.feed(conn, SUBSCRIBER, 0), SUBSCRIBER.len());
    engine.take_output(|_, _| {});
}

fn route(c: &mut Criterion) {
    let payload = [7u8; RECORD];
    let mut group = c.benchmark_group("route");
    group.throughput(Throughput::Elements(BATCH));

    let mut alone = shard(0);
    with_subscriber(&mut alone);
    group.bench_function("local", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                alone.publish("t/x", &payload, QoS::AtMostOnce, false, 0);
            }
            alone.take_output(|_, bytes| {
                black_box(bytes);
            });
        })
    });

    let (mut publishing, mut subscribing) = (shard(0), shard(1));
    with_subscriber(&mut subscribing);
    let subscription = subscribing
        .take_bus(0)
        .expect("the SUBSCRIBE is replicated");
    publishing
        .bus_receive(1, subscription, 0)
        .expect("bus records");
    group.bench_function("cross-shard", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                publishing.publish("t/x", &payload, QoS::AtMostOnce, false, 0);
            }
            let records = publishing.take_bus(1).expect("routed");
            subscribing.bus_receive(0, records, 0).expect("bus records");
            subscribing.take_output(|_, bytes| {
                black_box(bytes);
            });
        })
    });
    group.finish();
}

criterion_group!(benches, one_thread, two_threads, route);
criterion_main!(benches);
