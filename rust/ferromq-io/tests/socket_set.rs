//! The socket set over real loopback sockets with a real engine: what a client sees
//! (CONNACK, deliveries in order, a refusal before the close) and what the owner is
//! told (the ends, with the peer and the listener).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ferromq_core::bus::shard_of;
use ferromq_core::engine::{Engine, EngineConfig, Event};
use ferromq_core::topic::ShareStrategy;
use ferromq_io::{sys, SocketSet};

/// CONNECT, MQTT 3.1.1, clean session, keep-alive 60 s, client id `id`.
fn connect(id: &str) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, id.len() as u8];
    body.extend_from_slice(id.as_bytes());
    let mut packet = vec![0x10, body.len() as u8];
    packet.extend(body);
    packet
}

const CONNACK_ACCEPTED: [u8; 4] = [0x20, 2, 0, 0];

struct Broker {
    engine: Engine,
    sockets: SocketSet,
    listener: TcpListener,
    now: u64,
}

impl Broker {
    fn new(high_water: usize) -> Broker {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Broker {
            engine: Engine::new(EngineConfig::default(), ShareStrategy::RoundRobin),
            sockets: SocketSet::new(64 * 1024, high_water).unwrap(),
            listener,
            now: 1_000,
        }
    }

    /// A client connected to the broker, its socket adopted by the set as one of
    /// listener number `listener` (routed first when the set knows shards): the
    /// engine's connection id unless it is routed.
    fn adopted(&mut self, listener: u16) -> (TcpStream, Option<u32>) {
        let client = TcpStream::connect(self.listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (fd, peer) = sys::accept(self.listener.as_raw_fd())
            .unwrap()
            .expect("waiting");
        let conn = self
            .sockets
            .adopt(
                &mut self.engine,
                fd,
                listener,
                peer.unwrap(),
                true,
                b"",
                self.now,
            )
            .unwrap();
        (client, conn)
    }

    /// A client on listener 3 of a one-shard set: an engine connection at once.
    fn client(&mut self) -> (TcpStream, u32) {
        let (client, conn) = self.adopted(3);
        (client, conn.expect("not routed: one shard"))
    }

    /// One loop tick: read, write, act on the IO events.
    fn tick(&mut self) {
        self.now += 1;
        self.sockets.poll(&mut self.engine, self.now).unwrap();
        self.sockets.flush(&mut self.engine, self.now, |conn, _| {
            panic!("{conn} is not owned")
        });
        for event in self.engine.take_events() {
            match event {
                Event::Close { conn } => {
                    assert!(self.sockets.close(&mut self.engine, conn, self.now))
                }
                Event::ResumeReading { conn } => {
                    self.sockets
                        .resume_reading(&mut self.engine, conn, self.now);
                }
                _ => {}
            }
        }
    }

    /// Tick until `done`, for at most 5 s.
    fn until(&mut self, mut done: impl FnMut(&mut Broker) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out");
            self.tick();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Read exactly `n` bytes while the broker ticks on another thread's behalf: here,
/// the client socket is non-blocking-polled between ticks.
fn read_exactly(broker: &mut Broker, client: &mut TcpStream, n: usize) -> Vec<u8> {
    client.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buffer = vec![0; 64 * 1024];
    broker.until(|_| {
        while got.len() < n {
            match client.read(&mut buffer) {
                Ok(0) => panic!("closed after {} of {n} bytes", got.len()),
                Ok(count) => got.extend_from_slice(&buffer[..count]),
                Err(_) => return false,
            }
        }
        true
    });
    client.set_nonblocking(false).unwrap();
    got
}

#[test]
fn a_connect_over_a_real_socket_is_answered() {
    let mut broker = Broker::new(64 * 1024);
    let (mut client, _) = broker.client();
    client.write_all(&connect("c1")).unwrap();
    assert_eq!(read_exactly(&mut broker, &mut client, 4), CONNACK_ACCEPTED);
    assert_eq!(broker.sockets.len(), 1);
}

#[test]
fn a_frame_split_over_reads_is_kept_until_it_is_whole() {
    let mut broker = Broker::new(64 * 1024);
    let (mut client, _) = broker.client();
    let packet = connect("split");
    client.write_all(&packet[..5]).unwrap();
    for _ in 0..5 {
        broker.tick();
    }
    client.write_all(&packet[5..]).unwrap();
    assert_eq!(read_exactly(&mut broker, &mut client, 4), CONNACK_ACCEPTED);
}

#[test]
fn bytes_read_before_adoption_are_fed_first() {
    let mut broker = Broker::new(64 * 1024);
    let mut client = TcpStream::connect(broker.listener.local_addr().unwrap()).unwrap();
    let (fd, peer) = sys::accept(broker.listener.as_raw_fd()).unwrap().unwrap();
    let packet = connect("routed");
    broker
        .sockets
        .adopt(
            &mut broker.engine,
            fd,
            0,
            peer.unwrap(),
            false,
            &packet,
            1_000,
        )
        .unwrap();
    assert_eq!(read_exactly(&mut broker, &mut client, 4), CONNACK_ACCEPTED);
}

#[test]
fn a_peer_that_leaves_is_reported_with_its_address_and_listener() {
    let mut broker = Broker::new(64 * 1024);
    let (mut client, conn) = broker.client();
    client.write_all(&connect("leaver")).unwrap();
    read_exactly(&mut broker, &mut client, 4);
    let port = client.local_addr().unwrap().port();
    drop(client);
    broker.until(|b| b.sockets.is_empty());
    let closed = broker.sockets.take_closed();
    assert_eq!(closed.len(), 1);
    assert_eq!((closed[0].conn, closed[0].listener), (Some(conn), 3));
    assert_eq!(closed[0].peer.to_string(), format!("127.0.0.1:{port}"));
    assert_eq!(broker.sockets.peer(conn), None);
}

#[test]
fn a_refused_connect_gets_its_connack_before_the_close() {
    let mut broker = Broker::new(64 * 1024);
    let (mut client, _) = broker.client();
    let mut packet = connect("old");
    packet[8] = 2; // protocol level 2: unacceptable, refused in 3.1.1 form
    client.write_all(&packet).unwrap();
    assert_eq!(read_exactly(&mut broker, &mut client, 4), [0x20, 2, 0, 1]);
    broker.until(|b| b.sockets.is_empty());
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "nothing after the refusal: {rest:?}");
}

#[test]
fn a_subscriber_that_does_not_read_is_paused_and_then_gets_everything_in_order() {
    // A small mark, so the kept output passes it once the kernel's buffers are full.
    let mut broker = Broker::new(16 * 1024);
    let (mut subscriber, _) = broker.client();
    subscriber.write_all(&connect("sub")).unwrap();
    read_exactly(&mut broker, &mut subscriber, 4);
    // SUBSCRIBE id 1 to "t" at QoS 0; SUBACK 90 03 00 01 00.
    subscriber
        .write_all(&[0x82, 6, 0, 1, 0, 1, b't', 0])
        .unwrap();
    assert_eq!(
        read_exactly(&mut broker, &mut subscriber, 5),
        [0x90, 3, 0, 1, 0]
    );
    let (mut publisher, _) = broker.client();
    publisher.write_all(&connect("pub")).unwrap();
    read_exactly(&mut broker, &mut publisher, 4);
    const PAYLOAD: usize = 32 * 1024;
    const MESSAGES: usize = 384; // 12 MiB: past the kernel's buffers of both ends
    let mut frame = vec![0x30, 0x83, 0x80, 0x02, 0, 1, b't'];
    assert_eq!(3 + PAYLOAD, 0x03 | 2 << 14); // the remaining length 83 80 02
    frame.resize(frame.len() + PAYLOAD, 0);
    publisher.set_nonblocking(true).unwrap();
    for index in 0..MESSAGES {
        frame[7..11].copy_from_slice(&(index as u32).to_be_bytes());
        let mut rest = &frame[..];
        while !rest.is_empty() {
            match publisher.write(rest) {
                Ok(count) => rest = &rest[count..],
                Err(_) => broker.tick(),
            }
        }
        broker.tick();
    }
    let received = read_exactly(&mut broker, &mut subscriber, MESSAGES * frame.len());
    for (index, got) in received.chunks(frame.len()).enumerate() {
        assert_eq!(got[..7], frame[..7]);
        assert_eq!(
            u32::from_be_bytes(got[7..11].try_into().unwrap()),
            index as u32
        );
    }
}

/// A client id whose owner of `count` shards is `owner`.
fn client_id_of(owner: u16, count: u16) -> String {
    (0..)
        .map(|i| format!("c{i}"))
        .find(|id| shard_of(id, count) == owner)
        .unwrap()
}

#[test]
fn in_a_node_a_connect_for_this_shard_is_served_here_and_another_is_handed_over() {
    let mut broker = Broker::new(64 * 1024);
    broker.sockets.set_shards(1, 2, 1024, 10_000);
    let (mut mine, _) = routed_client(&mut broker);
    mine.write_all(&connect(&client_id_of(1, 2))).unwrap();
    assert_eq!(read_exactly(&mut broker, &mut mine, 4), CONNACK_ACCEPTED);
    assert_eq!(broker.sockets.len(), 1);

    let (mut theirs, peer) = routed_client(&mut broker);
    let mut sent = connect(&client_id_of(0, 2));
    theirs.write_all(&sent[..3]).unwrap();
    broker.tick();
    assert!(broker.sockets.take_handovers().is_empty(), "not whole yet");
    sent.extend_from_slice(&[0xc0, 0]); // a PINGREQ right behind it
    theirs.write_all(&sent[3..]).unwrap();
    let mut handed = Vec::new();
    broker.until(|b| {
        handed.extend(b.sockets.take_handovers());
        !handed.is_empty()
    });
    assert_eq!(
        (handed[0].owner, handed[0].listener, handed[0].peer),
        (0, 7, peer)
    );
    assert_eq!(handed[0].data, sent, "every byte read goes with it");
    assert_eq!(broker.sockets.len(), 1, "not a connection here");
    assert!(
        broker.sockets.take_closed().is_empty(),
        "its slots go with it"
    );
}

#[test]
fn a_routing_socket_without_connect_is_closed_at_the_connect_timeout() {
    let mut broker = Broker::new(64 * 1024);
    broker.sockets.set_shards(0, 2, 1024, 500);
    let (mut silent, _) = routed_client(&mut broker);
    broker.tick();
    // No socket is ready now: the broker's clock tick (a flush) closes it.
    broker.now += 1_000;
    broker
        .sockets
        .flush(&mut broker.engine, broker.now, |_, _| {});
    let closed = broker.sockets.take_closed();
    assert_eq!((closed.len(), closed[0].conn), (1, None));
    assert_eq!(broker.sockets.routing_timeouts(), 1);
    let mut rest = Vec::new();
    assert_eq!(
        silent.read_to_end(&mut rest).unwrap(),
        0,
        "closed by the broker"
    );
}

/// A client whose socket the set routes (listener 7), and its address.
fn routed_client(broker: &mut Broker) -> (TcpStream, std::net::SocketAddr) {
    let (client, conn) = broker.adopted(7);
    assert_eq!(conn, None, "routed first");
    let address = client.local_addr().unwrap();
    (client, address)
}

/// A PUBLISH frame to topic "t" at QoS 0 with `payload`.
fn publish(payload: &[u8]) -> Vec<u8> {
    let mut remaining = 3 + payload.len();
    let mut frame = vec![0x30];
    loop {
        let byte = (remaining % 128) as u8;
        remaining /= 128;
        frame.push(if remaining > 0 { byte | 0x80 } else { byte });
        if remaining == 0 {
            break;
        }
    }
    frame.extend_from_slice(&[0, 1, b't']);
    frame.extend_from_slice(payload);
    frame
}

#[test]
fn a_frame_larger_than_half_the_arena_arrives_whole() {
    let mut broker = Broker::new(1 << 20);
    let (mut subscriber, _) = broker.client();
    subscriber.write_all(&connect("big-sub")).unwrap();
    read_exactly(&mut broker, &mut subscriber, 4);
    subscriber
        .write_all(&[0x82, 6, 0, 1, 0, 1, b't', 0])
        .unwrap();
    read_exactly(&mut broker, &mut subscriber, 5);
    let (mut publisher, _) = broker.client();
    publisher.write_all(&connect("big-pub")).unwrap();
    read_exactly(&mut broker, &mut publisher, 4);
    // 300 kB against a 64 KiB arena: read into the connection's own buffer, in pieces.
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let frame = publish(&payload);
    for piece in frame.chunks(7_000) {
        publisher.write_all(piece).unwrap();
        broker.tick();
    }
    assert_eq!(
        read_exactly(&mut broker, &mut subscriber, frame.len()),
        frame
    );
}
