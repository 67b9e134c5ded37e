//! Golden frames (docs/architecture.md, "Frames"): a bus batch between two shards, a
//! cluster node record and a subscription value as the build that introduced frame
//! format version N wrote them, in `tests/golden/frames-v<N>/`. Every later build must
//! read each to the same records and the same effects: a node of mixed builds (a shard
//! restarted after an upgrade, a cluster restarted one node at a time) reads what the
//! other build wrote.
//!
//! The files are made by this file's ignored test, with the build that introduced the
//! version: `cargo test -p ferromq-core --test frames_golden -- --ignored`.

mod support;

use std::path::PathBuf;

use bytes::Bytes;
use ferromq_core::codec::{Packet, ProtocolVersion, QoS};
use ferromq_core::durability::{
    frame_batch, open_frame, FrameKind, RecordReader, FRAME_VERSION, SUBSCRIPTION_VALUE,
};
use ferromq_core::engine::EngineConfig;
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;
const MAX_FRAME: usize = 1 << 20;

const BUS_BATCH: &str = "bus-batch.bin";
const NODE_RECORD: &str = "node-record.bin";
const SUBSCRIPTION: &str = "subscription-value.bin";

/// Record kinds of the golden bus batch: `SYNC`, `SUBSCRIBE golden/b/#`, `HELLO` (shard
/// 1 started), `MESSAGE` + `ROUTE` (golden/a, QoS 1), `MESSAGE` + `RETAIN` (golden/r,
/// retained), `MESSAGE` + `ROUTE` (golden/r to its subscriber), `BUS_ROUND 1`.
const BUS_KINDS: [u8; 10] = [65, 3, 66, 5, 64, 5, 10, 5, 64, 68];
/// Record kinds of the golden node record: `MESSAGE` + `ROUTE` (golden/n, QoS 1).
const NODE_KINDS: [u8; 2] = [5, 64];

fn golden(version: u8) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/golden")
        .join(format!("frames-v{version}"))
}

fn connected(h: &mut Harness, id: &str) -> Client {
    let (client, connack) = h.connect(connect(id, V311, true));
    assert!(matches!(connack, Packet::ConnAck(_)));
    client
}

fn subscribed(h: &mut Harness, id: &str, filter: &str) -> Client {
    let mut client = connected(h, id);
    h.send(&client, subscribe(1, filter, QoS::AtLeastOnce));
    h.pump();
    h.recv(&mut client);
    client
}

fn shard(me: u16) -> Harness {
    let mut h = Harness::new(EngineConfig::default());
    h.engine.set_shards(me, 2);
    h
}

/// Shard 1's batch for shard 0 (see `BUS_KINDS`), as one frame.
fn bus_batch() -> Bytes {
    let (mut zero, mut one) = (shard(0), shard(1));
    subscribed(&mut zero, "golden-sub", "golden/#");
    let records = zero.engine.take_bus(1).expect("the subscription");
    let now = one.now;
    one.engine.bus_receive(0, records, now).unwrap();
    subscribed(&mut one, "golden-b-sub", "golden/b/#");
    one.engine.take_bus(0);
    one.engine.bus_hello();
    let publisher = connected(&mut one, "golden-pub");
    one.send(
        &publisher,
        publish("golden/a", b"one", QoS::AtLeastOnce, 1, false),
    );
    one.send(
        &publisher,
        publish("golden/r", b"kept", QoS::AtLeastOnce, 2, true),
    );
    one.pump();
    let batch = one.engine.take_bus(0).expect("routed");
    let mut frames = frame_batch(batch, MAX_FRAME).unwrap();
    assert_eq!(frames.len(), 1);
    frames.remove(0)
}

/// Shard 1 confirms what shard 0 sent it (its SUBACK's round), as a live shard does.
fn confirm_by_shard_1(zero: &mut Harness) {
    let mut one = shard(1);
    let records = zero.engine.take_bus(1).expect("the subscription's round");
    let now = one.now;
    one.engine.bus_receive(0, records, now).unwrap();
    let confirmation = one.engine.take_bus(0).expect("BUS_ACK");
    let now = zero.now;
    zero.engine.bus_receive(1, confirmation, now).unwrap();
    zero.pump();
}

