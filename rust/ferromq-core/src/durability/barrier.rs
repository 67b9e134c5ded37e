//! The barrier: every "wait for confirmation" of the engine, in one place.
//!
//! What the broker sends that promises durability leaves only once what it promises
//! is confirmed. Each held item carries a [`Ticket`] naming what it waits for — the
//! journal batch holding everything before it (the store), the `[stream]` batch (an
//! acked sink), a bus round and the slots it went to (another shard's store, or Kafka
//! for another node) — and a queue releases its items *per owner in arrival order*:
//! an acknowledgement never overtakes an earlier one of its connection
//! [MQTT-4.6.0-2], while a connection that waits only for a slow slot (a node whose
//! Kafka is away) holds nobody else.
//!
//! Batches and rounds are confirmed in order, so a release pops the front while it is
//! confirmed (O(released)); only when the front waits for a bus round alone does it
//! scan the rest (O(held)), letting go of the owners not waiting for one.
//!
//! The engine keeps one [`Barrier`] with three queues: `replies` (PUBACK, PUBREC,
//! PUBREL and SUBACK per connection), `deliveries` (sessions holding deliveries of a
//! QoS 2 message whose packet id is not stored yet, per session) and `bus_acks`
//! (`BUS_ACK(round)` to each shard once this shard's store has what the round
//! brought, per shard).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

/// What a held item waits for; 0 in a field (or [`BusWait::None`]): nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ticket {
    /// The journal batch holding everything the item depends on.
    pub journal_batch: u64,
    /// The `[stream]` export batch, when the sink holds acknowledgements.
    pub stream_batch: u64,
    pub bus: BusWait,
}

/// The bus confirmation an item waits for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BusWait {
    #[default]
    None,
    /// Every slot in `slots` (one bit each, bit 63 for slots from 63 up) has confirmed
    /// `round` or a later one: a message went there.
    Slots { round: u64, slots: u64 },
    /// Every slot has confirmed the rounds up to `round` it was sent: a subscription
    /// every shard (and the cluster's subscription topic) must hold.
    Everyone { round: u64 },
}

impl Ticket {
    pub fn journal(batch: u64) -> Ticket {
        Ticket {
            journal_batch: batch,
            ..Ticket::default()
        }
    }

    /// Nothing to wait for.
    pub fn is_free(&self) -> bool {
        *self == Ticket::default()
    }
}

/// The confirmations so far, as the engine's parts keep them (the journal, the
/// export, the bus).
pub trait Confirmations {
    fn journal_has(&self, batch: u64) -> bool;
    fn stream_has(&self, batch: u64) -> bool;
    fn bus_has(&self, wait: BusWait) -> bool;

    fn met(&self, ticket: &Ticket) -> bool {
        self.stored(ticket) && self.bus_has(ticket.bus)
    }

    /// The ticket's journal and stream batches are confirmed (its bus round may not be).
    fn stored(&self, ticket: &Ticket) -> bool {
        self.journal_has(ticket.journal_batch) && self.stream_has(ticket.stream_batch)
    }
}

/// Items held per owner until their tickets are met, released per owner in order.
#[derive(Debug)]
pub struct Queue<O, T> {
    held: VecDeque<(O, Ticket, T)>,
}

impl<O, T> Default for Queue<O, T> {
    fn default() -> Self {
        Queue {
            held: VecDeque::new(),
        }
    }
}

impl<O: Copy + Eq + Hash, T> Queue<O, T> {
    /// Whether `owner` has an item held (a new one of its must wait behind it).
    pub fn holds_for(&self, owner: O) -> bool {
        self.held.iter().any(|(held, _, _)| *held == owner)
    }

    pub fn hold(&mut self, owner: O, ticket: Ticket, item: T) {
        self.held.push_back((owner, ticket, item));
    }

    /// Whether the last item held is `owner`'s and waits for the same ticket.
    pub fn last_is(&self, owner: O, ticket: &Ticket) -> bool {
        self.held
            .back()
            .is_some_and(|(held, t, _)| *held == owner && t == ticket)
    }

    /// Drop every item of `owner` (a connection that closed).
    pub fn forget(&mut self, owner: O) {
        self.held.retain(|(held, _, _)| *held != owner);
    }

