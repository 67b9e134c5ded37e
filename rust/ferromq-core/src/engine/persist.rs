//! Durability: what the engine journals, the acknowledgements that wait for the
//! store, and rebuilding state from a journal (restore) or writing it whole
//! (snapshot).
//!
//! - **Journaling** (`journal_*`): called where session state changes; each is a
//!   no-op for sessions that are not `journaled` (expiry 0) and when the journal is
//!   off, so the in-memory broker pays one branch.
//! - **Durable before acknowledged**: a PUBACK/PUBREC is written at once only when
//!   nothing it depends on is unconfirmed; otherwise it waits in the engine's
//!   barrier (`durability::barrier`) with a ticket naming the journal batch that
//!   covers everything journaled before it (and the stream batch, and the bus round
//!   of the slots its message went to), and `release_replies` lets each connection's
//!   replies go in arrival order [MQTT-4.6.0-2]. A PUBREL waits the same way for the
//!   batch holding its Release record (`publish::send_pubrel`), a SUBACK for its
//!   subscriptions (`subscribe::hold_suback`). `Confirmations for Engine` answers the
//!   tickets.
//! - **Durable before sent** (QoS 2 of a journaled publisher): deliveries of a
//!   message with `held_for_batch` stay queued until that batch is confirmed;
//!   `journal_done` then drains the sessions held in the barrier's `deliveries` and
//!   the group queues.
//! - **Restore** replays records: a delivery's sequence orders the rebuilt queue, so
//!   order survives packet id wrap; records are idempotent (keyed by client,
//!   sequence, packet id, filter, topic), so a snapshot followed by records it
//!   already covers reads back the same state. Reading recovers past damaged
//!   records (durability/log.rs, "Recovery") and reports the ranges it skipped.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{Packet, Property, PropertyId, QoS, Will};
use crate::durability::log::{Damage, RecordReader};
use crate::durability::record::{
    ClientType, Journal, JournalError, KeptRoute, Record, StoredMessage, StoredWill,
};

use super::message::{next_message_id, Message};
use super::retained_store::Origin;
use super::session::{Awaiting, Session};
use super::shared::group_of_journal_name;
use super::subscribe::Granted;
use super::{ConnId, Engine, Outgoing};
use crate::durability::{BusWait, Confirmations, Ticket};

/// What a connection is owed once the barrier lets it go (`Engine::barrier`).
#[derive(Debug)]
pub(super) enum Reply {
    /// PUBACK, PUBREC or PUBREL.
    Ack(Packet),
    SubAck(Granted),
}

/// What `restore` rebuilt.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    pub records: usize,
    pub sessions: usize,
    pub messages: usize,
    pub retained: usize,
    /// Bytes up to the end of the last whole record; a torn tail starts here.
    pub valid_len: usize,
    /// Why reading ended before the end (a torn tail, an unknown format version).
    pub error: Option<JournalError>,
    /// Damaged ranges skipped, with intact records read after each.
    pub damaged: Vec<Damage>,
}

impl Engine {
    /// Tell the engine the wall clock, for expiry times the journal stores as unix
    /// milliseconds.
    pub fn set_wall_clock(&mut self, unix_ms: u64, now: u64) {
        self.wall_offset = unix_ms as i64 - now as i64;
        self.start_routes_at_wall_clock(unix_ms);
    }

    /// The journal records since the last call, as numbered batch; None when empty.
    pub fn take_journal(&mut self) -> Option<(u64, Bytes)> {
        self.persist_signalled = false;
        self.persist_full_signalled = false;
        self.journal.take()
    }

    /// Raise `Persist` a second time once `records` are pending (0: never), so a
    /// store that waits a flush interval after the first record writes a full batch
    /// at once (Lettuce-style: by size or by time, whichever comes first).
    pub fn set_journal_flush_records(&mut self, records: usize) {
        self.journal_flush_records = records;
    }

    /// The store applies a journal batch per client, each client's records at once
    /// but not the batch as a whole (the Redis store). A shard then keeps, per
    /// session, the last route it took from each shard (an `Applied` record beside
    /// the deliveries, not one `BusCursor` per batch), and the store drops a
    /// confirmed `Outbox` route when told (`Record::OutboxDone`) rather than at
    /// compaction (`shards.rs`, "Exactly once across the bus").
    pub fn set_store_per_client(&mut self, per_client: bool) {
        self.store_per_client = per_client;
    }

