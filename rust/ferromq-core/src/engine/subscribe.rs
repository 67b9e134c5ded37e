//! SUBSCRIBE and UNSUBSCRIBE, and retained messages sent on subscribe.
//!
//! Every filter is granted the QoS it asked for up to the Maximum QoS; a filter the
//! index refuses gets 0x8F in 5.0 and 0x80 in 3.1.1, a new one beyond
//! `max_subscriptions_per_client` 0x97 (Quota exceeded) in 5.0 and 0x80 in 3.1.1,
//! one using a feature the
//! broker does not offer its reason code from `announce`, one holding control
//! characters its code from `names` (also in UNSUBSCRIBE), one the ACL denies 0x87
//! in 5.0 and 0x80 in 3.1.1 (`acl`; a shared filter checked without its
//! `$share/{group}/`). SUBACK goes out
//! first, then the retained messages matching each granted filter, per Retain
//! Handling (0 always, 1 only for a new subscription, 2 never) and never for shared
//! subscriptions [MQTT-3.3.1-9..11, 3.8.4-?]; they carry RETAIN=1 and their QoS is
//! lowered to the subscription's. They join the connection's retained cursor
//! (`retained_cursor`), which the delivery drain sends from as the socket and the
//! window allow; an UNSUBSCRIBE drops what its filter still had to send. With
//! `client_events`, each SUBSCRIBE and UNSUBSCRIBE is reported once (`Subscribed`,
//! `Unsubscribed`), before its ack.
//!
//! A SUBACK waits (in the barrier, behind its connection's earlier replies) until the store has the subscriptions of a
//! journaled session, so a broker killed right after a SUBACK still has what it
//! granted, and on a node of shards or a cluster until the other shards (or the
//! subscription topic) hold the filters; what the client subscribed to waits behind it
//! (`Connection::subacks_held`).

use super::persist::Reply;
use crate::acl::Reach;
use crate::codec::{
    Packet, Properties, Property, PropertyId, ProtocolVersion, QoS, ReasonCode, RetainHandling,
    SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe,
};
use crate::durability::{BusWait, Ticket};
use crate::topic::{parse_shared_filter, IndexError};

use super::{ConnId, Engine, Event};

/// Why the broker's own subscription (`subscribe_session`) was not made.
#[derive(Debug)]
pub(super) enum SubscribeRefusal {
    Filter(IndexError),
    Quota,
    Denied,
}

/// A SUBSCRIBE's answer: its SUBACK and the retained messages that follow it.
#[derive(Debug)]
pub(super) struct Granted {
    pub conn: ConnId,
    pub session: u32,
    pub suback: Packet,
    retained_for: Vec<(String, QoS)>,
    subscription_ids: Vec<u32>,
}

impl Engine {
    pub(super) fn handle_subscribe(
        &mut self,
        conn_id: ConnId,
        session: u32,
        mut subscribe: Subscribe,
        now: u64,
    ) {
        for (filter, _) in &mut subscribe.filters {
            if let Some(rewritten) = self.rewritten_filter(session, filter) {
                *filter = rewritten;
            }
        }
        let v5 = self.conn_mut(conn_id).is_some_and(|c| c.version.is_v5());
        let subscription_id = match subscribe.properties.get(PropertyId::SubscriptionIdentifier) {
            Some(Property::SubscriptionIdentifier(id)) => Some(*id),
            _ => None,
        };
        if self.subscription_id_refused(subscription_id) {
            self.refuse_with(
                conn_id,
                ReasonCode::SubscriptionIdentifiersNotSupported,
                "Subscription Identifier Available is 0",
                now,
            );
            return;
        }
        let mut reasons = Vec::with_capacity(subscribe.filters.len());
        let mut retained_for = Vec::new();
        let mut properties = Properties::new();
        for (filter, options) in &subscribe.filters {
            let refusal = self
                .filter_refusal(filter, v5)
                .or_else(|| self.filter_name_refusal(filter, v5))
                .or_else(|| self.subscription_quota_refusal(session, filter, v5));
            if let Some(refusal) = refusal {
                reasons.push(refusal);
                properties = self.ack_reason_string(conn_id, refusal.name());
                continue;
            }
            if self.subscription_reach(session, filter) == Reach::None {
                reasons.push(if v5 {
                    ReasonCode::NotAuthorized
                } else {
                    ReasonCode::UnspecifiedError
                });
                properties = self.ack_reason_string(conn_id, "denied by the ACL");
                continue;
            }
            let options = self.granted(*options);
            match self.add_subscription(session, filter, options, subscription_id) {
                Ok(is_new) => {
                    reasons.push(match options.qos {
                        QoS::AtMostOnce => ReasonCode::Success,
                        QoS::AtLeastOnce => ReasonCode::GrantedQos1,
                        QoS::ExactlyOnce => ReasonCode::GrantedQos2,
                    });
                    if sends_retained(filter, options, is_new) {
                        retained_for.push((filter.to_string(), options.qos));
                    }
                }
                Err(_) if v5 => reasons.push(ReasonCode::TopicFilterInvalid),
                Err(_) => reasons.push(ReasonCode::UnspecifiedError),
            }
        }
        if self.exports_events() {
            let filters: Vec<(&str, ReasonCode)> = subscribe
                .filters
                .iter()
                .zip(&reasons)
                .map(|((filter, _), reason)| (filter.as_str(), *reason))
                .collect();
            self.export_subscribed(session, &filters, now);
        }
        if self.config.client_events {
            let filters = subscribe
                .filters
                .iter()
                .zip(&reasons)
                .map(|((filter, options), reason)| {
                    (filter.as_str().to_owned(), options.qos as u8, *reason)
                })
                .collect();
            let client_id = self.client_id_of(session);
            self.events.push(Event::Subscribed {
                conn: conn_id,
                client_id,
                filters,
            });
        }
        let suback = Packet::SubAck(SubAck {
            packet_id: subscribe.packet_id,
            properties,
            reasons,
        });
        let granted = Granted {
            conn: conn_id,
            session,
            suback,
            retained_for,
            subscription_ids: subscription_id.into_iter().collect(),
        };
        if self.hold_suback(granted, now) {
            self.drain_queue(session, now);
        }
    }

