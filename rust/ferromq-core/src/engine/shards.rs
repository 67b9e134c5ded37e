//! The engine's side of a node's shards (issue 16, `docs/shards.md`): what it sends
//! other shards and what it makes of what they send. Records are the journal's own
//! (`durability/record.rs`), written to one outbox per shard that the IO layer copies
//! into that shard's bus ring once per tick (`take_bus`), and read back by `bus_receive`.
//!
//! - **Subscriptions are replicated.** A filter a local session gains or loses goes to
//!   every other shard as a `SUBSCRIBE` / `UNSUBSCRIBE` record. The receiver counts
//!   subscribers per (shard, filter) and holds each such filter once in its index, for a
//!   pseudo-session that stands for the shard ([`remote_shard`]).
//! - **A PUBLISH is matched where it arrives** (`publish::fan_out`): a match on a
//!   shard's pseudo-session becomes one `MESSAGE` + `ROUTE` record to that shard, whatever
//!   the number of its subscribers; the receiver delivers to its own sessions only.
//! - **Retained messages are replicated** to every shard (`MESSAGE` + `RETAIN`, or a
//!   clear), so a SUBSCRIBE anywhere finds them locally.
//!
//! - **Shared groups span shards.** A `$share/` filter is replicated like any other, so
//!   a shard with members of a group is one pseudo-member of it everywhere else. When
//!   the group's pick (or a redistribution) falls on that pseudo-member, the message
//!   goes there once as `ROUTE_SHARED`, and one of that shard's online members takes
//!   it by the group's strategy; with none online there, that shard's group queue
//!   holds it until one of its members returns.
//! - **A (re)started shard** sends every other `SYNC` (replace what you hold from me),
//!   its subscriptions, then `HELLO` (send me yours), so both sides' indexes agree
//!   after a shard process is restarted (`bus_hello`).
//!
//! - **Acknowledgements wait for the receiving shard's store.** A QoS 1/2 message
//!   routed to another shard makes the PUBACK/PUBREC given after it wait (in
//!   the barrier, like the waits for this shard's own store) for a *round*: the next
//!   batch to that shard ends with `BUS_ROUND(n)`, and the receiver answers
//!   `BUS_ACK(n)` once its own store has confirmed the batch that was pending when it
//!   applied the round (at once when nothing was). So `kill -9` of the node loses no
//!   acknowledged message, whichever shard holds its subscribers.
//!
//! - **Exactly once across the bus.** Every route carries a number (`route`) that
//!   grows across the sender's restarts (it starts from the wall clock's milliseconds
//!   << 20), and the receiver applies each route from a shard once: it keeps the last
//!   one applied per shard (`applied`) and journals it (`BusCursor`) with the records
//!   the routes made, so a route sent again after a crash is dropped. A QoS 1/2 route
//!   stays in the sender's `unconfirmed` queue for its slot until the receiver
//!   confirms its round; when the receiver restarts (`HELLO`) they are sent again
//!   instead of being given up, since the dead process may have read them from its
//!   ring without storing them. A QoS 2 message of a journaled publisher crosses only
//!   once the sender's batch holding it (an `Outbox` record, with the publisher's
//!   packet id) is stored, like its local deliveries: a crash before leaves no copy
//!   anywhere, and after it the restarted sender sends it again from its journal. A
//!   restarted receiver ignores routes and rounds from a shard until that shard's
//!   `SYNC` (the routes before it are sent again after it, the rounds renumbered).
//!   A store that applies a batch per client rather than whole (Redis,
//!   `Engine::set_store_per_client`) cannot store one cursor with every session's
//!   deliveries: there each session keeps its own cursor of each shard
//!   (`arrival.rs`), and the store keeps the `Outbox` with the publisher's keys,
//!   written before its packet id, and drops it when the receiver confirms the route
//!   (`OutboxDone`). A route to a shared group's member is picked again when sent
//!   again, so there it is at least once.
//!
//! Sessions never move between shards: a client id has one owner shard
//! ([`crate::bus::shard_of`]) and connections are handed to it before their CONNECT
//! reaches an engine (docs/shards.md, "Sessions"). A SUBACK waits the same
//! way for a round every other shard confirms, so a PUBLISH on any shard after the
//! SUBACK matches the new subscription (the retained messages follow the SUBACK, as on
//! one shard). Not yet carried: a group's queue on one shard drains only to that
//! shard's members.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::{Buf, Bytes};

use crate::codec::{ProtocolVersion, QoS, SubscriptionOptions};
use crate::durability::record::{
    decode_record, get_str, BusPlace, Journal, JournalError, KeptRoute, Record, BUS_ACK, BUS_ROUND,
    HELLO, ROUTE, ROUTE_SHARED, SYNC,
};
use crate::durability::Ticket;
use crate::topic::GroupRef;

use super::message::Message;
use super::Engine;
use crate::bus::shard_of;

/// Session ids from here up stand for other shards in the subscription index; real
/// sessions are slots of `Engine::sessions` and never come near.
const REMOTE_BASE: u32 = u32::MAX - u16::MAX as u32;

/// The shard a pseudo-session of the index stands for.
pub(super) fn remote_shard(session: u32) -> Option<u16> {
    session.checked_sub(REMOTE_BASE).map(|shard| shard as u16)
}