    pub(super) fn journal_is_full(&self, pending: usize) -> bool {
        self.journal_flush_records > 0
            && pending >= self.journal_flush_records
            && !self.persist_full_signalled
    }

    pub fn journal_pending(&self) -> usize {
        self.journal.pending_records()
    }

    /// The store has batch `n` and all before it: send the acknowledgements that
    /// waited for them, then the deliveries of held messages it covers.
    pub fn journal_done(&mut self, n: u64) {
        self.journal.confirm(n);
        self.send_stored_routes();
        self.release_bus_acks();
        self.release_replies();
        let mut deliveries = std::mem::take(&mut self.barrier.deliveries);
        let mut released: Vec<u32> = Vec::new();
        for (session, ()) in deliveries.release_any(&*self) {
            if !released.contains(&session) {
                released.push(session);
            }
        }
        self.barrier.deliveries = deliveries;
        if released.is_empty() {
            return;
        }
        let now = self.clock;
        for session in released {
            self.drain_queue(session, now);
        }
        self.drain_all_groups(now);
    }

    /// True while `message` waits for the store (`Message::held_for_batch`).
    pub(super) fn is_held(&self, message: &Message) -> bool {
        message.held_for_batch != 0 && self.journal.has_unconfirmed_at(message.held_for_batch)
    }

    /// `session` has a delivery of held `message` queued: drain it when the store
    /// confirms the message's batch.
    pub(super) fn drain_when_stored(&mut self, session: u32, message: &Message) {
        let ticket = Ticket::journal(message.held_for_batch);
        if !self.barrier.deliveries.last_is(session, &ticket) {
            self.barrier.deliveries.hold(session, ticket, ());
        }
    }

    /// Write the acknowledgements and SUBACKs whose tickets are met, each
    /// connection's in order [MQTT-4.6.0-2] (`durability::barrier`).
    pub(super) fn release_replies(&mut self) {
        let mut replies = std::mem::take(&mut self.barrier.replies);
        let ready = replies.release(&*self);
        self.barrier.replies = replies;
        let now = self.clock;
        for (conn, reply) in ready {
            match reply {
                Reply::Ack(packet) => {
                    self.write(conn, &packet);
                }
                Reply::SubAck(granted) => self.release_suback(granted, now),
            }
        }
    }

    /// Write a PUBACK/PUBREC now, or hold it until the store (and, when the stream
    /// holds acks, the stream's sink, and the shards or nodes its message went to)
    /// has what came before.
    pub(super) fn acknowledge(&mut self, conn: ConnId, packet: Packet) {
        let (round, slots) = self.take_bus_wait();
        let ticket = Ticket {
            journal_batch: self.journal.unconfirmed_batch().unwrap_or(0),
            stream_batch: self.stream_unconfirmed_batch().unwrap_or(0),
            bus: match round {
                0 => BusWait::None,
                round => BusWait::Slots { round, slots },
            },
        };
        self.reply(conn, ticket, Reply::Ack(packet), self.clock);
    }

    /// Send `reply` now when its ticket is free and nothing of its connection is held
    /// (it would overtake it), else hold it; true when it was held.
    pub(super) fn reply(&mut self, conn: ConnId, ticket: Ticket, reply: Reply, now: u64) -> bool {
        if ticket.is_free() && !self.barrier.replies.holds_for(conn) {
            match reply {
                Reply::Ack(packet) => {
                    self.write(conn, &packet);
                }
                Reply::SubAck(granted) => self.send_suback(granted, now),
            }
            return false;
        }
        self.barrier.replies.hold(conn, ticket, reply);
        true
    }

    /// Hold an acknowledgement until the store confirms `batch`, behind those
    /// held before it.
    pub(super) fn hold_until(&mut self, conn: ConnId, batch: u64, packet: Packet) {
        self.barrier
            .replies
            .hold(conn, Ticket::journal(batch), Reply::Ack(packet));
    }

    fn journaled(&mut self, session: u32) -> Option<(&mut Journal, &mut Session)> {
        let state = self.sessions.get_mut(session as usize)?.as_mut()?;
        state.journaled.then_some((&mut self.journal, state))
    }

