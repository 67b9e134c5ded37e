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
//!   session (0x8E to its connection; what it had queued and in flight is in the store,
//!   which the new owner restores it from, `Engine::restore`), waits until the store
//!   has everything journaled for it, and answers.
//! - **A moved session leaves a forwarding stub** for a grace period: the old owner
//!   keeps its subscriptions (so its key in the subscription topic stays, and other
//!   nodes keep routing its filters here until they have read the new owner's key)
//!   and queues what matches, unjournaled; when the grace period ends the queue goes
//!   to the new owner as `ENQUEUE` records for that client, delivered there to the
//!   session alone, and the stub ends. So nothing published while the move spreads
//!   through the subscription topic is lost. Nor is anything delivered twice: every
//!   delivery carries how far into the subscription topic the node that matched it
//!   had read (`Outgoing::seen`: the batch's sender's, or this node's own), the new
//!   owner announces the session's filters again once it restored it, and the stub
//!   forwards only what was matched before that announcement was read, which the
//!   new owner cannot have had directly.
//! - **Exactly once per record.** A node topic record is applied as one batch named
//!   by its topic (the node id) and Kafka offset ([`Engine::peer_receive`]). Each
//!   session keeps, per node topic, the offset of the last record it took, journaled
//!   (`Applied`) with the deliveries that record brought it, which the Redis store
//!   writes in the same call; a record at or below it is skipped, so a topic read
//!   again (a restart, an adopter) delivers nothing twice. A QoS 1/2 delivery to a
//!   journaled session waits for that batch before it is sent (`held_routed`): a
//!   client never holds what the store may not.
//! - **Crossing QoS 2.** A journaled publisher's QoS 2 message crosses to another
//!   node as it crosses to a shard (`shards.rs`, "Exactly once across the bus"): the
//!   store batch holding its packet id holds an `Outbox` record naming the node (in
//!   the publisher's `{c}_outbox`, written before the id), and the route goes to
//!   Kafka only once that batch is stored. So a store without the id has no copy
//!   anywhere (the retransmission is new), and one with it has the route. Each
//!   Kafka record lists the kept routes it carries, `(publisher, route)`, in a
//!   header ([`Engine::take_crossings`]); once Kafka has the record the route is
//!   dropped from the store (`OutboxDone`, at the round's confirmation). Whoever
//!   restores the publisher (an adopter, the node itself at start, a node it moved
//!   to) finds the routes its store still keeps ([`Engine::restored_crossings`])
//!   and, for each, whether the destination node's topic holds it already (a header
//!   naming it): if so it is dropped ([`Engine::crossing_settled`]), if not it is sent
//!   again ([`Engine::crossing_records`]), once, to that topic, whose stored offsets
//!   make it arrive once. A node that hands a session over alive first waits until
//!   its routes are settled ([`Engine::crossings_pending`]).
//! - **Adoption.** The adopter of a dead node announces the restored sessions'
//!   filters, then tombstones the dead node's keys; the position after them is the
//!   marker. A sender that had read that far routed a session's messages to the
//!   adopter, one that had not to the dead node's topic, and one in between both
//!   ways: so until [`Engine::adoption_done`] an adopted session takes the dead
//!   node's records matched before the marker and others from it on
//!   ([`Engine::adopt_sessions`]). The dead node's records are matched here again,
//!   but only the sessions adopted from it take them: every other session (this
//!   node's own, or one adopted from another dead node, a sibling shard of the same
//!   machine) had its copy routed to it directly.

use std::collections::HashMap;

use bytes::Bytes;

use crate::codec::ReasonCode;

use std::sync::Arc;

use crate::durability::record::{Journal, KeptRoute};

use super::lifecycle::DisconnectReason;
use super::message::Message;
use super::shards::{Shards, Unconfirmed};
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
    /// Forwarding stubs of moved sessions.
    stubs: Vec<Stub>,
    /// How far this node has read the subscription topic (Python tells it).
    seen: u64,
    /// The offset of each other node's latest `present` key, by (slot, filter).
    key_offsets: HashMap<(u16, Box<str>), u64>,
    /// Per node slot, the kept routes its outbox carries ("Crossing QoS 2"), as
    /// [`Engine::take_crossings`] gives them.
    crossings: HashMap<u16, Vec<u8>>,
    /// Each other node's id, by slot.
    names: HashMap<u16, Box<str>>,
    /// Kept routes to other nodes restored from the store, by route number, until
    /// Python settles them ("Crossing QoS 2").
    restored: HashMap<u64, RestoredCrossing>,
    /// The dead nodes whose topics this node reads as their adopter, from
    /// [`Engine::adopt_sessions`] to [`Engine::adoption_done`]: only the sessions
    /// adopted from one take its records ("Adoption").
    adopting: Vec<Box<str>>,
}

