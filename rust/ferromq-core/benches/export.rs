//! Criterion benchmarks of the `[stream]` export, no Python:
//! `cargo bench -p ferromq-core --bench export`.
//!
//! - `encode/avro`: one telemetry message record (v5, a content type and a user
//!   property, a 25-byte JSON payload) in the Avro binary encoding the broker uses;
//!   `encode/json`: the same record as a JSON object (payload and correlation data
//!   base64), written here only to compare the encodings (docs/stream.md, "Choosing
//!   the encoding"). Both print their bytes per record once.
//! - `publish/stream_off`, `publish/stream_on`, `publish/stream_filters`: a
//!   connected v5 publisher's buffer of 1,000 QoS 0 PUBLISHes fed to the engine (no
//!   subscriber), with the stream off, on with `#`, and on with three filters; the
//!   difference per element is the export's cost per PUBLISH (matching, encoding,
//!   appending; the batch is taken every iteration).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::codec::{
    Connect, Packet, Properties, Property, ProtocolVersion, Publish, QoS, Utf8Bytes,
};
use ferromq_core::engine::{Engine, EngineConfig, StreamConfig, StreamKey};
use ferromq_core::export::avro::{Kind, Record};
use ferromq_core::topic::ShareStrategy;
use std::hint::black_box;
use std::io::Write;

const PUBLISHES: usize = 1_000;
const TOPIC: &str = "tenant/1/site/2/device/42/temp";
const PAYLOAD: &[u8] = br#"{"value":21.5,"unit":"C"}"#;

fn s(text: &str) -> Utf8Bytes {
    Utf8Bytes::try_from(text).unwrap()
}

fn properties() -> Properties {
    Properties(vec![
        Property::ContentType(s("application/json")),
        Property::UserProperty(s("fw"), s("1.4.2")),
    ])
}

fn record(properties: &Properties) -> Record<'_> {
    let mut r = Record::new([7; 16], Kind::Message, 1_763_000_000_123_456, "node-a");
    r.client_id = Some("device-42");
    r.username = Some("tenant-1");
    r.topic = Some(TOPIC);
    r.payload = Some(PAYLOAD);
    r.qos = Some(1);
    r.retain = Some(false);
    r.properties = Some(properties);
    r
}

