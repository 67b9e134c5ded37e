//! One MQTT client of the generator, as a state machine without IO.
//!
//! The worker owns the socket; a [`Client`] owns the protocol: it turns decoded packets
//! into replies appended to `out`, and publishes into `out` when [`Client::pump`] is
//! called. Every packet is built and parsed by `ferromq-core`'s codec.
//!
//! Flows (§4.3): a publisher keeps at most `window` QoS 1/2 publishes unacknowledged
//! (capped by a 5.0 server's Receive Maximum) and measures publish-ack latency to
//! PUBACK (QoS 1) or PUBCOMP (QoS 2). A subscriber acknowledges every delivery; for
//! QoS 2 it keeps the packet ids it has PUBREC'd until PUBREL, across reconnects, so a
//! redelivered QoS 2 PUBLISH is not delivered twice (receiver Method B, §4.3.3). A
//! subscriber told to reconnect drops the connection right after counting the
//! delivery that triggers it, before acknowledging its read batch, so a persistent
//! session must redeliver what it had in flight.

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{
    Ack, ConnAck, Connect, FrameDecoder, Packet, Properties, Property, ProtocolVersion, Publish,
    QoS, ReasonCode, ReasonOnly, SubAck, Subscribe, SubscriptionOptions, Utf8Bytes,
    PROTOCOL_MAX_PACKET_SIZE,
};

use crate::config::Config;
use crate::payload::Stamp;
use crate::scenario::{ClientSpec, Role};
use crate::shared::{Counters, Instants};
use crate::stats::{Delivery, Latency, SeqTracker};

/// Resolution of the throughput timeline.
pub const BUCKET_NS: u64 = 100_000_000;
/// A publisher stops filling its output once this much is waiting to be written.
const HIGH_WATER: usize = 64 * 1024;
/// Publishes per [`Client::pump`] call, so one publisher cannot starve the others.
const PUMP_BUDGET: usize = 64;
/// A rate-limited publisher that fell this far behind its schedule skips ahead
/// instead of bursting to catch up.
const MAX_LAG_NS: u64 = 1_000_000_000;

/// Run-wide settings every client reads.
#[derive(Debug, Clone)]
pub struct RunParams {
    pub run_id: u32,
    pub version: ProtocolVersion,
    pub pub_qos: QoS,
    pub sub_qos: QoS,
    pub window: usize,
    /// Nanoseconds between two publishes of one publisher; 0 for no limit.
    pub interval_ns: u64,
    pub count: u64,
    pub persistent: bool,
    pub session_expiry: u32,
    pub keep_alive: u16,
    pub reconnect_after: u64,
    pub payload: Bytes,
    /// Bytes per second a subscriber reads; 0 for no limit.
    pub sub_read_rate: f64,
}

impl RunParams {
    pub fn new(config: &Config, run_id: u32) -> RunParams {
        RunParams {
            run_id,
            // `Config::validate` has accepted the protocol level.
            version: config.version().unwrap_or(ProtocolVersion::V3_1_1),
            pub_qos: config.publish_qos(),
            sub_qos: config.subscribe_qos(),
            window: config.inflight as usize,
            interval_ns: if config.rate > 0.0 {
                (1e9 / config.rate) as u64
            } else {
                0
            },
            count: config.count,
            persistent: config.persistent,
            session_expiry: config.session_expiry,
            keep_alive: config.keep_alive,
            reconnect_after: config.subscriber_reconnect_after,
            payload: Bytes::from(vec![0u8; config.payload]),
            sub_read_rate: config.sub_read_rate,
        }
    }
}

/// What one worker measured, merged into the report at the end.
#[derive(Debug, Default)]
pub struct Tally {
    pub e2e: Latency,
    pub ack: Latency,
    pub connect: Latency,
    /// Per [`BUCKET_NS`] since publishing started: `[sent, received]`.
    pub timeline: Vec<[u64; 2]>,
    /// Deliveries that were not this run's messages (queued by an earlier run).
    pub stale: u64,
    pub reconnects: u64,
    /// Connections whose TLS handshake resumed an earlier session (a ticket).
    pub tls_resumed: u64,
}