/// A shard's pseudo-session takes every message at its own QoS and retain flag; the
/// receiving shard applies its subscribers' options.
fn remote_options() -> SubscriptionOptions {
    SubscriptionOptions {
        qos: QoS::ExactlyOnce,
        retain_as_published: true,
        ..SubscriptionOptions::default()
    }
}

#[derive(Debug)]
pub(super) struct Shards {
    pub(super) me: u16,
    /// The node's shards: slots `0..local`, joined by rings. Slots from `local` up are
    /// other nodes of a cluster, joined through Kafka (`engine/cluster.rs`), and the
    /// cluster's subscription topic.
    pub(super) local: u16,
    /// One per slot (this shard's own stays empty).
    pub(super) outboxes: Vec<Journal>,
    /// Subscribers per (shard, filter) as that shard reported them.
    pub(super) remote: HashMap<(u16, Box<str>), u32>,
    /// Acknowledged rounds (see "Acknowledgements" in the module header), per slot:
    /// a QoS 1/2 message is in the outbox and no round was written after it yet,
    pub(super) needs_round: Vec<bool>,
    /// the last round sent to it, and the last it confirmed.
    pub(super) sent_round: Vec<u64>,
    pub(super) acked_round: Vec<u64>,
    pub(super) next_round: u64,
    /// The slots a QoS 1/2 message was routed to since the last acknowledgement took
    /// them (bit 63 stands for every slot from 63 up): what that PUBACK waits for.
    pub(super) routed: u64,
    /// The cluster's side of the index (`engine/cluster.rs`), when clustered.
    pub(super) cluster: Option<super::cluster::ClusterIndex>,
    /// Shared groups by `$share/` filter, for messages routed to their members here
    /// (checked live before use: a group id is reused once its group ends).
    groups: HashMap<Box<str>, GroupRef>,
    /// The number the next route gets (module header, "Exactly once").
    next_route: u64,
    /// Per local slot: routes sent or waiting to be sent and not yet confirmed.
    pub(super) unconfirmed: Vec<VecDeque<Unconfirmed>>,
    /// Per local slot: the last route applied from that shard.
    applied: Vec<u64>,
    /// Per local slot: this process started and has not yet had that shard's `SYNC`.
    awaiting_sync: Vec<bool>,
    /// The journaled publisher whose QoS 2 PUBLISH is being routed, if one is
    /// (`Engine::begin_crossing`): its routes are kept as `Outbox` records.
    pub(super) publishing: Option<u32>,
    /// The route or node topic record being applied, and a count of those applied,
    /// so a session decides once per record (`Engine::accepts_arrival`).
    pub(super) arriving: Option<super::arrival::Arriving>,
    pub(super) arrivals: u64,
    /// Per local slot, its name as a session's cursor of it (`shard:<n>`, "Exactly
    /// once across the bus" with a store kept per client).
    cursor_names: Vec<Arc<str>>,
}

/// A route to another shard of the node (or a journaled publisher's QoS 2 message to
/// another node of a cluster), kept until its receiver confirms its round.
#[derive(Debug)]
pub(super) struct Unconfirmed {
    pub(super) route: u64,
    message: Arc<Message>,
    share_filter: Option<Box<str>>,
    /// In the outbox since, in the round numbered so (0: not taken yet); None while
    /// it waits for this shard's store (a held QoS 2 message, or one behind it).
    sent_in: Option<u64>,
    /// Kept in this shard's store as an `Outbox` record of this publisher (a
    /// snapshot writes it again; a store kept per client drops it when confirmed).
    pub(super) publisher: Option<Box<str>>,
}

impl Unconfirmed {
    /// Into `outbox` (first time or again), to be stamped with the next round; one
    /// to another node is listed among that outbox's crossings (`cluster`, given for
    /// a node's slot `to` only: `engine/cluster.rs`, "Crossing QoS 2").
    fn write(
        &mut self,
        outbox: &mut Journal,
        cluster: Option<&mut super::cluster::ClusterIndex>,
        to: u16,
        wall_offset: i64,
    ) {
        outbox.route(
            &self.message,
            self.route,
            self.share_filter.as_deref(),
            wall_offset,
        );
        self.sent_in = Some(0);
        if let Some(cluster) = cluster {
            cluster.note_crossing(to, self);
        }
    }
}

impl Shards {
    pub(super) fn new(me: u16, local: u16) -> Self {
        Shards {
            me,
            local,
            outboxes: (0..local).map(|_| Journal::for_bus()).collect(),
            remote: HashMap::new(),
            needs_round: vec![false; usize::from(local)],
            sent_round: vec![0; usize::from(local)],
            acked_round: vec![0; usize::from(local)],
            next_round: 1,
            routed: 0,
            groups: HashMap::new(),
            cluster: None,
            next_route: 1,
            unconfirmed: (0..local).map(|_| VecDeque::new()).collect(),
            applied: vec![0; usize::from(local)],
            awaiting_sync: vec![false; usize::from(local)],
            publishing: None,
            arriving: None,
            arrivals: 0,
            cursor_names: (0..local).map(|n| format!("shard:{n}").into()).collect(),
        }
    }

    fn place(&self) -> BusPlace {
        BusPlace {
            me: self.me,
            shards: self.local,
        }
    }

