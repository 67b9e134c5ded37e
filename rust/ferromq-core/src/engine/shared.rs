//! Shared subscriptions in the engine: a message for a group is never lost because
//! members come and go (MQTT 5.0 §4.8.2; 3.1.1 clients use the same `$share/` filters).
//!
//! The index chooses one member per group and message (`topic::shared`). Around that
//! choice the engine keeps two things:
//!
//! - **The group queue.** A group with no member online (the index reports it
//!   unserved) queues the message here, bounded by the session queue limit and drop
//!   policy (every drop counted; QoS 0 is dropped unless `queue_qos0_offline`, as for
//!   an offline session). While a group's queue holds messages, newer messages of the
//!   group join its tail, so the group's order holds. The queue drains, front first,
//!   through the group's strategy to members that can send at once (online,
//!   writable, nothing queued in their session, window open): when a member
//!   connects, subscribes, or an acknowledgement frees its window. Each drained
//!   message gets the chosen member's QoS, Retain As Published and subscription
//!   identifier.
//! - **Redistribution.** A delivery made through a group remembers it
//!   (`Outgoing::group`). When a member's connection ends (DISCONNECT, keep alive,
//!   takeover, error) its QoS 1 deliveries sent and not acknowledged, then everything
//!   of the group still queued in its session, go back to their group in their
//!   original order: to another online member, or the group queue when none is
//!   online. So each message is with one member at a time, and a group of persistent
//!   sessions keeps receiving while members come and go. A QoS 2 delivery already
//!   sent stays with its member: the spec makes the server complete it with that
//!   client when it reconnects [MQTT-4.8.2-4] and never send it to another one if the
//!   session ends first [MQTT-4.8.2-5] (the client may already have passed it on; a
//!   second copy would break exactly once). A member that refused a delivery with a
//!   reason code of 0x80 or more has ended that flow: it is not sent to anyone else
//!   [MQTT-4.8.2-6].
//!
//! - **Durability.** With a store, a group's queue is journaled like a persistent
//!   session whose client id is a NUL followed by the group's `$share/` filter (a
//!   NUL is never in a real client id [MQTT-1.5.4-2]): a QoS 1/2 message held for
//!   the group is stored before its publisher's PUBACK, removed when it is handed to
//!   a member (whose own session journals it), and `restore` puts it back in the
//!   group's queue (`restore_group_queue`).
//!
//! - **ACL withhold mode.** A member whose wildcard subscription the ACL narrows
//!   (`[acl] wildcards = "withhold"`) is never handed a message it may not read:
//!   the strategy picks again among the members that may, and the drain offers a
//!   queued message only to them; with none online it is withheld (counted).
//!
//! A group's queue is dropped (counted) when the group ends: its last member
//! unsubscribed or its session ended. Deliveries of an ended group still with a
//! member stay with it like any other. Retained messages are never sent on a shared
//! subscription (`subscribe`).
//!
//! Cost: route pays one empty-map check per shared delivery while no group holds
//! messages back, and one engine flag test until a session is first narrowed by
//! the ACL (then a session flag test); the drain pays O(members) per message it
//! moves.

use std::collections::HashMap;
use std::sync::Arc;

use crate::codec::QoS;
use crate::topic::{GroupRef, Member};

use super::memory::Ledger;
use super::message::Message;
use super::queue::{DeliveryQueue, Pushed, QueueLimit};
use super::session::Awaiting;
use super::stats::DropReason;
use super::{Engine, Outgoing};

/// The queues of the groups holding messages back; a group is here only while its
/// queue is not empty.
#[derive(Debug, Default)]
pub(super) struct GroupQueues {
    queues: HashMap<GroupRef, DeliveryQueue>,
    /// Groups whose queue the journal holds: its journal name and next sequence.
    pub(super) journaled: HashMap<GroupRef, (Box<str>, u64)>,
}

