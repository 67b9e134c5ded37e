//! Seed 002's scenario: a producer sends 2,000 QoS 1 messages; a QoS 1 subscriber
//! with a persistent session drops at about 500 and returns at about 1,000. It must
//! receive all 2,000 in order, nothing twice except DUP-flagged redeliveries of
//! messages it had not acknowledged.

mod support;

use ferromq_core::codec::{Packet, ProtocolVersion::V3_1_1, QoS};
use ferromq_core::engine::EngineConfig;
use support::*;

#[test]
fn no_loss_no_duplicates_across_the_offline_online_seam() {
    let mut h = Harness::new(EngineConfig {
        queue_limit: 65_535,
        ..EngineConfig::default()
    });
    let (mut sub, _) = h.connect(connect("consumer", V3_1_1, false));
    h.send(&sub, subscribe(1, "orders", QoS::AtLeastOnce));
    h.recv(&mut sub);
    let (mut producer, _) = h.connect(connect("producer", V3_1_1, true));

    let mut received: Vec<(u32, bool)> = Vec::new();
    let mut online = true;
    for n in 0..2000u32 {
        let packet_id = (n % 65_535 + 1) as u16;
        h.send(
            &producer,
            publish(
                "orders",
                &n.to_be_bytes(),
                QoS::AtLeastOnce,
                packet_id,
                false,
            ),
        );
        h.recv(&mut producer);
        if n == 500 {
            // Drop without acknowledging what arrived in this last batch.
            h.recv(&mut sub);
            h.drop_connection(&sub);
            online = false;
        }
        if n == 1000 {
            let (again, _) = h.connect(connect("consumer", V3_1_1, false));
            sub = again;
            online = true;
        }
        if online {
            for packet in h.recv(&mut sub) {
                if let Packet::Publish(p) = packet {
                    let seq = u32::from_be_bytes(p.payload[..4].try_into().unwrap());
                    received.push((seq, p.dup));
                    h.send(&sub, puback(p.packet_id));
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut last = None;
    for (seq, dup) in &received {
        if !seen.insert(*seq) {
            assert!(*dup, "message {seq} delivered twice without DUP");
            continue;
        }
        if let Some(prev) = last {
            assert_eq!(*seq, prev + 1, "out of order after {prev}");
        }
        last = Some(*seq);
    }
    assert_eq!(seen.len(), 2000, "lost {} messages", 2000 - seen.len());
}