    fn take_route(&mut self) -> u64 {
        let route = self.next_route;
        self.next_route += 1;
        route
    }

    /// A new slot past the others: another node, or the subscription topic.
    pub(super) fn add_slot(&mut self) -> u16 {
        self.outboxes.push(Journal::for_bus());
        self.unconfirmed.push(VecDeque::new());
        self.needs_round.push(false);
        self.sent_round.push(0);
        self.acked_round.push(0);
        (self.outboxes.len() - 1) as u16
    }

    /// The node's other shards, which replicate subscriptions record by record.
    fn others(&mut self) -> impl Iterator<Item = &mut Journal> {
        let me = usize::from(self.me);
        let local = usize::from(self.local);
        self.outboxes
            .iter_mut()
            .take(local)
            .enumerate()
            .filter(move |(shard, _)| *shard != me)
            .map(|(_, outbox)| outbox)
    }

    /// Every other shard, and every other node unless `nodes` is false: where
    /// retained messages go (a node's `$SYS` tree is its own).
    fn everyone_else(&mut self, nodes: bool) -> impl Iterator<Item = &mut Journal> {
        let me = usize::from(self.me);
        let local = usize::from(self.local);
        let topic = self.cluster.as_ref().map(|c| usize::from(c.slot));
        self.outboxes
            .iter_mut()
            .enumerate()
            .filter(move |(slot, _)| {
                *slot != me && Some(*slot) != topic && (nodes || *slot < local)
            })
            .map(|(_, outbox)| outbox)
    }

    fn count(&self) -> u16 {
        self.local
    }

    /// The round a batch taken for `slot` now carries: a new one when a QoS 1/2
    /// message or a SUBSCRIBE waits for one, else 0.
    pub(super) fn start_round(&mut self, slot: u16) -> u64 {
        let at = usize::from(slot);
        if !self.needs_round[at] {
            return 0;
        }
        let round = self.next_round;
        self.next_round += 1;
        self.needs_round[at] = false;
        self.sent_round[at] = round;
        // Every route written since the last round, wherever it stands in the queue:
        // a held route released by the store sits before routes sent earlier.
        if let Some(queue) = self.unconfirmed.get_mut(at) {
            for entry in queue.iter_mut().filter(|entry| entry.sent_in == Some(0)) {
                entry.sent_in = Some(round);
            }
        }
        round
    }

    /// Whether `slot` is another node (its rounds are confirmed by Kafka, not by a
    /// `BUS_ACK`).
    pub(super) fn is_node(&self, slot: u16) -> bool {
        slot >= self.local
    }

    /// Filters other shards hold in this shard's index.
    pub(super) fn remote_filters(&self) -> usize {
        self.remote.len()
    }
}

impl Engine {
    /// Make this engine shard `me` of `count`; one shard (the default) sends nothing.
    pub fn set_shards(&mut self, me: u16, count: u16) {
        assert!(me < count, "shard {me} of {count}");
        self.shards = (count > 1).then(|| Shards::new(me, count));
    }

    /// This engine's shard and the node's number of shards; (0, 1) when alone.
    pub fn shard(&self) -> (u16, u16) {
        self.shards.as_ref().map_or((0, 1), |s| (s.me, s.count()))
    }

    /// Whether this shard owns `client_id` (`bus::shard_of`); always when alone.
    pub fn owns(&self, client_id: &str) -> bool {
        let (me, count) = self.shard();
        shard_of(client_id, count) == me
    }

    /// Whether this engine is a member of a cluster ([`Engine::enable_cluster`]).
    pub fn is_cluster_member(&self) -> bool {
        self.shards
            .as_ref()
            .is_some_and(|shards| shards.cluster.is_some())
    }

    /// Announce this shard to the others, once its store is restored: each is sent a
    /// `SYNC` and every local subscription (replacing what it held from this shard,
    /// which matters when this shard restarted), then a `HELLO`, which they answer
    /// the same way.
    pub fn bus_hello(&mut self) {
        let (me, count) = self.shard();
        for to in (0..count).filter(|&to| to != me) {
            self.sync_subscriptions_to(to);
            self.resend_unconfirmed(to);
            if let Some(shards) = self.shards.as_mut() {
                shards.awaiting_sync[usize::from(to)] = true;
            }
            if let Some(outbox) = self.outbox(to) {
                outbox.bus_signal(HELLO);
            }
        }
    }

    /// Whether every other shard's `SYNC` (its subscriptions) arrived since
    /// `bus_hello`: before, a PUBLISH here would miss their subscribers, so a started
    /// shard serves no client until then (`shard/bus_pump.py`).
    pub fn bus_synced(&self) -> bool {
        self.shards
            .as_ref()
            .is_none_or(|shards| !shards.awaiting_sync.contains(&true))
    }

    fn outbox(&mut self, to: u16) -> Option<&mut Journal> {
        self.shards.as_mut()?.outboxes.get_mut(usize::from(to))
    }