/// The journal's client id for `group`'s queue.
pub(super) fn group_journal_name(share_filter: &str) -> String {
    format!("\0{share_filter}")
}

/// The `$share/` filter of a group queue's journal client id; None for a real client.
pub(super) fn group_of_journal_name(client: &str) -> Option<&str> {
    client.strip_prefix('\0')
}

impl GroupQueues {
    /// Messages held back over all groups (a gauge for `Engine::stats`).
    pub(super) fn len(&self) -> usize {
        self.queues.values().map(DeliveryQueue::len).sum()
    }

    /// Groups with messages held and their queued bytes (`memory`).
    pub(super) fn sizes(&self) -> Vec<(u64, GroupRef)> {
        self.queues.iter().map(|(g, q)| (q.bytes(), *g)).collect()
    }

    /// Take the front of `group`'s queue, dropping the queue once empty.
    fn pop(&mut self, group: GroupRef) -> Option<Outgoing> {
        let queue = self.queues.get_mut(&group)?;
        let front = queue.pop();
        if queue.is_empty() {
            self.queues.remove(&group);
        }
        front
    }

    /// `group`'s queue, made (counting into `ledger`) if it has none.
    fn queue(&mut self, group: GroupRef, ledger: &Ledger) -> &mut DeliveryQueue {
        self.queues
            .entry(group)
            .or_insert_with(|| DeliveryQueue::new(ledger.clone()))
    }
}

/// A group's message as its queue keeps it: the member's options are applied when
/// one is chosen.
fn held(message: Arc<Message>, group: GroupRef) -> Outgoing {
    let qos = message.qos;
    let mut out = Outgoing::new(message, qos, false, Vec::new());
    out.group = Some(group);
    out
}

/// The delivery of `message` to the chosen `member` of `group`.
fn for_member(message: Arc<Message>, group: GroupRef, member: Member) -> Outgoing {
    let mut out = member_delivery(message, member);
    out.group = Some(group);
    out
}

/// `message` as `member`'s subscription options deliver it: its QoS capped, Retain
/// As Published, the subscription identifier.
pub(super) fn member_delivery(message: Arc<Message>, member: Member) -> Outgoing {
    let qos = message.qos.min(member.qos);
    let retain = message.retain && member.retain_as_published;
    let ids = (member.subscription_id != 0)
        .then_some(member.subscription_id)
        .into_iter()
        .collect();
    Outgoing::new(message, qos, retain, ids)
}

impl Engine {
    /// Route's delivery to the member the index chose for group id `group`. While
    /// the group holds messages back this one goes behind them instead.
    pub(super) fn deliver_shared(
        &mut self,
        group: u32,
        session: u32,
        mut out: Outgoing,
        now: u64,
    ) -> bool {
        let Some(group) = self.index.group_ref(group) else {
            return self.deliver(session, out, now);
        };
        if out.message.qos != QoS::AtMostOnce && self.application_groups.contains(group) {
            return self.application_message(group, &out.message, now);
        }
        if self.group_queues.queues.contains_key(&group) {
            let queued = self.hold_for_group(group, out.message, now);
            self.drain_group(group, now);
            return queued;
        }
        if self.withholds(session, &out.message.topic) {
            // The chosen member may not read it (`[acl] wildcards = "withhold"`):
            // offered to one that may, by the group's strategy; none online, it is
            // withheld from the chosen one as from any subscriber.
            if let Some(member) = self.member_that_may_read(group, &out.message) {
                return self.deliver(member.client, for_member(out.message, group, member), now);
            }
        }
        out.group = Some(group);
        self.deliver(session, out, now)
    }

    /// The member of `group` the group's strategy picks among those online that the
    /// ACL lets read `message` (withhold mode), if any.
    fn member_that_may_read(&mut self, group: GroupRef, message: &Message) -> Option<Member> {
        let members: Vec<u32> = self.index.members(group).collect();
        let readers: Vec<u32> = members
            .into_iter()
            .filter(|&member| !self.withholds(member, &message.topic))
            .collect();
        self.index
            .pick_member(group, message.publisher, &message.topic, |client| {
                readers.contains(&client)
            })
    }

