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
//! Packet ids: every QoS 1/2 delivery gets the next value of a sequence that only
//! grows, and its packet id is `sequence % 65535 + 1`, skipping ids still in
//! flight, so an id is never reused while in flight [MQTT-2.3.1-2]. The id is
//! fixed when the delivery is queued, so a store keeps it (TBMQ's layout: the
//! sequence is the sorted-set score that keeps order past a wrap, the id names the
//! stored message). The in-flight window plus the queue stay below 65,535
//! (config), so a queued delivery's id is never one still live.
//!
//! Persistence: a session with a non-zero expiry is `journaled`: its changes go to
//! the journal, and `subscriptions` keeps what it subscribed to for snapshots.

use std::collections::{HashMap, HashSet};

use super::acl::SessionAcl;
use super::memory::Ledger;
use super::queue::DeliveryQueue;
use super::{ConnId, Outgoing};
use crate::codec::Will;
use crate::durability::record::ClientType;

/// What an outbound QoS 1/2 delivery is waiting for.
#[derive(Debug)]
#[allow(clippy::enum_variant_names)] // named after the packets awaited
pub enum Awaiting {
    /// QoS 1 sent, waiting for PUBACK.
    PubAck(Outgoing),
    /// QoS 2 sent, waiting for PUBREC.
    PubRec(Outgoing),
    /// PUBREL sent (or waiting for `release_batch`, the journal batch holding its
    /// Release record; 0 when stored or not journaled), waiting for PUBCOMP: the
    /// message itself is done with.
    PubComp { release_batch: u64 },
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
    /// When the queue last moved: a delivery left it, or it stopped being empty
    /// (`memory`: a queue that has not moved for a while does not drain).
    pub queue_moved_at: u64,
    pub inbound_qos2: HashSet<u16>,
    /// A will waiting for its delay after the connection ended. Boxed: inline it cost
    /// every session 104 bytes.
    pub pending_will: Option<Box<PendingWill>>,
    pub client_type: ClientType,
    /// True once the journal holds this session.
    pub journaled: bool,
    /// Filter → (options byte, subscription id or 0), kept for journaled sessions.
    pub subscriptions: HashMap<Box<str>, (u8, u32)>,
    pub next_sequence: u64,
    /// Who the session is for the ACL rules, set at each CONNECT.
    pub acl: SessionAcl,
    /// The user name of its last CONNECT, for the admin API (`admin`).
    pub username: Option<Box<str>>,
    /// True while the store holds a will for it (a `Will` record).
    pub will_stored: bool,
    /// Per cluster node topic, the Kafka offset up to which this session holds what
    /// that topic carried (`engine/cluster.rs`): a record read again is not applied.
    pub applied: Vec<(Box<str>, u64)>,
    /// Adopted from a dead node (its id) while the adopter reads its topic, and the
    /// subscription topic position from which senders route to the adopter instead
    /// (`engine/cluster.rs`, "Adoption"). Boxed: set only while an adoption lasts,
    /// it would otherwise cost every session 16 bytes (`docs/memory.md`).
    pub adopted_from: Option<Box<(Box<str>, u64)>>,
    /// The node topic record it last took (`Engine::cluster_accepts`).
    pub accepted_arrival: u64,
}

impl Session {
    /// A session whose queue counts its bytes into `ledger` (`memory`).
    pub fn new(client_id: &str, expiry_interval: u32, ledger: Ledger) -> Session {
        Session {
            client_id: client_id.into(),
            conn: None,
            expiry_interval,
            expires_at: None,
            inflight: HashMap::new(),
            queue: DeliveryQueue::new(ledger),
            queue_moved_at: 0,
            inbound_qos2: HashSet::new(),
            pending_will: None,
            client_type: ClientType::Device,
            journaled: false,
            subscriptions: HashMap::new(),
            next_sequence: 0,
            acl: SessionAcl::default(),
            username: None,
            will_stored: false,
            applied: Vec::new(),
            adopted_from: None,
            accepted_arrival: 0,
        }
    }

    /// The next delivery sequence and its packet id, one not in flight. Callers keep
    /// `inflight.len() < 65535`.
    pub fn assign_packet_id(&mut self) -> (u64, u16) {
        loop {
            let sequence = self.next_sequence;
            self.next_sequence += 1;
            let id = packet_id_of(sequence);
            if !self.inflight.contains_key(&id) {
                return (sequence, id);
            }
        }
    }

    pub fn record_inflight(&mut self, packet_id: u16, sequence: u64, awaiting: Awaiting) {
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

/// The packet id of a delivery sequence number: 1..=65535, wrapping.
pub fn packet_id_of(sequence: u64) -> u16 {
    (sequence % 65_535) as u16 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_ids_skip_those_in_flight_and_wrap_past_zero() {
        let mut s = Session::new("c", 0, Ledger::default());
        s.next_sequence = 65_533;
        s.record_inflight(u16::MAX, 1, Awaiting::PubComp { release_batch: 0 });
        s.record_inflight(1, 2, Awaiting::PubComp { release_batch: 0 });
        assert_eq!(s.assign_packet_id(), (65_533, u16::MAX - 1));
        assert_eq!(s.assign_packet_id(), (65_536, 2));
    }

    #[test]
    fn inflight_order_is_send_order() {
        let mut s = Session::new("c", 0, Ledger::default());
        for (sequence, id) in [9, 3, 7].into_iter().enumerate() {
            s.record_inflight(id, sequence as u64, Awaiting::PubComp { release_batch: 0 });
        }
        assert_eq!(s.inflight_in_order(), vec![9, 3, 7]);
    }
}