    /// `SYNC` and every non-shared filter of every local session, to shard `to`.
    fn sync_subscriptions_to(&mut self, to: u16) {
        let options = remote_options().to_byte(ProtocolVersion::V5);
        let Some(outbox) = self
            .shards
            .as_mut()
            .and_then(|shards| shards.outboxes.get_mut(usize::from(to)))
        else {
            return;
        };
        outbox.bus_signal(SYNC);
        for (session, state) in self.sessions.iter().enumerate() {
            let Some(state) = state else { continue };
            for filter in self.index.client_filters(session as u32) {
                outbox.subscribe(&state.client_id, &filter, options, 0);
            }
        }
    }

    /// Shard `from` sent round `round`: confirm it once the store has what it brought
    /// (at once when nothing waits for the store).
    fn confirm_round_when_stored(&mut self, from: u16, round: u64) {
        let ticket = Ticket::journal(self.journal.unconfirmed_batch().unwrap_or(0));
        if ticket.is_free() && !self.barrier.bus_acks.holds_for(from) {
            if let Some(outbox) = self.outbox(from) {
                outbox.bus_number(BUS_ACK, round);
            }
            return;
        }
        // Behind an earlier one to the same shard: a confirmation covers every round
        // before it, so it never overtakes one still waiting.
        self.barrier.bus_acks.hold(from, ticket, round);
    }

    pub(super) fn round_confirmed(&mut self, from: u16, round: u64) {
        let per_client = self.store_per_client;
        let journal = &mut self.journal;
        if let Some(shards) = self.shards.as_mut() {
            let at = usize::from(from);
            let acked = &mut shards.acked_round[at];
            *acked = (*acked).max(round);
            if let Some(queue) = shards.unconfirmed.get_mut(at) {
                queue.retain(|entry| {
                    let confirmed = matches!(entry.sent_in, Some(r) if r != 0 && r <= round);
                    match entry.publisher.as_deref() {
                        Some(publisher) if confirmed && per_client => {
                            journal.outbox_done(publisher, entry.route);
                        }
                        _ => {}
                    }
                    !confirmed
                });
            }
        }
        self.release_replies();
    }

    /// Shard `from` (re)started: its previous process may have read routes from its
    /// ring without storing them, so every unconfirmed one goes again (after the
    /// `SYNC` just written, which the new process waits for), the rounds it was asked
    /// to confirm for the dead process are not answered to the new one, and a new
    /// round stands for every round the dead process never confirmed.
    fn peer_restarted(&mut self, from: u16) {
        self.barrier.bus_acks.forget(from);
        if let Some(shards) = self.shards.as_mut() {
            // A new round, which the new process confirms once it has everything sent
            // after its SYNC: what waited for the dead one's confirmation waits for it.
            shards.needs_round[usize::from(from)] = true;
        }
        self.resend_unconfirmed(from);
    }

    /// For the admin API's count (`Engine::publish`): each other shard's
    /// subscriptions matching `topic`, less the one that shard's route counted in
    /// `fan_out`. A scan of the replicated filters: for a rare publish, not routing.
    pub(super) fn remote_matches_beyond_routes(&self, topic: &str) -> usize {
        let Some(shards) = &self.shards else {
            return 0;
        };
        let mut per_shard: HashMap<u16, usize> = HashMap::new();
        for ((shard, filter), count) in &shards.remote {
            if !filter.starts_with("$share/") && filter_matches(filter, topic) {
                *per_shard.entry(*shard).or_default() += *count as usize;
            }
        }
        per_shard.values().map(|n| n - 1).sum()
    }

