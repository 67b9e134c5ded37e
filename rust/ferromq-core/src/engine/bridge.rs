//! Bridges (`[[bridges]]`): a connection this broker opened to another MQTT broker,
//! served by the engine as if it were a client's, in reverse. Python dials the
//! remote broker, sends CONNECT and the SUBSCRIBE of the `in` topics itself (once
//! per connection), then hands the transport to the engine (`open_bridge`):
//!
//! - the connection gets a persistent session of its own (the bridge's client id;
//!   no CONNACK is written: the remote broker is the server here), subscribed to
//!   the `out` topics (local prefix + pattern) with No Local, so that what came in
//!   over the bridge never goes back out, and Retain As Published. Local messages
//!   matching them are delivered to the remote broker as to any subscriber: queued
//!   while it is away (bounded in bytes by the bridge's own limit), journaled,
//!   QoS 1/2 resent on reconnect, the remote's PUBACK/PUBREC/PUBCOMP ending them;
//!   each goes out with its local prefix replaced by the remote one;
//! - a PUBLISH from the remote broker (what the `in` subscriptions bring) is taken
//!   as a client's: its remote prefix replaced by the local one, then ACL-free (the
//!   session's own rule allows every topic), routed, acknowledged;
//! - the remote's PINGRESP (Python sends the PINGREQ the client side owes) is
//!   accepted on a bridge connection, a protocol error on any other.
//!
//! A connection is a bridge by its `bridge` flag; the links live beside the
//! connections (`Engine::bridges`, a few entries), so a client connection pays
//! one flag test per delivery and per PUBLISH.

use std::sync::Arc;

use crate::acl::{AclTable, Action, Binding, Permission, Rule, Subject};
use crate::codec::{
    Connect, FrameDecoder, Properties, Property, ProtocolVersion, QoS, RetainHandling,
    SubscriptionOptions, Utf8Bytes,
};
use crate::topic::filter_matches;

use super::acl::SessionAcl;
use super::queue::QueueLimit;
use super::subscribe::sends_retained;
use super::{ConnId, Engine};

/// One topic mapping of a bridge: `pattern` under `local_prefix` here and under
/// `remote_prefix` there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeTopic {
    pub pattern: String,
    pub qos: QoS,
    pub local_prefix: String,
    pub remote_prefix: String,
}

impl BridgeTopic {
    pub fn local_filter(&self) -> String {
        format!("{}{}", self.local_prefix, self.pattern)
    }

    pub fn remote_filter(&self) -> String {
        format!("{}{}", self.remote_prefix, self.pattern)
    }
}

/// What a bridge connection is: its session's client id, the protocol the remote
/// broker speaks, its topics each way and the bound on what waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeLink {
    pub client_id: String,
    pub version: ProtocolVersion,
    pub out: Vec<BridgeTopic>,
    pub inbound: Vec<BridgeTopic>,
    /// Seconds between Python's PINGREQs; nothing received for 1.5 times that
    /// closes the connection.
    pub keep_alive: u16,
    /// Bytes queued for the remote broker while it is away or slow; 0: the
    /// `[session]` bound.
    pub max_queued_bytes: u64,
}

/// An open bridge: its connection, its session and its link.
#[derive(Debug)]
pub(super) struct OpenBridge {
    conn: ConnId,
    /// Bound once the connection has its session.
    session: Option<u32>,
    link: BridgeLink,
    /// The link's topics as prefix swaps each way, their filters made once here
    /// rather than per delivery.
    out: Vec<Swap>,
    inbound: Vec<Swap>,
}

/// One topic's prefix swap in one direction: a topic `filter` matches has its
/// `from` prefix replaced by `to`.
#[derive(Debug)]
struct Swap {
    filter: String,
    from: String,
    to: String,
}

impl Swap {
    fn out(topic: &BridgeTopic) -> Swap {
        Swap {
            filter: topic.local_filter(),
            from: topic.local_prefix.clone(),
            to: topic.remote_prefix.clone(),
        }
    }

    fn inbound(topic: &BridgeTopic) -> Swap {
        Swap {
            filter: topic.remote_filter(),
            from: topic.remote_prefix.clone(),
            to: topic.local_prefix.clone(),
        }
    }
}

/// `topic` moved by the first swap whose filter matches it (and that changes it).
fn mapped(swaps: &[Swap], topic: &str) -> Option<String> {
    swaps.iter().find_map(|swap| {
        (filter_matches(&swap.filter, topic) && swap.from != swap.to)
            .then(|| format!("{}{}", swap.to, &topic[swap.from.len()..]))
    })
}

