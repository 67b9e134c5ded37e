//! The engine's side of a cluster (issue 17, docs/cluster.md): other nodes are slots
//! of the shards' bus (`shards.rs`) past the node's own shards, and Kafka carries
//! what the rings carry between shards. What differs is written here:
//!
//! - **Subscriptions go through one compacted topic**, not record by record to each
//!   node. The engine counts this node's subscribers per filter ([`ClusterIndex`])
//!   and reports only the changes that matter to others: a filter's first subscriber
//!   (`present`) and its last one leaving (`absent`). Python turns them into the
//!   topic's keys (`<node>\0<filter>`) and applies every node's keys with
//!   [`Engine::peer_subscription`], which holds each as that node's pseudo-session in
//!   the index, as a shard's filters are held.
//! - **Routing is the shards'**: a PUBLISH matched here goes once to each node with a
//!   matching filter, as `MESSAGE` + `ROUTE` (or `ROUTE_SHARED`) records in that
//!   node's outbox, which Python takes once per tick ([`Engine::take_peer`]) and
//!   produces to the node's topic as one Kafka record.
//! - **Rounds are Kafka's acknowledgement.** A QoS 1/2 message routed to a node makes
//!   the PUBACK/PUBREC it caused wait for the round carrying it, which Python confirms
//!   ([`Engine::peer_confirmed`]) once Kafka has the record (acks=all): from then on
//!   the node's topic holds it for whoever consumes that topic (the node, or the
//!   survivor that adopted it), so a dead node stalls nobody. A SUBACK waits for the
//!   subscription topic's round the same way.
//! - **Sessions move between nodes** (`cluster/ownership.py`): the node a client
//!   reaches claims its client id in Redis; the previous owner [`Engine::evict`]s the
//!   session (0x8E to its connection, the session dropped from memory without
//!   journaling its end), waits until the store has everything journaled for it, and
//!   the new owner restores it from Redis (`Engine::restore`).

use std::collections::HashMap;

use bytes::Bytes;

use crate::codec::ReasonCode;

use super::lifecycle::DisconnectReason;
use super::shards::Shards;
use super::Engine;

/// This node's subscribers per filter, and the changes other nodes have not heard of.
#[derive(Debug)]
pub(super) struct ClusterIndex {
    /// The slot whose rounds are the subscription topic's (SUBACKs wait for it).
    pub(super) slot: u16,
    filters: HashMap<Box<str>, u32>,
    /// (filter, present) in the order they happened; a later change of a filter
    /// replaces nothing: the topic keeps the last.
    changes: Vec<(Box<str>, bool)>,
}

impl ClusterIndex {
    pub(super) fn gained(&mut self, filter: &str) {
        let count = self.filters.entry(filter.into()).or_default();
        *count += 1;
        if *count == 1 {
            self.changes.push((filter.into(), true));
        }
    }

    pub(super) fn lost(&mut self, filter: &str) {
        let Some(count) = self.filters.get_mut(filter) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.filters.remove(filter);
            self.changes.push((filter.into(), false));
        }
    }
}

impl Engine {
    /// Make this engine a node of a cluster; other nodes come with [`Engine::add_peer`].
    /// Subscriptions made from now on are counted for the subscription topic, and
    /// those already held are reported as present.
    pub fn enable_cluster(&mut self) {
        let shards = self.shards.get_or_insert_with(|| Shards::new(0, 1));
        if shards.cluster.is_some() {
            return;
        }
        let slot = shards.add_slot();
        let mut index = ClusterIndex {
            slot,
            filters: HashMap::new(),
            changes: Vec::new(),
        };
        for (session, state) in self.sessions.iter().enumerate() {
            if state.is_some() {
                for filter in self.index.client_filters(session as u32) {
                    index.gained(&filter);
                }
            }
        }
        shards.cluster = Some(index);
    }

    /// A slot for another node of the cluster (its pseudo-session in the index, its
    /// outbox, its rounds).
    pub fn add_peer(&mut self) -> u16 {
        self.enable_cluster();
        self.shards.as_mut().expect("enabled").add_slot()
    }

    /// The records for node `slot` since the last call, and the round that carries
    /// them (0: no QoS 1/2 message among them); None when there are none.
    pub fn take_peer(&mut self, slot: u16) -> Option<(Bytes, u64)> {
        let shards = self.shards.as_mut()?;
        let at = usize::from(slot);
        let (_, records) = shards.outboxes.get_mut(at)?.take()?;
        let round = if shards.needs_round[at] {
            let round = shards.next_round;
            shards.next_round += 1;
            shards.needs_round[at] = false;
            shards.sent_round[at] = round;
            round
        } else {
            0
        };
        Some((records, round))
    }