    /// Forget every subscription shard `from` reported.
    fn remote_reset(&mut self, from: u16) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let gone: Vec<Box<str>> = shards
            .remote
            .keys()
            .filter(|(shard, _)| *shard == from)
            .map(|(_, filter)| filter.clone())
            .collect();
        for filter in gone {
            shards.remote.remove(&(from, filter.clone()));
            self.index
                .unsubscribe(REMOTE_BASE + u32::from(from), &filter);
        }
    }

    /// The records for shard `to` since the last call; None when there are none.
    pub fn take_bus(&mut self, to: u16) -> Option<Bytes> {
        let shards = self.shards.as_mut()?;
        let at = usize::from(to);
        if at < shards.outboxes.len() && !shards.is_node(to) {
            let round = shards.start_round(to);
            if round != 0 {
                shards.outboxes[at].bus_number(BUS_ROUND, round);
            }
        }
        let outbox = shards.outboxes.get_mut(at)?;
        outbox.take().map(|(_, records)| records)
    }

    /// What an acknowledgement given now must wait for: the round that will carry the
    /// QoS 1/2 messages routed since the last one, and the slots they went to; (0, 0)
    /// when none was. Messages routed elsewhere earlier are waited for through the
    /// acknowledgements held before this one, on the same connection.
    pub(super) fn take_bus_wait(&mut self) -> (u64, u64) {
        match self.shards.as_mut() {
            Some(shards) if shards.routed != 0 => {
                (shards.next_round, std::mem::take(&mut shards.routed))
            }
            _ => (0, 0),
        }
    }

    /// Every slot of `slots` (as `take_bus_wait` gave them) has confirmed round
    /// `round` or a later one.
    pub(super) fn bus_slots_confirmed(&self, round: u64, slots: u64) -> bool {
        let Some(shards) = self.shards.as_ref().filter(|_| round != 0) else {
            return true;
        };
        (0..shards.outboxes.len())
            .all(|to| slots & (1 << to.min(63)) == 0 || shards.acked_round[to] >= round)
    }

    /// Every shard that was sent a QoS 1/2 message in a round up to `round` has
    /// confirmed it (or a later one).
    pub(super) fn bus_round_confirmed(&self, round: u64) -> bool {
        let Some(shards) = self.shards.as_ref().filter(|_| round != 0) else {
            return true;
        };
        (0..shards.outboxes.len()).all(|to| {
            !shards.needs_round[to] && shards.acked_round[to] >= round.min(shards.sent_round[to])
        })
    }

    /// Confirm the rounds whose journal batch the store now has.
    pub(super) fn release_bus_acks(&mut self) {
        let mut bus_acks = std::mem::take(&mut self.barrier.bus_acks);
        let ready = bus_acks.release(&*self);
        self.barrier.bus_acks = bus_acks;
        for (from, round) in ready {
            if let Some(outbox) = self.outbox(from) {
                outbox.bus_number(BUS_ACK, round);
            }
        }
    }

    /// The round a SUBACK given now waits for: every other shard (and a cluster's
    /// subscription topic) must confirm one sent after its subscriptions, so a PUBLISH
    /// anywhere after the SUBACK matches them; 0 alone.
    pub(super) fn suback_round(&mut self) -> u64 {
        let Some(shards) = self.shards.as_mut() else {
            return 0;
        };
        let me = usize::from(shards.me);
        let local = usize::from(shards.local);
        let topic = shards.cluster.as_ref().map(|c| usize::from(c.slot));
        for (to, needs) in shards.needs_round.iter_mut().enumerate() {
            *needs |= (to != me && to < local) || Some(to) == topic;
        }
        shards.next_round
    }

    /// A QoS 1/2 message went into `to`'s outbox: acknowledgements given from now
    /// wait for `to` to confirm the round that carries it.
    fn needs_round(&mut self, to: u16, message: &Message) {
        if message.qos != QoS::AtMostOnce {
            if let Some(shards) = self.shards.as_mut() {
                shards.needs_round[usize::from(to)] = true;
                shards.routed |= 1 << to.min(63);
            }
        }
    }

    /// A local session gained `filter`: every other shard routes matches to us.
    pub(super) fn shards_subscribed(&mut self, session: u32, filter: &str) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let client = self.sessions[session as usize]
            .as_ref()
            .map_or("", |state| &*state.client_id);
        let options = remote_options().to_byte(ProtocolVersion::V5);
        for outbox in shards.others() {
            outbox.subscribe(client, filter, options, 0);
        }
        if let Some(cluster) = shards.cluster.as_mut() {
            cluster.gained(filter);
        }
    }

    /// A local session lost `filter`.
    pub(super) fn shards_unsubscribed(&mut self, session: u32, filter: &str) {
        if self.shards.is_none() {
            return;
        }
        let client = self.sessions[session as usize]
            .as_ref()
            .map_or_else(String::new, |state| state.client_id.to_string());
        self.replicate_unsubscribe(&client, filter);
    }

    /// A local session is ending (already out of `sessions`): its filters go.
    pub(super) fn shards_session_ended(&mut self, session: u32, client: &str) {
        if self.shards.is_none() {
            return;
        }
        for filter in self.index.client_filters(session) {
            self.replicate_unsubscribe(client, &filter);
        }
    }

    fn replicate_unsubscribe(&mut self, client: &str, filter: &str) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        for outbox in shards.others() {
            outbox.unsubscribe(client, filter);
        }
        if let Some(cluster) = shards.cluster.as_mut() {
            cluster.lost(filter);
        }
    }

    /// A client's retained message was stored (`Some`) or its topic cleared (`None`).
    pub(super) fn shards_retained(&mut self, topic: &str, message: Option<&Message>) {
        let wall_offset = self.wall_offset;
        if let Some(shards) = self.shards.as_mut() {
            for outbox in shards.everyone_else(!topic.starts_with("$SYS/")) {
                outbox.retain(topic, message, wall_offset);
            }
        }
    }

    /// A shared group's pick fell on another shard's pseudo-member: the message goes
    /// there for one of that shard's members of the group.
    pub(super) fn route_shared_to_shard(&mut self, shard: u16, message: &Arc<Message>, group: u32) {
        if let Some(filter) = self.index.shared_group_filter(group) {
            self.route_to(shard, message, Some(filter.as_str()));
        }
    }

    /// A message another shard routed to this shard's members of `share_filter`:
    /// one local online member takes it by the group's strategy, else the group's
    /// queue here holds it (as when no member is online on one shard).
    fn receive_shared(&mut self, message: Arc<Message>, share_filter: &str, now: u64) {
        let cached = self
            .shards
            .as_ref()
            .and_then(|shards| shards.groups.get(share_filter).copied())
            .filter(|&group| self.index.is_group_live(group));
        let Some(group) = cached.or_else(|| self.index.find_shared_group(share_filter)) else {
            // Its members here left while the message crossed: nobody to hold it for.
            self.stats
                .count_drop(super::stats::DropReason::GroupEnded, 1);
            return;
        };
        if cached.is_none() {
            if let Some(shards) = self.shards.as_mut() {
                shards.groups.insert(share_filter.into(), group);
            }
        }
        let local = self
            .index
            .pick_member(group, message.publisher, &message.topic, |client| {
                remote_shard(client).is_none()
            });
        match local {
            Some(member) => {
                let out = super::shared::member_delivery(message, member);
                self.deliver_shared(group.id, member.client, out, now);
            }
            None => {
                self.queue_for_group(group.id, &message, now);
            }
        }
    }

    /// A match on another shard's pseudo-session: the message goes there once.
    pub(super) fn route_to_shard(&mut self, shard: u16, message: &Arc<Message>) {
        self.route_to(shard, message, None);
    }

    /// `message` to slot `to` as one route (module header, "Exactly once across the
    /// bus"): at once, or for a held QoS 2 message once this shard's store has it.
    fn route_to(&mut self, to: u16, message: &Arc<Message>, share_filter: Option<&str>) {
        let held = self.is_held(message);
        let wall_offset = self.wall_offset;
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let route = shards.take_route();
        let at = usize::from(to);
        let to_node = shards.is_node(to);
        // A journaled publisher's QoS 2 message (`held_for_batch`): its packet id is
        // in the same batch as this record, so its crossing is stored with it. To a
        // shard every QoS 1/2 route is kept (a restarted shard gets them again); to
        // another node only those (Kafka's round makes the others durable, and the
        // receiver's stored offset takes each record once: `engine/cluster.rs`).
        let publisher = shards
            .publishing
            .filter(|_| message.qos != QoS::AtMostOnce && message.held_for_batch != 0)
            .filter(|_| !to_node || message.qos == QoS::ExactlyOnce)
            .and_then(|session| self.sessions.get(session as usize)?.as_ref())
            .map(|state| state.client_id.clone());
        let kept = if to_node {
            publisher.is_some()
        } else {
            message.qos != QoS::AtMostOnce
        };
        if let Some(publisher) = publisher.as_deref() {
            let kept = KeptRoute {
                shard: shards.place(),
                to,
                to_node: shards.cluster.as_ref().and_then(|c| c.node_name(to)),
                route,
                share_filter,
                publisher,
            };
            self.journal.outbox(&kept, message, wall_offset);
        }
        // Kept routes cross in the order of their numbers (a shard's receiver keeps
        // the last number it applied): one behind a held route waits too.
        let behind = shards
            .unconfirmed
            .get(at)
            .and_then(VecDeque::back)
            .is_some_and(|entry| entry.sent_in.is_none());
        let waits = kept && (held || behind);
        let mut entry = kept.then(|| Unconfirmed {
            route,
            message: message.clone(),
            share_filter: share_filter.map(Into::into),
            sent_in: None,
            publisher,
        });
        if let (false, Some(outbox)) = (waits, shards.outboxes.get_mut(at)) {
            match entry.as_mut() {
                Some(entry) => {
                    let cluster = shards.cluster.as_mut().filter(|_| to_node);
                    entry.write(outbox, cluster, to, wall_offset);
                }
                None => outbox.route(message, route, share_filter, wall_offset),
            }
        }
        if let Some(entry) = entry {
            shards.unconfirmed[at].push_back(entry);
        }
        self.needs_round(to, message);
    }

    /// The store confirmed a batch: the held routes it covers, and those behind them,
    /// cross now, in the order they were routed (the first still held stops a slot's).
    pub(super) fn send_stored_routes(&mut self) {
        let journal = &self.journal;
        let wall_offset = self.wall_offset;
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        for (at, queue) in shards.unconfirmed.iter_mut().enumerate() {
            for entry in queue.iter_mut().filter(|entry| entry.sent_in.is_none()) {
                let batch = entry.message.held_for_batch;
                if batch != 0 && journal.has_unconfirmed_at(batch) {
                    break;
                }
                let to = at as u16;
                let cluster = shards.cluster.as_mut().filter(|_| to >= shards.local);
                entry.write(&mut shards.outboxes[at], cluster, to, wall_offset);
                shards.needs_round[at] = true;
            }
        }
    }

    /// Every route to `to` not yet confirmed, into its outbox again (after what is
    /// already there): `to` restarted, or this shard did and restored them.
    fn resend_unconfirmed(&mut self, to: u16) {
        let wall_offset = self.wall_offset;
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let at = usize::from(to);
        let Some(queue) = shards.unconfirmed.get_mut(at) else {
            return;
        };
        for entry in queue.iter_mut().filter(|entry| entry.sent_in.is_some()) {
            entry.write(&mut shards.outboxes[at], None, to, wall_offset);
            shards.needs_round[at] = true;
        }
    }

    /// A route this shard's journal kept (`Record::Outbox`), restored unconfirmed: it
    /// is sent again once the bus starts (`bus_hello`). One to another node of a
    /// cluster waits for Python to find whether Kafka has it (`engine/cluster.rs`,
    /// "Crossing QoS 2").
    pub(super) fn restore_outbox(&mut self, kept: KeptRoute, message: Arc<Message>) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        shards.next_route = shards.next_route.max(kept.route + 1);
        if kept.to_node.is_some() {
            if let Some(cluster) = shards.cluster.as_mut() {
                cluster.restore_crossing(&kept, message);
            }
            return;
        }
        let to = kept.to;
        if kept.shard != shards.place() || to == shards.me || to >= shards.local {
            return; // another layout's: its receivers are not this node's shards
        }
        let queue = &mut shards.unconfirmed[usize::from(to)];
        if queue.iter().any(|entry| entry.route == kept.route) {
            return;
        }
        queue.push_back(Unconfirmed {
            route: kept.route,
            message,
            share_filter: kept.share_filter.map(Into::into),
            sent_in: Some(0),
            publisher: Some(kept.publisher.into()),
        });
    }

    /// Kept route `route` was confirmed after it was stored (`Record::OutboxDone`).
    pub(super) fn forget_outbox(&mut self, route: u64) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        for queue in &mut shards.unconfirmed {
            queue.retain(|entry| entry.route != route);
        }
        if let Some(cluster) = shards.cluster.as_mut() {
            cluster.forget_crossing(route);
        }
    }

    /// The last route from `from` this shard's store had applied (`Record::BusCursor`).
    pub(super) fn restore_bus_cursor(&mut self, place: BusPlace, from: u16, route: u64) {
        if let Some(shards) = self.shards.as_mut() {
            if place == shards.place() && from < shards.local {
                let applied = &mut shards.applied[usize::from(from)];
                *applied = (*applied).max(route);
            }
        }
    }

    /// The bus's durable state as records (`Engine::snapshot`): the routes kept in
    /// this shard's journal and not yet confirmed, and the last route applied from
    /// each shard.
    pub(super) fn snapshot_bus(&self, out: &mut Journal) {
        let Some(shards) = self.shards.as_ref() else {
            return;
        };
        let place = shards.place();
        for (to, queue) in shards.unconfirmed.iter().enumerate() {
            for entry in queue.iter() {
                let Some(publisher) = entry.publisher.as_deref() else {
                    continue;
                };
                let kept = KeptRoute {
                    shard: place,
                    to: to as u16,
                    to_node: shards.cluster.as_ref().and_then(|c| c.node_name(to as u16)),
                    route: entry.route,
                    share_filter: entry.share_filter.as_deref(),
                    publisher,
                };
                out.outbox(&kept, &entry.message, self.wall_offset);
            }
        }
        for (from, &route) in shards.applied.iter().enumerate() {
            if route != 0 {
                out.bus_cursor(place, from as u16, route);
            }
        }
    }

    /// Routes start past every number this shard's earlier processes can have used:
    /// from the wall clock's milliseconds << 20 (a process would have to route a
    /// million messages per millisecond of its life to reach the next start).
    pub(super) fn start_routes_at_wall_clock(&mut self, unix_ms: u64) {
        if let Some(shards) = self.shards.as_mut() {
            shards.next_route = shards.next_route.max(unix_ms << 20);
        }
    }

    /// Apply the records shard `from` sent (as `take_bus` gave them there); returns how
    /// many. A record that does not decode stops the batch: the rings carry whole
    /// records, so that is a bug, reported to the caller.
    pub fn bus_receive(
        &mut self,
        from: u16,
        mut records: Bytes,
        now: u64,
    ) -> Result<usize, JournalError> {
        if self.shards.is_none() {
            return Err(JournalError(
                "bus records for an engine that is not a shard",
            ));
        }
        // Each ROUTE and RETAIN follows its message's record (`Journal::for_bus`).
        let mut last: Option<(u64, Arc<Message>)> = None;
        let mut count = 0;
        let journaled_before = self.journal.pending_records();
        let mut applied_any = false;
        while records.has_remaining() {
            if records.remaining() < 5 {
                return Err(JournalError("bus record header cut off"));
            }
            let kind = records.get_u8();
            let len = records.get_u32_le() as usize;
            if records.remaining() < len {
                return Err(JournalError("bus record cut off"));
            }
            let mut body = records.split_to(len);
            count += 1;
            if kind == SYNC {
                if let Some(waiting) = self.awaiting_sync_from(from) {
                    *waiting = false;
                }
                self.remote_reset(from);
                continue;
            }
            if self
                .awaiting_sync_from(from)
                .is_some_and(|waiting| *waiting)
                && matches!(kind, ROUTE | ROUTE_SHARED | BUS_ROUND | BUS_ACK)
            {
                // Meant for this shard's previous process: sent again after the SYNC.
                continue;
            }
            if kind == HELLO {
                self.sync_subscriptions_to(from);
                self.peer_restarted(from);
                continue;
            }
            if kind == BUS_ROUND || kind == BUS_ACK {
                if body.remaining() < 8 {
                    return Err(JournalError("round record cut off"));
                }
                let round = body.get_u64_le();
                if kind == BUS_ROUND {
                    self.confirm_round_when_stored(from, round);
                } else {
                    self.round_confirmed(from, round);
                }
                continue;
            }
            if kind == ROUTE || kind == ROUTE_SHARED {
                if body.remaining() < 16 {
                    return Err(JournalError("route record cut off"));
                }
                let message = referenced(&last, body.get_u64_le())?;
                let route = body.get_u64_le();
                // QoS 0 is never sent again, so it neither needs nor moves the cursor
                // (it may overtake a held QoS 2 route with a lower number).
                if message.qos != QoS::AtMostOnce && !self.first_time(from, route) {
                    continue; // applied before a crash of its sender or of this shard
                }
                applied_any = true;
                // With a store kept per client, each session keeps its own cursor
                // of the shard (`arrival.rs`): the shard's alone would not be
                // stored with every session's deliveries.
                let cursor = self
                    .shards
                    .as_ref()
                    .filter(|_| self.store_per_client && message.qos != QoS::AtMostOnce)
                    .and_then(|shards| shards.cursor_names.get(usize::from(from)).cloned());
                let per_session = cursor.is_some();
                if let Some(source) = cursor {
                    self.begin_arrival(source, route, None);
                }
                if kind == ROUTE {
                    self.fan_out_routed(message, now);
                } else {
                    let filter = get_str(&mut body)?;
                    self.receive_shared(message, &filter, now);
                }
                if per_session {
                    self.end_arrival();
                }
                continue;
            }
            match decode_record(kind, body)? {
                Record::Message(stored) => {
                    let id = stored.id;
                    last = Some((id, self.message_from_store(stored).message));
                }
                Record::Subscribe { filter, .. } => self.remote_subscribe(from, filter),
                Record::Unsubscribe { filter, .. } => self.remote_unsubscribe(from, &filter),
                Record::Retain {
                    topic,
                    message_id: 0,
                } => {
                    if self.forget_retained(&topic) && !topic.starts_with("$SYS/") {
                        self.journal.retain(&topic, None, self.wall_offset);
                    }
                }
                Record::Retain { message_id, .. } => {
                    // Journaled here too, so each shard's store holds the node's
                    // retained messages; not sent on (journal_retained would).
                    let message = referenced(&last, message_id)?;
                    if !message.topic.starts_with("$SYS/") {
                        self.journal
                            .retain(&message.topic, Some(&message), self.wall_offset);
                    }
                    self.restore_retained(message);
                }
                Record::Enqueue {
                    client,
                    message_id,
                    qos,
                    retain,
                    subscription_ids,
                    ..
                } => {
                    let message = referenced(&last, message_id)?;
                    let out = super::Outgoing::new(message, qos, retain, subscription_ids);
                    self.receive_forwarded(out, &client, now);
                }
                _ => return Err(JournalError("not a bus record")),
            }
        }
        if applied_any && self.journal.pending_records() > journaled_before {
            // With the records the routes made: stored, it says they are.
            let whole = !self.store_per_client;
            if let Some(shards) = self.shards.as_ref().filter(|s| whole && from < s.local) {
                let (place, route) = (shards.place(), shards.applied[usize::from(from)]);
                self.journal.bus_cursor(place, from, route);
            }
        }
        Ok(count)
    }

    /// Whether route `route` from slot `from` is new here (and note it); a node's
    /// slots (Kafka) are not numbered by this shard's rules and always are.
    fn first_time(&mut self, from: u16, route: u64) -> bool {
        let Some(applied) = self
            .shards
            .as_mut()
            .and_then(|shards| shards.applied.get_mut(usize::from(from)))
        else {
            return true;
        };
        if route <= *applied {
            return false;
        }
        *applied = route;
        true
    }

    fn awaiting_sync_from(&mut self, from: u16) -> Option<&mut bool> {
        self.shards
            .as_mut()
            .and_then(|shards| shards.awaiting_sync.get_mut(usize::from(from)))
    }

    pub(super) fn remote_subscribe(&mut self, from: u16, filter: String) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let count = shards
            .remote
            .entry((from, filter.as_str().into()))
            .or_insert(0);
        *count += 1;
        if *count == 1 {
            // The filter was valid where it was subscribed; the index is the same.
            let _ = self.index.subscribe(
                REMOTE_BASE + u32::from(from),
                &filter,
                remote_options(),
                None,
            );
        }
    }

    pub(super) fn remote_unsubscribe(&mut self, from: u16, filter: &str) {
        let Some(shards) = self.shards.as_mut() else {
            return;
        };
        let key = (from, Box::<str>::from(filter));
        let Some(count) = shards.remote.get_mut(&key) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            shards.remote.remove(&key);
            self.index
                .unsubscribe(REMOTE_BASE + u32::from(from), filter);
        }
    }
}

/// Whether `filter` matches `topic` [MQTT-4.7.1, 4.7.2-1]: for counting, not routing
/// (the index routes).
fn filter_matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let (mut levels, mut wanted) = (topic.split('/'), filter.split('/'));
    loop {
        match (wanted.next(), levels.next()) {
            (Some("#"), _) => return true,
            (None, None) => return true,
            (Some("+"), Some(_)) => {}
            (Some(want), Some(level)) if want == level => {}
            _ => return false,
        }
    }
}

fn referenced(last: &Option<(u64, Arc<Message>)>, id: u64) -> Result<Arc<Message>, JournalError> {
    match last {
        Some((last_id, message)) if *last_id == id => Ok(message.clone()),
        _ => Err(JournalError(
            "bus record names a message not sent before it",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_as_the_spec_says() {
        assert!(filter_matches("cmd/#", "cmd/light"));
        assert!(filter_matches("cmd/#", "cmd"));
        assert!(filter_matches("+/light", "cmd/light"));
        assert!(!filter_matches("+", "cmd/light"));
        assert!(!filter_matches("#", "$SYS/broker"));
        assert!(filter_matches("$SYS/#", "$SYS/broker"));
        assert!(!filter_matches("cmd/dark", "cmd/light"));
    }
}
