//! The engine's memory budget for deliveries (`session.memory_budget`): what it
//! counts and when publishers are read less.
//!
//! Counted: every delivery in a session or shared-group queue
//! ([`delivery_bytes`]: topic + payload + the `Outgoing` record; a message fanned
//! out to N queues counts N times, so the figure errs high) and every byte encoded
//! for a connection and not yet taken by the IO layer (`Engine::take_output`).
//! In-flight deliveries (bounded by the window) and the transports' own buffers
//! (bounded by `limits.write_buffer_high_water` each) are outside it.
//!
//! Above the budget, a connection that sends a PUBLISH has its input held (`hold`)
//! and the IO layer stops reading it; the held connections resume together once the
//! total is at or below the low-water mark, three quarters of the budget. A
//! publisher whose own session has deliveries queued or in flight is never held
//! (it must keep reading its acknowledgements, or nothing it holds would drain);
//! its session's queue is bounded by `max_queued_bytes` instead.
//!
//! The queues share one `Ledger` (a counter the engine and every queue hold): a
//! queue adds and subtracts its own bytes as it changes and when it is dropped, so
//! the total is exact at O(1) per queue change whatever ends a session.

use std::cell::Cell;
use std::rc::Rc;

use super::Outgoing;

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
    /// Queued bytes plus output not yet taken: what the budget bounds.
    pub fn memory_used(&self) -> u64 {
        self.ledger.get() + self.output_bytes
    }

    /// Over the budget: a PUBLISH now holds its connection's input.
    pub(super) fn over_memory_budget(&self) -> bool {
        self.config.memory_budget > 0 && self.memory_used() > self.config.memory_budget
    }

    /// At or below the low-water mark: connections held for memory may resume.
    pub(super) fn below_memory_low_water(&self) -> bool {
        self.memory_used() <= self.config.memory_budget / 4 * 3
    }
}
