//! Criterion benchmarks of the Rust codec alone, no Python:
//! `cargo bench -p ferromq-core --bench codec`.
//!
//! - decode a buffer of 10,000 PUBLISH packets (64-byte and 1 KiB payloads, QoS 1,
//!   topics like `site/42/device/1234/telemetry`) with the streaming decoder;
//! - encode the same 10,000 packets into one buffer.
//!
//! Throughput is reported in bytes of wire data; the goal is ≥ 1 GB/s for the
//! 1 KiB case (rumqttd's parser reads about 3.7 GB/s).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::codec::{
    FrameDecoder, Packet, Properties, ProtocolVersion, Publish, QoS, Utf8Bytes,
};
use std::hint::black_box;

const PACKETS: usize = 10_000;

fn publishes(payload_len: usize) -> Vec<Packet> {
    (0..PACKETS)
        .map(|i| {
            let topic = format!("site/{}/device/{}/telemetry", i % 100, i);
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::AtLeastOnce,
                retain: false,
                topic: Utf8Bytes::try_from(topic).unwrap(),
                packet_id: (i % 65_535 + 1) as u16,
                properties: Properties::new(),
                payload: Bytes::from(vec![b'x'; payload_len]),
            })
        })
        .collect()
}

fn wire(packets: &[Packet], version: ProtocolVersion) -> Bytes {
    let mut out = BytesMut::new();
    for packet in packets {
        packet.encode(version, &mut out).unwrap();
    }
    out.freeze()
}

fn bench_codec(c: &mut Criterion) {
    for (label, payload_len) in [("64B", 64), ("1KiB", 1024)] {
        for version in [ProtocolVersion::V3_1_1, ProtocolVersion::V5] {
            let packets = publishes(payload_len);
            let data = wire(&packets, version);
            let mut group = c.benchmark_group(format!("publish_{label}_v{}", version.level()));
            group.throughput(Throughput::Bytes(data.len() as u64));
            group.bench_function("decode_10k", |b| {
                b.iter(|| {
                    let mut decoder = FrameDecoder::new(u32::MAX, Some(version));
                    let mut buf = BytesMut::from(&data[..]);
                    let mut count = 0;
                    while let Some(packet) = decoder.decode(&mut buf).unwrap() {
                        black_box(&packet);
                        count += 1;
                    }
                    assert_eq!(count, PACKETS);
                })
            });
            group.bench_function("encode_10k", |b| {
                let mut out = BytesMut::with_capacity(data.len());
                b.iter(|| {
                    out.clear();
                    for packet in &packets {
                        packet.encode(version, &mut out).unwrap();
                    }
                    black_box(out.len())
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, bench_codec);
criterion_main!(benches);
