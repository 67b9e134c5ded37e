//! A session's queue of deliveries waiting for the in-flight window (or for the
//! client to come back), bounded in messages (`session.queue_limit`) and in bytes
//! (`session.max_queued_bytes`), with a drop policy.
//!
//! Invariant: `len() <= limit.count` and `bytes() <= limit.bytes`. To make room, a
//! queued QoS 0 delivery is dropped first (oldest first; a new QoS 0 delivery that
//! does not fit is itself dropped); then the policy decides between the oldest queued
//! messages and the new one. `refuse_newest` drops nothing when dropping every queued
//! QoS 0 delivery would still not make room. Every drop is returned to the caller
//! with its reason, which counts it. Order is FIFO, so messages reach the client in
//! the order the broker accepted them [MQTT-4.6.0-6].
//!
//! Bytes are each delivery's `memory::delivery_bytes`; every queue also adds them to
//! the engine's `memory::Ledger` (and takes them back when it drops, pops or is
//! dropped itself), which is the total the memory budget is checked against.

use std::collections::VecDeque;

use super::config::DropPolicy;
use super::memory::{delivery_bytes, Ledger};
use super::stats::DropReason;
use super::Outgoing;
use crate::codec::QoS;

/// The bounds a push respects.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimit {
    pub count: usize,
    /// Bytes; `u64::MAX` for none.
    pub bytes: u64,
    pub policy: DropPolicy,
}

impl QueueLimit {
    /// No bound (a queue rebuilt from a store keeps everything it had).
    pub const NONE: QueueLimit = QueueLimit {
        count: usize::MAX,
        bytes: u64::MAX,
        policy: DropPolicy::DropOldest,
    };

    fn fits(&self, len: usize, bytes: u64, size: u64) -> bool {
        len < self.count && bytes.saturating_add(size) <= self.bytes
    }
}

#[derive(Debug, Default)]
pub struct DeliveryQueue {
    items: VecDeque<Outgoing>,
    qos0_queued: usize,
    qos0_bytes: u64,
    bytes: u64,
    ledger: Ledger,
    /// Deliveries ever pushed and ever removed (sent or dropped): positions a
    /// connection's retained cursor takes its turn at (`retained_cursor`).
    pushed: u64,
    removed: u64,
}

/// What a push did to the queue.
#[derive(Debug)]
pub enum Pushed {
    Queued,
    /// Queued after dropping these older deliveries, for this reason.
    QueuedDropping(Vec<Outgoing>, DropReason),
    /// The new delivery was dropped.
    Refused(DropReason),
}

