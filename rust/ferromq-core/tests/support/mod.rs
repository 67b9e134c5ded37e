//! A scripted MQTT client around the sans-IO engine: it encodes packets into
//! `Engine::feed` and decodes what `take_output` wrote for its connection, with the
//! codec a real client would use. The clock is explicit.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{
    Ack, Connect, FrameDecoder, Packet, Properties, Property, ProtocolVersion, Publish, QoS,
    ReasonCode, ReasonOnly, Subscribe, SubscriptionOptions, Utf8Bytes, Will,
};
use ferromq_core::engine::{ConnId, Engine, EngineConfig, Event};
use ferromq_core::topic::ShareStrategy;

pub struct Harness {
    pub engine: Engine,
    pub now: u64,
    inbox: HashMap<ConnId, BytesMut>,
    pub closed: Vec<ConnId>,
    /// `Rejected` events: (connection, reason, detail).
    pub rejected: Vec<(ConnId, ReasonCode, &'static str)>,
    /// A store that confirms every journal batch at once, when set: the bytes it
    /// holds are what a restart reads back.
    pub store: Option<BytesMut>,
    /// `Authenticate` and `Auth` events, for Python's part to answer.
    pub auth_events: Vec<Event>,
    /// `Persist` events seen.
    pub persists: usize,
    /// `ApplicationMember` events as (client, share filter, online).
    pub stream_members: Vec<(String, String, bool)>,
    /// Tokens of application deliveries done with, taken on `ApplicationDone`.
    pub stream_done: Vec<u64>,
    /// Connections whose input the engine holds, as the IO layer tracks them: added
    /// when `input_held` says so after a feed, removed on `ResumeReading`.
    pub held: HashSet<ConnId>,
    /// `Wake` times asked for.
    pub wakes: Vec<u64>,
    /// Client events and packet traces (`ClientConnected` ... `Trace`), in order.
    pub client_events: Vec<Event>,
    /// `StreamReady` events seen (the `[stream]` export has a batch to take).
    pub stream_ready: usize,
    /// `PayloadInvalid` events (a validation rule refused a payload; logged).
    pub invalid: Vec<Event>,
    /// Every plugin batch taken (`PluginReady`), in order.
    pub plugin_messages: Vec<ferromq_core::engine::PluginMessage>,
}

pub struct Client {
    pub conn: ConnId,
    pub version: ProtocolVersion,
    decoder: FrameDecoder,
    /// Packets that arrived together with the CONNACK.
    pending: Vec<Packet>,
}

impl Harness {
    pub fn new(config: EngineConfig) -> Harness {
        Harness::with_strategy(config, ShareStrategy::RoundRobin)
    }

    pub fn with_strategy(config: EngineConfig, strategy: ShareStrategy) -> Harness {
        Harness {
            engine: Engine::new(config, strategy),
            now: 1_000,
            inbox: HashMap::new(),
            closed: Vec::new(),
            rejected: Vec::new(),
            store: None,
            auth_events: Vec::new(),
            persists: 0,
            stream_members: Vec::new(),
            stream_done: Vec::new(),
            held: HashSet::new(),
            wakes: Vec::new(),
            client_events: Vec::new(),
            stream_ready: 0,
            invalid: Vec::new(),
            plugin_messages: Vec::new(),
        }
    }

    /// Write every journal batch to the store and confirm it.
    pub fn persist(&mut self) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        while let Some((batch, bytes)) = self.engine.take_journal() {
            store.extend_from_slice(&bytes);
            self.engine.journal_done(batch);
        }
    }

    pub fn pump(&mut self) {
        self.persist();
        let inbox = &mut self.inbox;
        self.engine.take_output(|conn, bytes: Bytes| {
            inbox.entry(conn).or_default().extend_from_slice(&bytes);
        });
        for event in self.engine.take_events() {
            match event {
                Event::Close { conn } => self.closed.push(conn),
                Event::Rejected {
                    conn,
                    reason,
                    detail,
                } => self.rejected.push((conn, reason, detail)),
                Event::Authenticate { .. } | Event::Auth { .. } => self.auth_events.push(event),
                Event::Persist => self.persists += 1,
                Event::ApplicationMember {
                    client,
                    share_filter,
                    online,
                } => self.stream_members.push((client, share_filter, online)),
                Event::ApplicationDone => {
                    self.stream_done.extend(self.engine.take_application_done())
                }
                Event::StreamReady => self.stream_ready += 1,
                Event::ResumeReading { conn } => {
                    self.held.remove(&conn);
                }
                Event::Wake { at } => self.wakes.push(at),
                Event::ClientConnected { .. }
                | Event::ClientDisconnected { .. }
                | Event::Subscribed { .. }
                | Event::Unsubscribed { .. }
                | Event::Trace { .. } => self.client_events.push(event),
                Event::PayloadInvalid { .. } => self.invalid.push(event),
                Event::PluginReady => {
                    let batch = self.engine.take_plugin_batch();
                    self.plugin_messages.extend(batch);
                }
            }
        }
    }

