//! The engine's memory budget for deliveries (`session.memory_budget`): what it
//! counts and when publishers are read less.
//!
//! Counted: every delivery in a session or shared-group queue, online or offline
//! ([`delivery_bytes`]: topic + payload + the `Outgoing` record; a message fanned
//! out to N queues counts N times, so the figure errs high) and every byte encoded
//! for a connection and not yet taken by the IO layer (`Engine::take_output`), and
//! the `[stream]` batches an acked sink holds and has not confirmed (`export`).
//! In-flight deliveries (bounded by the window) and the transports' own buffers
//! (bounded by `limits.write_buffer_high_water` each) are outside it.
//!
//! Above the budget, a connection that sends a PUBLISH has its input held (`hold`)
//! and the IO layer stops reading it; the held connections resume together once the
//! total is at or below the low-water mark, three quarters of the budget. So
//! publishers go at the pace of the subscribers that hold the memory. A publisher
//! whose own session has deliveries queued or in flight is never held (it must keep
//! reading its acknowledgements, or nothing it holds would drain).
//!
//! Memory that does not drain would hold publishers for ever: a subscriber that
//! never reads, an offline session. So when publishers have been held for
//! `STALL_MS` and the total is still above the low-water mark, the engine drops the
//! oldest queued deliveries of the sessions that are not draining (offline, or
//! whose queue has not moved for `STALL_MS`: it neither reads nor acknowledges),
//! largest queue first, then of shared groups' queues (messages no member could
//! take), down to the low-water mark (counted as `memory_budget`), and the
//! publishers resume. A subscriber that reads and acknowledges slowly is
//! never trimmed: it paces them.
//!
//! The trade-off: a publisher whose messages go to one slow subscriber among fast
//! ones is paced to the slow one (the fast ones too) while that subscriber's backlog
//! fills the budget; `session.max_queued_bytes` well below the budget bounds that
//! subscriber's backlog on its own (it drops, counted as `session_bytes`) and keeps
//! the others at their pace; no per-session bound favours losing nothing.
//!
//! The queues share one `Ledger` (a counter the engine and every queue hold): a
//! queue adds and subtracts its own bytes as it changes and when it is dropped, so
//! the total is exact at O(1) per queue change whatever ends a session.

use std::cell::Cell;
use std::rc::Rc;

use super::stats::DropReason;
use super::Outgoing;

/// How long publishers are held for memory before queues that do not drain are
/// trimmed, and how long a queue must not have moved to count as not draining.
pub const STALL_MS: u64 = 1000;

/// Bytes a queued delivery is counted for.
pub fn delivery_bytes(out: &Outgoing) -> u64 {
    (out.message.topic.len() + out.message.payload.len() + std::mem::size_of::<Outgoing>()) as u64
}

/// The running total of queued bytes, shared by the engine and its queues.
#[derive(Debug, Clone, Default)]
pub struct Ledger(Rc<Cell<u64>>);

impl Ledger {
    pub fn add(&self, bytes: u64) {
        self.0.set(self.0.get() + bytes);
    }

    pub fn sub(&self, bytes: u64) {
        self.0.set(self.0.get().saturating_sub(bytes));
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl super::Engine {
    /// Queued bytes, output not yet taken and stream batches an acked sink has not
    /// confirmed: what the budget bounds.
    pub fn memory_used(&self) -> u64 {
        self.ledger.get() + self.output_bytes + self.stream_unconfirmed_bytes()
    }

    /// Over the budget: a PUBLISH now holds its connection's input.
    pub(super) fn over_memory_budget(&self) -> bool {
        self.config.memory_budget > 0 && self.memory_used() > self.config.memory_budget
    }

    /// At or below the low-water mark: connections held for memory may resume.
    pub(super) fn below_memory_low_water(&self) -> bool {
        self.memory_used() <= self.config.memory_budget / 4 * 3
    }

    /// Publishers have been held for memory for `STALL_MS` and the total did not
    /// come down: drop the oldest deliveries of sessions that do not drain, largest
    /// queue first, to the low-water mark, and let the publishers go. O(sessions),
    /// only while stalled.
    pub(super) fn relieve_memory(&mut self, now: u64) {
        let stalled = self.memory_held > 0
            && now >= self.memory_held_since + STALL_MS
            && !self.below_memory_low_water();
        if !stalled {
            return;
        }
        let mut stuck: Vec<(u64, u32)> = Vec::new();
        for (id, session) in self.sessions.iter().enumerate() {
            let Some(session) = session.as_ref().filter(|s| !s.queue.is_empty()) else {
                continue;
            };
            let draining = session.conn.is_some() && now < session.queue_moved_at + STALL_MS;
            if !draining {
                stuck.push((session.queue.bytes(), id as u32));
            }
        }
        stuck.sort_unstable_by(|a, b| b.cmp(a));
        for (_, session) in stuck {
            while !self.below_memory_low_water() {
                let Some(out) = self.session_mut(session).and_then(|s| s.queue.pop()) else {
                    break;
                };
                self.count_dropped(DropReason::MemoryBudget, Some(session), &out.message, now);
                self.journal_removed(session, &out);
            }
        }
        let mut groups = self.group_queues.sizes();
        groups.sort_unstable_by_key(|&(bytes, _)| std::cmp::Reverse(bytes));
        for (_, group) in groups {
            while !self.below_memory_low_water() && self.trim_group(group) {}
        }
        self.release_memory_holds();
    }
}