impl DeliveryQueue {
    /// An empty queue counting its bytes into `ledger`.
    pub fn new(ledger: Ledger) -> DeliveryQueue {
        DeliveryQueue {
            items: VecDeque::new(),
            qos0_queued: 0,
            qos0_bytes: 0,
            bytes: 0,
            ledger,
            pushed: 0,
            removed: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes queued (`memory::delivery_bytes` of each delivery).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    pub fn removed(&self) -> u64 {
        self.removed
    }

    pub fn push(&mut self, item: Outgoing, limit: QueueLimit) -> Pushed {
        let size = delivery_bytes(&item);
        if limit.fits(self.items.len(), self.bytes, size) {
            self.push_back(item);
            return Pushed::Queued;
        }
        let reason = if self.items.len() >= limit.count {
            DropReason::QueueFull
        } else {
            DropReason::SessionBytes
        };
        let only_qos0_may_go = limit.policy == DropPolicy::RefuseNewest;
        let room_at_best = if only_qos0_may_go {
            limit.fits(
                self.items.len() - self.qos0_queued,
                self.bytes - self.qos0_bytes,
                size,
            )
        } else {
            limit.fits(0, 0, size)
        };
        if item.qos == QoS::AtMostOnce || !room_at_best {
            return Pushed::Refused(reason);
        }
        let mut dropped = Vec::new();
        while !limit.fits(self.items.len(), self.bytes, size) {
            let at = if self.qos0_queued > 0 {
                self.items.iter().position(|o| o.qos == QoS::AtMostOnce)
            } else {
                Some(0)
            };
            let removed = at.and_then(|at| self.remove_at(at));
            dropped.extend(removed);
        }
        self.push_back(item);
        Pushed::QueuedDropping(dropped, reason)
    }

    fn push_back(&mut self, item: Outgoing) {
        let size = delivery_bytes(&item);
        if item.qos == QoS::AtMostOnce {
            self.qos0_queued += 1;
            self.qos0_bytes += size;
        }
        self.bytes += size;
        self.ledger.add(size);
        self.pushed += 1;
        self.items.push_back(item);
    }

    fn remove_at(&mut self, at: usize) -> Option<Outgoing> {
        let item = self.items.remove(at)?;
        self.forget(&item);
        Some(item)
    }

    fn forget(&mut self, item: &Outgoing) {
        let size = delivery_bytes(item);
        self.removed += 1;
        if item.qos == QoS::AtMostOnce {
            self.qos0_queued -= 1;
            self.qos0_bytes -= size;
        }
        self.bytes -= size;
        self.ledger.sub(size);
    }

    pub fn pop(&mut self) -> Option<Outgoing> {
        self.remove_at(0)
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
        for item in &taken {
            self.forget(item);
        }
        taken.into()
    }
}

impl Drop for DeliveryQueue {
    /// A queue dropped with its session or group gives its bytes back.
    fn drop(&mut self) {
        self.ledger.sub(self.bytes);
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

    fn count(count: usize, policy: DropPolicy) -> QueueLimit {
        QueueLimit {
            count,
            bytes: u64::MAX,
            policy,
        }
    }

    fn tags(q: &mut DeliveryQueue) -> Vec<u8> {
        std::iter::from_fn(|| q.pop())
            .map(|o| o.message.payload[0])
            .collect()
    }

    #[test]
    fn qos0_goes_first_then_policy() {
        let mut q = DeliveryQueue::default();
        q.push(out(1, QoS::AtLeastOnce), count(3, DropPolicy::DropOldest));
        q.push(out(2, QoS::AtMostOnce), count(3, DropPolicy::DropOldest));
        q.push(out(3, QoS::AtLeastOnce), count(3, DropPolicy::DropOldest));
        let dropped = |pushed| match pushed {
            Pushed::QueuedDropping(o, DropReason::QueueFull) if o.len() == 1 => {
                o[0].message.payload[0]
            }
            other => panic!("expected a drop, got {other:?}"),
        };
        assert_eq!(
            dropped(q.push(out(4, QoS::AtLeastOnce), count(3, DropPolicy::DropOldest))),
            2
        );
        assert_eq!(
            dropped(q.push(out(5, QoS::AtLeastOnce), count(3, DropPolicy::DropOldest))),
            1
        );
        assert!(matches!(
            q.push(out(6, QoS::AtMostOnce), count(3, DropPolicy::DropOldest)),
            Pushed::Refused(DropReason::QueueFull)
        ));
        assert_eq!(tags(&mut q), vec![3, 4, 5]);
    }

    #[test]
    fn refuse_newest_keeps_the_queue() {
        let mut q = DeliveryQueue::default();
        q.push(out(1, QoS::AtLeastOnce), count(2, DropPolicy::RefuseNewest));
        q.push(out(2, QoS::ExactlyOnce), count(2, DropPolicy::RefuseNewest));
        assert!(matches!(
            q.push(out(3, QoS::AtLeastOnce), count(2, DropPolicy::RefuseNewest)),
            Pushed::Refused(DropReason::QueueFull)
        ));
        assert_eq!(tags(&mut q), vec![1, 2]);
    }

    #[test]
    fn bytes_bound_drops_as_many_as_needed_and_the_ledger_follows() {
        let ledger = Ledger::default();
        let mut q = DeliveryQueue::new(ledger.clone());
        let size = delivery_bytes(&out(1, QoS::AtLeastOnce));
        let limit = QueueLimit {
            count: 100,
            bytes: 3 * size,
            policy: DropPolicy::DropOldest,
        };
        for tag in 1..=3 {
            assert!(matches!(
                q.push(out(tag, QoS::AtLeastOnce), limit),
                Pushed::Queued
            ));
        }
        assert_eq!(ledger.get(), 3 * size);
        match q.push(out(4, QoS::AtLeastOnce), limit) {
            Pushed::QueuedDropping(d, DropReason::SessionBytes) => assert_eq!(d.len(), 1),
            other => panic!("expected one drop, got {other:?}"),
        }
        let refuse = QueueLimit {
            policy: DropPolicy::RefuseNewest,
            ..limit
        };
        assert!(matches!(
            q.push(out(5, QoS::AtLeastOnce), refuse),
            Pushed::Refused(DropReason::SessionBytes)
        ));
        assert_eq!(q.bytes(), 3 * size);
        q.pop();
        assert_eq!(ledger.get(), 2 * size);
        drop(q);
        assert_eq!(ledger.get(), 0);
    }
}
