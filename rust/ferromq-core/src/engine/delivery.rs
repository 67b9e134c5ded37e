//! Outbound delivery: straight to the socket when the window allows, else into the
//! session's queue; the queue drains as acknowledgements free the window.
//!
//! A QoS 1/2 delivery is sent now only if the session is online, its connection
//! writable, nothing is queued ahead of it (so order holds [MQTT-4.6.0-6]) and the
//! window has room; QoS 0 needs no window and is sent whenever the connection is
//! writable and no QoS 0 delivery is queued ahead of it. Neither goes straight out
//! while the connection's retained cursor still has messages (`retained_cursor`),
//! nor while its message waits for the store (`Message::held_for_batch`). The
//! drain takes the retained cursor's turn first, then the queue; one stopped by
//! the engine's own output buffer (not the transport) runs again after
//! `take_output` empties it. Expired messages are dropped at send time
//! [MQTT-3.3.2-5], and a retained message the ACL does not let the client read is
//! skipped (`acl`), as is a message withheld from a subscription that reaches
//! only some topics (`Engine::withheld`: checked as it is delivered and again as
//! a queued one is sent). A PUBLISH above the client's Maximum Packet Size is dropped for
//! that client only and, for QoS 1/2, never enters the window; it counts as sent,
//! so a publisher whose every match was too large still hears 0x00, not 0x10
//! [MQTT-3.1.2-25, 3.1.2-26]. Outbound topic aliases are applied as each PUBLISH is
//! written (`alias_out`).

use crate::acl::Action;
use crate::codec::{Packet, Publish, QoS};

use super::queue::{Pushed, QueueLimit};
use super::session::Awaiting;
use super::stats::DropReason;
use super::{ConnId, Engine, Outgoing};

/// What one step of a retained cursor did.
enum Step {
    Done,
    Blocked,
    NotDue,
}

impl Engine {
    /// Deliver to a session: send, queue or drop. True unless dropped (a copy too
    /// large for the client counts as sent [MQTT-3.1.2-25]). A QoS 1/2
    /// delivery gets its sequence and packet id here, and a journaled session's
    /// journal gets it once it is sent or queued.
    pub(super) fn deliver(&mut self, session: u32, mut out: Outgoing, now: u64) -> bool {
        if out.message.is_expired(now) {
            self.count_dropped(DropReason::Expired, Some(session), &out.message, now);
            return false;
        }
        if self.withheld(session, &out.message.topic) {
            return false;
        }
        out.seen = self.subscriptions_seen();
        let Some(state) = self.session_mut(session) else {
            return false;
        };
        if out.qos != QoS::AtMostOnce {
            (out.sequence, out.packet_id) = state.assign_packet_id();
        }
        let online = state.conn;
        let held = self.is_held(&out.message);
        let conn = online.filter(|&conn| !held && self.has_room(conn) && self.retained_sent(conn));
        let state = self.sessions[session as usize]
            .as_ref()
            .expect("session checked above");
        match (conn, out.qos) {
            (Some(conn), QoS::AtMostOnce) if !state.queue.has_qos0() => {
                return self.send_now(session, conn, out, now);
            }
            (Some(conn), _) if state.queue.is_empty() && self.window_open(session, conn) => {
                return self.send_now(session, conn, out, now);
            }
            (None, QoS::AtMostOnce) if online.is_none() && !self.config.queue_qos0_offline => {
                self.count_dropped(DropReason::Qos0Offline, Some(session), &out.message, now);
                return false;
            }
            _ => {}
        }
        let limit = self.bridge_queue_limit(session, self.queue_limit());
        if held {
            self.drain_when_stored(session, &out.message);
        }
        let state = self.session_mut(session).expect("session checked above");
        if state.queue.is_empty() {
            state.queue_moved_at = now;
        }
        let record = (state.journaled && out.qos != QoS::AtMostOnce).then(|| out.clone());
        // Only while the stream records drops: a refused delivery leaves with the queue.
        let exported = self.exports_events().then(|| out.message.clone());
        let state = self.session_mut(session).expect("session checked above");
        let pushed = state.queue.push(out, limit);
        match pushed {
            Pushed::Refused(reason) => {
                self.stats.count_drop(reason, 1);
                if let Some(message) = exported {
                    self.export_dropped(reason, Some(session), &message, now);
                }
                return false;
            }
            Pushed::QueuedDropping(dropped, reason) => {
                for dropped in &dropped {
                    self.count_dropped(reason, Some(session), &dropped.message, now);
                    self.journal_removed(session, dropped);
                }
            }
            Pushed::Queued => {}
        }
        if let Some(out) = record {
            self.journal_delivery(session, &out);
        }
        true
    }

