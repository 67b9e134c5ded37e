//! A session's queue of deliveries waiting for the in-flight window (or for the
//! client to come back), bounded with a drop policy.
//!
//! Invariant: `len() <= limit`. When full, a QoS 0 delivery is dropped first (the
//! oldest one queued, or the new one if it is QoS 0 itself); otherwise the policy
//! decides between the oldest queued message and the new one. Every drop is
//! returned to the caller, which counts it. Order is FIFO, so messages reach the
//! client in the order the broker accepted them [MQTT-4.6.0-6].

use std::collections::VecDeque;

use super::config::DropPolicy;
use super::Outgoing;
use crate::codec::QoS;

#[derive(Debug, Default)]
pub struct DeliveryQueue {
    items: VecDeque<Outgoing>,
    qos0_queued: usize,
    /// Deliveries ever pushed and ever removed (sent or dropped): positions a
    /// connection's retained cursor takes its turn at (`retained_cursor`).
    pushed: u64,
    removed: u64,
}

/// What a push did to the queue.
#[derive(Debug)]
pub enum Pushed {
    Queued,
    /// Queued after dropping this older delivery.
    QueuedDropping(Outgoing),
    /// The new delivery was dropped.
    Refused,
}

impl DeliveryQueue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    pub fn removed(&self) -> u64 {
        self.removed
    }

    pub fn push(&mut self, item: Outgoing, limit: usize, policy: DropPolicy) -> Pushed {
        if self.items.len() < limit {
            self.push_back(item);
            return Pushed::Queued;
        }
        if item.qos == QoS::AtMostOnce {
            return Pushed::Refused;
        }
        if self.qos0_queued > 0 {
            if let Some(at) = self.items.iter().position(|o| o.qos == QoS::AtMostOnce) {
                let dropped = self.items.remove(at).expect("position is in range");
                self.qos0_queued -= 1;
                self.removed += 1;
                self.push_back(item);
                return Pushed::QueuedDropping(dropped);
            }
        }
        match policy {
            DropPolicy::DropOldest if limit > 0 => {
                let dropped = self.pop().expect("a full queue has a front");
                self.push_back(item);
                Pushed::QueuedDropping(dropped)
            }
            _ => Pushed::Refused,
        }
    }

    fn push_back(&mut self, item: Outgoing) {
        if item.qos == QoS::AtMostOnce {
            self.qos0_queued += 1;
        }
        self.pushed += 1;
        self.items.push_back(item);
    }

    pub fn pop(&mut self) -> Option<Outgoing> {
        let item = self.items.pop_front()?;
        self.removed += 1;
        if item.qos == QoS::AtMostOnce {
            self.qos0_queued -= 1;
        }
        Some(item)
    }

    /// Deliveries in queue order.
    pub fn iter(&self) -> impl Iterator<Item = &Outgoing> {
        self.items.iter()
    }

    /// True while a QoS 0 delivery is queued: a new one goes behind it, so QoS 0
    /// keeps its order even though it never waits for the window.
    pub fn has_qos0(&self) -> bool {
        self.qos0_queued > 0
    }

    pub fn front(&self) -> Option<&Outgoing> {
        self.items.front()
    }

    /// Remove the deliveries for which `take` holds, in queue order; the rest keep
    /// their order.
    pub fn take_where(&mut self, take: impl Fn(&Outgoing) -> bool) -> Vec<Outgoing> {
        let (taken, kept) = std::mem::take(&mut self.items)
            .into_iter()
            .partition::<VecDeque<_>, _>(|o| take(o));
        self.items = kept;
        self.removed += taken.len() as u64;
        self.qos0_queued -= taken.iter().filter(|o| o.qos == QoS::AtMostOnce).count();
        taken.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Properties;
    use crate::engine::message::Message;
    use std::sync::Arc;

    fn out(tag: u8, qos: QoS) -> Outgoing {
        let message = Message::from_publish("t", &[tag], qos, false, &Properties::new(), None, 0);
        Outgoing::new(Arc::new(message), qos, false, Vec::new())
    }

    fn tags(q: &mut DeliveryQueue) -> Vec<u8> {
        std::iter::from_fn(|| q.pop())
            .map(|o| o.message.payload[0])
            .collect()
    }

    #[test]
    fn qos0_goes_first_then_policy() {
        let mut q = DeliveryQueue::default();
        q.push(out(1, QoS::AtLeastOnce), 3, DropPolicy::DropOldest);
        q.push(out(2, QoS::AtMostOnce), 3, DropPolicy::DropOldest);
        q.push(out(3, QoS::AtLeastOnce), 3, DropPolicy::DropOldest);
        let dropped = |pushed| match pushed {
            Pushed::QueuedDropping(o) => o.message.payload[0],
            other => panic!("expected a drop, got {other:?}"),
        };
        assert_eq!(
            dropped(q.push(out(4, QoS::AtLeastOnce), 3, DropPolicy::DropOldest)),
            2
        );
        assert_eq!(
            dropped(q.push(out(5, QoS::AtLeastOnce), 3, DropPolicy::DropOldest)),
            1
        );
        assert!(matches!(
            q.push(out(6, QoS::AtMostOnce), 3, DropPolicy::DropOldest),
            Pushed::Refused
        ));
        assert_eq!(tags(&mut q), vec![3, 4, 5]);
    }

    #[test]
    fn refuse_newest_keeps_the_queue() {
        let mut q = DeliveryQueue::default();
        q.push(out(1, QoS::AtLeastOnce), 2, DropPolicy::RefuseNewest);
        q.push(out(2, QoS::ExactlyOnce), 2, DropPolicy::RefuseNewest);
        assert!(matches!(
            q.push(out(3, QoS::AtLeastOnce), 2, DropPolicy::RefuseNewest),
            Pushed::Refused
        ));
        assert_eq!(tags(&mut q), vec![1, 2]);
    }
}