    /// Send a SUBACK once the store has a journaled session's subscriptions and every
    /// other shard holds them (module header), held in the barrier until then; true
    /// when it was held.
    pub(super) fn hold_suback(&mut self, granted: Granted, now: u64) -> bool {
        let journaled = self
            .sessions
            .get(granted.session as usize)
            .and_then(Option::as_ref)
            .is_some_and(|state| state.journaled);
        let batch = match journaled {
            true => self.journal.unconfirmed_batch().unwrap_or(0),
            false => 0,
        };
        let ticket = Ticket {
            journal_batch: batch,
            bus: match self.suback_round() {
                0 => BusWait::None,
                round => BusWait::Everyone { round },
            },
            ..Ticket::default()
        };
        let conn = granted.conn;
        let held = self.reply(conn, ticket, Reply::SubAck(granted), now);
        if held {
            if let Some(conn) = self.conn_mut(conn) {
                conn.subacks_held += 1;
            }
        }
        held
    }

    /// A held SUBACK the barrier let go: sent unless its connection ended, or its
    /// session moved to another, meanwhile.
    pub(super) fn release_suback(&mut self, granted: Granted, now: u64) {
        let Some(conn) = self.conn_mut(granted.conn) else {
            return;
        };
        if conn.session() == Some(granted.session) {
            conn.subacks_held = conn.subacks_held.saturating_sub(1);
            self.send_suback(granted, now);
        }
    }

    /// Write a SUBACK, then put the retained messages of its filters on the cursor.
    pub(super) fn send_suback(&mut self, granted: Granted, now: u64) {
        self.write(granted.conn, &granted.suback);
        for (filter, qos) in granted.retained_for {
            self.queue_retained(
                granted.conn,
                granted.session,
                &filter,
                qos,
                &granted.subscription_ids,
                now,
            );
        }
        self.drain_queue(granted.session, now);
    }

    /// Hold `filter` for `session`: in the index, the journal and (a shared filter)
    /// its application group. True when it is new, false when it replaced one. Used by
    /// SUBSCRIBE and by the admin API (`admin`).
    pub(super) fn add_subscription(
        &mut self,
        session: u32,
        filter: &str,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
    ) -> Result<bool, IndexError> {
        let is_new = self
            .index
            .subscribe(session, filter, options, subscription_id)?;
        self.journal_subscribe(
            session,
            filter,
            options.to_byte(ProtocolVersion::V5),
            subscription_id.unwrap_or(0),
        );
        if matches!(parse_shared_filter(filter), Ok(Some(_))) {
            self.application_subscribed(session, filter);
        }
        if is_new {
            self.shards_subscribed(session, filter);
        }
        Ok(is_new)
    }

    /// Subscribe `session` to `filter` as a SUBSCRIBE from it would, for the broker
    /// (the admin API, auto-subscriptions): QoS capped by the Maximum QoS, checked
    /// against `max_subscriptions_per_client` and the ACL, journaled; retained
    /// messages sent per Retain Handling when connected. True when it is new.
    pub(super) fn subscribe_session(
        &mut self,
        session: u32,
        filter: &str,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
        now: u64,
    ) -> Result<bool, SubscribeRefusal> {
        crate::topic::validate_topic_filter(filter)
            .map_err(|err| SubscribeRefusal::Filter(err.into()))?;
        if self
            .subscription_quota_refusal(session, filter, true)
            .is_some()
        {
            return Err(SubscribeRefusal::Quota);
        }
        if self.subscription_reach(session, filter) == Reach::None {
            return Err(SubscribeRefusal::Denied);
        }
        let options = self.granted(options);
        let is_new = self
            .add_subscription(session, filter, options, subscription_id)
            .map_err(SubscribeRefusal::Filter)?;
        let conn = self.sessions[session as usize]
            .as_ref()
            .and_then(|s| s.conn);
        if let Some(conn) = conn {
            if sends_retained(filter, options, is_new) {
                let ids: Vec<u32> = subscription_id.into_iter().collect();
                self.queue_retained(conn, session, filter, options.qos, &ids, now);
            }
            self.drain_queue(session, now);
        }
        Ok(is_new)
    }