    /// Drop the items `drop` picks.
    pub fn forget_where(&mut self, mut drop: impl FnMut(O, &T) -> bool) {
        self.held.retain(|(owner, _, item)| !drop(*owner, item));
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Every item whose ticket `confirmed` meets, in no particular order between
    /// owners (for items whose order does not matter: sessions to drain).
    pub fn release_any(&mut self, confirmed: &impl Confirmations) -> Vec<(O, T)> {
        let mut ready = Vec::new();
        let mut kept = VecDeque::with_capacity(self.held.len());
        for (owner, ticket, item) in std::mem::take(&mut self.held) {
            if confirmed.met(&ticket) {
                ready.push((owner, item));
            } else {
                kept.push_back((owner, ticket, item));
            }
        }
        self.held = kept;
        ready
    }

    /// The items whose tickets `confirmed` meets, each owner's in arrival order and
    /// none past an earlier one of its owner still held.
    pub fn release(&mut self, confirmed: &impl Confirmations) -> Vec<(O, T)> {
        let mut ready = Vec::new();
        while self
            .held
            .front()
            .is_some_and(|(_, ticket, _)| confirmed.met(ticket))
        {
            let (owner, _, item) = self.held.pop_front().expect("front checked");
            ready.push((owner, item));
        }
        let front_waits_for_bus_only = self
            .held
            .front()
            .is_some_and(|(_, ticket, _)| confirmed.stored(ticket));
        if !front_waits_for_bus_only {
            return ready;
        }
        let mut waiting: HashSet<O> = HashSet::new();
        let mut kept = VecDeque::with_capacity(self.held.len());
        for (owner, ticket, item) in std::mem::take(&mut self.held) {
            if !waiting.contains(&owner) && confirmed.met(&ticket) {
                ready.push((owner, item));
            } else {
                waiting.insert(owner);
                kept.push_back((owner, ticket, item));
            }
        }
        self.held = kept;
        ready
    }
}

/// The engine's waits (module header): one field of the engine.
#[derive(Debug)]
pub struct Barrier<C, R> {
    /// Acknowledgements and SUBACKs, per connection.
    pub replies: Queue<C, R>,
    /// Sessions with deliveries of a held message queued, per session.
    pub deliveries: Queue<u32, ()>,
    /// `BUS_ACK(round)` owed to a shard, per shard.
    pub bus_acks: Queue<u16, u64>,
}

impl<C, R> Default for Barrier<C, R> {
    fn default() -> Self {
        Barrier {
            replies: Queue::default(),
            deliveries: Queue::default(),
            bus_acks: Queue::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Journal batches and rounds confirmed up to these numbers.
    struct Upto {
        journal: u64,
        round: u64,
    }

    impl Confirmations for Upto {
        fn journal_has(&self, batch: u64) -> bool {
            batch <= self.journal
        }
        fn stream_has(&self, _: u64) -> bool {
            true
        }
        fn bus_has(&self, wait: BusWait) -> bool {
            match wait {
                BusWait::None => true,
                BusWait::Slots { round, .. } | BusWait::Everyone { round } => round <= self.round,
            }
        }
    }

    fn bus(round: u64) -> Ticket {
        Ticket {
            bus: BusWait::Slots { round, slots: 1 },
            ..Ticket::journal(1)
        }
    }

    #[test]
    fn items_leave_in_order_once_their_batch_is_stored() {
        let mut queue = Queue::default();
        queue.hold(1, Ticket::journal(1), "a");
        queue.hold(2, Ticket::journal(2), "b");
        queue.hold(1, Ticket::journal(2), "c");
        assert!(queue
            .release(&Upto {
                journal: 0,
                round: 0
            })
            .is_empty());
        assert_eq!(
            queue.release(&Upto {
                journal: 1,
                round: 0
            }),
            [(1, "a")]
        );
        assert_eq!(
            queue.release(&Upto {
                journal: 2,
                round: 0
            }),
            [(2, "b"), (1, "c")]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn an_owner_waiting_for_a_round_holds_only_itself() {
        let mut queue = Queue::default();
        queue.hold(1, bus(5), "slow");
        queue.hold(2, Ticket::journal(1), "other");
        queue.hold(1, Ticket::journal(1), "behind");
        let stored = Upto {
            journal: 1,
            round: 0,
        };
        assert_eq!(queue.release(&stored), [(2, "other")]);
        assert_eq!(
            queue.len(),
            2,
            "1's second waits behind its first [MQTT-4.6.0-2]"
        );
        assert_eq!(
            queue.release(&Upto {
                journal: 1,
                round: 5
            }),
            [(1, "slow"), (1, "behind")]
        );
    }

    #[test]
    fn a_forgotten_owner_releases_nothing() {
        let mut queue = Queue::default();
        queue.hold(7u32, Ticket::journal(1), ());
        assert!(queue.holds_for(7));
        queue.forget(7);
        assert!(!queue.holds_for(7));
        assert!(queue
            .release(&Upto {
                journal: 9,
                round: 9
            })
            .is_empty());
    }
}