    /// The bounds of a session's or group's queue.
    pub(super) fn queue_limit(&self) -> QueueLimit {
        QueueLimit {
            count: usize::from(self.config.queue_limit),
            bytes: match self.config.max_queued_bytes {
                0 => u64::MAX,
                bytes => bytes,
            },
            policy: self.config.drop_policy,
        }
    }

    /// Write a delivery that may go now (a QoS 1/2 one numbered, into the window
    /// and the journal). True: one too large for the client counts as sent.
    fn send_now(&mut self, session: u32, conn: ConnId, out: Outgoing, now: u64) -> bool {
        if out.qos == QoS::AtMostOnce {
            self.send_publish(conn, &out, 0, now);
            return true;
        }
        self.journal_delivery(session, &out);
        self.send_in_window(session, conn, out, now)
    }

    /// Move queued deliveries and pending retained messages into the window while
    /// the connection takes them, then let the session's shared groups hand it
    /// what they hold back.
    pub(super) fn drain_queue(&mut self, session: u32, now: u64) {
        self.drain_session_queue(session, now);
        self.drain_groups_of(session, now);
    }

    fn drain_session_queue(&mut self, session: u32, now: u64) {
        loop {
            let Some(conn) = self
                .sessions
                .get(session as usize)
                .and_then(Option::as_ref)
                .and_then(|s| s.conn)
            else {
                return;
            };
            // Nothing overtakes a SUBACK held for the other shards (`shards`).
            if !self.has_room(conn)
                || self.conns[conn as usize]
                    .as_ref()
                    .is_some_and(|c| c.subacks_held > 0)
            {
                return;
            }
            match self.send_retained(session, conn, now) {
                Step::Done => continue,
                Step::Blocked => return,
                Step::NotDue => {}
            }
            let state = self.sessions[session as usize]
                .as_ref()
                .expect("session checked above");
            let Some(front) = state.queue.front() else {
                return;
            };
            if self.is_held(&front.message) {
                let message = front.message.clone();
                self.drain_when_stored(session, &message);
                return;
            }
            let qos = front.qos;
            if qos != QoS::AtMostOnce && !self.window_open(session, conn) {
                return;
            }
            let state = self.session_mut(session).expect("session checked above");
            state.queue_moved_at = now;
            let out = state.queue.pop().expect("queue front checked above");
            if out.message.is_expired(now) {
                self.count_dropped(DropReason::Expired, Some(session), &out.message, now);
                self.journal_removed(session, &out);
            } else if self.withheld(session, &out.message.topic) {
                self.journal_removed(session, &out);
            } else if qos == QoS::AtMostOnce {
                self.send_publish(conn, &out, 0, now);
            } else {
                self.send_in_window(session, conn, out, now);
            }
        }
    }

    /// One step of the connection's retained cursor (`retained_cursor`): the next
    /// pending retained message sent (or skipped: cleared, replaced, expired),
    /// blocked by the window or the store, or not due yet.
    fn send_retained(&mut self, session: u32, conn: ConnId, now: u64) -> Step {
        let removed = self.sessions[session as usize]
            .as_ref()
            .map_or(0, |s| s.queue.removed());
        let Some(c) = self.conns[conn as usize].as_ref() else {
            return Step::Blocked;
        };
        let Some(pending) = c.retained.due(removed) else {
            return Step::NotDue;
        };
        let (cap, subscription_ids) = (pending.qos, pending.subscription_ids.to_vec());
        let message = self
            .retained_messages
            .get(&pending.id)
            .filter(|m| !m.is_expired(now))
            .cloned();
        let readable = message.as_ref().is_some_and(|m| {
            self.acl_allows(session, Action::Read, &m.topic) && !self.withheld(session, &m.topic)
        });
        let Some(message) = message.filter(|_| readable) else {
            self.advance_retained(conn);
            return Step::Done;
        };
        if self.is_held(&message) {
            self.drain_when_stored(session, &message);
            return Step::Blocked;
        }
        let qos = message.qos.min(cap);
        if qos != QoS::AtMostOnce && !self.window_open(session, conn) {
            return Step::Blocked;
        }
        self.advance_retained(conn);
        let mut out = Outgoing::new(message, qos, true, subscription_ids);
        if qos != QoS::AtMostOnce {
            let state = self.session_mut(session).expect("session checked above");
            (out.sequence, out.packet_id) = state.assign_packet_id();
        }
        self.send_now(session, conn, out, now);
        Step::Done
    }