    /// Put the retained messages matching `filter` on the connection's cursor (sent
    /// after what the session queued before, `retained_cursor`).
    pub(super) fn queue_retained(
        &mut self,
        conn_id: ConnId,
        session: u32,
        filter: &str,
        qos: QoS,
        subscription_ids: &[u32],
        now: u64,
    ) {
        let queue_pushed = self
            .session_mut(session)
            .map_or(0, |state| state.queue.pushed());
        let mut ids = Vec::new();
        if self.retained.match_filter(filter, now, &mut ids).is_err() {
            return;
        }
        if let Some(conn) = self.conn_mut(conn_id) {
            conn.retained
                .add(filter, qos, subscription_ids.to_vec(), ids, queue_pushed);
        }
    }

    /// Drop `filter` from `session` (and what the connection's cursor still had to
    /// send for it); false when it held none. The caller forgets ended groups.
    pub(super) fn remove_subscription(
        &mut self,
        session: u32,
        conn_id: Option<ConnId>,
        filter: &str,
    ) -> bool {
        self.application_unsubscribing(session, filter);
        if let Some(conn) = conn_id.and_then(|id| self.conn_mut(id)) {
            conn.retained.remove(filter);
        }
        let existed = self.index.unsubscribe(session, filter);
        self.journal_unsubscribe(session, filter);
        if existed {
            self.shards_unsubscribed(session, filter);
        }
        existed
    }

    /// A new filter beyond `max_subscriptions_per_client`: 0x97 Quota exceeded in
    /// 5.0, 0x80 in 3.1.1. Replacing a filter the session holds is always allowed.
    pub(super) fn subscription_quota_refusal(
        &mut self,
        session: u32,
        filter: &str,
        v5: bool,
    ) -> Option<ReasonCode> {
        let max = self.config.max_subscriptions_per_client as usize;
        // An invalid filter is the index's to refuse (0x8F / 0x80).
        if max == 0
            || self.index.subscription_count(session) < max
            || self.index.has_subscription(session, filter)
            || crate::topic::validate_topic_filter(filter).is_err()
        {
            return None;
        }
        self.stats.subscriptions_refused += 1;
        Some(if v5 {
            ReasonCode::QuotaExceeded
        } else {
            ReasonCode::UnspecifiedError
        })
    }

    pub(super) fn handle_unsubscribe(
        &mut self,
        conn_id: ConnId,
        session: u32,
        mut unsubscribe: Unsubscribe,
    ) {
        for filter in &mut unsubscribe.filters {
            if let Some(rewritten) = self.rewritten_filter(session, filter) {
                *filter = rewritten;
            }
        }
        let v5 = self.conn_mut(conn_id).is_some_and(|c| c.version.is_v5());
        let mut reasons = Vec::new();
        for filter in &unsubscribe.filters {
            if let Some(refusal) = self.filter_name_refusal(filter, v5) {
                // 3.1.1's UNSUBACK has no per-filter code: the filter is left alone.
                if v5 {
                    reasons.push(refusal);
                }
                continue;
            }
            let existed = self.remove_subscription(session, Some(conn_id), filter);
            if v5 {
                reasons.push(if existed {
                    ReasonCode::Success
                } else {
                    ReasonCode::NoSubscriptionExisted
                });
            }
        }
        if self.exports_events() {
            let filters: Vec<&str> = unsubscribe.filters.iter().map(|f| f.as_str()).collect();
            self.export_unsubscribed(session, &filters, self.clock);
        }
        if self.config.client_events {
            let filters = unsubscribe
                .filters
                .iter()
                .map(|filter| filter.as_str().to_owned())
                .collect();
            let client_id = self.client_id_of(session);
            self.events.push(Event::Unsubscribed {
                conn: conn_id,
                client_id,
                filters,
            });
        }
        self.write(
            conn_id,
            &Packet::UnsubAck(UnsubAck {
                packet_id: unsubscribe.packet_id,
                properties: Default::default(),
                reasons,
            }),
        );
        self.forget_removed_groups();
    }
}

/// Whether a granted subscription gets the retained messages now, per its Retain
/// Handling [MQTT-3.3.1-9..11]; never a shared one (MQTT 5.0 §4.8.2).
pub(super) fn sends_retained(filter: &str, options: SubscriptionOptions, is_new: bool) -> bool {
    let shared = matches!(parse_shared_filter(filter), Ok(Some(_)));
    !shared
        && match options.retain_handling {
            RetainHandling::SendAtSubscribe => true,
            RetainHandling::SendAtSubscribeIfNew => is_new,
            RetainHandling::DoNotSend => false,
        }
}