impl Tally {
    fn count_in_timeline(&mut self, column: usize, now: u64, start: u64) {
        if start == 0 || now < start {
            return;
        }
        let bucket = ((now - start) / BUCKET_NS) as usize;
        if bucket >= self.timeline.len() {
            self.timeline.resize(bucket + 1, [0, 0]);
        }
        self.timeline[bucket][column] += 1;
    }
}

/// What a client needs from its worker while handling a packet or publishing.
pub struct Ctx<'a> {
    pub now: u64,
    pub run: &'a RunParams,
    /// Zero until publishing starts.
    pub instants: Instants,
    pub tally: &'a mut Tally,
    pub counters: &'a Counters,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not connected; waiting for its turn to connect.
    Idle,
    TcpConnecting,
    AwaitConnAck,
    AwaitSubAck,
    Ready,
    Closed,
}

/// What the worker does after a packet was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// Drop the connection now, unacknowledged deliveries and all, and reconnect.
    Reconnect,
}

/// Why [`Client::pump`] stopped publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pump {
    /// Budget or output buffer used up: flush, then pump again.
    More,
    /// The in-flight window is full; an acknowledgement will free it.
    Window,
    /// Rate-limited until this instant.
    Until(u64),
    /// This publisher has published everything it will.
    Done,
}

#[derive(Debug)]
struct Pending {
    sent_ns: u64,
    measured: bool,
}

#[derive(Debug)]
pub struct Publisher {
    pub id: u32,
    topic: Utf8Bytes,
    /// Sequences issued so far: the stream's length.
    pub next_seq: u64,
    next_packet_id: u16,
    inflight: HashMap<u16, Pending>,
    window: usize,
    next_due: u64,
    measured_sent: u64,
    pub done: bool,
}

#[derive(Debug)]
pub struct Subscriber {
    pub index: u32,
    filter: Utf8Bytes,
    /// Per publisher id.
    pub streams: HashMap<u32, SeqTracker>,
    qos2_awaiting_rel: HashSet<u16>,
    delivered: u64,
    reconnected: bool,
}

#[derive(Debug)]
pub enum RoleState {
    Publisher(Publisher),
    Subscriber(Subscriber),
    Idle,
}

type Outcome<T> = Result<T, String>;

#[derive(Debug)]
pub struct Client {
    pub spec: ClientSpec,
    pub state: State,
    pub out: BytesMut,
    pub inbuf: BytesMut,
    decoder: FrameDecoder,
    pub last_send: u64,
    connect_started: u64,
    ever_ready: bool,
    pub role: RoleState,
}

fn utf8(s: &str) -> Utf8Bytes {
    // Client ids and topics come from the scenario plan: short, valid UTF-8.
    Utf8Bytes::try_from(s).expect("plan strings are valid MQTT strings")
}

impl Client {
    pub fn new(spec: ClientSpec, run: &RunParams) -> Client {
        let role = match &spec.role {
            Role::Publisher { id, topic } => RoleState::Publisher(Publisher {
                id: *id,
                topic: utf8(topic),
                next_seq: 0,
                next_packet_id: 0,
                inflight: HashMap::new(),
                window: run.window,
                next_due: 0,
                measured_sent: 0,
                done: false,
            }),
            Role::Subscriber { index, filter } => RoleState::Subscriber(Subscriber {
                index: *index,
                filter: utf8(filter),
                streams: HashMap::new(),
                qos2_awaiting_rel: HashSet::new(),
                delivered: 0,
                reconnected: false,
            }),
            Role::Idle => RoleState::Idle,
        };
        Client {
            spec,
            state: State::Idle,
            out: BytesMut::new(),
            inbuf: BytesMut::new(),
            decoder: FrameDecoder::new(PROTOCOL_MAX_PACKET_SIZE, Some(run.version)),
            last_send: 0,
            connect_started: 0,
            ever_ready: false,
            role,
        }
    }

    /// Connected (and subscribed) at least once.
    pub fn was_ready(&self) -> bool {
        self.ever_ready
    }

    pub fn is_publisher(&self) -> bool {
        matches!(self.role, RoleState::Publisher(_))
    }

