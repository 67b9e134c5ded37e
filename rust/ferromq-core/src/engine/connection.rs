//! A network connection as the engine sees it: decoder, protocol state, output
//! buffer and timers. It points at its session once CONNECT is accepted.

use std::collections::{HashMap, VecDeque};

use bytes::BytesMut;

use crate::codec::{Connect, FrameDecoder, Packet, ProtocolVersion, Utf8Bytes, Will};

use super::acl::SessionAcl;
use super::alias_out::OutboundAliases;
use super::auth::AuthExchange;
use super::framing::WebSocket;
use super::hold::Hold;
use super::rate::PublishRate;
use super::retained_cursor::RetainedCursor;
use super::users::UserId;

#[derive(Debug)]
pub enum ConnState {
    /// Accepted socket; CONNECT must arrive before `deadline`.
    AwaitingConnect { deadline: u64 },
    /// CONNECT received; Python is authenticating it.
    Authenticating(Box<Connect>),
    /// CONNACK sent; bound to a session.
    Connected { session: u32 },
    /// Closed by the engine; output may still be flushing.
    Closed,
}

#[derive(Debug)]
pub struct Connection {
    pub state: ConnState,
    /// Unique per socket for the engine's life (ids are reused): events carry it and
    /// Python's answers must bring it back (`auth.rs`).
    pub token: u64,
    /// DEVICE or APPLICATION as authentication decided; None leaves it to the
    /// client-id prefixes in the config.
    pub client_type: Option<crate::durability::record::ClientType>,
    /// The Authentication Method from CONNECT; every AUTH must repeat it.
    pub auth_method: Option<Utf8Bytes>,
    /// An authentication exchange in progress (CONNECT or re-authentication); boxed,
    /// as are the other rarely set fields below, so an idle connection's slot stays
    /// small (`docs/memory.md`).
    pub auth: Option<Box<AuthExchange>>,
    pub decoder: FrameDecoder,
    pub out: BytesMut,
    /// The version from CONNECT (3.1.1 until then, for error replies).
    pub version: ProtocolVersion,
    /// Keep alive in milliseconds × 1.5 [MQTT-3.1.2-24]; 0 disables.
    pub keepalive_grace_ms: u64,
    /// The keep alive granted in CONNACK, in seconds, and when (engine time): for
    /// the admin API (`admin`).
    pub keep_alive: u16,
    pub connected_at: u64,
    pub last_received: u64,
    /// The transport accepted more output (false between pause and resume).
    pub writable: bool,
    /// SUBACKs held for the other shards (`subscribe::hold_suback`): live deliveries
    /// queue behind them, so the client sees a SUBACK before what it subscribed to.
    pub subacks_held: u32,
    /// Outbound QoS 1/2 window: the client's Receive Maximum capped by config.
    pub send_window: u16,
    /// Largest packet the client accepts [MQTT-3.1.2-24 (v5 Maximum Packet Size)].
    pub client_max_packet: u32,
    /// Inbound topic aliases of a v5 client, from its first aliased PUBLISH: a box of
    /// 8 bytes in every connection against an empty map's 48.
    #[allow(clippy::box_collection)]
    pub topic_aliases: Option<Box<HashMap<u16, Utf8Bytes>>>,
    /// Topic aliases the broker uses towards a v5 client.
    pub aliases_out: OutboundAliases,
    /// The v5 client's Request Problem Information (1 unless it sent 0).
    pub request_problem_info: bool,
    /// The connection's publish rate, when configured (`rate`).
    pub rate: Option<Box<PublishRate>>,
    /// Its user name's entry, when a per-user limit is configured (`users`).
    pub user: Option<UserId>,
    /// Why its input is held, if it is (`hold`); `parked` holds what waits.
    pub hold: Option<Hold>,
    /// The client's will, published unless it disconnects normally. Boxed: most
    /// connections have none, and inline it cost every slot 96 bytes (`docs/memory.md`).
    pub will: Option<Box<Will>>,
    /// Session Expiry Interval the connection asked for (v5 DISCONNECT may change it).
    pub session_expiry_from_connect: u32,
    /// Already listed among the engine's dirty connections.
    pub flush_queued: bool,
    /// Already listed among the connections to drain after `take_output` (its
    /// deliveries stopped at the engine's write high-water mark).
    pub refill_queued: bool,
    /// Packets not handled yet, in order: those that arrived while CONNECT was
    /// being authenticated, or while the input is held.
    pub parked: VecDeque<Packet>,
    /// Retained messages its subscriptions still have to receive.
    pub retained: RetainedCursor,
    /// WebSocket framing state; None for a plain MQTT stream (`framing.rs`).
    pub websocket: Option<Box<WebSocket>>,
    /// The ACL binding Python's authentication answer gave, until CONNACK.
    pub acl: Option<Box<SessionAcl>>,
    /// Its packets are copied into `Trace` events (`trace`).
    pub traced: bool,
    /// A connection this broker opened to another broker (`bridge`).
    pub bridge: bool,
    /// The client's address, for the stream's `connected` / `auth_refused`
    /// records (`export`); set only while the stream records events.
    pub peer: Option<Box<str>>,
    /// The listener it came in on, for its stream records (`export`); set only
    /// while the stream is on.
    pub listener: Option<Box<str>>,
}

impl Connection {
    pub fn new(max_packet_size: u32, now: u64, connect_timeout_ms: u64, token: u64) -> Connection {
        Connection {
            state: ConnState::AwaitingConnect {
                deadline: now + connect_timeout_ms,
            },
            token,
            client_type: None,
            auth_method: None,
            auth: None,
            decoder: FrameDecoder::new(max_packet_size, None),
            out: BytesMut::new(),
            version: ProtocolVersion::V3_1_1,
            keepalive_grace_ms: 0,
            keep_alive: 0,
            connected_at: 0,
            last_received: now,
            writable: true,
            subacks_held: 0,
            refill_queued: false,
            send_window: 0,
            client_max_packet: u32::MAX,
            topic_aliases: None,
            aliases_out: OutboundAliases::default(),
            request_problem_info: true,
            rate: None,
            user: None,
            hold: None,
            will: None,
            session_expiry_from_connect: 0,
            flush_queued: false,
            parked: VecDeque::new(),
            retained: RetainedCursor::default(),
            websocket: None,
            acl: None,
            traced: false,
            bridge: false,
            peer: None,
            listener: None,
        }
    }

    pub fn session(&self) -> Option<u32> {
        match self.state {
            ConnState::Connected { session } => Some(session),
            _ => None,
        }
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, ConnState::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::session::Session;
    use super::Connection;

    /// Every open connection has a `Connection` and a `Session` slot in the engine's
    /// vectors, so their sizes are bytes of every idle connection (`docs/memory.md`).
    /// Rarely set fields are boxed; a new field that is not should be a choice.
    #[test]
    fn slot_sizes_stay_small() {
        let (connection, session) = (size_of::<Connection>(), size_of::<Session>());
        eprintln!("Connection {connection} B, Session {session} B");
        assert!(connection <= 336, "Connection is {connection} B (was 336)");
        assert!(session <= 448, "Session is {session} B (was 448)");
    }
}