/// The comparison's JSON encoding: every schema field, null where Avro has null.
fn encode_json(r: &Record<'_>, out: &mut Vec<u8>) {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.push(b'"');
        for &b in s.as_bytes() {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0..=0x1F => write!(out, "\\u{b:04x}").expect("a Vec takes every write"),
                _ => out.push(b),
            }
        }
        out.push(b'"');
    }
    fn base64(out: &mut Vec<u8>, data: &[u8]) {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        out.push(b'"');
        for chunk in data.chunks(3) {
            let n = (u32::from(chunk[0]) << 16)
                | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
                | u32::from(*chunk.get(2).unwrap_or(&0));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(A[(n >> (18 - 6 * i)) as usize & 63]);
                } else {
                    out.push(b'=');
                }
            }
        }
        out.push(b'"');
    }
    fn key(out: &mut Vec<u8>, key: &str) {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
    }
    fn opt_str(out: &mut Vec<u8>, name: &str, v: Option<&str>) {
        key(out, name);
        match v {
            Some(v) => string(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }
    fn opt_num(out: &mut Vec<u8>, name: &str, v: Option<i64>) {
        key(out, name);
        match v {
            Some(v) => write!(out, "{v}").expect("a Vec takes every write"),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.extend_from_slice(b"{\"schema_version\":1,\"id\":");
    base64(out, &r.id);
    out.extend_from_slice(b",\"kind\":\"message\"");
    opt_num(out, "time", Some(r.time_us));
    opt_str(out, "node", Some(r.node));
    opt_str(out, "listener", r.listener);
    opt_str(out, "client_id", r.client_id);
    opt_str(out, "username", r.username);
    opt_str(out, "topic", r.topic);
    out.extend_from_slice(b",\"payload\":");
    base64(out, r.payload.unwrap_or_default());
    opt_num(out, "qos", r.qos.map(i64::from));
    out.extend_from_slice(b",\"retain\":false");
    let mut content_type = None;
    let mut user = Vec::new();
    for p in r.properties.map_or(&[][..], |p| &p.0) {
        match p {
            Property::ContentType(v) => content_type = Some(v.as_str()),
            Property::UserProperty(k, v) => user.push((k.as_str(), v.as_str())),
            _ => {}
        }
    }
    opt_str(out, "content_type", content_type);
    opt_num(out, "payload_format", None);
    opt_str(out, "response_topic", None);
    opt_str(out, "correlation_data", None);
    out.extend_from_slice(b",\"user_properties\":[");
    for (i, (k, v)) in user.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"key\":");
        string(out, k);
        out.extend_from_slice(b",\"value\":");
        string(out, v);
        out.push(b'}');
    }
    out.push(b']');
    for key in [
        "reason",
        "reason_code",
        "peer",
        "protocol_version",
        "keep_alive",
    ] {
        opt_num(out, key, None);
    }
    for key in ["clean_start", "session_expiry"] {
        opt_num(out, key, None);
    }
    out.push(b'}');
}

fn bench_encode(c: &mut Criterion) {
    let properties = properties();
    let r = record(&properties);
    let mut avro = BytesMut::new();
    r.encode(&mut avro);
    let mut json = Vec::new();
    encode_json(&r, &mut json);
    println!(
        "bytes per record: avro {}, json {} (payload {} B, topic {} B)",
        avro.len(),
        json.len(),
        PAYLOAD.len(),
        TOPIC.len()
    );
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("avro", |b| {
        let mut out = BytesMut::with_capacity(1 << 20);
        b.iter(|| {
            if out.len() > (1 << 19) {
                out.clear();
            }
            black_box(&r).encode(&mut out);
        })
    });
    group.bench_function("json", |b| {
        let mut out = Vec::with_capacity(1 << 20);
        b.iter(|| {
            if out.len() > (1 << 19) {
                out.clear();
            }
            encode_json(black_box(&r), &mut out);
        })
    });
    group.finish();
}

/// An engine with one connected v5 publisher, and a buffer of its PUBLISHes.
fn publisher(stream: Option<&[&str]>) -> (Engine, u32, Bytes) {
    let mut engine = Engine::new(EngineConfig::default(), ShareStrategy::RoundRobin);
    engine.set_wall_clock(1_763_000_000_000, 0);
    if let Some(filters) = stream {
        let config = StreamConfig {
            filters: filters.iter().map(|f| f.to_string()).collect(),
            events: true,
            node: "node-a".into(),
            key: StreamKey::Topic,
            acked: false,
            boot_id_us: 1,
        };
        engine.set_stream(Some(config)).unwrap();
    }
    let conn = engine.open(0);
    let connect = Packet::Connect(Box::new(Connect {
        protocol: ProtocolVersion::V5,
        clean_start: true,
        keep_alive: 0,
        properties: Properties::new(),
        client_id: s("device-42"),
        will: None,
        username: Some(s("tenant-1")),
        password: None,
    }));
    let wire = connect.to_bytes(ProtocolVersion::V5).unwrap();
    engine.feed(conn, &wire, 0);
    engine.take_output(|_, _| {});
    engine.take_events();
    engine.take_stream();
    let mut buf = BytesMut::new();
    for _ in 0..PUBLISHES {
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: s(TOPIC),
            packet_id: 0,
            properties: properties(),
            payload: Bytes::from_static(PAYLOAD),
        })
        .encode(ProtocolVersion::V5, &mut buf)
        .unwrap();
    }
    (engine, conn, buf.freeze())
}

fn bench_publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish");
    group.throughput(Throughput::Elements(PUBLISHES as u64));
    let filters: &[&str] = &["tenant/+/site/+/device/+/temp", "alerts/#", "tenant/9/#"];
    for (label, stream) in [
        ("stream_off", None),
        ("stream_on", Some(&["#"][..])),
        ("stream_filters", Some(filters)),
    ] {
        let (mut engine, conn, wire) = publisher(stream);
        group.bench_function(label, |b| {
            b.iter(|| {
                engine.feed(conn, black_box(&wire), 0);
                black_box(engine.take_stream());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_encode, bench_publish);
criterion_main!(benches);