    pub fn is_subscriber(&self) -> bool {
        matches!(self.role, RoleState::Subscriber(_))
    }

    fn is_persistent_subscriber(&self, run: &RunParams) -> bool {
        run.persistent && matches!(self.role, RoleState::Subscriber(_))
    }

    /// The worker opened the socket; the TCP handshake is under way.
    pub fn begin_connect(&mut self, now: u64) {
        self.state = State::TcpConnecting;
        self.connect_started = now;
        self.out.clear();
        self.inbuf.clear();
    }

    /// The TCP handshake finished: send CONNECT.
    pub fn on_tcp_connected(&mut self, run: &RunParams) -> Outcome<()> {
        let persistent = self.is_persistent_subscriber(run);
        let mut properties = Properties::new();
        if persistent && run.version.is_v5() {
            properties
                .0
                .push(Property::SessionExpiryInterval(run.session_expiry));
        }
        let connect = Connect {
            protocol: run.version,
            clean_start: !persistent,
            keep_alive: run.keep_alive,
            properties,
            client_id: utf8(&self.spec.client_id),
            will: None,
            username: None,
            password: None,
        };
        self.state = State::AwaitConnAck;
        self.send(&Packet::Connect(Box::new(connect)), run.version)
    }

    fn send(&mut self, packet: &Packet, version: ProtocolVersion) -> Outcome<()> {
        packet
            .encode(version, &mut self.out)
            .map_err(|err| format!("cannot encode {:?}: {err}", packet.packet_type()))
    }

    /// Decode and handle every whole packet in `inbuf`.
    pub fn handle_input(&mut self, ctx: &mut Ctx<'_>) -> Outcome<Next> {
        loop {
            let packet = match self.decoder.decode(&mut self.inbuf) {
                Ok(Some(packet)) => packet,
                Ok(None) => return Ok(Next::Continue),
                Err(err) => return Err(format!("undecodable packet from the broker: {err}")),
            };
            if self.handle(packet, ctx)? == Next::Reconnect {
                return Ok(Next::Reconnect);
            }
        }
    }

    fn handle(&mut self, packet: Packet, ctx: &mut Ctx<'_>) -> Outcome<Next> {
        let version = ctx.run.version;
        match (packet, self.state) {
            (Packet::ConnAck(connack), State::AwaitConnAck) => self.handle_connack(connack, ctx)?,
            (Packet::SubAck(suback), State::AwaitSubAck) => self.handle_suback(&suback, ctx)?,
            (Packet::Publish(publish), State::Ready | State::AwaitSubAck) => {
                return self.handle_publish(publish, ctx);
            }
            (Packet::PubAck(ack), State::Ready) => self.complete_flow(&ack, ctx),
            (Packet::PubRec(ack), State::Ready) => {
                if ack.reason.is_error() {
                    self.complete_flow(&ack, ctx);
                } else {
                    self.send(&Packet::PubRel(Ack::new(ack.packet_id)), version)?;
                }
            }
            (Packet::PubComp(ack), State::Ready) => self.complete_flow(&ack, ctx),
            (Packet::PubRel(ack), State::Ready) => {
                if let RoleState::Subscriber(sub) = &mut self.role {
                    sub.qos2_awaiting_rel.remove(&ack.packet_id);
                }
                self.send(&Packet::PubComp(Ack::new(ack.packet_id)), version)?;
            }
            (Packet::PingResp, _) => {}
            (Packet::Disconnect(d), _) => {
                return Err(format!("broker sent DISCONNECT {:?}", d.reason));
            }
            (packet, state) => {
                return Err(format!(
                    "unexpected {:?} in state {state:?}",
                    packet.packet_type()
                ));
            }
        }
        Ok(Next::Continue)
    }

