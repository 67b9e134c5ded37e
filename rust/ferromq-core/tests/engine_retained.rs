//! Retained messages for a new subscription: every one is delivered, paced by the
//! connection's output buffer and the client's window, never dropped for the
//! queue limit or buffer space (engine/retained_cursor.rs).

mod support;

use bytes::BytesMut;
use ferromq_core::codec::{FrameDecoder, Packet, Property, ProtocolVersion, QoS, Unsubscribe};
use ferromq_core::engine::EngineConfig;
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;
const V5: ProtocolVersion = ProtocolVersion::V5;
const RETAINED: usize = 5_000;
const HIGH_WATER: usize = 4_096;

/// A small queue and output buffer, far below the retained set.
fn tight_config() -> EngineConfig {
    EngineConfig {
        queue_limit: 10,
        write_high_water: HIGH_WATER,
        ..EngineConfig::default()
    }
}

fn with_retained(count: usize, qos: QoS) -> Harness {
    let mut h = Harness::new(tight_config());
    let now = h.now;
    for i in 0..count {
        let topic = format!("r/{i}");
        h.engine.publish(&topic, topic.as_bytes(), qos, true, now);
    }
    h
}

/// Read until the broker sends nothing more, acknowledging QoS 1 as a client
/// does; the payloads in arrival order.
fn read_all(h: &mut Harness, client: &mut Client) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    loop {
        let packets = h.recv(client);
        if packets.is_empty() {
            return got;
        }
        for p in publishes(&packets) {
            got.push(p.payload.to_vec());
            if p.qos == QoS::AtLeastOnce {
                h.send(client, puback(p.packet_id));
            }
        }
    }
}

fn expected(count: usize) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = (0..count).map(|i| format!("r/{i}").into_bytes()).collect();
    all.sort();
    all
}

fn sorted(mut got: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    got.sort();
    got
}

#[test]
fn every_retained_message_reaches_a_qos0_subscriber_a_buffer_at_a_time() {
    let mut h = with_retained(RETAINED, QoS::AtMostOnce);
    let (sub, _) = h.connect(connect("sub", V311, true));
    // Driven by hand: each take_output is one flush of the IO layer.
    let wire = subscribe(1, "#", QoS::AtMostOnce).to_bytes(V311).unwrap();
    h.engine.feed(sub.conn, &wire, h.now);
    let mut decoder = FrameDecoder::new(u32::MAX, Some(V311));
    let mut got = Vec::new();
    let mut flushes = Vec::new();
    loop {
        let mut out = BytesMut::new();
        h.engine.take_output(|conn, bytes| {
            if conn == sub.conn {
                out.extend_from_slice(&bytes);
            }
        });
        if out.is_empty() {
            break;
        }
        flushes.push(out.len());
        while let Some(packet) = decoder.decode(&mut out).unwrap() {
            got.extend(payloads(&[packet]));
        }
    }
    assert_eq!(sorted(got), expected(RETAINED));
    let largest = flushes.iter().max().unwrap();
    assert!(
        *largest < HIGH_WATER + 64,
        "a flush holds at most the high-water mark and one packet: {largest}"
    );
    assert_eq!(h.engine.stats().publish_dropped, 0);
}

#[test]
fn every_retained_message_reaches_a_qos1_subscriber_through_a_small_window() {
    let mut h = with_retained(RETAINED, QoS::AtLeastOnce);
    let mut c = connect("sub", V5, true);
    c.properties.0.push(Property::ReceiveMaximum(5));
    let (mut sub, _) = h.connect(c);
    h.send(&sub, subscribe(1, "#", QoS::AtLeastOnce));
    let first = h.recv(&mut sub);
    assert_eq!(publishes(&first).len(), 5, "the client's Receive Maximum");
    for p in publishes(&first) {
        h.send(&sub, puback(p.packet_id));
    }
    let rest = read_all(&mut h, &mut sub);
    let mut got = payloads(&first);
    got.extend(rest);
    assert_eq!(sorted(got), expected(RETAINED));
    assert_eq!(h.engine.stats().publish_dropped, 0);
}

/// 100 retained QoS 1 messages and a v5 client with `receive_maximum` that has
/// just subscribed to them.
fn subscribed_to_100_retained(receive_maximum: u16) -> (Harness, Client) {
    let mut h = with_retained(100, QoS::AtLeastOnce);
    let mut c = connect("sub", V5, true);
    c.properties
        .0
        .push(Property::ReceiveMaximum(receive_maximum));
    let (sub, _) = h.connect(c);
    h.send(&sub, subscribe(1, "r/#", QoS::AtLeastOnce));
    (h, sub)
}

#[test]
fn live_messages_wait_behind_the_retained_ones() {
    let (mut h, mut sub) = subscribed_to_100_retained(1);
    let (mut publisher, _) = h.connect(connect("pub", V311, true));
    h.send(
        &publisher,
        publish("r/0", b"live", QoS::AtLeastOnce, 1, false),
    );
    h.recv(&mut publisher);
    let got = read_all(&mut h, &mut sub);
    assert_eq!(got.len(), 101);
    assert_eq!(got.last().unwrap(), b"live", "after every retained one");
    assert_eq!(sorted(got[..100].to_vec()), expected(100));
}

#[test]
fn a_retained_message_replaced_during_the_drain_is_not_sent_stale() {
    let (mut h, mut sub) = subscribed_to_100_retained(1);
    let first = h.recv(&mut sub);
    let [sent] = publishes(&first)[..] else {
        panic!("one in the window, got {first:?}");
    };
    // Replace a retained message the cursor has not reached yet.
    let pending = (0..100)
        .map(|i| format!("r/{i}"))
        .find(|t| t.as_bytes() != &sent.payload[..])
        .unwrap();
    let now = h.now;
    h.engine
        .publish(&pending, b"new", QoS::AtLeastOnce, true, now);
    h.send(&sub, puback(sent.packet_id));
    let rest = read_all(&mut h, &mut sub);
    assert_eq!(rest.len(), 99, "99 more: the replaced one once, as new");
    assert!(!rest.contains(&pending.clone().into_bytes()));
    assert_eq!(rest.last().unwrap(), b"new");
}

#[test]
fn unsubscribe_stops_the_retained_messages_still_to_send() {
    let (mut h, mut sub) = subscribed_to_100_retained(2);
    let first = h.recv(&mut sub);
    assert_eq!(publishes(&first).len(), 2);
    h.send(
        &sub,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 2,
            properties: Default::default(),
            filters: vec![s("r/#")],
        }),
    );
    for p in publishes(&first) {
        h.send(&sub, puback(p.packet_id));
    }
    let after = h.recv(&mut sub);
    assert!(
        matches!(after.as_slice(), [Packet::UnsubAck(_)]),
        "{after:?}"
    );
}