    fn advance_retained(&mut self, conn: ConnId) {
        if let Some(c) = self.conn_mut(conn) {
            c.retained.advance();
        }
    }

    /// No retained message (nor a SUBACK held for the other shards) is pending on
    /// the connection: live deliveries may go straight out without overtaking one.
    pub(super) fn retained_sent(&self, conn: ConnId) -> bool {
        self.conns[conn as usize]
            .as_ref()
            .is_none_or(|c| c.retained.is_empty() && c.subacks_held == 0)
    }

    /// The connection takes more output now. One held back only by the engine's
    /// own buffer (the transport did not pause) is drained again after
    /// `take_output` empties it.
    fn has_room(&mut self, conn: ConnId) -> bool {
        if self.is_writable(conn) {
            return true;
        }
        if let Some(c) = self.conns[conn as usize].as_mut() {
            if c.writable && !c.is_closed() && !c.refill_queued {
                c.refill_queued = true;
                self.refill.push(conn);
            }
        }
        false
    }

    pub(super) fn is_writable(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.writable && c.out.len() < self.config.write_high_water)
    }

    pub(super) fn window_open(&self, session: u32, conn: ConnId) -> bool {
        let window = self.conns[conn as usize]
            .as_ref()
            .map_or(0, |c| c.send_window);
        self.sessions[session as usize]
            .as_ref()
            .is_some_and(|s| s.inflight.len() < usize::from(window))
    }

    /// Send a QoS 1/2 delivery under its packet id and keep it in flight; one the
    /// client cannot take (too large) is done with, as if sent [MQTT-3.1.2-25].
    fn send_in_window(&mut self, session: u32, conn: ConnId, out: Outgoing, now: u64) -> bool {
        let (packet_id, sequence) = (out.packet_id, out.sequence);
        if !self.send_publish(conn, &out, packet_id, now) {
            self.journal_removed(session, &out);
            return true;
        }
        let entry = if out.qos == QoS::AtLeastOnce {
            Awaiting::PubAck(out)
        } else {
            Awaiting::PubRec(out)
        };
        if let Some(state) = self.session_mut(session) {
            state.record_inflight(packet_id, sequence, entry);
        }
        true
    }

    /// Write one PUBLISH. False when it was dropped: the connection is writable (a
    /// closed one has left its session), so the PUBLISH exceeded the client's Maximum
    /// Packet Size.
    fn send_publish(&mut self, conn: ConnId, out: &Outgoing, packet_id: u16, now: u64) -> bool {
        let packet = self.publish_packet(conn, out, packet_id, false, now);
        if self.write_publish(conn, packet, &out.message.topic) {
            self.stats.publish_sent += 1;
            true
        } else {
            let session = self.conn_mut(conn).and_then(|c| c.session());
            self.count_dropped(DropReason::TooLarge, session, &out.message, now);
            false
        }
    }

    /// The PUBLISH of one delivery on one connection.
    pub(super) fn publish_packet(
        &self,
        conn: ConnId,
        out: &Outgoing,
        packet_id: u16,
        dup: bool,
        now: u64,
    ) -> Packet {
        let (v5, bridge) = self.conns[conn as usize]
            .as_ref()
            .map_or((false, false), |c| (c.version.is_v5(), c.bridge));
        let message = &out.message;
        let topic = bridge
            .then(|| self.remote_topic(conn, &message.topic))
            .flatten()
            .unwrap_or_else(|| message.topic.clone());
        let properties = if v5 {
            message.delivery_properties(&out.subscription_ids, now)
        } else {
            crate::codec::Properties::new()
        };
        Packet::Publish(Publish {
            dup: dup || out.restored,
            qos: out.qos,
            retain: out.retain,
            topic,
            packet_id,
            properties,
            payload: message.payload.clone(),
        })
    }
}
