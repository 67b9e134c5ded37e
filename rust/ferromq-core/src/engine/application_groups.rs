//! Application groups: a shared group of APPLICATION clients served through a
//! Kafka consumer group (seed 000; TBMQ's application shared subscriptions), when
//! the application store is Kafka (`EngineConfig::serve_application_groups`).
//!
//! A group becomes an application group when an APPLICATION client subscribes to it (or one's
//! restored session holds it). From then on:
//!
//! - **In**: a QoS 1/2 message for the group is not given to a member. It is
//!   journaled once to the group's pseudo-session (`shared::group_journal_name`),
//!   journaled as an application session, so the journal split sends it to the
//!   Kafka store, which produces it to the group's topic: spread over its
//!   partitions by the group's sequence, or by the topic under the `hash_topic`
//!   share strategy so a topic's messages keep their order. The publisher's
//!   PUBACK/PUBREC waits for that batch like any other. The engine keeps nothing of
//!   it in memory. QoS 0 messages go through the engine's group as before.
//! - **Out**: Python runs one Kafka consumer per online member, all in the group's
//!   consumer group, so Kafka shares the topic's partitions among the members and
//!   moves them when members come and go. Each record is handed to the member with
//!   [`Engine::deliver_application`] and a token. The delivery is never journaled
//!   (the topic is its durable copy). When it is done with (PUBACK; PUBREC, after
//!   which the member holds it; or dropped by expiry or queue policy), its token is
//!   reported (`Event::ApplicationDone`, then `take_application_done`) and the consumer
//!   commits the acknowledged prefix of its partition.
//! - **Members**: `Event::ApplicationMember` tells Python when a member of an application group
//!   group comes online for it (SUBSCRIBE, or CONNECT resuming a session that holds
//!   the subscription) and when it stops (UNSUBSCRIBE, connection end), so it
//!   starts and stops that member's consumer.
//! - **A member leaving**: its application deliveries not yet done leave its session
//!   unreported. Its consumer leaves the group without committing past them, and the
//!   member that gets the partition receives them again. A QoS 2 message without
//!   its PUBREC goes the same way: unlike the engine's groups
//!   [MQTT-4.8.2-4], the topic, not the member, holds it.
//!
//! Cost: an application group's message costs one journal record, not one per member;
//! each delivery out crosses into Python once (the consumer), as the Kafka store's
//! per-client path does.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::codec::QoS;
use crate::durability::log::RecordReader;
use crate::durability::record::{ClientType, Record};
use crate::topic::{topic_hash, GroupRef, ShareStrategy};

use super::message::Message;
use super::shared::{group_journal_name, member_delivery};
use super::{Engine, Event};

#[derive(Debug, Default)]
pub(super) struct ApplicationGroups {
    /// Application groups and their `$share/{group}/{filter}`, both ways: by group for
    /// routing, by filter for Python's calls (the index only scans for a filter).
    groups: HashMap<GroupRef, Box<str>>,
    by_filter: HashMap<Box<str>, GroupRef>,
    /// Tokens of application deliveries done with, for Python.
    done: Vec<u64>,
    done_signalled: bool,
}

impl ApplicationGroups {
    pub(super) fn contains(&self, group: GroupRef) -> bool {
        !self.groups.is_empty() && self.groups.contains_key(&group)
    }

    /// The application group `share_filter` names, if it is one.
    fn group_of(&self, share_filter: &str) -> Option<GroupRef> {
        self.by_filter.get(share_filter).copied()
    }

    fn insert(&mut self, group: GroupRef, share_filter: &str) {
        self.groups.insert(group, share_filter.into());
        self.by_filter.insert(share_filter.into(), group);
    }
}

impl Engine {
    /// `session` subscribed to `share_filter`. An APPLICATION client makes its group
    /// an application group; every online member of an application group is reported online (one
    /// group, one way of delivering: a device member gets a consumer too).
    pub(super) fn application_subscribed(&mut self, session: u32, share_filter: &str) {
        if !self.config.serve_application_groups {
            return;
        }
        let known = self.application_groups.group_of(share_filter);
        if known.is_some_and(|group| self.index.is_group_live(group)) {
            self.application_member_event(session, share_filter, true);
            return;
        }
        if self.client_type_of(session) != ClientType::Application {
            return;
        }
        let Some(group) = self.index.find_shared_group(share_filter) else {
            return;
        };
        self.application_groups.insert(group, share_filter);
        if let Some((name, _)) = self.group_queues.journaled.get(&group) {
            // A group queue journaled before: its queue is the application store's now.
            self.journal
                .session(name, u32::MAX, ClientType::Application);
        }
        // Members here only: another shard's pseudo-member reports its own.
        let online: Vec<u32> = self
            .index
            .members(group)
            .filter(|&member| {
                super::shards::remote_shard(member).is_none() && self.index.is_client_online(member)
            })
            .collect();
        for member in online {
            self.application_member_event(member, share_filter, true);
        }
    }

    /// `session` unsubscribed from `share_filter` (before the index forgets it).
    pub(super) fn application_unsubscribing(&mut self, session: u32, share_filter: &str) {
        let member = self
            .application_groups
            .group_of(share_filter)
            .is_some_and(|group| self.index.is_member(group, session));
        if member {
            self.application_member_event(session, share_filter, false);
        }
    }

