//! Per-client packet trace, switched on and off while the broker runs (EMQX's
//! `trace`): every packet in and out of a traced client's connection is copied into
//! a `Trace` event as a [`PacketSummary`] (type, packet id, topic or filters, QoS,
//! reason codes, payload size and its first [`PREVIEW_BYTES`]).
//!
//! `Engine::trace(client_id, on)` keeps the id in a set, so a connection made later
//! with that id is traced from its CONNACK on (its CONNECT is summarised then), and
//! flags the live connection of that id at once. The flag lives on the connection:
//! an untraced one pays one `bool` check per packet read and per packet written,
//! and one set lookup per CONNECT only while some client is traced.

use bytes::Bytes;

use crate::codec::{Packet, PacketType};

use super::{ConnId, Engine, Event};

/// Payload bytes a trace shows.
pub const PREVIEW_BYTES: usize = 64;

/// One traced packet, decoded enough to read in a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketSummary {
    pub packet_type: PacketType,
    pub packet_id: Option<u16>,
    /// A PUBLISH's topic (empty when a v5 Topic Alias stands for it).
    pub topic: Option<String>,
    /// A SUBSCRIBE's or UNSUBSCRIBE's filters.
    pub filters: Vec<String>,
    pub qos: Option<u8>,
    /// CONNACK's code, an ack's, SUBACK's and UNSUBACK's per filter, DISCONNECT's, AUTH's.
    pub reason_codes: Vec<u8>,
    pub payload_size: Option<usize>,
    /// The first `PREVIEW_BYTES` of a PUBLISH's payload.
    pub payload_preview: Option<Bytes>,
}

impl PacketSummary {
    pub(super) fn of_type(packet_type: PacketType) -> PacketSummary {
        PacketSummary {
            packet_type,
            packet_id: None,
            topic: None,
            filters: Vec::new(),
            qos: None,
            reason_codes: Vec::new(),
            payload_size: None,
            payload_preview: None,
        }
    }

    pub fn of(packet: &Packet) -> PacketSummary {
        let mut summary = PacketSummary::of_type(packet.packet_type());
        match packet {
            Packet::Connect(_) | Packet::PingReq | Packet::PingResp => {}
            Packet::ConnAck(connack) => summary.reason_codes.push(connack.code),
            Packet::Publish(publish) => {
                summary.packet_id = (publish.packet_id != 0).then_some(publish.packet_id);
                summary.topic = Some(publish.topic.as_str().to_owned());
                summary.qos = Some(publish.qos as u8);
                summary.payload_size = Some(publish.payload.len());
                let preview = publish.payload.len().min(PREVIEW_BYTES);
                summary.payload_preview = Some(publish.payload.slice(..preview));
            }
            Packet::PubAck(ack)
            | Packet::PubRec(ack)
            | Packet::PubRel(ack)
            | Packet::PubComp(ack) => {
                summary.packet_id = Some(ack.packet_id);
                summary.reason_codes.push(ack.reason as u8);
            }
            Packet::Subscribe(subscribe) => {
                summary.packet_id = Some(subscribe.packet_id);
                summary.filters = subscribe
                    .filters
                    .iter()
                    .map(|(filter, _)| filter.as_str().to_owned())
                    .collect();
            }
            Packet::SubAck(ack) => {
                summary.packet_id = Some(ack.packet_id);
                summary.reason_codes = ack.reasons.iter().map(|r| *r as u8).collect();
            }
            Packet::Unsubscribe(unsubscribe) => {
                summary.packet_id = Some(unsubscribe.packet_id);
                summary.filters = unsubscribe
                    .filters
                    .iter()
                    .map(|filter| filter.as_str().to_owned())
                    .collect();
            }
            Packet::UnsubAck(ack) => {
                summary.packet_id = Some(ack.packet_id);
                summary.reason_codes = ack.reasons.iter().map(|r| *r as u8).collect();
            }
            Packet::Disconnect(packet) | Packet::Auth(packet) => {
                summary.reason_codes.push(packet.reason as u8)
            }
        }
        summary
    }
}

impl Engine {
    /// Trace `client_id`'s packets (`on`) or stop; applies to its live connection at
    /// once and to its later connections.
    pub fn trace(&mut self, client_id: &str, on: bool) {
        if on {
            self.traced.insert(client_id.into());
        } else {
            self.traced.remove(client_id);
        }
        let conn = self
            .by_client_id
            .get(client_id)
            .and_then(|&session| self.sessions[session as usize].as_ref())
            .and_then(|session| session.conn);
        if let Some(conn) = conn.and_then(|conn| self.conn_mut(conn)) {
            conn.traced = on;
        }
    }

    /// The client ids traced now, sorted.
    pub fn traced(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.traced.iter().map(|id| id.to_string()).collect();
        ids.sort();
        ids
    }

    /// Whether a connection for `client_id` starts traced (at CONNACK).
    pub(super) fn is_traced(&self, client_id: &str) -> bool {
        !self.traced.is_empty() && self.traced.contains(client_id)
    }

    /// Copy a traced connection's packet into a `Trace` event.
    pub(super) fn trace_packet(&mut self, conn: ConnId, inbound: bool, packet: PacketSummary) {
        let Some(session) = self.conn_mut(conn).and_then(|c| c.session()) else {
            return;
        };
        let client_id = self.client_id_of(session);
        self.events.push(Event::Trace {
            conn,
            client_id,
            inbound,
            packet,
        });
    }
}