    /// Kafka has round `round` of slot `slot` (a node's topic, or the subscription
    /// topic): the acknowledgements and SUBACKs waiting for it go out.
    pub fn peer_confirmed(&mut self, slot: u16, round: u64) {
        if round != 0 {
            self.round_confirmed(slot, round);
        }
    }

    /// Node `slot` holds `filter` (`present`) or no longer does, as its key in the
    /// subscription topic says. Idempotent: the topic may be read again.
    pub fn peer_subscription(&mut self, slot: u16, filter: &str, present: bool) {
        let held = self
            .shards
            .as_ref()
            .is_some_and(|shards| shards.remote.contains_key(&(slot, filter.into())));
        if present && !held {
            self.remote_subscribe(slot, filter.to_owned());
        } else if !present && held {
            self.remote_unsubscribe(slot, filter);
        }
    }

    /// Forget every filter node `slot` held (it was adopted by another node, whose
    /// own keys now stand for its sessions).
    pub fn peer_reset(&mut self, slot: u16) {
        self.remote_reset(slot);
    }

    /// The subscription changes other nodes have not heard of, and the round the
    /// SUBACKs waiting for them need; None when there is nothing to send or confirm.
    pub fn take_cluster_subscriptions(&mut self) -> Option<(Vec<(String, bool)>, u64)> {
        let shards = self.shards.as_mut()?;
        let cluster = shards.cluster.as_mut()?;
        let at = usize::from(cluster.slot);
        if cluster.changes.is_empty() && !shards.needs_round[at] {
            return None;
        }
        let changes = std::mem::take(&mut cluster.changes)
            .into_iter()
            .map(|(filter, present)| (filter.into_string(), present))
            .collect();
        let round = if shards.needs_round[at] {
            let round = shards.next_round;
            shards.next_round += 1;
            shards.needs_round[at] = false;
            shards.sent_round[at] = round;
            round
        } else {
            0
        };
        Some((changes, round))
    }

    /// The slot whose rounds are the subscription topic's (0 when not clustered).
    pub fn cluster_slot(&self) -> u16 {
        self.shards
            .as_ref()
            .and_then(|shards| shards.cluster.as_ref())
            .map_or(0, |cluster| cluster.slot)
    }

    /// Every filter this node has a subscriber of: what its keys in the subscription
    /// topic must say when it (re)joins.
    pub fn cluster_filters(&self) -> Vec<String> {
        self.shards
            .as_ref()
            .and_then(|shards| shards.cluster.as_ref())
            .map(|cluster| cluster.filters.keys().map(|f| f.to_string()).collect())
            .unwrap_or_default()
    }

    /// Filters node `slot` holds in this node's index.
    pub fn peer_filters(&self, slot: u16) -> usize {
        self.shards.as_ref().map_or(0, |shards| {
            shards.remote.keys().filter(|(s, _)| *s == slot).count()
        })
    }

    /// Another node claimed `client_id`: its connection here (if any) is closed with
    /// 0x8E Session taken over [MQTT-3.1.4-3], and its session leaves this node
    /// without its end being journaled, so the store keeps it for the new owner
    /// (a session that ends with its connection ends as usual). Returns the journal
    /// batch the store must confirm before the new owner reads the session (0: none
    /// is pending), or None when there is no such session here.
    pub fn evict(&mut self, client_id: &str, now: u64) -> Option<u64> {
        let session = self.by_client_id.get(client_id).copied()?;
        if let Some(conn) = self.sessions[session as usize].as_ref().and_then(|s| s.conn) {
            self.disconnect_with(conn, ReasonCode::SessionTakenOver);
            self.close_connection(conn, DisconnectReason::TakenOver, now);
        }
        if let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::take)
        {
            self.free_sessions.push(session);
            self.by_client_id.remove(&state.client_id);
            self.shards_session_ended(session, &state.client_id);
            self.index.remove_client(session);
            self.forget_removed_groups();
        }
        Some(self.journal.unconfirmed_batch().unwrap_or(0))
    }

    /// The journal batch that holds everything journaled so far (0: the store has it
    /// all): records applied now are stored once `journal_confirmed` says so.
    pub fn journal_mark(&self) -> u64 {
        self.journal.unconfirmed_batch().unwrap_or(0)
    }

    /// Whether the store has confirmed journal batch `batch` (as `evict` or
    /// `journal_mark` gave it).
    pub fn journal_confirmed(&self, batch: u64) -> bool {
        !self.journal.has_unconfirmed_at(batch)
    }

    /// Client ids the broker assigns start with `prefix` (a node id keeps them apart
    /// across the cluster).
    pub fn set_assigned_id_prefix(&mut self, prefix: &str) {
        self.assigned_id_prefix = prefix.into();
    }
}