    /// `session`'s connection started (`online`) or ended: report each application group
    /// group it is a member of.
    pub(super) fn application_member_presence(&mut self, session: u32, online: bool) {
        if self.application_groups.groups.is_empty() {
            return;
        }
        let filters: Vec<Box<str>> = self
            .application_groups
            .groups
            .iter()
            .filter(|(group, _)| self.index.is_member(**group, session))
            .map(|(_, filter)| filter.clone())
            .collect();
        for filter in filters {
            self.application_member_event(session, &filter, online);
        }
    }

    fn application_member_event(&mut self, session: u32, share_filter: &str, online: bool) {
        if let Some(state) = self.sessions.get(session as usize).and_then(Option::as_ref) {
            self.events.push(Event::ApplicationMember {
                client: state.client_id.to_string(),
                share_filter: share_filter.to_owned(),
                online,
            });
        }
    }

    /// Route's QoS 1/2 message for an application `group`: journal it to the group's
    /// topic. True when stored (not dropped as expired).
    pub(super) fn application_message(
        &mut self,
        group: GroupRef,
        message: &Arc<Message>,
        now: u64,
    ) -> bool {
        if message.is_expired(now) || !self.journal.is_enabled() {
            self.count_dropped(super::stats::DropReason::Expired, None, message, now);
            return false;
        }
        let Some(filter) = self.application_groups.groups.get(&group) else {
            return false;
        };
        let journaled = &mut self.group_queues.journaled;
        let (name, next) = journaled.entry(group).or_insert_with(|| {
            let name = group_journal_name(filter);
            self.journal
                .session(&name, u32::MAX, ClientType::Application);
            (name.into_boxed_str(), 0)
        });
        let sequence = *next;
        *next += 1;
        // The topic record's packet id is only its partition key (nothing acknowledges it):
        // by the topic under `hash_topic`, so a topic's messages keep their order in
        // one partition; else by the sequence, spreading them over every partition.
        let packet_id = if self.index.strategy() == ShareStrategy::HashTopic {
            (topic_hash(&message.topic) % 65_535) as u16 + 1
        } else {
            super::session::packet_id_of(sequence)
        };
        self.journal.enqueue(
            name,
            sequence,
            packet_id,
            message,
            message.qos,
            false,
            &[],
            self.wall_offset,
        );
        true
    }

    /// Hand one record of an application group's topic (a journal Message record then
    /// its Enqueue record, as the Kafka store produced it) to `client`, a member of
    /// `share_filter`'s group, under `token`. False when that member is not online
    /// for the group (nothing was delivered; the record stays uncommitted).
    pub fn deliver_application(
        &mut self,
        client: &str,
        share_filter: &str,
        record: Bytes,
        token: u64,
        now: u64,
    ) -> bool {
        let Some(&session) = self.by_client_id.get(client) else {
            return false;
        };
        let member = self
            .application_groups
            .group_of(share_filter)
            .filter(|_| self.index.is_client_online(session))
            .and_then(|group| self.index.member(group, session));
        let Some(member) = member else {
            return false;
        };
        let Some(message) = self.application_record_message(record) else {
            // Not a record this broker wrote: nothing to deliver, nothing to keep.
            self.application_delivery_done(token);
            return true;
        };
        let mut out = member_delivery(message, member);
        out.application_token = Some(token);
        let qos = out.qos;
        let sent = self.deliver(session, out, now);
        if !sent || qos == QoS::AtMostOnce {
            self.application_delivery_done(token);
        }
        true
    }

    fn application_record_message(&self, record: Bytes) -> Option<Arc<Message>> {
        let mut reader = RecordReader::new(record);
        match reader.next()?.ok()? {
            Record::Message(stored) => Some(self.message_from_store(stored).message),
            _ => None,
        }
    }

    /// The application delivery under `token` is done with.
    pub(super) fn application_delivery_done(&mut self, token: u64) {
        self.application_groups.done.push(token);
        if !self.application_groups.done_signalled {
            self.application_groups.done_signalled = true;
            self.events.push(Event::ApplicationDone);
        }
    }

    /// Tokens of application deliveries done with since the last call.
    pub fn take_application_done(&mut self) -> Vec<u64> {
        self.application_groups.done_signalled = false;
        std::mem::take(&mut self.application_groups.done)
    }

    /// After a restore: the groups its APPLICATION sessions share are application groups.
    pub(super) fn restore_application_groups(&mut self) {
        if !self.config.serve_application_groups {
            return;
        }
        let mut shared: Vec<Box<str>> = Vec::new();
        for state in self.sessions.iter().flatten() {
            if state.client_type == ClientType::Application {
                shared.extend(
                    state
                        .subscriptions
                        .keys()
                        .filter(|f| f.starts_with("$share/"))
                        .cloned(),
                );
            }
        }
        for filter in shared {
            if let Some(group) = self.index.find_shared_group(&filter) {
                self.application_groups.insert(group, &filter);
            }
        }
    }

    /// Drop application groups that ended (their last member left).
    pub(super) fn forget_removed_application_groups(&mut self) {
        let index = &self.index;
        let groups = &mut self.application_groups;
        groups.groups.retain(|&group, _| index.is_group_live(group));
        groups
            .by_filter
            .retain(|_, group| index.is_group_live(*group));
    }
}