    /// Route found no online member of group id `group`: hold the message.
    pub(super) fn queue_for_group(&mut self, group: u32, message: &Arc<Message>, now: u64) -> bool {
        match self.index.group_ref(group) {
            Some(group)
                if message.qos != QoS::AtMostOnce && self.application_groups.contains(group) =>
            {
                self.application_message(group, message, now)
            }
            Some(group) => self.hold_for_group(group, message.clone(), now),
            None => false,
        }
    }

    /// Put `message` at the tail of `group`'s queue. False when it was dropped.
    fn hold_for_group(&mut self, group: GroupRef, message: Arc<Message>, now: u64) -> bool {
        let offline_qos0 = message.qos == QoS::AtMostOnce && !self.config.queue_qos0_offline;
        let reason = if message.is_expired(now) {
            Some(DropReason::Expired)
        } else if !self.index.is_group_live(group) {
            Some(DropReason::GroupEnded)
        } else {
            offline_qos0.then_some(DropReason::Qos0Offline)
        };
        if let Some(reason) = reason {
            self.count_dropped(reason, None, &message, now);
            return false;
        }
        let limit = self.queue_limit();
        let exported = self.exports_events().then(|| message.clone());
        let mut out = held(message, group);
        if out.qos != QoS::AtMostOnce {
            self.number_for_journal(group, &mut out);
        }
        let record = out.clone();
        let queue = self.group_queues.queue(group, &self.ledger);
        let pushed = queue.push(out, limit);
        if queue.is_empty() {
            self.group_queues.queues.remove(&group);
        }
        match pushed {
            Pushed::Queued => {
                self.journal_group_delivery(group, &record);
                true
            }
            Pushed::QueuedDropping(dropped, reason) => {
                for dropped in &dropped {
                    self.count_dropped(reason, None, &dropped.message, now);
                    self.journal_group_removed(group, dropped);
                }
                self.journal_group_delivery(group, &record);
                true
            }
            Pushed::Refused(reason) => {
                self.stats.count_drop(reason, 1);
                if let Some(message) = exported {
                    self.export_dropped(reason, None, &message, now);
                }
                false
            }
        }
    }

