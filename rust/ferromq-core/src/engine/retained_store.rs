//! The retained messages' payloads by retained id (the `RetainedIndex` maps topics
//! to ids) and the limits on them (`[limits]`): at most `max_messages` and
//! `max_bytes` in all, `max_messages_per_user` and `max_bytes_per_user` per owning
//! user name, each kept at most `max_expiry_ms`.
//!
//! A retained PUBLISH that would break a count or byte limit is not stored (the
//! existing retained message of its topic stays); it is still routed, except that an
//! MQTT 5.0 QoS 1/2 publisher gets PUBACK/PUBREC 0x97 Quota exceeded and the message
//! goes nowhere. Replacing a topic's message counts the replaced one out first;
//! clearing (empty payload) is always allowed. The expiry cap shortens how long the
//! retained copy is kept, never the Message Expiry Interval live subscribers see.
//! Refusals are counted (`retained_refused`).
//!
//! Only clients' retained messages (wills included) count and are limited; the
//! broker's own (`Engine::publish`: $SYS) are neither, and messages restored from
//! a store count unless their topic starts with `$`.
//!
//! Bytes are topic + payload. The owner is the publishing connection's user name
//! (`users`, set when a per-user limit is configured); wills, the broker's own
//! messages and messages restored from a store count towards the totals only.
//! Totals are kept as messages come and go, so a check is O(1).

use std::collections::HashMap;
use std::sync::Arc;

use super::message::Message;
use super::users::{UserId, Users};
use super::Engine;

/// Who published a retained message: only clients' count against the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    Broker,
}

#[derive(Debug)]
struct Stored {
    message: Arc<Message>,
    origin: Origin,
    owner: Option<UserId>,
}

#[derive(Debug, Default)]
pub struct RetainedStore {
    messages: HashMap<u64, Stored>,
    /// Clients' retained messages and their bytes.
    count: u64,
    bytes: u64,
}

pub fn size_of(message: &Message) -> u64 {
    (message.topic.len() + message.payload.len()) as u64
}

impl RetainedStore {
    pub fn get(&self, id: &u64) -> Option<&Arc<Message>> {
        self.messages.get(id).map(|s| &s.message)
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Bytes of clients' retained messages (the broker's own are not counted).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<Message>> {
        self.messages.values().map(|s| &s.message)
    }

    pub fn insert(
        &mut self,
        id: u64,
        message: Arc<Message>,
        origin: Origin,
        owner: Option<UserId>,
        users: &mut Users,
    ) {
        let size = size_of(&message);
        if origin == Origin::Client {
            self.count += 1;
            self.bytes += size;
        }
        if let Some(user) = owner.and_then(|o| users.get_mut(o)) {
            user.retained_count += 1;
            user.retained_bytes += size;
        }
        let stored = Stored {
            message,
            origin,
            owner,
        };
        if let Some(old) = self.messages.insert(id, stored) {
            self.forget(&old, users);
        }
    }

    pub fn remove(&mut self, id: &u64, users: &mut Users) {
        if let Some(old) = self.messages.remove(id) {
            self.forget(&old, users);
        }
    }

    fn forget(&mut self, old: &Stored, users: &mut Users) {
        let size = size_of(&old.message);
        if old.origin == Origin::Client {
            self.count -= 1;
            self.bytes -= size;
        }
        if let Some(owner) = old.owner {
            if let Some(user) = users.get_mut(owner) {
                user.retained_count -= 1;
                user.retained_bytes -= size;
            }
            users.free_if_unused(owner);
        }
    }
}

impl Engine {
    /// Why a retained message of `size` bytes (topic + payload) on `topic` from
    /// `owner` may not be stored, if a limit says so.
    pub(super) fn retained_refusal(
        &self,
        topic: &str,
        size: u64,
        owner: Option<UserId>,
        now: u64,
    ) -> Option<&'static str> {
        let limits = &self.config.retained_limits;
        let replaced = self
            .retained
            .get(topic, now)
            .and_then(|id| self.retained_messages.messages.get(&id));
        let replaced_counted = replaced.is_some_and(|s| s.origin == Origin::Client);
        let (replaced_size, replaced_owner) = match replaced {
            Some(s) if replaced_counted => (size_of(&s.message), s.owner),
            _ => (0, None),
        };
        let count = self.retained_messages.count + u64::from(!replaced_counted);
        if limits.max_messages > 0 && count > limits.max_messages {
            return Some("retained messages at limits.max_retained_messages");
        }
        let bytes = self.retained_messages.bytes - replaced_size + size;
        if limits.max_bytes > 0 && bytes > limits.max_bytes {
            return Some("retained bytes at limits.max_retained_bytes");
        }
        let user = owner.and_then(|o| self.users.get(o))?;
        let same_owner = replaced_counted && replaced_owner == owner;
        let count = user.retained_count + u64::from(!same_owner);
        if limits.max_messages_per_user > 0 && count > limits.max_messages_per_user {
            return Some("retained messages of this user at limits.max_retained_messages_per_user");
        }
        let bytes = user.retained_bytes + size - if same_owner { replaced_size } else { 0 };
        if limits.max_bytes_per_user > 0 && bytes > limits.max_bytes_per_user {
            return Some("retained bytes of this user at limits.max_retained_bytes_per_user");
        }
        None
    }

    /// The user a retained message from `session` counts against, if any.
    pub(super) fn retained_owner(&self, session: Option<u32>) -> Option<UserId> {
        let conn = self.sessions.get(session? as usize)?.as_ref()?.conn?;
        self.conns.get(conn as usize)?.as_ref()?.user
    }

    /// The retained copy's deadline: the message's own, capped by `max_expiry_ms`.
    pub(super) fn retained_deadline(&self, message: &Message, now: u64) -> Option<u64> {
        match self.config.retained_limits.max_expiry_ms {
            0 => message.expires_at,
            cap => Some(message.expires_at.map_or(now + cap, |at| at.min(now + cap))),
        }
    }
}