    /// A session was created or resumed with `expiry` seconds: journal it when that
    /// makes it persistent (or changes how long it lives).
    pub(super) fn journal_session(&mut self, session: u32, expiry: u32) {
        if !self.journal.is_enabled() {
            return;
        }
        let Some(state) = self.session_mut(session) else {
            return;
        };
        if expiry == 0 && !state.journaled {
            return;
        }
        let client_type = self.client_type_of(session);
        let Some(state) = self.sessions[session as usize].as_mut() else {
            return;
        };
        state.client_type = client_type;
        if expiry == 0 {
            // Ends with its connection: the store forgets it now.
            state.journaled = false;
            state.subscriptions.clear();
            self.journal.session_end(&state.client_id);
        } else {
            state.journaled = true;
            self.journal
                .session(&state.client_id, expiry, state.client_type);
        }
    }

    /// Authentication decided the client's type (its user record says DEVICE or
    /// APPLICATION); set before the answer that accepts it. Ignored for another token.
    pub fn set_client_type(&mut self, conn_id: ConnId, token: u64, client_type: ClientType) {
        if let Some(conn) = self.conn_mut(conn_id).filter(|c| c.token == token) {
            conn.client_type = Some(client_type);
        }
    }

    /// The type authentication gave the session's connection, else the one the
    /// configured client-id prefixes give.
    pub(super) fn client_type_of(&self, session: u32) -> ClientType {
        let state = self.sessions[session as usize]
            .as_ref()
            .expect("caller checked");
        let decided = state
            .conn
            .and_then(|conn| self.conns.get(conn as usize)?.as_ref()?.client_type);
        if let Some(client_type) = decided {
            return client_type;
        }
        let client_id = &state.client_id;
        let application = self
            .config
            .application_client_prefixes
            .iter()
            .any(|prefix| client_id.starts_with(prefix.as_str()));
        if application {
            ClientType::Application
        } else {
            ClientType::Device
        }
    }

    pub(super) fn journal_session_end(&mut self, state: &Session) {
        if state.journaled {
            self.journal.session_end(&state.client_id);
        }
    }

    pub(super) fn journal_subscribe(
        &mut self,
        session: u32,
        filter: &str,
        options: u8,
        subscription_id: u32,
    ) {
        if let Some((journal, state)) = self.journaled(session) {
            journal.subscribe(&state.client_id, filter, options, subscription_id);
            state
                .subscriptions
                .insert(filter.into(), (options, subscription_id));
        }
    }

    pub(super) fn journal_unsubscribe(&mut self, session: u32, filter: &str) {
        if let Some((journal, state)) = self.journaled(session) {
            if state.subscriptions.remove(filter).is_some() {
                journal.unsubscribe(&state.client_id, filter);
            }
        }
    }

    /// A QoS 1/2 delivery was sent or queued.
    pub(super) fn journal_delivery(&mut self, session: u32, out: &Outgoing) {
        if out.application_token.is_some() {
            return; // its group's topic holds it
        }
        let wall_offset = self.wall_offset;
        if let Some((journal, state)) = self.journaled(session) {
            journal.enqueue(
                &state.client_id,
                out.sequence,
                out.packet_id,
                &out.message,
                out.qos,
                out.retain,
                &out.subscription_ids,
                wall_offset,
            );
        }
    }

    /// A delivery left the session without completing (dropped, expired, too large).
    pub(super) fn journal_removed(&mut self, session: u32, out: &Outgoing) {
        if let Some(token) = out.application_token {
            self.application_delivery_done(token);
        } else if out.qos != QoS::AtMostOnce {
            self.journal_ack(session, out.packet_id);
        }
    }

    /// The delivery under `packet_id` is complete (PUBACK, PUBCOMP, refused PUBREC).
    pub(super) fn journal_ack(&mut self, session: u32, packet_id: u16) {
        if let Some((journal, state)) = self.journaled(session) {
            journal.ack(&state.client_id, packet_id);
        }
    }

    /// PUBREC arrived: the delivery now waits for PUBCOMP.
    pub(super) fn journal_release(&mut self, session: u32, packet_id: u16) {
        if let Some((journal, state)) = self.journaled(session) {
            journal.release(&state.client_id, packet_id);
        }
    }