    fn handle_connack(&mut self, connack: ConnAck, ctx: &mut Ctx<'_>) -> Outcome<()> {
        if connack.code != 0 {
            return Err(format!(
                "CONNACK refused the connection: code {:#04x}",
                connack.code
            ));
        }
        if !self.ever_ready {
            ctx.tally.connect.record_ns(ctx.now - self.connect_started);
        }
        let receive_maximum = connack.properties.iter().find_map(|p| match p {
            Property::ReceiveMaximum(max) => Some(usize::from(*max)),
            _ => None,
        });
        match &mut self.role {
            RoleState::Publisher(publisher) => {
                publisher.window = ctx.run.window.min(receive_maximum.unwrap_or(usize::MAX));
                self.become_ready(ctx);
            }
            // A persistent session the broker kept still holds the subscription.
            RoleState::Subscriber(_) if connack.session_present && self.ever_ready => {
                self.become_ready(ctx);
            }
            RoleState::Subscriber(sub) => {
                let options = SubscriptionOptions {
                    qos: ctx.run.sub_qos,
                    ..SubscriptionOptions::default()
                };
                let subscribe = Subscribe {
                    packet_id: 1,
                    properties: Properties::new(),
                    filters: vec![(sub.filter.clone(), options)],
                };
                self.state = State::AwaitSubAck;
                self.send(&Packet::Subscribe(subscribe), ctx.run.version)?;
            }
            RoleState::Idle => self.become_ready(ctx),
        }
        Ok(())
    }

    fn handle_suback(&mut self, suback: &SubAck, ctx: &mut Ctx<'_>) -> Outcome<()> {
        if let Some(refused) = suback.reasons.iter().find(|r| r.is_error()) {
            return Err(format!("SUBACK refused the subscription: {refused:?}"));
        }
        self.become_ready(ctx);
        Ok(())
    }

    fn become_ready(&mut self, ctx: &mut Ctx<'_>) {
        self.state = State::Ready;
        if !self.ever_ready {
            self.ever_ready = true;
            Counters::add(&ctx.counters.ready, 1);
        }
    }