    pub fn open(&mut self, version: ProtocolVersion) -> Client {
        let conn = self.engine.open(self.now);
        Client {
            conn,
            version,
            decoder: FrameDecoder::new(u32::MAX, Some(version)),
            pending: Vec::new(),
        }
    }

    pub fn send(&mut self, client: &Client, packet: Packet) {
        let wire = packet.to_bytes(client.version).unwrap();
        self.send_raw(client, &wire);
    }

    pub fn send_raw(&mut self, client: &Client, wire: &[u8]) {
        assert!(
            !self.held.contains(&client.conn),
            "the IO layer does not read a held connection"
        );
        let used = self.engine.feed(client.conn, wire, self.now);
        assert_eq!(used, wire.len(), "the engine keeps no partial frames here");
        if self.engine.input_held(client.conn) {
            self.held.insert(client.conn);
        }
        self.pump();
    }

    pub fn recv(&mut self, client: &mut Client) -> Vec<Packet> {
        self.pump();
        let mut buf = self.inbox.remove(&client.conn).unwrap_or_default();
        let mut out = std::mem::take(&mut client.pending);
        while let Some(packet) = client.decoder.decode(&mut buf).unwrap() {
            out.push(packet);
        }
        assert!(buf.is_empty());
        out
    }

    /// The IO layer reads this client's bytes (its input is not held).
    pub fn is_read(&self, client: &Client) -> bool {
        !self.held.contains(&client.conn)
    }

    pub fn is_closed(&self, client: &Client) -> bool {
        self.closed.contains(&client.conn)
    }

    pub fn drop_connection(&mut self, client: &Client) {
        self.engine.connection_lost(client.conn, self.now);
        self.inbox.remove(&client.conn);
        self.held.remove(&client.conn); // the IO layer forgets a closed socket
        self.pump();
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.engine.tick(self.now);
        self.pump();
    }

    /// Open, CONNECT, and return the client with its CONNACK; packets that came
    /// with it are returned by the next `recv`.
    pub fn connect(&mut self, connect: Connect) -> (Client, Packet) {
        let mut client = self.open(connect.protocol);
        self.send(&client, Packet::Connect(Box::new(connect)));
        let mut got = self.recv(&mut client);
        assert!(!got.is_empty(), "no CONNACK");
        let connack = got.remove(0);
        client.pending = got;
        (client, connack)
    }
}

/// The default configuration with the journal on.
pub fn durable_config() -> EngineConfig {
    EngineConfig {
        journal: true,
        ..EngineConfig::default()
    }
}

pub fn s(text: &str) -> Utf8Bytes {
    Utf8Bytes::try_from(text).unwrap()
}

pub fn connect(id: &str, version: ProtocolVersion, clean: bool) -> Connect {
    Connect {
        protocol: version,
        clean_start: clean,
        keep_alive: 60,
        properties: Properties::new(),
        client_id: s(id),
        will: None,
        username: None,
        password: None,
    }
}

pub fn with_expiry(mut c: Connect, seconds: u32) -> Connect {
    c.properties
        .0
        .push(Property::SessionExpiryInterval(seconds));
    c
}

pub fn with_will(mut c: Connect, topic: &str, payload: &[u8], delay: Option<u32>) -> Connect {
    let mut properties = Properties::new();
    if let Some(delay) = delay {
        properties.0.push(Property::WillDelayInterval(delay));
    }
    c.will = Some(Will {
        topic: s(topic),
        payload: Bytes::copy_from_slice(payload),
        qos: QoS::AtLeastOnce,
        retain: false,
        properties,
    });
    c
}

pub fn subscribe(packet_id: u16, filter: &str, qos: QoS) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id,
        properties: Properties::new(),
        filters: vec![(
            s(filter),
            SubscriptionOptions {
                qos,
                ..Default::default()
            },
        )],
    })
}

pub fn publish(topic: &str, payload: &[u8], qos: QoS, packet_id: u16, retain: bool) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain,
        topic: s(topic),
        packet_id: if qos == QoS::AtMostOnce { 0 } else { packet_id },
        properties: Properties::new(),
        payload: Bytes::copy_from_slice(payload),
    })
}

pub fn puback(packet_id: u16) -> Packet {
    Packet::PubAck(Ack::new(packet_id))
}

pub fn disconnect() -> Packet {
    Packet::Disconnect(ReasonOnly::new(ReasonCode::Success))
}

/// The payloads of the PUBLISH packets among `packets`, in order.
pub fn payloads(packets: &[Packet]) -> Vec<Vec<u8>> {
    publishes(packets)
        .iter()
        .map(|p| p.payload.to_vec())
        .collect()
}

pub fn publishes(packets: &[Packet]) -> Vec<&Publish> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p),
            _ => None,
        })
        .collect()
}