    /// The session's will as the store must hold it: the connection's (`due_at` 0),
    /// one waiting for its delay (`due_at` in engine ms), or none. A session holding
    /// no stored will writes nothing for none. On a cluster a clean session's will is
    /// stored too (the store keeps nothing else of it), so the node that adopts a
    /// dead node's clients publishes it (`docs/cluster.md`, "Wills").
    pub(super) fn journal_will(&mut self, session: u32, will: Option<(&Will, u64)>) {
        let wall_offset = self.wall_offset;
        let clustered = self.journal.is_enabled() && self.is_cluster_member();
        let journal = &mut self.journal;
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
            .filter(|state| state.journaled || clustered)
        else {
            return;
        };
        if will.is_none() && !state.will_stored {
            return;
        }
        state.will_stored = will.is_some();
        let stored = will.map(|(will, due_at)| StoredWill {
            due_at: if due_at == 0 {
                0
            } else {
                (due_at as i64 + wall_offset).max(1) as u64
            },
            delay_seconds: will_delay_seconds(will),
            will: will.clone(),
        });
        journal.will(&state.client_id, stored.as_ref());
    }

    pub(super) fn journal_inbound_qos2(&mut self, session: u32, packet_id: u16, held: bool) {
        if let Some((journal, state)) = self.journaled(session) {
            journal.inbound_qos2(&state.client_id, packet_id, held);
        }
    }

    /// A retained message set or cleared, journaled and sent to the other shards. The
    /// broker's own `$SYS/` statistics are republished on every interval and are not
    /// worth a disk write; the other shards still get them, so a SUBSCRIBE anywhere
    /// finds the node's `$SYS` tree at once.
    pub(super) fn journal_retained(&mut self, topic: &str, message: Option<&Message>) {
        if !topic.starts_with("$SYS/") {
            self.journal.retain(topic, message, self.wall_offset);
        }
        self.shards_retained(topic, message);
    }

    /// Every durable thing the engine holds, as journal records: persistent
    /// sessions with their subscriptions, inbound QoS 2 ids, in-flight and queued
    /// QoS 1/2 deliveries (in sequence order), and retained messages.
    pub fn snapshot(&self) -> Bytes {
        let mut out = Journal::detached();
        for state in self.sessions.iter().flatten().filter(|s| s.journaled) {
            let client = &*state.client_id;
            out.session(client, state.expiry_interval, state.client_type);
            for (filter, (options, id)) in &state.subscriptions {
                out.subscribe(client, filter, *options, *id);
            }
            for packet_id in &state.inbound_qos2 {
                out.inbound_qos2(client, *packet_id, true);
            }
            for packet_id in state.inflight_in_order() {
                match &state.inflight[&packet_id].awaiting {
                    Awaiting::PubAck(o) | Awaiting::PubRec(o) => {
                        snapshot_delivery(&mut out, client, o, self.wall_offset)
                    }
                    Awaiting::PubComp { .. } => out.release(client, packet_id),
                }
            }
            for o in state.queue.iter().filter(|o| o.qos != QoS::AtMostOnce) {
                snapshot_delivery(&mut out, client, o, self.wall_offset);
            }
            for (node, offset) in &state.applied {
                out.applied(client, node, *offset);
            }
            let connection_will = state
                .conn
                .and_then(|conn| self.conns.get(conn as usize)?.as_ref()?.will.as_deref())
                .map(|will| (will, 0));
            let will = state
                .pending_will
                .as_ref()
                .map(|pending| (&pending.will, pending.due_at))
                .or(connection_will);
            if let Some((will, due_at)) = will {
                let due_at = if due_at == 0 {
                    0
                } else {
                    (due_at as i64 + self.wall_offset).max(1) as u64
                };
                let stored = StoredWill {
                    due_at,
                    delay_seconds: will_delay_seconds(will),
                    will: will.clone(),
                };
                out.will(client, Some(&stored));
            }
        }
        self.snapshot_group_queues(&mut out);
        self.snapshot_bus(&mut out);
        for message in self.retained_messages.values() {
            out.retain(&message.topic, Some(message), self.wall_offset);
        }
        out.take().map(|(_, bytes)| bytes).unwrap_or_default()
    }

