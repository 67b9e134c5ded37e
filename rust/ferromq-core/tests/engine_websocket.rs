//! The engine's WebSocket framing (`engine/framing.rs`): a WebSocket connection is fed
//! frames and writes frames, with the same MQTT behaviour as a TCP one.

mod support;

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{FrameDecoder, Packet, ProtocolVersion, QoS};
use ferromq_core::engine::{ConnId, Engine, EngineConfig, Event, Framing};
use ferromq_core::topic::ShareStrategy;
use ferromq_core::transport::websocket::put_client_frame;
use support::{connect, publish, subscribe};

const MASK: [u8; 4] = [0xa1, 0x02, 0x5c, 0xee];

/// A masked client frame.
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    put_client_frame(&mut out, first, payload, MASK);
    out.to_vec()
}

fn wire(packet: Packet) -> Vec<u8> {
    packet.to_bytes(ProtocolVersion::V3_1_1).unwrap().to_vec()
}

/// What a server frame stream holds: (opcode, payload) per frame, none masked.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert_eq!(bytes[0] & 0xF0, 0x80, "final, no reserved bits");
        assert_eq!(bytes[1] & 0x80, 0, "server frames are not masked");
        let (len, at) = match bytes[1] {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        frames.push((bytes[0] & 0x0F, bytes[at..at + len].to_vec()));
        bytes = &bytes[at + len..];
    }
    frames
}

struct Broker {
    engine: Engine,
    output: Vec<(ConnId, Bytes)>,
    events: Vec<Event>,
}

impl Broker {
    fn new() -> Broker {
        Broker {
            engine: Engine::new(EngineConfig::default(), ShareStrategy::RoundRobin),
            output: Vec::new(),
            events: Vec::new(),
        }
    }

    fn feed(&mut self, conn: ConnId, bytes: &[u8]) -> usize {
        let used = self.engine.feed(conn, bytes, 1);
        self.engine
            .take_output(|conn, bytes| self.output.push((conn, bytes)));
        self.events.extend(self.engine.take_events());
        used
    }

    /// Every frame written to `conn` so far, taken.
    fn frames(&mut self, conn: ConnId) -> Vec<(u8, Vec<u8>)> {
        let mut all = Vec::new();
        self.output.retain(|(to, bytes)| {
            if *to == conn {
                // One buffer per flush: whole frames, never a frame cut between flushes.
                all.extend(server_frames(bytes));
                false
            } else {
                true
            }
        });
        all
    }

    fn closed(&self, conn: ConnId) -> bool {
        self.events
            .iter()
            .any(|event| matches!(event, Event::Close { conn: c } if *c == conn))
    }
}

fn packets(frames: &[(u8, Vec<u8>)]) -> Vec<Packet> {
    let mut decoder = FrameDecoder::new(u32::MAX, Some(ProtocolVersion::V3_1_1));
    let mut stream = bytes::BytesMut::new();
    for (opcode, payload) in frames.iter().filter(|(opcode, _)| *opcode == 0x2) {
        assert_eq!(*opcode, 0x2);
        stream.extend_from_slice(payload);
    }
    let mut out = Vec::new();
    while let Some(packet) = decoder.decode(&mut stream).unwrap() {
        out.push(packet);
    }
    out
}

