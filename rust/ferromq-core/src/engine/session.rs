//! A session: the state that outlives a network connection [MQTT-4.1].
//!
//! - `inflight`: outbound QoS 1/2 deliveries sent and not yet completed, by packet
//!   id, each with the sequence number it was sent with, so a reconnect resends
//!   them in their original order with DUP set [MQTT-4.4.0-1].
//! - `queue`: deliveries waiting for the window or for the client to return. Live
//!   messages go behind anything already queued, never around it: offline and
//!   online delivery share this one FIFO, which is what keeps the seam between
//!   them free of loss and duplicates (seed 002's bug mixed two cursors).
//! - `inbound_qos2`: packet ids of QoS 2 PUBLISHes received and not yet released;
//!   a PUBLISH that repeats one is not routed again [MQTT-4.3.3-9].
//!
//! Packet ids: `next_packet_id` walks 1..=65535 and skips ids still in flight, so an
//! id is never reused while in flight [MQTT-2.3.1-2]; the window is at most 65,535,
//! so a free id always exists.

use std::collections::{HashMap, HashSet};

use super::queue::DeliveryQueue;
use super::{ConnId, Outgoing};
use crate::codec::Will;

/// What an outbound QoS 1/2 delivery is waiting for.
#[derive(Debug)]
#[allow(clippy::enum_variant_names)] // named after the packets awaited
pub enum Awaiting {
    /// QoS 1 sent, waiting for PUBACK.
    PubAck(Outgoing),
    /// QoS 2 sent, waiting for PUBREC.
    PubRec(Outgoing),
    /// PUBREL sent, waiting for PUBCOMP: the message itself is done with.
    PubComp,
}

#[derive(Debug)]
pub struct Inflight {
    pub sequence: u64,
    pub awaiting: Awaiting,
}

/// A will held back by its Will Delay Interval.
#[derive(Debug)]
pub struct PendingWill {
    pub due_at: u64,
    pub will: Will,
}

#[derive(Debug)]
pub struct Session {
    pub client_id: Box<str>,
    pub conn: Option<ConnId>,
    /// Seconds the session survives its connection; 0 ends it with the connection,
    /// `u32::MAX` never expires.
    pub expiry_interval: u32,
    /// When a disconnected session expires (engine milliseconds).
    pub expires_at: Option<u64>,
    pub inflight: HashMap<u16, Inflight>,
    pub queue: DeliveryQueue,
    pub inbound_qos2: HashSet<u16>,
    pub pending_will: Option<PendingWill>,
    next_packet_id: u16,
    next_sequence: u64,
}

impl Session {
    pub fn new(client_id: &str, expiry_interval: u32) -> Session {
        Session {
            client_id: client_id.into(),
            conn: None,
            expiry_interval,
            expires_at: None,
            inflight: HashMap::new(),
            queue: DeliveryQueue::default(),
            inbound_qos2: HashSet::new(),
            pending_will: None,
            next_packet_id: 1,
            next_sequence: 0,
        }
    }

    /// A packet id not in flight. Callers keep `inflight.len() < 65535`.
    pub fn allocate_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if !self.inflight.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn record_inflight(&mut self, packet_id: u16, awaiting: Awaiting) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.inflight
            .insert(packet_id, Inflight { sequence, awaiting });
    }

    /// Packet ids in flight in the order they were first sent.
    pub fn inflight_in_order(&self) -> Vec<u16> {
        let mut ids: Vec<(u64, u16)> = self
            .inflight
            .iter()
            .map(|(id, entry)| (entry.sequence, *id))
            .collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_ids_skip_those_in_flight_and_wrap_past_zero() {
        let mut s = Session::new("c", 0);
        s.next_packet_id = u16::MAX - 1;
        s.record_inflight(u16::MAX, Awaiting::PubComp);
        s.record_inflight(1, Awaiting::PubComp);
        assert_eq!(s.allocate_packet_id(), u16::MAX - 1);
        assert_eq!(s.allocate_packet_id(), 2);
    }

    #[test]
    fn inflight_order_is_send_order() {
        let mut s = Session::new("c", 0);
        for id in [9, 3, 7] {
            s.record_inflight(id, Awaiting::PubComp);
        }
        assert_eq!(s.inflight_in_order(), vec![9, 3, 7]);
    }
}
