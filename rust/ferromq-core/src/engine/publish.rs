//! Inbound PUBLISH and the acknowledgements of outbound ones.
//!
//! Inbound: QoS 0 is routed; QoS 1 is routed then PUBACKed; QoS 2 is routed once,
//! its packet id kept until PUBREL, and a PUBLISH repeating a kept id is only
//! PUBRECed again, never routed twice [MQTT-4.3.3-9]. A journaled publisher's
//! QoS 2 message is routed into session state at once but sent to nobody until the
//! batch holding its packet id (and the routing's records before it) is stored
//! (`Message::held_for_batch`): a crash before that leaves no copy anywhere, and
//! the retransmission the client must make is routed as new; a crash after it
//! leaves the id stored, so the retransmission is only PUBRECed; the PUBCOMP that
//! ends the flow waits for the id's stored release, so an id reused at once is new.
//! Outbound PUBREL of a journaled session waits for its stored Release record
//! (`send_pubrel`). v5 topic aliases are resolved
//! per connection [MQTT-3.3.2-10..12]; a client PUBLISH carrying a Subscription
//! Identifier is a protocol error (0x82) [MQTT-3.3.4-6]; a client with more unreleased QoS 2 messages
//! than the Receive Maximum announced is disconnected with 0x93 [MQTT-3.3.4-9].
//! Before any of that a PUBLISH passes the connection's rate quota (`quota`),
//! the limits the broker announced (`announce`) and, its topic rewritten by the
//! `[[rewrite.rules]]` (`rewrite`), the ACL (`acl`) and the payload schemas of
//! `[[validation.rules]]` (`validation`); after it an intercepting plugin may hold it
//! for its verdict (`plugins`) before it is accepted (`accept_publish`).
//!
//! Routing: one `Arc<Message>`, one index match (one delivery per session, highest
//! QoS, every subscription identifier), then per delivery the QoS is lowered to the
//! subscription's (seed 004: QoS downgrade) and handed to `delivery`; shared-group
//! deliveries, and groups with no member online, go through `shared`.

use std::sync::Arc;

use crate::acl::Action;
use crate::codec::{Ack, Packet, Property, PropertyId, Publish, QoS, ReasonCode};

use super::announce::PublishRefusal;
use super::message::Message;
use super::retained_store::{self, Origin};
use super::session::Awaiting;
use super::shards;
use super::sparkplug;
use super::validation::OnInvalid;
use super::{ConnId, Engine, Outgoing};

