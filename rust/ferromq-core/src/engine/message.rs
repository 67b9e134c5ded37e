//! An application message as the router holds it: one `Arc` per PUBLISH, shared by
//! every subscriber's queue and in-flight window, so fan-out copies no payload.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::codec::{Properties, Property, PropertyId, QoS, Utf8Bytes};

/// Message ids, unique within a process run (journal records refer to them).
static NEXT_MESSAGE_ID: AtomicU64 = AtomicU64::new(1);

pub fn next_message_id() -> u64 {
    NEXT_MESSAGE_ID.fetch_add(1, Ordering::Relaxed)
}

#[derive(Debug)]
pub struct Message {
    pub id: u64,
    pub topic: Utf8Bytes,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// The properties forwarded to v5 subscribers unchanged [MQTT-3.3.2-4..20]: all
    /// but Topic Alias and Subscription Identifier, and Message Expiry Interval,
    /// which is rewritten per delivery from `expires_at`.
    pub properties: Properties,
    /// The publishing session, for No Local; None for the broker's own messages.
    pub publisher: Option<u32>,
    /// Milliseconds of engine time after which the message is not delivered.
    pub expires_at: Option<u64>,
    /// The journal batch that last carried this message's record.
    pub journal_batch: AtomicU64,
    /// Deliveries wait until the store confirms this journal batch (0: never wait):
    /// an inbound QoS 2 message of a journaled publisher is sent to nobody before
    /// its packet id is stored (`publish`, `persist`).
    pub held_for_batch: u64,
}

impl Message {
    /// Build from an inbound PUBLISH, copying topic and payload out of the read
    /// buffer so a queued message never pins a whole batch of input.
    pub fn from_publish(
        topic: &str,
        payload: &[u8],
        qos: QoS,
        retain: bool,
        properties: &Properties,
        publisher: Option<u32>,
        now: u64,
    ) -> Message {
        let mut expires_at = None;
        let mut forwarded = Vec::new();
        for property in properties.iter() {
            match property {
                Property::MessageExpiryInterval(seconds) => {
                    expires_at = Some(now + u64::from(*seconds) * 1000);
                }
                p if p.kind() == PropertyId::TopicAlias
                    || p.kind() == PropertyId::SubscriptionIdentifier => {}
                p => forwarded.push(p.clone()),
            }
        }
        Message {
            id: next_message_id(),
            topic: Utf8Bytes::try_from(topic).expect("topic came from a validated string"),
            payload: Bytes::copy_from_slice(payload),
            qos,
            retain,
            properties: Properties(forwarded),
            publisher,
            expires_at,
            journal_batch: AtomicU64::new(0),
            held_for_batch: 0,
        }
    }

    /// A copy of this message under a new id, not journaled yet (the journal
    /// writes it on its own): the base of a message made from another.
    pub fn copy(&self) -> Message {
        Message {
            id: next_message_id(),
            topic: self.topic.clone(),
            payload: self.payload.clone(),
            qos: self.qos,
            retain: self.retain,
            properties: self.properties.clone(),
            publisher: self.publisher,
            expires_at: self.expires_at,
            journal_batch: AtomicU64::new(0),
            held_for_batch: self.held_for_batch,
        }
    }

    /// A copy of this message whose deliveries wait until the store confirms
    /// journal batch `batch`.
    pub fn held_until(&self, batch: u64) -> Message {
        Message {
            held_for_batch: batch,
            ..self.copy()
        }
    }

    pub fn is_expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }

    /// The properties of one delivery: the forwarded ones, the remaining expiry
    /// [MQTT-3.3.2-6] and the subscription identifiers that matched [MQTT-3.3.4-3].
    pub fn delivery_properties(&self, subscription_ids: &[u32], now: u64) -> Properties {
        if self.properties.is_empty() && self.expires_at.is_none() && subscription_ids.is_empty() {
            return Properties::new();
        }
        let mut items = self.properties.0.clone();
        if let Some(at) = self.expires_at {
            let remaining = at.saturating_sub(now).div_ceil(1000);
            items.push(Property::MessageExpiryInterval(remaining as u32));
        }
        items.extend(
            subscription_ids
                .iter()
                .map(|id| Property::SubscriptionIdentifier(*id)),
        );
        Properties(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_rewritten_and_alias_dropped() {
        let props = Properties(vec![
            Property::MessageExpiryInterval(10),
            Property::TopicAlias(3),
            Property::ContentType(Utf8Bytes::from_static("json")),
        ]);
        let m = Message::from_publish("a", b"x", QoS::AtLeastOnce, false, &props, None, 1_000);
        assert_eq!(m.expires_at, Some(11_000));
        assert!(!m.is_expired(10_999));
        assert!(m.is_expired(11_000));
        let out = m.delivery_properties(&[7], 5_500);
        assert_eq!(
            out.0,
            vec![
                Property::ContentType(Utf8Bytes::from_static("json")),
                Property::MessageExpiryInterval(6),
                Property::SubscriptionIdentifier(7),
            ]
        );
    }
}
