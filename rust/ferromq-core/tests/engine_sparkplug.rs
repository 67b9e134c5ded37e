//! Sparkplug B "Aware" through the engine (engine/sparkplug.rs): births republished
//! as retained certificates a late host application reads, and an edge node's
//! NDEATH will stamped with the time it is sent.

mod support;

use ferromq_core::codec::{ProtocolVersion, QoS};
use ferromq_core::engine::{EngineConfig, Sparkplug};
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;
const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

fn aware(on: bool) -> Harness {
    let mut h = Harness::new(EngineConfig {
        sparkplug: Sparkplug {
            aware: on,
            ndeath_timestamp: true,
        },
        ..EngineConfig::default()
    });
    let now = h.now;
    h.engine.set_wall_clock(1_700_000_000_000, now);
    h
}

/// A Sparkplug B payload holding only a timestamp (field 1) and a seq (field 3).
fn payload(timestamp: u64, seq: u8) -> Vec<u8> {
    let mut out = vec![0x08];
    let mut value = timestamp;
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    out.extend_from_slice(&[0x18, seq]);
    out
}

#[test]
fn births_are_kept_as_retained_certificates_for_a_late_host() {
    for on in [true, false] {
        let mut h = aware(on);
        let (edge, _) = h.connect(connect("edge-1", V311, true));
        h.send(
            &edge,
            publish(
                "spBv1.0/plant/NBIRTH/edge-1",
                b"node",
                QoS::AtLeastOnce,
                1,
                false,
            ),
        );
        h.send(
            &edge,
            publish(
                "spBv1.0/plant/DBIRTH/edge-1/pump",
                b"dev",
                QoS::AtMostOnce,
                0,
                false,
            ),
        );
        h.send(
            &edge,
            publish(
                "spBv1.0/plant/NDATA/edge-1",
                b"data",
                QoS::AtMostOnce,
                0,
                false,
            ),
        );
        let (mut host, _) = h.connect(connect("host", V5, true));
        h.send(
            &host,
            subscribe(1, "$sparkplug/certificates/#", QoS::AtLeastOnce),
        );
        let packets = h.recv(&mut host);
        let mut got: Vec<(String, Vec<u8>, bool)> = publishes(&packets)
            .into_iter()
            .map(|p| (p.topic.to_string(), p.payload.to_vec(), p.retain))
            .collect();
        got.sort();
        let expected = if on {
            vec![
                (
                    "$sparkplug/certificates/spBv1.0/plant/DBIRTH/edge-1/pump".to_string(),
                    b"dev".to_vec(),
                    true,
                ),
                (
                    "$sparkplug/certificates/spBv1.0/plant/NBIRTH/edge-1".to_string(),
                    b"node".to_vec(),
                    true,
                ),
            ]
        } else {
            vec![]
        };
        assert_eq!(got, expected, "aware: {on}");
    }
}

#[test]
fn an_ndeath_will_carries_the_time_it_is_sent() {
    let mut h = aware(true);
    let (mut host, _) = h.connect(connect("host", V5, true));
    h.send(
        &host,
        subscribe(1, "spBv1.0/plant/NDEATH/+", QoS::AtLeastOnce),
    );
    h.recv(&mut host);
    let will = payload(1_000, 7); // composed at CONNECT, long before
    let (edge, _) = h.connect(with_will(
        connect("edge-1", V311, true),
        "spBv1.0/plant/NDEATH/edge-1",
        &will,
        None,
    ));
    h.advance(90_000);
    h.drop_connection(&edge);
    let got = payloads(&h.recv(&mut host));
    assert_eq!(got, vec![payload(1_700_000_090_000, 7)]);
}