impl Engine {
    pub(super) fn handle_publish(
        &mut self,
        conn_id: ConnId,
        session: u32,
        publish: Publish,
        now: u64,
    ) {
        let Some(mut publish) = self.admit_publish(conn_id, session, publish, now) else {
            return;
        };
        self.stats.publish_received += 1;
        if publish
            .properties
            .get(PropertyId::SubscriptionIdentifier)
            .is_some()
        {
            // Only a server sends one (it names the subscriptions a delivery matched).
            self.refuse_with(
                conn_id,
                ReasonCode::ProtocolError,
                "PUBLISH from a client with a Subscription Identifier [MQTT-3.3.4-6]",
                now,
            );
            return;
        }
        if let Err(reason) = self.resolve_topic_alias(conn_id, &mut publish) {
            self.refuse(conn_id, reason, now);
            return;
        }
        if let Some(topic) = self.rewritten_topic(session, &publish.topic) {
            publish.topic = topic;
        }
        if self.conn_mut(conn_id).is_some_and(|c| c.bridge) {
            if let Some(topic) = self.local_topic(conn_id, &publish.topic) {
                publish.topic = topic;
            }
        }
        let v5 = self.conn_mut(conn_id).is_some_and(|c| c.version.is_v5());
        let refusal = self
            .publish_refusal(&publish)
            .or_else(|| self.publish_name_refusal(&publish, v5));
        match refusal {
            Some(PublishRefusal::Reject(reason, detail)) if publish.qos != QoS::AtMostOnce => {
                self.reject_publish(conn_id, &publish, reason, detail);
                return;
            }
            Some(
                PublishRefusal::Reject(reason, detail) | PublishRefusal::Disconnect(reason, detail),
            ) => {
                self.refuse_with(conn_id, reason, detail, now);
                return;
            }
            None => {}
        }
        let repeated_qos2 = publish.qos == QoS::ExactlyOnce
            && self
                .sessions
                .get(session as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.inbound_qos2.contains(&publish.packet_id));
        if !repeated_qos2 && !self.acl_allows(session, Action::Publish, &publish.topic) {
            self.deny_publish(conn_id, &publish, v5);
            return;
        }
        if !repeated_qos2 {
            if let Some(action) = self.invalid_payload(session, &publish, now) {
                self.refuse_invalid(conn_id, &publish, action, v5, now);
                return;
            }
        }
        if let Some(detail) = self.retained_quota_refusal(session, &publish, v5, now) {
            self.reject_publish(conn_id, &publish, ReasonCode::QuotaExceeded, detail);
            return;
        }
        if !repeated_qos2 && !self.plugins.is_empty() {
            // An intercepting plugin decides it first (`plugins`).
            match self.set_aside(conn_id, session, publish, 0) {
                Ok(()) => return,
                Err(back) => publish = back,
            }
        }
        self.accept_publish(conn_id, session, publish, now);
    }

    /// Route a PUBLISH that passed every check and acknowledge it; a QoS 2 one whose
    /// packet id is kept is only acknowledged again.
    pub(super) fn accept_publish(
        &mut self,
        conn_id: ConnId,
        session: u32,
        publish: Publish,
        now: u64,
    ) {
        let make_message = |publish: &Publish| {
            Arc::new(Message::from_publish(
                &publish.topic,
                &publish.payload,
                publish.qos,
                publish.retain,
                &publish.properties,
                Some(session),
                now,
            ))
        };
        // Each arm streams the PUBLISH (`export`), and shows it to the plugins that
        // observe it (`plugins`), once it is sure to be routed.
        match publish.qos {
            QoS::AtMostOnce => {
                self.record_accepted(session, &publish, now);
                self.route(make_message(&publish), now);
            }
            QoS::AtLeastOnce => {
                self.record_accepted(session, &publish, now);
                let delivered = self.route(make_message(&publish), now);
                let ack = self.publish_ack(conn_id, publish.packet_id, delivered);
                self.acknowledge(conn_id, Packet::PubAck(ack));
            }
            QoS::ExactlyOnce => {
                let receive_maximum = usize::from(self.config.receive_maximum);
                let Some(state) = self.session_mut(session) else {
                    return;
                };
                if !state.inbound_qos2.contains(&publish.packet_id) {
                    if state.inbound_qos2.len() >= receive_maximum {
                        self.refuse(conn_id, ReasonCode::ReceiveMaximumExceeded, now);
                        return;
                    }
                    state.inbound_qos2.insert(publish.packet_id);
                    let journaled = state.journaled;
                    let mut message = make_message(&publish);
                    if journaled {
                        // Sent to nobody before the batch holding its packet id is
                        // stored: a retransmission after a crash is then known.
                        Arc::get_mut(&mut message)
                            .expect("not shared yet")
                            .held_for_batch = self.journal.current_batch();
                    }
                    self.record_accepted(session, &publish, now);
                    if journaled {
                        self.begin_crossing(session);
                    }
                    let delivered = self.route(message, now);
                    self.end_crossing();
                    // After the routing's records: stored, it implies they are.
                    self.journal_inbound_qos2(session, publish.packet_id, true);
                    let ack = self.publish_ack(conn_id, publish.packet_id, delivered);
                    self.acknowledge(conn_id, Packet::PubRec(ack));
                } else {
                    self.acknowledge(conn_id, Packet::PubRec(Ack::new(publish.packet_id)));
                }
            }
        }
    }