/// One entry of a record's crossings: `publisher (u16 LE length, UTF-8) | route u64 LE`.
fn put_crossing(out: &mut Vec<u8>, publisher: &str, route: u64) {
    out.extend_from_slice(&(publisher.len() as u16).to_le_bytes());
    out.extend_from_slice(publisher.as_bytes());
    out.extend_from_slice(&route.to_le_bytes());
}

/// The (publisher, route) entries of a record's crossings, as
/// [`Engine::take_crossings`] gives them (a cut-short tail is ignored).
pub fn crossing_entries(mut listed: &[u8]) -> Vec<(String, u64)> {
    let mut entries = Vec::new();
    while listed.len() >= 2 {
        let end = 2 + usize::from(u16::from_le_bytes([listed[0], listed[1]]));
        let Some(route) = listed.get(end..end + 8) else {
            break;
        };
        let publisher = String::from_utf8_lossy(&listed[2..end]).into_owned();
        entries.push((
            publisher,
            u64::from_le_bytes(route.try_into().expect("8 bytes")),
        ));
        listed = &listed[end + 8..];
    }
    entries
}

/// A journaled publisher's QoS 2 route to another node, restored from the store.
#[derive(Debug)]
struct RestoredCrossing {
    publisher: Box<str>,
    to_node: Box<str>,
    share_filter: Option<Box<str>>,
    message: Arc<Message>,
}

#[derive(Debug)]
struct Stub {
    until: u64,
    session: u32,
    client: Box<str>,
    to: u16,
    /// This node's read position when the session moved: the new owner's keys for it
    /// are written after.
    seen: u64,
}

impl ClusterIndex {
    pub(super) fn gained(&mut self, filter: &str) {
        let count = self.filters.entry(filter.into()).or_default();
        *count += 1;
        if *count == 1 {
            self.changes.push((filter.into(), true));
        }
    }

    /// A session restored here holds `filter`: announced again even when other
    /// sessions here hold it already, so other nodes' reading of it marks when they
    /// route to the restored session (`Stub`).
    fn restored(&mut self, filter: &str) {
        if self.filters.get(filter).is_some_and(|&count| count > 1) {
            self.changes.push((filter.into(), true));
        }
    }

    /// Kept route `entry` went into node `slot`'s outbox.
    pub(super) fn note_crossing(&mut self, slot: u16, entry: &Unconfirmed) {
        let Some(publisher) = entry.publisher.as_deref() else {
            return;
        };
        put_crossing(
            self.crossings.entry(slot).or_default(),
            publisher,
            entry.route,
        );
    }

    /// Node `slot`'s id.
    pub(super) fn node_name(&self, slot: u16) -> Option<&str> {
        self.names.get(&slot).map(AsRef::as_ref)
    }

    pub(super) fn restore_crossing(&mut self, kept: &KeptRoute, message: Arc<Message>) {
        let Some(to_node) = kept.to_node else {
            return;
        };
        self.restored.insert(
            kept.route,
            RestoredCrossing {
                publisher: kept.publisher.into(),
                to_node: to_node.into(),
                share_filter: kept.share_filter.map(Into::into),
                message,
            },
        );
    }

