//! The generator's ceiling: a minimal MQTT forwarder that does as little as a broker
//! can, so a benchmark against it measures the generator, not the broker.
//!
//! One thread, one `mio` loop. It answers CONNECT, SUBSCRIBE and PINGREQ, completes
//! the publisher's QoS 1/2 flow, and forwards each PUBLISH at QoS 0 to the connections
//! subscribed to exactly its topic (no wildcards, no sessions, no queues): enough for
//! `p2p`; a PUBLISH nobody subscribed to is acknowledged and dropped, which makes it a
//! sink for publish-only runs. Output is coalesced per connection and written once
//! per loop turn. Listens on 127.0.0.1 only.
//!
//! `cargo run --release -p ferromq-bench --example forwarder -- 1884`

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use ferromq_core::codec::{
    Ack, ConnAck, FrameDecoder, Packet, Properties, ProtocolVersion, QoS, ReasonCode, SubAck,
    PROTOCOL_MAX_PACKET_SIZE,
};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(usize::MAX);

struct Conn {
    socket: TcpStream,
    decoder: FrameDecoder,
    version: ProtocolVersion,
    inbuf: BytesMut,
    out: BytesMut,
}

fn main() -> io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(1884);
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    eprintln!("forwarder listening on 127.0.0.1:{port}");
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut routes: HashMap<bytes::Bytes, Vec<usize>> = HashMap::new();
    let mut next_token = 0;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        poll.poll(&mut events, None)?;
        let mut dirty = Vec::new();
        for event in events.iter() {
            if event.token() == LISTENER {
                while let Ok((mut socket, _)) = listener.accept() {
                    socket.set_nodelay(true)?;
                    let token = Token(next_token);
                    next_token += 1;
                    poll.registry().register(
                        &mut socket,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    let conn = Conn {
                        socket,
                        decoder: FrameDecoder::new(PROTOCOL_MAX_PACKET_SIZE, None),
                        version: ProtocolVersion::V3_1_1,
                        inbuf: BytesMut::new(),
                        out: BytesMut::new(),
                    };
                    conns.insert(token.0, conn);
                }
                continue;
            }
            let id = event.token().0;
            let mut forwards = Vec::new();
            let alive = match conns.get_mut(&id) {
                Some(conn) => serve(conn, &mut buf, &mut routes, id, &mut forwards),
                None => continue,
            };
            dirty.push(id);
            for (targets, packet) in forwards {
                for target in targets {
                    if let Some(sub) = conns.get_mut(&target) {
                        // Our own packets always encode.
                        let _ = packet.encode(sub.version, &mut sub.out);
                        dirty.push(target);
                    }
                }
            }
            if !alive {
                conns.remove(&id);
                routes
                    .values_mut()
                    .for_each(|subs| subs.retain(|s| *s != id));
            }
        }
        for id in dirty {
            if let Some(conn) = conns.get_mut(&id) {
                while !conn.out.is_empty() {
                    match conn.socket.write(&conn.out) {
                        Ok(n) => conn.out.advance(n),
                        Err(_) => break,
                    }
                }
            }
        }
    }
}

type Forward = (Vec<usize>, Packet);

/// Read what is there, answer it, collect the PUBLISH packets to forward. `false`
/// when the connection is over.
fn serve(
    conn: &mut Conn,
    buf: &mut [u8],
    routes: &mut HashMap<bytes::Bytes, Vec<usize>>,
    id: usize,
    forwards: &mut Vec<Forward>,
) -> bool {
    loop {
        match conn.socket.read(buf) {
            Ok(0) => return false,
            Ok(n) => conn.inbuf.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => return false,
        }
    }
    loop {
        let packet = match conn.decoder.decode(&mut conn.inbuf) {
            Ok(Some(packet)) => packet,
            Ok(None) => return true,
            Err(_) => return false,
        };
        let reply = match packet {
            Packet::Connect(connect) => {
                conn.version = connect.protocol;
                Packet::ConnAck(ConnAck {
                    session_present: false,
                    code: 0,
                    properties: Properties::new(),
                })
            }
            Packet::Subscribe(subscribe) => {
                for (filter, _) in &subscribe.filters {
                    routes
                        .entry(filter.as_bytes().clone())
                        .or_default()
                        .push(id);
                }
                let granted = subscribe.filters.iter().map(|(_, o)| match o.qos {
                    QoS::AtMostOnce => ReasonCode::Success,
                    QoS::AtLeastOnce => ReasonCode::GrantedQos1,
                    QoS::ExactlyOnce => ReasonCode::GrantedQos2,
                });
                Packet::SubAck(SubAck {
                    packet_id: subscribe.packet_id,
                    properties: Properties::new(),
                    reasons: granted.collect(),
                })
            }
            Packet::Publish(mut publish) => {
                let ack = match publish.qos {
                    QoS::AtMostOnce => None,
                    QoS::AtLeastOnce => Some(Packet::PubAck(Ack::new(publish.packet_id))),
                    QoS::ExactlyOnce => Some(Packet::PubRec(Ack::new(publish.packet_id))),
                };
                if let Some(targets) = routes.get(publish.topic.as_bytes()) {
                    publish.qos = QoS::AtMostOnce;
                    publish.packet_id = 0;
                    forwards.push((targets.clone(), Packet::Publish(publish)));
                }
                match ack {
                    Some(ack) => ack,
                    None => continue,
                }
            }
            Packet::PubRel(rel) => Packet::PubComp(Ack::new(rel.packet_id)),
            Packet::PingReq => Packet::PingResp,
            Packet::Disconnect(_) => return false,
            _ => continue,
        };
        // Our own packets always encode.
        let _ = reply.encode(conn.version, &mut conn.out);
    }
}