#[test]
fn packets_span_frames_and_frames_hold_several_packets() {
    let mut broker = Broker::new();
    let conn = broker.engine.open_framed(1, Framing::WebSocket);
    let connect = wire(Packet::Connect(Box::new(connect(
        "ws",
        ProtocolVersion::V3_1_1,
        true,
    ))));
    // CONNECT cut over three frames, the middle one fragmented into a message.
    let (a, rest) = connect.split_at(3);
    let (b, c) = rest.split_at(4);
    let mut input = frame(0x82, a);
    input.extend(frame(0x02, b));
    input.extend(frame(0x80, c));
    // SUBSCRIBE and a PUBLISH to it in one frame.
    let mut both = wire(subscribe(1, "t", QoS::AtMostOnce));
    both.extend(wire(publish("t", b"hello", QoS::AtMostOnce, 0, false)));
    input.extend(frame(0x82, &both));
    // Fed a byte at a time, keeping what the engine did not use, as the IO layer does.
    let mut held = Vec::new();
    for byte in input {
        held.push(byte);
        let used = broker.feed(conn, &held);
        held.drain(..used);
    }
    assert!(held.is_empty());
    let frames = broker.frames(conn);
    let got = packets(&frames);
    assert!(matches!(got[0], Packet::ConnAck(_)), "{got:?}");
    assert!(matches!(got[1], Packet::SubAck(_)), "{got:?}");
    match &got[2] {
        Packet::Publish(p) => assert_eq!(&p.payload[..], b"hello"),
        other => panic!("{other:?}"),
    }
    assert!(!broker.closed(conn));
}

#[test]
fn ping_is_answered_with_pong_and_close_is_echoed() {
    let mut broker = Broker::new();
    let conn = broker.engine.open_framed(1, Framing::WebSocket);
    broker.feed(conn, &frame(0x89, b"are you there"));
    assert_eq!(broker.frames(conn), [(0xA, b"are you there".to_vec())]);
    broker.feed(conn, &frame(0x88, &[0x03, 0xe9]));
    assert_eq!(broker.frames(conn), [(0x8, vec![0x03, 0xe9])]);
    assert!(broker.closed(conn));
}

#[test]
fn a_bad_frame_closes_that_connection_with_its_status_only() {
    let mut broker = Broker::new();
    let cases: [(Vec<u8>, u16); 3] = [
        (
            {
                let mut unmasked = frame(0x82, b"x");
                unmasked[1] &= 0x7F;
                unmasked
            },
            1002,
        ),
        (frame(0x81, b"text"), 1003),
        (vec![0x82, 0x80 | 127, 0, 0, 0, 1, 0, 0, 0, 0], 1009),
    ];
    let other = broker.engine.open_framed(1, Framing::WebSocket);
    for (input, status) in cases {
        let conn = broker.engine.open_framed(1, Framing::WebSocket);
        assert_eq!(broker.feed(conn, &input), input.len());
        assert_eq!(broker.frames(conn), [(0x8, status.to_be_bytes().to_vec())]);
        assert!(broker.closed(conn));
        broker.engine.connection_lost(conn, 1);
    }
    assert!(broker
        .events
        .iter()
        .any(|e| matches!(e, Event::Rejected { .. })));
    // The other connection goes on.
    let connect = wire(Packet::Connect(Box::new(connect(
        "other",
        ProtocolVersion::V3_1_1,
        true,
    ))));
    broker.feed(other, &frame(0x82, &connect));
    assert!(matches!(
        packets(&broker.frames(other))[0],
        Packet::ConnAck(_)
    ));
    assert!(!broker.closed(other));
}

#[test]
fn the_engine_ending_a_connection_sends_its_mqtt_bytes_then_close_1000() {
    let mut broker = Broker::new();
    let conn = broker.engine.open_framed(1, Framing::WebSocket);
    // A PUBLISH before CONNECT is a protocol error [MQTT-3.1.0-1].
    broker.feed(
        conn,
        &frame(0x82, &wire(publish("t", b"x", QoS::AtMostOnce, 0, false))),
    );
    let frames = broker.frames(conn);
    assert_eq!(frames.last(), Some(&(0x8, 1000u16.to_be_bytes().to_vec())));
    assert!(broker.closed(conn));
}

#[test]
fn tcp_connections_are_unframed() {
    let mut broker = Broker::new();
    let conn = broker.engine.open(1);
    let connect = wire(Packet::Connect(Box::new(connect(
        "tcp",
        ProtocolVersion::V3_1_1,
        true,
    ))));
    broker.feed(conn, &connect);
    let (to, bytes) = broker.output.pop().unwrap();
    assert_eq!((to, &bytes[..]), (conn, &[0x20, 0x02, 0x00, 0x00][..]));
}