    /// An accepted PUBLISH goes to the stream and to the plugins that observe it.
    fn record_accepted(&mut self, session: u32, publish: &Publish, now: u64) {
        self.export_message(session, publish, now);
        self.observe(session, publish);
    }

    /// A PUBLISH the ACL denies is not routed. v5 QoS 1/2 hear 0x87 Not authorized;
    /// 3.1.1 has no refusal in PUBACK/PUBREC, so it is acknowledged as usual
    /// (a QoS 2 id is not kept: its PUBREL gets PUBCOMP all the same).
    fn deny_publish(&mut self, conn_id: ConnId, publish: &Publish, v5: bool) {
        let reason = if v5 {
            ReasonCode::NotAuthorized
        } else {
            ReasonCode::Success
        };
        self.answer_unrouted(conn_id, publish, reason, "denied by the ACL");
    }

    /// A PUBLISH whose payload a validation rule refuses (`validation`) is not
    /// routed: dropped (acknowledged as usual), rejected (v5 QoS 1/2: 0x99; others
    /// as dropped) or its connection closed with 0x99.
    fn refuse_invalid(
        &mut self,
        conn_id: ConnId,
        publish: &Publish,
        action: OnInvalid,
        v5: bool,
        now: u64,
    ) {
        const DETAIL: &str = "payload failed validation";
        match action {
            OnInvalid::Disconnect => {
                self.refuse_with(conn_id, ReasonCode::PayloadFormatInvalid, DETAIL, now);
            }
            OnInvalid::Reject if v5 => {
                self.answer_unrouted(conn_id, publish, ReasonCode::PayloadFormatInvalid, DETAIL);
            }
            OnInvalid::Reject | OnInvalid::Drop => {
                self.answer_unrouted(conn_id, publish, ReasonCode::Success, DETAIL);
            }
        }
    }