fn cluster_node(subscriber: bool) -> (Harness, u16, Option<Client>) {
    let mut h = Harness::new(EngineConfig::default());
    let peer = h.engine.add_peer("golden-peer");
    let client = subscriber.then(|| {
        let mut client = subscribed(&mut h, "golden-node-sub", "golden/#");
        // Its SUBACK waits until the subscription topic has the filter.
        let (_, round) = h.engine.take_cluster_subscriptions().expect("golden/#");
        let topic = h.engine.cluster_slot();
        h.engine.peer_confirmed(topic, round);
        h.pump();
        h.recv(&mut client);
        client
    });
    (h, peer, client)
}

/// A node's record for another node that holds `golden/#` (see `NODE_KINDS`).
fn node_record() -> Bytes {
    let (mut node, peer, _) = cluster_node(false);
    node.engine.peer_subscription(peer, "golden/#", true, 0);
    let publisher = connected(&mut node, "golden-node-pub");
    node.send(
        &publisher,
        publish("golden/n", b"two", QoS::AtLeastOnce, 1, false),
    );
    node.pump();
    let (records, round) = node.engine.take_peer(peer).expect("routed");
    assert_ne!(round, 0, "a QoS 1 message waits for Kafka");
    let mut frames = frame_batch(records, MAX_FRAME).unwrap();
    assert_eq!(frames.len(), 1);
    frames.remove(0)
}

#[test]
#[ignore = "writes tests/golden/frames-v<FRAME_VERSION>: run with the build that introduces it"]
fn make_golden_frames() {
    let dir = golden(FRAME_VERSION);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(BUS_BATCH), bus_batch()).unwrap();
    std::fs::write(dir.join(NODE_RECORD), node_record()).unwrap();
    std::fs::write(dir.join(SUBSCRIPTION), SUBSCRIPTION_VALUE).unwrap();
}

fn read(version: u8, name: &str) -> Bytes {
    let path = golden(version).join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn kinds(records: &Bytes) -> Vec<u8> {
    let mut reader = RecordReader::new(records.clone());
    std::iter::from_fn(|| reader.next_raw())
        .map(|record| record.unwrap().0)
        .collect()
}

#[test]
fn every_frame_version_has_golden_frames() {
    for version in 1..=FRAME_VERSION {
        for name in [BUS_BATCH, NODE_RECORD, SUBSCRIPTION] {
            assert!(
                golden(version).join(name).is_file(),
                "frames-v{version}/{name}"
            );
        }
    }
}

#[test]
fn golden_bus_batches_read_to_the_same_records_and_effects() {
    for version in 1..=FRAME_VERSION {
        let records = open_frame(FrameKind::BusBatch, read(version, BUS_BATCH)).unwrap();
        assert_eq!(kinds(&records), BUS_KINDS, "frames-v{version}");

        let mut zero = shard(0);
        let mut sub = subscribed(&mut zero, "golden-sub", "golden/#");
        confirm_by_shard_1(&mut zero);
        let now = zero.now;
        let applied = zero.engine.bus_receive(1, records, now).unwrap();
        assert_eq!(applied, BUS_KINDS.len());
        zero.pump();
        let got = zero.recv(&mut sub);
        assert_eq!(
            payloads(&got),
            [b"one".to_vec(), b"kept".to_vec()],
            "frames-v{version}: the routed messages"
        );
        // The retained message is kept here, the round confirmed, the HELLO answered.
        assert_eq!(zero.engine.stats().retained_messages, 1);
        let answer = zero
            .engine
            .take_bus(1)
            .expect("BUS_ACK, SYNC, filters, HELLO");
        assert!(kinds(&answer).contains(&69), "a BUS_ACK");
    }
}

#[test]
fn golden_node_records_read_to_the_same_records_and_effects() {
    for version in 1..=FRAME_VERSION {
        let records = open_frame(FrameKind::NodeRecord, read(version, NODE_RECORD)).unwrap();
        assert_eq!(kinds(&records), NODE_KINDS, "frames-v{version}");

        let (mut node, peer, sub) = cluster_node(true);
        let now = node.now;
        assert_eq!(
            node.engine
                .peer_receive(peer, records, "golden-node-topic", 1, 0, now)
                .unwrap(),
            NODE_KINDS.len()
        );
        node.pump();
        let got = node.recv(&mut sub.expect("a subscriber"));
        assert_eq!(payloads(&got), [b"two".to_vec()], "frames-v{version}");
    }
}

#[test]
fn golden_subscription_values_read_as_present() {
    for version in 1..=FRAME_VERSION {
        let body = open_frame(FrameKind::SubscriptionValue, read(version, SUBSCRIPTION));
        assert_eq!(body, Ok(Bytes::new()), "frames-v{version}");
    }
}