impl Engine {
    /// Serve `conn` (open, nothing read from it yet) as the bridge `link`: bind its
    /// session (created, or resumed with what it queued), subscribe it to the `out`
    /// topics (dropping subscriptions no longer configured) and start delivering.
    /// With `websocket_seed` the connection carries MQTT in WebSocket frames as the
    /// client side (Python ran the upgrade), its masks drawn from that seed.
    pub fn open_bridge(
        &mut self,
        conn_id: ConnId,
        link: BridgeLink,
        websocket_seed: Option<u64>,
        now: u64,
    ) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        conn.bridge = true;
        if let Some(seed) = websocket_seed {
            let max = conn.decoder.max_packet_size();
            conn.websocket = Some(Box::new(super::framing::WebSocket::client(max, seed)));
        }
        // What a CONNECT would have told the connection: the version it speaks.
        conn.version = link.version;
        conn.decoder = FrameDecoder::new(conn.decoder.max_packet_size(), Some(link.version));
        // Everything is allowed to a bridge: its own rule, checked before the table.
        let all = Action::Publish.bit() | Action::Subscribe.bit() | Action::Read.bit();
        let everything = Rule::new(Permission::Allow, all, Subject::All, "#")
            .map(|rule| Arc::new(AclTable::new(vec![rule])))
            .ok();
        let binding = Binding {
            client_id: link.client_id.as_str().into(),
            ..Binding::default()
        };
        conn.acl = Some(Box::new(SessionAcl::new(binding, everything)));
        let mut properties = Properties::new();
        if link.version.is_v5() {
            properties.0.push(Property::SessionExpiryInterval(u32::MAX));
        }
        let connect = Connect {
            protocol: link.version,
            clean_start: false,
            keep_alive: 0, // the remote broker's side; ours is Python's PINGREQ
            properties,
            client_id: Utf8Bytes::try_from(link.client_id.as_str()).unwrap_or_default(),
            will: None,
            username: None,
            password: None,
        };
        // Known before the session is bound: what it queued goes out mapped.
        let client_id = link.client_id.clone();
        self.bridges.retain(|open| open.link.client_id != client_id);
        self.bridges.push(OpenBridge {
            conn: conn_id,
            session: None,
            out: link.out.iter().map(Swap::out).collect(),
            inbound: link.inbound.iter().map(Swap::inbound).collect(),
            link,
        });
        self.accept_connect(conn_id, connect, now);
        let Some(session) = self.conn_mut(conn_id).and_then(|c| c.session()) else {
            return;
        };
        let open = self.bridges.last_mut().expect("pushed above");
        open.session = Some(session);
        let keepalive_grace_ms = u64::from(open.link.keep_alive) * 1500;
        // Each `out` filter here with its QoS; a filter named twice keeps the first.
        let mut wanted: Vec<(String, QoS)> = Vec::with_capacity(open.out.len());
        for (swap, topic) in open.out.iter().zip(&open.link.out) {
            if !wanted.iter().any(|(filter, _)| *filter == swap.filter) {
                wanted.push((swap.filter.clone(), topic.qos));
            }
        }
        if let Some(conn) = self.conn_mut(conn_id) {
            conn.keepalive_grace_ms = keepalive_grace_ms;
        }
        let stale: Vec<Box<str>> = self.sessions[session as usize]
            .as_ref()
            .map(|s| {
                s.subscriptions
                    .keys()
                    .filter(|f| !wanted.iter().any(|(w, _)| w == &***f))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for filter in stale {
            self.remove_subscription(session, Some(conn_id), &filter);
        }
        // Not the quota or the ACL: the bridge's filters are the operator's.
        for (filter, qos) in &wanted {
            let options = self.granted(SubscriptionOptions {
                qos: *qos,
                no_local: true,
                retain_as_published: true,
                retain_handling: RetainHandling::SendAtSubscribeIfNew,
            });
            if let Ok(is_new) = self.add_subscription(session, filter, options, None) {
                if sends_retained(filter, options, is_new) {
                    self.queue_retained(conn_id, session, filter, options.qos, &[], now);
                }
            }
        }
        self.drain_queue(session, now);
    }

    fn bridge_of(&self, conn_id: ConnId) -> Option<&OpenBridge> {
        let conn = self.conns.get(conn_id as usize)?.as_ref()?;
        if !conn.bridge {
            return None;
        }
        self.bridges.iter().rev().find(|open| open.conn == conn_id)
    }

    /// The topic a delivery of `topic` carries on `conn`: on a bridge, with its
    /// local prefix replaced by the remote one.
    #[cold]
    #[inline(never)]
    pub(super) fn remote_topic(&self, conn_id: ConnId, topic: &Utf8Bytes) -> Option<Utf8Bytes> {
        let remote = mapped(&self.bridge_of(conn_id)?.out, topic)?;
        Utf8Bytes::try_from(remote).ok()
    }

    /// The topic a PUBLISH from the remote broker is routed on here.
    #[cold]
    #[inline(never)]
    pub(super) fn local_topic(&self, conn_id: ConnId, topic: &str) -> Option<Utf8Bytes> {
        let local = mapped(&self.bridge_of(conn_id)?.inbound, topic)?;
        Utf8Bytes::try_from(local).ok()
    }

    /// A bridge session's own queue bound, if it has one.
    pub(super) fn bridge_queue_limit(&self, session: u32, limit: QueueLimit) -> QueueLimit {
        match self
            .bridges
            .iter()
            .find(|open| open.session == Some(session))
        {
            Some(open) if open.link.max_queued_bytes > 0 => QueueLimit {
                bytes: open.link.max_queued_bytes,
                ..limit
            },
            _ => limit,
        }
    }
}