    fn handle_publish(&mut self, publish: Publish, ctx: &mut Ctx<'_>) -> Outcome<Next> {
        let RoleState::Subscriber(sub) = &mut self.role else {
            return Err("a publisher received a PUBLISH".into());
        };
        let version = ctx.run.version;
        let id = publish.packet_id;
        let redelivered_qos2 = publish.qos == QoS::ExactlyOnce && !sub.qos2_awaiting_rel.insert(id);
        let mut next = Next::Continue;
        match Stamp::read(&publish.payload) {
            _ if redelivered_qos2 => {}
            Some(stamp) if stamp.run_id == ctx.run.run_id => {
                sub.delivered += 1;
                let tracker = sub.streams.entry(stamp.publisher).or_default();
                if tracker.record(stamp.seq) == Delivery::New {
                    Counters::add(&ctx.counters.received_new, 1);
                }
                Counters::add(&ctx.counters.received, 1);
                if stamp.sent_ns >= ctx.instants.measure_start && ctx.instants.measure_start > 0 {
                    ctx.tally
                        .e2e
                        .record_ns(ctx.now.saturating_sub(stamp.sent_ns));
                }
                ctx.tally
                    .count_in_timeline(1, ctx.now, ctx.instants.publish_start);
                if ctx.run.reconnect_after > 0
                    && !sub.reconnected
                    && sub.delivered >= ctx.run.reconnect_after
                {
                    sub.reconnected = true;
                    next = Next::Reconnect;
                }
            }
            _ => ctx.tally.stale += 1,
        }
        if next == Next::Reconnect {
            return Ok(next);
        }
        match publish.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.send(&Packet::PubAck(Ack::new(id)), version)?,
            QoS::ExactlyOnce => self.send(&Packet::PubRec(Ack::new(id)), version)?,
        }
        Ok(next)
    }

    /// PUBACK, PUBCOMP, or a refusing PUBREC: the publish's slot is free again.
    fn complete_flow(&mut self, ack: &Ack, ctx: &mut Ctx<'_>) {
        let RoleState::Publisher(publisher) = &mut self.role else {
            return;
        };
        if let Some(pending) = publisher.inflight.remove(&ack.packet_id) {
            if pending.measured {
                ctx.tally
                    .ack
                    .record_ns(ctx.now.saturating_sub(pending.sent_ns));
            }
            Counters::add(&ctx.counters.acked, 1);
        }
    }

    /// Publish what the window, the rate and the count allow right now.
    pub fn pump(&mut self, ctx: &mut Ctx<'_>, clock_now: impl Fn() -> u64) -> Outcome<Pump> {
        let RoleState::Publisher(p) = &mut self.role else {
            return Ok(Pump::Done);
        };
        let run = ctx.run;
        let instants = ctx.instants;
        if p.done {
            return Ok(Pump::Done);
        }
        if p.next_due == 0 && run.interval_ns > 0 {
            // Spread publishers over one interval instead of all starting at once.
            let phase = (f64::from(p.id) * 0.618_033_988_75).fract();
            p.next_due = instants.publish_start + (phase * run.interval_ns as f64) as u64;
        }
        for _ in 0..PUMP_BUDGET {
            let now = clock_now();
            let finished = if run.count > 0 {
                p.measured_sent >= run.count
            } else {
                now >= instants.publish_end
            };
            if finished {
                p.done = true;
                Counters::add(&ctx.counters.publishers_done, 1);
                return Ok(Pump::Done);
            }
            if run.pub_qos != QoS::AtMostOnce && p.inflight.len() >= p.window {
                return Ok(Pump::Window);
            }
            if run.interval_ns > 0 {
                if p.next_due > now {
                    return Ok(Pump::Until(p.next_due));
                }
                p.next_due = p.next_due.max(now.saturating_sub(MAX_LAG_NS)) + run.interval_ns;
            }
            if self.out.len() >= HIGH_WATER {
                return Ok(Pump::More);
            }
            let packet_id = if run.pub_qos == QoS::AtMostOnce {
                0
            } else {
                p.allocate_packet_id()
            };
            let publish = Publish {
                dup: false,
                qos: run.pub_qos,
                retain: false,
                topic: p.topic.clone(),
                packet_id,
                properties: Properties::new(),
                payload: run.payload.clone(),
            };
            Packet::Publish(publish)
                .encode(run.version, &mut self.out)
                .map_err(|err| format!("cannot encode PUBLISH: {err}"))?;
            let at = self.out.len() - run.payload.len();
            let stamp = Stamp {
                run_id: run.run_id,
                publisher: p.id,
                seq: p.next_seq,
                sent_ns: now,
            };
            stamp.write(&mut self.out[at..]);
            p.next_seq += 1;
            let measured = now >= instants.measure_start;
            p.measured_sent += u64::from(measured);
            if packet_id != 0 {
                let pending = Pending {
                    sent_ns: now,
                    measured,
                };
                p.inflight.insert(packet_id, pending);
            }
            Counters::add(&ctx.counters.sent, 1);
            ctx.tally.count_in_timeline(0, now, instants.publish_start);
        }
        Ok(Pump::More)
    }

    /// Queue a PINGREQ when nothing was sent for half the keep-alive.
    pub fn keep_alive(&mut self, now: u64, run: &RunParams) -> Outcome<()> {
        let half = u64::from(run.keep_alive) * 500_000_000;
        if self.state == State::Ready && half > 0 && now.saturating_sub(self.last_send) > half {
            self.send(&Packet::PingReq, run.version)?;
        }
        Ok(())
    }

    /// Queue a normal DISCONNECT; the session, if persistent, stays on the broker.
    pub fn disconnect(&mut self, run: &RunParams) -> Outcome<()> {
        let packet = Packet::Disconnect(ReasonOnly::new(ReasonCode::Success));
        self.state = State::Closed;
        self.send(&packet, run.version)
    }

    /// The connection is gone; forget what was on the wire, keep the session state.
    pub fn drop_connection(&mut self) {
        self.state = State::Idle;
        self.out.clear();
        self.inbuf.clear();
    }
}

impl Publisher {
    /// The next packet id not in flight [MQTT-2.2.1-3]; the window is below 65,535,
    /// so one is always free.
    fn allocate_packet_id(&mut self) -> u16 {
        loop {
            self.next_packet_id = self.next_packet_id.wrapping_add(1).max(1);
            if !self.inflight.contains_key(&self.next_packet_id) {
                return self.next_packet_id;
            }
        }
    }
}