    pub(super) fn forget_crossing(&mut self, route: u64) {
        self.restored.remove(&route);
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
            stubs: Vec::new(),
            seen: 0,
            key_offsets: HashMap::new(),
            crossings: HashMap::new(),
            names: HashMap::new(),
            restored: HashMap::new(),
            adopting: Vec::new(),
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

    /// A slot for node `name` of the cluster (its pseudo-session in the index, its
    /// outbox, its rounds).
    pub fn add_peer(&mut self, name: &str) -> u16 {
        self.enable_cluster();
        let shards = self.shards.as_mut().expect("enabled");
        let slot = shards.add_slot();
        if let Some(cluster) = shards.cluster.as_mut() {
            cluster.names.insert(slot, name.into());
        }
        slot
    }

    /// The records for node `slot` since the last call, and the round that carries
    /// them (0: no QoS 1/2 message among them); None when there are none.
    pub fn take_peer(&mut self, slot: u16) -> Option<(Bytes, u64)> {
        let shards = self.shards.as_mut()?;
        let at = usize::from(slot);
        let (_, records) = shards.outboxes.get_mut(at)?.take()?;
        Some((records, shards.start_round(slot)))
    }

    /// The kept routes the records [`Engine::take_peer`] just took for node `slot`
    /// carry ("Crossing QoS 2"): `publisher (u16 LE length, UTF-8) | route u64 LE`,
    /// one after another; None when they carry none.
    pub fn take_crossings(&mut self, slot: u16) -> Option<Vec<u8>> {
        self.cluster_mut()?.crossings.remove(&slot)
    }

    /// A journaled publisher's QoS 2 PUBLISH is being routed: its routes to other
    /// shards and nodes are kept ("Crossing QoS 2") until [`Engine::end_crossing`].
    pub(super) fn begin_crossing(&mut self, session: u32) {
        if let Some(shards) = self.shards.as_mut() {
            shards.publishing = Some(session);
        }
    }

    pub(super) fn end_crossing(&mut self) {
        if let Some(shards) = self.shards.as_mut() {
            shards.publishing = None;
        }
    }

    /// The kept routes to other nodes that restored sessions' stores hold and that
    /// are not settled yet: (publisher, route, destination node id) each
    /// ("Crossing QoS 2"). Each is settled with [`Engine::crossing_settled`], after
    /// being sent again ([`Engine::crossing_records`]) if Kafka did not have it.
    pub fn restored_crossings(&self) -> Vec<(String, u64, String)> {
        let Some(cluster) = self.shards.as_ref().and_then(|s| s.cluster.as_ref()) else {
            return Vec::new();
        };
        let mut restored: Vec<_> = cluster
            .restored
            .iter()
            .map(|(&route, c)| (c.publisher.to_string(), route, c.to_node.to_string()))
            .collect();
        restored.sort_by_key(|(_, route, _)| *route);
        restored
    }

    /// Restored route `route` as node records (what [`Engine::take_peer`] gives) and
    /// their crossings (what [`Engine::take_crossings`] gives), to be produced to its
    /// destination node's topic again.
    pub fn crossing_records(&self, route: u64) -> Option<(Bytes, Vec<u8>)> {
        let cluster = self.shards.as_ref()?.cluster.as_ref()?;
        let crossing = cluster.restored.get(&route)?;
        let mut records = Journal::for_bus();
        let share_filter = crossing.share_filter.as_deref();
        records.route(&crossing.message, route, share_filter, self.wall_offset);
        let mut listed = Vec::new();
        put_crossing(&mut listed, &crossing.publisher, route);
        records.take().map(|(_, records)| (records, listed))
    }

    /// Restored route `route` is in its destination's topic (it was, or was sent
    /// again): the store drops it (`OutboxDone`).
    pub fn crossing_settled(&mut self, route: u64) {
        let Some(crossing) = self.cluster_mut().and_then(|c| c.restored.remove(&route)) else {
            return;
        };
        self.journal.outbox_done(&crossing.publisher, route);
    }

    /// Whether `publisher` has QoS 2 routes to other nodes that Kafka has not
    /// confirmed yet: a node handing its session over waits for them (and then
    /// for the store to drop them), so the new owner has none to settle.
    pub fn crossings_pending(&self, publisher: &str) -> bool {
        self.shards.as_ref().is_some_and(|shards| {
            shards.unconfirmed.iter().enumerate().any(|(slot, queue)| {
                shards.is_node(slot as u16)
                    && queue
                        .iter()
                        .any(|entry| entry.publisher.as_deref() == Some(publisher))
            })
        })
    }

    /// Kafka has round `round` of slot `slot` (a node's topic, or the subscription
    /// topic): the acknowledgements and SUBACKs waiting for it go out.
    pub fn peer_confirmed(&mut self, slot: u16, round: u64) {
        if round != 0 {
            self.round_confirmed(slot, round);
        }
    }

    /// Node `slot` holds `filter` (`present`) or no longer does, as its key at
    /// `offset` in the subscription topic says. Idempotent: the topic may be read again.
    pub fn peer_subscription(&mut self, slot: u16, filter: &str, present: bool, offset: u64) {
        if let Some(cluster) = self.cluster_mut() {
            if present {
                cluster.key_offsets.insert((slot, filter.into()), offset);
            } else {
                cluster.key_offsets.remove(&(slot, filter.into()));
            }
        }
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

    /// This node has read the subscription topic up to `position` (the next offset).
    pub fn set_subscriptions_seen(&mut self, position: u64) {
        if let Some(cluster) = self.cluster_mut() {
            cluster.seen = position;
        }
    }

    /// Apply a batch node `slot` sent when it had read the subscription topic up to
    /// `seen` (as `bus_receive`): the record at Kafka offset `offset` of node
    /// `topic`'s topic (this node's own, or a dead one's it adopted). A session takes
    /// it unless it holds that offset already ("Exactly once" in the module header).
    pub fn peer_receive(
        &mut self,
        slot: u16,
        records: Bytes,
        topic: &str,
        offset: u64,
        seen: u64,
        now: u64,
    ) -> Result<usize, crate::durability::record::JournalError> {
        let adopted = self
            .cluster()
            .is_some_and(|cluster| cluster.adopting.iter().any(|dead| **dead == *topic));
        self.begin_arrival(topic.into(), offset, Some((seen, adopted)));
        let applied = self.bus_receive(slot, records, now);
        self.end_arrival();
        applied
    }

    /// Sessions restored from dead node `dead`'s store (`clients`): until
    /// [`Engine::adoption_done`], they take that node's topic records matched before
    /// subscription topic position `marker`, and other records matched from it on
    /// (module header, "Adoption").
    pub fn adopt_sessions(&mut self, clients: &[String], dead: &str, marker: u64) {
        if let Some(cluster) = self.cluster_mut() {
            if !cluster.adopting.iter().any(|node| **node == *dead) {
                cluster.adopting.push(dead.into());
            }
        }
        for client in clients {
            let Some(&session) = self.by_client_id.get(client.as_str()) else {
                continue;
            };
            if let Some(state) = self.sessions[session as usize].as_mut() {
                state.adopted_from = Some(Box::new((dead.into(), marker)));
            }
        }
    }

    /// The adopter finished reading dead node `dead`'s topic.
    pub fn adoption_done(&mut self, dead: &str) {
        if let Some(cluster) = self.cluster_mut() {
            cluster.adopting.retain(|node| **node != *dead);
        }
        for state in self.sessions.iter_mut().flatten() {
            if state
                .adopted_from
                .as_deref()
                .is_some_and(|(node, _)| **node == *dead)
            {
                state.adopted_from = None;
            }
        }
    }

    /// How far into the subscription topic the node matching what is delivered now
    /// had read (0 when not clustered).
    pub(super) fn subscriptions_seen(&self) -> u64 {
        self.shards
            .as_ref()
            .and_then(|shards| shards.cluster.as_ref())
            .map_or(0, |cluster| {
                self.arriving()
                    .and_then(|(arriving, _)| arriving.seen)
                    .map_or(cluster.seen, |(seen, _)| seen)
            })
    }

    /// A restored session's filter (`persist::install`).
    pub(super) fn cluster_restored(&mut self, filter: &str) {
        if let Some(cluster) = self.cluster_mut() {
            cluster.restored(filter);
        }
    }

    fn cluster(&self) -> Option<&ClusterIndex> {
        self.shards.as_ref().and_then(|s| s.cluster.as_ref())
    }

    fn cluster_mut(&mut self) -> Option<&mut ClusterIndex> {
        self.shards.as_mut().and_then(|s| s.cluster.as_mut())
    }

    /// The subscription changes other nodes have not heard of, and the round the
    /// SUBACKs waiting for them need; None when there is nothing to send or confirm.
    pub fn take_cluster_subscriptions(&mut self) -> Option<(Vec<(String, bool)>, u64)> {
        let shards = self.shards.as_mut()?;
        let cluster = shards.cluster.as_mut()?;
        let slot = cluster.slot;
        if cluster.changes.is_empty() && !shards.needs_round[usize::from(slot)] {
            return None;
        }
        let changes = std::mem::take(&mut cluster.changes)
            .into_iter()
            .map(|(filter, present)| (filter.into_string(), present))
            .collect();
        Some((changes, shards.start_round(slot)))
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

    /// Another node (slot `to`) claimed `client_id`: its connection here (if any) is
    /// closed with 0x8E Session taken over [MQTT-3.1.4-3]. A session that ends with its
    /// connection ends as usual; a persistent one becomes a forwarding stub for
    /// `grace_ms` (module header), its queue and in-flight window left to the store
    /// for the new owner. Returns the journal batch the store must confirm before the
    /// new owner reads the session (0: none is pending), or None when there is no such
    /// session here.
    pub fn evict(&mut self, client_id: &str, to: u16, grace_ms: u64, now: u64) -> Option<u64> {
        let session = self.by_client_id.get(client_id).copied()?;
        if let Some(conn) = self.sessions[session as usize]
            .as_ref()
            .and_then(|s| s.conn)
        {
            self.disconnect_with(conn, ReasonCode::SessionTakenOver);
            self.close_connection(conn, DisconnectReason::TakenOver, now);
        }
        let mark = self.journal.unconfirmed_batch().unwrap_or(0);
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return Some(mark);
        };
        // The new owner reads these from the store; the stub starts empty.
        drop(state.queue.take_where(|_| true));
        state.inflight.clear();
        state.inbound_qos2.clear();
        state.pending_will = None;
        state.journaled = false;
        state.expires_at = None;
        let client = state.client_id.clone();
        if let Some(cluster) = self.cluster_mut() {
            let seen = cluster.seen;
            cluster.stubs.push(Stub {
                until: now + grace_ms,
                session,
                client,
                to,
                seen,
            });
        }
        Some(mark)
    }

    /// Stubs whose grace period ended: their queues go to the new owners, they end.
    pub(super) fn forward_moved(&mut self, now: u64) {
        let Some(cluster) = self.cluster_mut() else {
            return;
        };
        if cluster.stubs.iter().all(|stub| stub.until > now) {
            return;
        }
        let (due, kept) = std::mem::take(&mut cluster.stubs)
            .into_iter()
            .partition::<Vec<_>, _>(|stub| stub.until <= now);
        cluster.stubs = kept;
        for stub in due {
            let is_stub = self.sessions[stub.session as usize]
                .as_ref()
                .is_some_and(|s| s.client_id == stub.client && s.conn.is_none() && !s.journaled);
            if is_stub {
                self.forward_stub(&stub);
            }
        }
    }

    /// Where the new owner's announcement of the stub's filters is in the
    /// subscription topic: deliveries matched by a node that had read it reached the
    /// new owner directly. `u64::MAX` when one is not known (all are forwarded).
    fn announced_at(&self, stub: &Stub) -> u64 {
        let Some(cluster) = self.shards.as_ref().and_then(|s| s.cluster.as_ref()) else {
            return u64::MAX;
        };
        let mut latest = 0;
        for filter in self.index.client_filters(stub.session) {
            match cluster.key_offsets.get(&(stub.to, filter.as_str().into())) {
                Some(&offset) if offset >= stub.seen => latest = latest.max(offset),
                _ => return u64::MAX,
            }
        }
        latest
    }

    fn forward_stub(&mut self, stub: &Stub) {
        let announced = self.announced_at(stub);
        let (session, to) = (stub.session, stub.to);
        let wall_offset = self.wall_offset;
        let Some(mut state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::take)
        else {
            return;
        };
        let queued = state.queue.take_where(|_| true);
        if let Some(outbox) = self
            .shards
            .as_mut()
            .and_then(|shards| shards.outboxes.get_mut(usize::from(to)))
        {
            // Matched by a node that had read the announcement (its position is past
            // the announcement's offset): that node routed it to the new owner too.
            for out in queued.iter().filter(|out| out.seen <= announced) {
                outbox.enqueue(
                    &state.client_id,
                    0,
                    0,
                    &out.message,
                    out.qos,
                    out.retain,
                    &out.subscription_ids,
                    wall_offset,
                );
            }
        }
        self.free_sessions.push(session);
        self.by_client_id.remove(&state.client_id);
        self.shards_session_ended(session, &state.client_id);
        self.index.remove_client(session);
        self.forget_removed_groups();
    }

    /// The session `client_id` here was restored or reconnected: it is no stub.
    pub(super) fn cancel_stub(&mut self, session: u32) {
        if let Some(cluster) = self.shards.as_mut().and_then(|s| s.cluster.as_mut()) {
            cluster.stubs.retain(|stub| stub.session != session);
        }
    }

    /// Another node forwarded a moved session's delivery (`forward_stub`): it goes to
    /// that session alone, if it is here.
    pub(super) fn receive_forwarded(&mut self, mut out: super::Outgoing, client: &str, now: u64) {
        match self.by_client_id.get(client).copied() {
            Some(session) if self.accepts_arrival(session) => {
                out.message = self.held_routed(out.message, std::iter::once(session));
                self.deliver(session, out, now);
            }
            Some(_) => {}
            None => self
                .stats
                .count_drop(super::stats::DropReason::SessionMoved, 1),
        }
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