    /// Give a QoS 1/2 message held for `group` its place in the group's journaled
    /// queue (a sequence and the packet id the store keys it by).
    fn number_for_journal(&mut self, group: GroupRef, out: &mut Outgoing) {
        if !self.journal.is_enabled() {
            return;
        }
        let (_, next) = match self.group_queues.journaled.entry(group) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let Some(filter) = self.index.shared_group_filter(group.id) else {
                    return;
                };
                let name = group_journal_name(&filter);
                self.journal.session(
                    &name,
                    u32::MAX,
                    crate::durability::record::ClientType::Device,
                );
                entry.insert((name.into_boxed_str(), 0))
            }
        };
        out.sequence = *next;
        out.packet_id = super::session::packet_id_of(*next);
        *next += 1;
    }

    fn journal_group_delivery(&mut self, group: GroupRef, out: &Outgoing) {
        if out.qos == QoS::AtMostOnce {
            return;
        }
        if let Some((name, _)) = self.group_queues.journaled.get(&group) {
            self.journal.enqueue(
                name,
                out.sequence,
                out.packet_id,
                &out.message,
                out.qos,
                false,
                &[],
                self.wall_offset,
            );
        }
    }

    /// Drop the oldest message `group` holds (`memory`); false when it holds none.
    pub(super) fn trim_group(&mut self, group: GroupRef) -> bool {
        let Some(out) = self.group_queues.pop(group) else {
            return false;
        };
        self.count_dropped(DropReason::MemoryBudget, None, &out.message, self.clock);
        self.journal_group_removed(group, &out);
        true
    }

    fn journal_group_removed(&mut self, group: GroupRef, out: &Outgoing) {
        if out.qos == QoS::AtMostOnce {
            return;
        }
        if let Some((name, _)) = self.group_queues.journaled.get(&group) {
            self.journal.ack(name, out.packet_id);
        }
    }

    /// Every journaled group queue as records, for a snapshot.
    pub(super) fn snapshot_group_queues(&self, out: &mut crate::durability::record::Journal) {
        for (group, (name, _)) in &self.group_queues.journaled {
            out.session(
                name,
                u32::MAX,
                crate::durability::record::ClientType::Device,
            );
            let queued = self.group_queues.queues.get(group);
            for o in queued
                .into_iter()
                .flat_map(DeliveryQueue::iter)
                .filter(|o| o.qos != QoS::AtMostOnce)
            {
                out.enqueue(
                    name,
                    o.sequence,
                    o.packet_id,
                    &o.message,
                    o.qos,
                    false,
                    &[],
                    self.wall_offset,
                );
            }
        }
    }

    /// Put a restored group queue back (`share_filter` names the group); its
    /// messages were restored in sequence order. A group no longer subscribed by
    /// anyone has lost its queue (counted as dropped).
    pub(super) fn restore_group_queue(
        &mut self,
        share_filter: &str,
        journal_name: String,
        deliveries: impl Iterator<Item = Outgoing>,
    ) {
        let Some(group) = self.index.find_shared_group(share_filter) else {
            let n = deliveries.count() as u64;
            self.stats.count_drop(DropReason::GroupEnded, n);
            self.journal.session_end(&journal_name);
            return;
        };
        let mut next = 0;
        let queue = self.group_queues.queue(group, &self.ledger);
        for mut out in deliveries {
            next = next.max(out.sequence + 1);
            out.group = Some(group);
            queue.push(out, QueueLimit::NONE);
        }
        if queue.is_empty() {
            self.group_queues.queues.remove(&group);
        }
        self.group_queues
            .journaled
            .insert(group, (journal_name.into_boxed_str(), next));
    }

    /// Drain the queues of the groups `session` belongs to (its window may have
    /// room now).
    pub(super) fn drain_groups_of(&mut self, session: u32, now: u64) {
        if self.group_queues.queues.is_empty() {
            return;
        }
        let groups: Vec<GroupRef> = self
            .group_queues
            .queues
            .keys()
            .copied()
            .filter(|&group| self.index.is_member(group, session))
            .collect();
        for group in groups {
            self.drain_group(group, now);
        }
    }

    /// Drain every group queue: the store confirmed a batch that held messages
    /// may wait for.
    pub(super) fn drain_all_groups(&mut self, now: u64) {
        let groups: Vec<GroupRef> = self.group_queues.queues.keys().copied().collect();
        for group in groups {
            self.drain_group(group, now);
        }
    }

    /// Hand `group`'s queued messages, front first, to members that can send at
    /// once, chosen by the group's strategy; stop when none can, or at a message
    /// still waiting for the store (`journal_done` drains again).
    fn drain_group(&mut self, group: GroupRef, now: u64) {
        let mut ready = Vec::new();
        loop {
            let Some(front) = self
                .group_queues
                .queues
                .get(&group)
                .and_then(DeliveryQueue::front)
            else {
                return;
            };
            if self.is_held(&front.message) {
                return;
            }
            let message = front.message.clone();
            ready.clear();
            ready.extend(
                self.index
                    .members(group)
                    .filter(|&member| self.can_send_now(member)),
            );
            // A member the ACL withholds this message from is not offered it.
            ready.retain(|&member| !self.withholds(member, &message.topic));
            let Some(member) =
                self.index
                    .pick_member(group, message.publisher, &message.topic, |client| {
                        ready.contains(&client)
                    })
            else {
                return;
            };
            if let Some(taken) = self.group_queues.pop(group) {
                self.journal_group_removed(group, &taken);
            }
            self.deliver(member.client, for_member(message, group, member), now);
        }
    }

    /// The session is online and a QoS 1/2 delivery to it would be sent now.
    fn can_send_now(&self, session: u32) -> bool {
        let Some(state) = self.sessions.get(session as usize).and_then(Option::as_ref) else {
            return false;
        };
        state.conn.is_some_and(|conn| {
            state.queue.is_empty()
                && self.retained_sent(conn)
                && self.is_writable(conn)
                && self.window_open(session, conn)
        })
    }

    /// The session's connection ended (it is offline in the index): send its
    /// unacknowledged shared deliveries back to their groups, in order.
    pub(super) fn release_shared(&mut self, session: u32, now: u64) {
        let index = &self.index;
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return;
        };
        // A delivery of a group that has ended stays with its session.
        let releasable = |out: &Outgoing| out.group.is_some_and(|g| index.is_group_live(g));
        let mut released = Vec::new();
        for packet_id in state.inflight_in_order() {
            // QoS 2 stays with its member [MQTT-4.8.2-4, 4.8.2-5].
            let shared_qos1 = matches!(
                &state.inflight[&packet_id].awaiting,
                Awaiting::PubAck(out) if releasable(out)
            );
            if let Some(Awaiting::PubAck(out)) = shared_qos1
                .then(|| state.inflight.remove(&packet_id))
                .flatten()
                .map(|entry| entry.awaiting)
            {
                released.push(out);
            }
        }
        released.extend(state.queue.take_where(releasable));
        // Streamed deliveries not done with go back to their topic (engine/application_groups.rs).
        let streamed: Vec<u16> = state
            .inflight
            .iter()
            .filter(|(_, entry)| {
                matches!(&entry.awaiting, Awaiting::PubAck(o) | Awaiting::PubRec(o) if o.application_token.is_some())
            })
            .map(|(id, _)| *id)
            .collect();
        for packet_id in streamed {
            state.inflight.remove(&packet_id);
        }
        state
            .queue
            .take_where(|out| out.application_token.is_some());
        self.stats.shared_released += released.len() as u64;
        for out in released {
            // The member's stored copy goes; the next holder journals its own.
            self.journal_removed(session, &out);
            if let Some(group) = out.group {
                self.redispatch(group, out.message, now);
            }
        }
    }

    /// Send a released message to another online member of `group`, or hold it.
    fn redispatch(&mut self, group: GroupRef, message: Arc<Message>, now: u64) {
        if self.group_queues.queues.contains_key(&group) {
            self.hold_for_group(group, message, now);
            self.drain_group(group, now);
            return;
        }
        let member = self
            .index
            .pick_member(group, message.publisher, &message.topic, |_| true);
        match member {
            Some(member) if super::shards::remote_shard(member.client).is_some() => {
                // Another shard's members of the group (engine/shards.rs).
                let shard = super::shards::remote_shard(member.client).expect("checked");
                self.route_shared_to_shard(shard, &message, group.id);
            }
            Some(member) => {
                self.deliver(member.client, for_member(message, group, member), now);
            }
            None => {
                self.hold_for_group(group, message, now);
            }
        }
    }

    /// Drop (counted) the queues of groups that ended.
    pub(super) fn forget_removed_groups(&mut self) {
        self.forget_removed_application_groups();
        if self.group_queues.queues.is_empty() && self.group_queues.journaled.is_empty() {
            return;
        }
        let index = &self.index;
        let stats = &mut self.stats;
        self.group_queues.queues.retain(|&group, queue| {
            let live = index.is_group_live(group);
            if !live {
                stats.count_drop(DropReason::GroupEnded, queue.len() as u64);
            }
            live
        });
        let journal = &mut self.journal;
        self.group_queues.journaled.retain(|&group, (name, _)| {
            let live = index.is_group_live(group);
            if !live {
                journal.session_end(name);
            }
            live
        });
    }
}