    /// Rebuild durable state from journal records (a snapshot and the records after
    /// it). Restored sessions are offline; their expiry runs from `now`. Damaged
    /// records are skipped (`damaged`); reading stops at a tail nothing intact follows
    /// (`error`, `valid_len`).
    pub fn restore(&mut self, data: Bytes, now: u64) -> RestoreReport {
        let mut report = RestoreReport::default();
        let mut messages: HashMap<u64, Arc<Message>> = HashMap::new();
        let mut restoring: HashMap<String, Restoring> = HashMap::new();
        let mut reader = RecordReader::recovering(data);
        for record in reader.by_ref() {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    report.error = Some(error);
                    break;
                }
            };
            report.records += 1;
            self.apply(record, &mut messages, &mut restoring);
        }
        report.valid_len = reader.valid_len();
        report.damaged = reader.damaged().to_vec();
        // A shard keeps the sessions (and group queues) it owns: on a node restarted
        // with another number of shards it reads the journals of the old layout.
        // It reports what it kept, so the shards' reports add up to the node's. A
        // member of a cluster keeps every session it is given: its store reads the
        // clients the cluster says it owns, which an adoption makes any client id.
        let clustered = self.is_cluster_member();
        let owned: Vec<_> = restoring
            .into_iter()
            .filter(|(client, _)| {
                self.owns(client) || (clustered && group_of_journal_name(client).is_none())
            })
            .collect();
        report.messages = owned.iter().map(|(_, r)| r.deliveries.len()).sum();
        let (group_queues, sessions): (Vec<_>, Vec<_>) = owned
            .into_iter()
            .partition(|(client, _)| group_of_journal_name(client).is_some());
        report.sessions = sessions.len();
        for (client, restored) in sessions {
            self.install(client, restored, now);
        }
        // After the sessions: a group is found through its members' subscriptions.
        for (client, restored) in group_queues {
            let filter = group_of_journal_name(&client)
                .expect("partitioned")
                .to_owned();
            let deliveries = restored.deliveries.into_values().filter_map(|r| match r {
                Restored::Deliver(out) => Some(out),
                Restored::AwaitPubComp(_) => None,
            });
            self.restore_group_queue(&filter, client, deliveries);
        }
        self.restore_application_groups();
        report.retained = self.retained_messages.len();
        report
    }

    fn apply(
        &mut self,
        record: Record,
        messages: &mut HashMap<u64, Arc<Message>>,
        restoring: &mut HashMap<String, Restoring>,
    ) {
        match record {
            Record::Session {
                client,
                expiry_interval,
                client_type,
            } => {
                let entry = restoring.entry(client).or_default();
                entry.expiry_interval = expiry_interval;
                entry.client_type = client_type;
            }
            Record::SessionEnd { client } => {
                restoring.remove(&client);
            }
            Record::Subscribe {
                client,
                filter,
                options,
                subscription_id,
            } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    entry
                        .subscriptions
                        .insert(filter, (options, subscription_id));
                }
            }
            Record::Unsubscribe { client, filter } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    entry.subscriptions.remove(&filter);
                }
            }
            Record::Message(stored) => {
                let message = self.message_from_store(stored);
                messages.insert(message.id_in_journal, message.message);
            }
            Record::Enqueue {
                client,
                sequence,
                packet_id,
                message_id,
                qos,
                retain,
                subscription_ids,
            } => {
                let (Some(entry), Some(message)) =
                    (restoring.get_mut(&client), messages.get(&message_id))
                else {
                    return;
                };
                let mut out = Outgoing::new(message.clone(), qos, retain, subscription_ids);
                out.sequence = sequence;
                out.packet_id = packet_id;
                out.restored = true;
                let slot = Slot::Sequence(sequence);
                if let Some(old) = entry.by_packet_id.insert(packet_id, slot) {
                    entry.deliveries.remove(&old);
                }
                entry.deliveries.insert(slot, Restored::Deliver(out));
            }
            Record::Ack { client, packet_id } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    if let Some(slot) = entry.by_packet_id.remove(&packet_id) {
                        entry.deliveries.remove(&slot);
                    }
                }
            }
            Record::Release { client, packet_id } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    let known = entry.by_packet_id.get(&packet_id).copied();
                    let slot = known.unwrap_or_else(|| {
                        // A snapshot's PUBREL-only entry: ordered before the rest.
                        let slot = Slot::Released(entry.released_only);
                        entry.released_only += 1;
                        entry.by_packet_id.insert(packet_id, slot);
                        slot
                    });
                    entry
                        .deliveries
                        .insert(slot, Restored::AwaitPubComp(packet_id));
                }
            }
            Record::InboundQos2 {
                client,
                packet_id,
                held,
            } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    if held {
                        entry.inbound_qos2.push(packet_id);
                    } else {
                        entry.inbound_qos2.retain(|id| *id != packet_id);
                    }
                }
            }
            Record::Outbox {
                shard,
                to,
                route,
                message_id,
                share_filter,
                publisher,
                to_node,
            } => {
                if let Some(message) = messages.get(&message_id) {
                    let kept = KeptRoute {
                        shard,
                        to,
                        to_node: (!to_node.is_empty()).then_some(to_node.as_str()),
                        route,
                        share_filter: (!share_filter.is_empty()).then_some(share_filter.as_str()),
                        publisher: &publisher,
                    };
                    self.restore_outbox(kept, message.clone());
                }
            }
            // A store kept per client drops the route instead; a log that has both
            // (a test's) drops it here.
            Record::OutboxDone { route, .. } => self.forget_outbox(route),
            Record::BusCursor { shard, from, route } => {
                self.restore_bus_cursor(shard, from, route);
            }
            Record::Applied {
                client,
                node,
                offset,
            } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    match entry.applied.iter_mut().find(|(n, _)| *n == node) {
                        Some((_, at)) => *at = offset,
                        None => entry.applied.push((node, offset)),
                    }
                }
            }
            Record::Will { client, will } => {
                if let Some(entry) = restoring.get_mut(&client) {
                    entry.will = will;
                }
            }
            Record::Retain { topic, message_id } => match messages.get(&message_id) {
                Some(message) => self.restore_retained(message.clone()),
                None => {
                    if let Some(previous) = self.retained.clear(&topic) {
                        self.retained_messages.remove(&previous, &mut self.users);
                    }
                }
            },
        }
    }

    pub(super) fn message_from_store(&self, stored: StoredMessage) -> JournalMessage {
        let expires_at = stored
            .expires_at
            .map(|at| (at as i64 - self.wall_offset).max(0) as u64);
        JournalMessage {
            id_in_journal: stored.id,
            message: Arc::new(Message {
                id: next_message_id(),
                topic: stored.topic.try_into().expect("journal strings are UTF-8"),
                payload: stored.payload,
                qos: stored.qos,
                retain: stored.retain,
                properties: stored.properties,
                publisher: None,
                expires_at,
                journal_batch: Default::default(),
                held_for_batch: 0,
            }),
        }
    }

    /// Put a restored session into the engine: offline, its subscriptions in the
    /// index, its deliveries queued in sequence order (PUBREL-awaiting ones back in
    /// flight, so the PUBREL is resent on reconnect).
    fn install(&mut self, client: String, restored: Restoring, now: u64) {
        let session = match self.by_client_id.get(client.as_str()).copied() {
            Some(existing) => existing,
            None => self.create_session(&client, restored.expiry_interval),
        };
        self.cancel_stub(session);
        let expiry = restored.expiry_interval;
        for (filter, (options, subscription_id)) in &restored.subscriptions {
            let Ok(options) = crate::codec::SubscriptionOptions::from_byte(*options) else {
                continue;
            };
            let id = (*subscription_id != 0).then_some(*subscription_id);
            // A filter the index refuses now was accepted when it was journaled.
            if let Ok(true) = self.index.subscribe(session, filter, options, id) {
                self.shards_subscribed(session, filter);
                self.cluster_restored(filter);
            }
        }
        self.index.set_client_online(session, false);
        let state = self.sessions[session as usize]
            .as_mut()
            .expect("session just made");
        state.expiry_interval = expiry;
        state.expires_at = (expiry != u32::MAX).then(|| now + u64::from(expiry) * 1000);
        state.client_type = restored.client_type;
        state.journaled = true;
        state.subscriptions = restored
            .subscriptions
            .into_iter()
            .map(|(filter, value)| (filter.into_boxed_str(), value))
            .collect();
        state.inbound_qos2.extend(restored.inbound_qos2);
        state.applied = restored
            .applied
            .into_iter()
            .map(|(node, offset)| (node.into_boxed_str(), offset))
            .collect();
        if let Some(stored) = restored.will {
            // The connection that had it is gone (a crash, or its node's): due after
            // its delay from now, or when it was due, and never after the session's
            // end [MQTT-3.1.3-9].
            let due_at = if stored.due_at == 0 {
                now + u64::from(stored.delay_seconds) * 1000
            } else {
                (stored.due_at as i64 - self.wall_offset).max(now as i64) as u64
            };
            let due_at = state.expires_at.map_or(due_at, |end| due_at.min(end));
            state.will_stored = true;
            state.pending_will = Some(Box::new(super::session::PendingWill {
                due_at,
                will: stored.will,
            }));
        }
        for (slot, restored) in restored.deliveries {
            let sequence = match slot {
                Slot::Released(order) => order,
                Slot::Sequence(sequence) => {
                    state.next_sequence = state.next_sequence.max(sequence + 1);
                    sequence
                }
            };
            match restored {
                Restored::Deliver(out) => {
                    state.queue.push(out, super::queue::QueueLimit::NONE);
                }
                Restored::AwaitPubComp(packet_id) => state.record_inflight(
                    packet_id,
                    sequence,
                    Awaiting::PubComp { release_batch: 0 },
                ),
            }
        }
    }

    pub(super) fn restore_retained(&mut self, message: Arc<Message>) {
        let id = self.next_retained_id;
        self.next_retained_id += 1;
        if let Ok(previous) = self.retained.set(&message.topic, id, message.expires_at) {
            // The broker's own ($SYS) come back outside the limits, as published.
            let origin = if message.topic.starts_with('$') {
                Origin::Broker
            } else {
                Origin::Client
            };
            self.retained_messages
                .insert(id, message, origin, None, &mut self.users);
            if let Some(previous) = previous {
                self.retained_messages.remove(&previous, &mut self.users);
            }
        }
    }
}

