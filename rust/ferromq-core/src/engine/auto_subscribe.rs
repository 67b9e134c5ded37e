//! Auto-subscribe (`[auto_subscribe]`, as EMQX and RMQTT ship it): subscriptions the
//! broker gives every client when its CONNECT is accepted, filters with the ACL's
//! placeholders (`devices/%c/cmd`, `users/%u/#`; `acl::template`) rendered with the
//! connection's binding (user name, client id, certificate identity, JWT claims).
//!
//! Each is made after the CONNACK as the admin API makes one
//! (`subscribe::subscribe_session`): checked against the ACL and the subscription
//! quota, journaled, replicated to the node's other shards, retained messages sent.
//! They are asked with Retain Handling 1 (send retained messages only for a new
//! subscription), so a persistent session that reconnects keeps its subscription and
//! is not sent the retained messages again. A filter whose placeholder has no value
//! for this client (no user name for `%u`), or that the ACL or the quota refuses, is
//! skipped and counted (`auto_subscribe_skipped`). The rules are replaced on reload
//! (`set_auto_subscribe`) and apply from the next CONNECT.

use crate::acl::Level;
use crate::codec::{QoS, RetainHandling, SubscriptionOptions};

use super::Engine;

/// One auto-subscription: a filter that may hold placeholders, and its QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoSubscription {
    pub filter: Box<[Level]>,
    pub qos: QoS,
}

impl Engine {
    /// Give every later CONNECT these subscriptions.
    pub fn set_auto_subscribe(&mut self, subscriptions: Vec<AutoSubscription>) {
        self.auto_subscriptions = subscriptions;
    }

    /// Make `session`'s auto-subscriptions (its CONNACK is written).
    pub(super) fn auto_subscribe(&mut self, session: u32, now: u64) {
        if self.auto_subscriptions.is_empty() {
            return;
        }
        let Some(binding) = self
            .sessions
            .get(session as usize)
            .and_then(Option::as_ref)
            .map(|s| s.acl.binding.clone())
        else {
            return;
        };
        for n in 0..self.auto_subscriptions.len() {
            let wanted = &self.auto_subscriptions[n];
            let options = SubscriptionOptions {
                qos: wanted.qos,
                retain_handling: RetainHandling::SendAtSubscribeIfNew,
                ..SubscriptionOptions::default()
            };
            let made = binding.render(&wanted.filter).is_some_and(|filter| {
                self.subscribe_session(session, &filter, options, None, now)
                    .is_ok()
            });
            if !made {
                self.stats.auto_subscribe_skipped += 1;
            }
        }
    }
}