    /// The PUBACK/PUBREC of a QoS 1/2 PUBLISH that is not routed, with `reason`
    /// (and `detail` as its Reason String when it is not Success).
    pub(super) fn answer_unrouted(
        &mut self,
        conn_id: ConnId,
        publish: &Publish,
        reason: ReasonCode,
        detail: &'static str,
    ) {
        let mut ack = Ack::new(publish.packet_id);
        if reason != ReasonCode::Success {
            ack.reason = reason;
            ack.properties = self.ack_reason_string(conn_id, detail);
        }
        match publish.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.acknowledge(conn_id, Packet::PubAck(ack)),
            QoS::ExactlyOnce => self.acknowledge(conn_id, Packet::PubRec(ack)),
        }
    }

    /// PUBACK/PUBREC refusing a QoS 1/2 PUBLISH with `reason`; it is not routed.
    fn reject_publish(
        &mut self,
        conn_id: ConnId,
        publish: &Publish,
        reason: ReasonCode,
        detail: &'static str,
    ) {
        let mut ack = Ack::new(publish.packet_id);
        ack.reason = reason;
        ack.properties = self.ack_reason_string(conn_id, detail);
        let packet = if publish.qos == QoS::AtLeastOnce {
            Packet::PubAck(ack)
        } else {
            Packet::PubRec(ack)
        };
        self.write(conn_id, &packet);
    }

    /// Why a v5 QoS 1/2 retained PUBLISH is refused by a retained limit (answered
    /// 0x97 and not routed); others are routed and only not stored (`retained_store`).
    fn retained_quota_refusal(
        &mut self,
        session: u32,
        publish: &Publish,
        v5: bool,
        now: u64,
    ) -> Option<&'static str> {
        let applies = v5 && publish.retain && !publish.payload.is_empty();
        if !applies || publish.qos == QoS::AtMostOnce {
            return None;
        }
        let size = (publish.topic.len() + publish.payload.len()) as u64;
        let owner = self.retained_owner(Some(session));
        let detail = self.retained_refusal(&publish.topic, size, owner, now)?;
        self.stats.retained_refused += 1;
        Some(detail)
    }

    /// PUBACK/PUBREC for a routed message: v5 says 0x10 when nobody subscribed (a
    /// copy discarded as too large for its client counts as sent [MQTT-3.1.2-25]).
    fn publish_ack(&mut self, conn_id: ConnId, packet_id: u16, delivered: usize) -> Ack {
        let mut ack = Ack::new(packet_id);
        if delivered == 0 && self.conn_mut(conn_id).is_some_and(|c| c.version.is_v5()) {
            ack.reason = ReasonCode::NoMatchingSubscribers;
        }
        ack
    }

    fn resolve_topic_alias(
        &mut self,
        conn_id: ConnId,
        publish: &mut Publish,
    ) -> Result<(), ReasonCode> {
        let Some(Property::TopicAlias(alias)) =
            publish.properties.get(PropertyId::TopicAlias).cloned()
        else {
            return Ok(());
        };
        // Above the announced maximum is 0x94 [MQTT-3.3.2-9]; an alias with no mapping
        // yet is a Protocol Error (§3.3.2.3.4); the codec refuses alias 0 (0x82).
        if alias > self.config.max_topic_alias {
            return Err(ReasonCode::TopicAliasInvalid);
        }
        let conn = self.conn_mut(conn_id).ok_or(ReasonCode::ProtocolError)?;
        if publish.topic.is_empty() {
            publish.topic = conn
                .topic_aliases
                .as_ref()
                .and_then(|aliases| aliases.get(&alias))
                .cloned()
                .ok_or(ReasonCode::ProtocolError)?;
        } else {
            conn.topic_aliases
                .get_or_insert_with(Box::default)
                .insert(alias, publish.topic.clone());
        }
        Ok(())
    }

    /// Route a client's message (or will) to every matching session and store it if
    /// retained; with `[sparkplug] aware`, an NDEATH is stamped and a birth also
    /// published as its retained certificate (`sparkplug`). Returns the number of
    /// sessions it was delivered or queued to.
    pub(super) fn route(&mut self, message: Arc<Message>, now: u64) -> usize {
        let aware = self.config.sparkplug;
        let message = if aware.aware && aware.ndeath_timestamp {
            let unix_ms = (now as i64 + self.wall_offset).max(0) as u64;
            sparkplug::stamped_death(&message, unix_ms).map_or(message, Arc::new)
        } else {
            message
        };
        if message.retain {
            self.store_retained(&message, Origin::Client, now);
        }
        let certificate = aware
            .aware
            .then(|| sparkplug::birth_certificate(&message))
            .flatten();
        let delivered = self.fan_out(message, now);
        if let Some(certificate) = certificate {
            self.route(Arc::new(certificate), now);
        }
        delivered
    }

    /// Deliver or queue a message to every matching session; returns how many.
    pub(super) fn fan_out(&mut self, message: Arc<Message>, now: u64) -> usize {
        self.fan_out_from(message, now, false)
    }

    /// Deliver a message another shard routed here to this shard's own sessions
    /// (`shards.rs`); shared groups are each shard's own, so they take only the
    /// messages published on their shard.
    pub(super) fn fan_out_routed(&mut self, message: Arc<Message>, now: u64) -> usize {
        self.fan_out_from(message, now, true)
    }

    fn fan_out_from(&mut self, message: Arc<Message>, now: u64, routed: bool) -> usize {
        let mut matches = std::mem::take(&mut self.matches);
        self.index
            .match_topic(&message.topic, message.publisher, &mut matches);
        let message = if routed {
            let local = matches
                .iter()
                .filter(|d| d.group.is_none() && shards::remote_shard(d.client).is_none())
                .map(|d| d.client);
            self.held_routed(message, local)
        } else {
            message
        };
        let mut delivered = 0;
        for delivery in matches.iter() {
            if let Some(shard) = shards::remote_shard(delivery.client) {
                if !routed {
                    match delivery.group {
                        Some(group) => self.route_shared_to_shard(shard, &message, group),
                        None => self.route_to_shard(shard, &message),
                    }
                    // A subscriber matched (there): not "no matching subscribers".
                    delivered += 1;
                }
                continue;
            }
            if routed && (delivery.group.is_some() || !self.accepts_arrival(delivery.client)) {
                continue;
            }
            let qos = message.qos.min(delivery.qos);
            let retain = message.retain && delivery.retain_as_published;
            let out = Outgoing::new(
                message.clone(),
                qos,
                retain,
                delivery.subscription_ids.to_vec(),
            );
            let sent = match delivery.group {
                Some(group) => self.deliver_shared(group, delivery.client, out, now),
                None => self.deliver(delivery.client, out, now),
            };
            if sent {
                delivered += 1;
            }
        }
        for &group in matches.unserved_groups().iter().filter(|_| !routed) {
            if self.queue_for_group(group, &message, now) {
                delivered += 1;
            }
        }
        self.matches = matches;
        delivered
    }

    /// Keep the last retained message per topic; an empty payload clears it
    /// [MQTT-3.3.1-5..7]. A client's one that a retained limit refuses is not
    /// stored, and the topic's existing one stays (`retained_store`).
    pub(super) fn store_retained(&mut self, message: &Arc<Message>, origin: Origin, now: u64) {
        let previous = if message.payload.is_empty() {
            self.clear_retained(&message.topic);
            None
        } else {
            let owner = self.retained_owner(message.publisher);
            let size = retained_store::size_of(message);
            let refused = origin == Origin::Client
                && self
                    .retained_refusal(&message.topic, size, owner, now)
                    .is_some();
            if refused {
                self.stats.retained_refused += 1;
                return;
            }
            let id = self.next_retained_id;
            self.next_retained_id += 1;
            let deadline = self.retained_deadline(message, now);
            match self.retained.set(&message.topic, id, deadline) {
                Ok(previous) => {
                    self.retained_messages.insert(
                        id,
                        message.clone(),
                        origin,
                        owner,
                        &mut self.users,
                    );
                    self.journal_retained(&message.topic, Some(message));
                    previous
                }
                Err(_) => None,
            }
        };
        if let Some(previous) = previous {
            self.retained_messages.remove(&previous, &mut self.users);
        }
    }

    /// Remove `topic`'s retained message (an empty retained PUBLISH, the admin
    /// API); false when it had none.
    pub fn clear_retained(&mut self, topic: &str) -> bool {
        let cleared = self.forget_retained(topic);
        if cleared {
            self.journal_retained(topic, None);
        }
        cleared
    }

    /// Remove `topic`'s retained message without journaling it (a shard applying
    /// another's clear); false when it had none.
    pub(super) fn forget_retained(&mut self, topic: &str) -> bool {
        let Some(previous) = self.retained.clear(topic) else {
            return false;
        };
        self.retained_messages.remove(&previous, &mut self.users);
        true
    }

    pub(super) fn handle_puback(&mut self, session: u32, packet_id: u16, now: u64) {
        let Some(state) = self.session_mut(session) else {
            return;
        };
        if matches!(
            state.inflight.get(&packet_id).map(|e| &e.awaiting),
            Some(Awaiting::PubAck(_))
        ) {
            if let Some(entry) = state.inflight.remove(&packet_id) {
                self.delivery_completed(session, packet_id, &entry.awaiting);
            }
            self.drain_queue(session, now);
        }
    }

    /// A delivery's flow ended at the client (PUBACK, refused PUBREC): journal it,
    /// or report a streamed one done.
    fn delivery_completed(&mut self, session: u32, packet_id: u16, awaiting: &Awaiting) {
        match awaiting {
            Awaiting::PubAck(out) | Awaiting::PubRec(out) if out.application_token.is_some() => {
                self.journal_removed(session, out);
            }
            _ => self.journal_ack(session, packet_id),
        }
    }

    pub(super) fn handle_pubrec(&mut self, conn_id: ConnId, session: u32, ack: Ack, now: u64) {
        let current_batch = self.journal.current_batch();
        let Some(state) = self.session_mut(session) else {
            return;
        };
        let known = matches!(
            state.inflight.get(&ack.packet_id).map(|e| &e.awaiting),
            Some(Awaiting::PubRec(_) | Awaiting::PubComp { .. })
        );
        if !known {
            let mut rel = Ack::new(ack.packet_id);
            rel.reason = ReasonCode::PacketIdentifierNotFound;
            self.write(conn_id, &Packet::PubRel(rel));
            return;
        }
        if ack.reason.is_error() {
            // The receiver refused it: the flow ends here [MQTT-4.3.3-4 (v5)].
            if let Some(entry) = state.inflight.remove(&ack.packet_id) {
                self.delivery_completed(session, ack.packet_id, &entry.awaiting);
            }
            self.drain_queue(session, now);
            return;
        }
        // The Release record joins the current batch; PUBREL waits for it.
        let release_batch = if state.journaled { current_batch } else { 0 };
        let received = state.inflight.get_mut(&ack.packet_id).map(|entry| {
            std::mem::replace(&mut entry.awaiting, Awaiting::PubComp { release_batch })
        });
        if let Some(Awaiting::PubRec(out)) = &received {
            if let Some(token) = out.application_token {
                // The member holds it now; only PUBREL/PUBCOMP remain, kept below.
                self.application_delivery_done(token);
            }
        }
        self.journal_release(session, ack.packet_id);
        self.send_pubrel(conn_id, ack.packet_id, release_batch);
    }

    /// PUBREL for an outbound QoS 2 delivery past PUBREC. A journaled session's
    /// waits until the store has its Release record (`release_batch`): once the
    /// client has PUBREL it forgets the packet id [MQTT-4.3.3-9], so a restart that
    /// resent the PUBLISH would deliver it twice [MQTT-4.3.3-6].
    pub(super) fn send_pubrel(&mut self, conn_id: ConnId, packet_id: u16, release_batch: u64) {
        let packet = Packet::PubRel(Ack::new(packet_id));
        if release_batch != 0 && self.journal.has_unconfirmed_at(release_batch) {
            self.hold_until(conn_id, release_batch, packet);
        } else {
            self.write(conn_id, &packet);
        }
    }

    pub(super) fn handle_pubcomp(&mut self, session: u32, packet_id: u16, now: u64) {
        let Some(state) = self.session_mut(session) else {
            return;
        };
        if matches!(
            state.inflight.get(&packet_id).map(|e| &e.awaiting),
            Some(Awaiting::PubComp { .. })
        ) {
            state.inflight.remove(&packet_id);
            self.journal_ack(session, packet_id);
            self.drain_queue(session, now);
        }
    }

    /// PUBREL releases an inbound QoS 2 packet id [MQTT-4.3.3-10]. The PUBCOMP waits,
    /// as a PUBREC does, for the batch holding the release: a client may reuse the id
    /// the moment PUBCOMP arrives, and a restart that still had the id would take the
    /// new message's retransmission for the old one's and never route it.
    pub(super) fn handle_pubrel(&mut self, conn_id: ConnId, session: u32, packet_id: u16) {
        let released = self
            .session_mut(session)
            .is_some_and(|state| state.inbound_qos2.remove(&packet_id));
        if released {
            self.journal_inbound_qos2(session, packet_id, false);
        }
        let mut comp = Ack::new(packet_id);
        if !released {
            comp.reason = ReasonCode::PacketIdentifierNotFound;
        }
        self.acknowledge(conn_id, Packet::PubComp(comp));
    }
}