fn snapshot_delivery(out: &mut Journal, client: &str, o: &Outgoing, wall_offset: i64) {
    out.enqueue(
        client,
        o.sequence,
        o.packet_id,
        &o.message,
        o.qos,
        o.retain,
        &o.subscription_ids,
        wall_offset,
    );
}

pub(super) struct JournalMessage {
    id_in_journal: u64,
    pub(super) message: Arc<Message>,
}

enum Restored {
    Deliver(Outgoing),
    AwaitPubComp(u16),
}

/// A restored delivery's place: a snapshot's PUBREL-only entries (their message
/// and sequence are gone) first, in record order, then deliveries by sequence.
/// Separate keys, so a PUBREL-only entry never takes a delivery's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Released(u64),
    Sequence(u64),
}

#[derive(Default)]
struct Restoring {
    expiry_interval: u32,
    client_type: ClientType,
    subscriptions: HashMap<String, (u8, u32)>,
    inbound_qos2: Vec<u16>,
    deliveries: BTreeMap<Slot, Restored>,
    by_packet_id: HashMap<u16, Slot>,
    /// PUBREL-only entries seen, for their slots.
    released_only: u64,
    /// Per cluster node topic, the offset the session holds deliveries up to.
    applied: Vec<(String, u64)>,
    will: Option<StoredWill>,
}

/// A will's Will Delay Interval in seconds (0 when it has none).
pub(super) fn will_delay_seconds(will: &Will) -> u32 {
    match will.properties.get(PropertyId::WillDelayInterval) {
        Some(Property::WillDelayInterval(seconds)) => *seconds,
        _ => 0,
    }
}

/// What the barrier asks (`durability::barrier`), from the parts that keep it.
impl Confirmations for Engine {
    fn journal_has(&self, batch: u64) -> bool {
        !self.journal.has_unconfirmed_at(batch)
    }

    fn stream_has(&self, batch: u64) -> bool {
        !self.stream_has_unconfirmed_at(batch)
    }

    fn bus_has(&self, wait: BusWait) -> bool {
        match wait {
            BusWait::None => true,
            BusWait::Slots { round, slots } => self.bus_slots_confirmed(round, slots),
            BusWait::Everyone { round } => self.bus_round_confirmed(round),
        }
    }
}
