//! State the coordinator and the worker threads share while a run is under way.
//!
//! The coordinator (the calling thread) owns the timeline: it moves [`Phase`] forward
//! and publishes the run's instants in [`Times`] before it announces `Publishing`
//! (written before the Release store of the phase, read after an Acquire load). Each
//! worker owns one cache-line-aligned [`Counters`] block it bumps with Relaxed adds; the
//! coordinator only sums them for the progress line and the drain condition. Nothing
//! per message crosses threads except those uncontended adds.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

/// Nanoseconds on one monotonic clock shared by every thread of a run, so a stamp
/// written by a publisher thread can be subtracted from a subscriber thread's now.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    pub fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Clients connect and subscribe; nobody publishes.
    Connecting = 0,
    /// Publishers publish (warm-up, then the measured window).
    Publishing = 1,
    /// Publishing is over; acknowledgements and deliveries still come in.
    Draining = 2,
    /// Workers disconnect their clients and hand back their results.
    Stop = 3,
}

/// Instants of the run, nanoseconds on the run's [`Clock`].
#[derive(Debug, Default)]
pub struct Times {
    pub publish_start: AtomicU64,
    pub measure_start: AtomicU64,
    /// `u64::MAX` when publishers stop after a message count instead.
    pub publish_end: AtomicU64,
}

/// A snapshot of [`Times`] a worker takes once publishing begins.
#[derive(Debug, Clone, Copy, Default)]
pub struct Instants {
    pub publish_start: u64,
    pub measure_start: u64,
    pub publish_end: u64,
}

/// Running totals of one worker.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    /// Clients connected (and, for subscribers, subscribed) at least once.
    pub ready: AtomicU64,
    /// Clients that failed before becoming ready.
    pub failed: AtomicU64,
    /// Connections lost or refused after becoming ready.
    pub errors: AtomicU64,
    pub sent: AtomicU64,
    /// QoS 1/2 publishes whose flow completed (PUBACK or PUBCOMP).
    pub acked: AtomicU64,
    /// Deliveries of this run's messages, duplicates included.
    pub received: AtomicU64,
    /// Deliveries new to their subscriber.
    pub received_new: AtomicU64,
    pub publishers_done: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Sums of every worker's [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub ready: u64,
    pub failed: u64,
    pub errors: u64,
    pub sent: u64,
    pub acked: u64,
    pub received: u64,
    pub received_new: u64,
    pub publishers_done: u64,
}

#[derive(Debug)]
pub struct Shared {
    pub clock: Clock,
    phase: AtomicU8,
    pub times: Times,
    pub counters: Vec<Counters>,
}

impl Shared {
    pub fn new(workers: usize) -> Shared {
        Shared {
            clock: Clock::start(),
            phase: AtomicU8::new(Phase::Connecting as u8),
            times: Times::default(),
            counters: (0..workers).map(|_| Counters::default()).collect(),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Connecting,
            1 => Phase::Publishing,
            2 => Phase::Draining,
            _ => Phase::Stop,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Fix the run's instants, then let the workers publish.
    pub fn start_publishing(&self, instants: Instants) {
        let t = &self.times;
        t.publish_start
            .store(instants.publish_start, Ordering::Relaxed);
        t.measure_start
            .store(instants.measure_start, Ordering::Relaxed);
        t.publish_end.store(instants.publish_end, Ordering::Relaxed);
        self.set_phase(Phase::Publishing);
    }

    /// The instants; only meaningful once the phase is past `Connecting`.
    pub fn instants(&self) -> Instants {
        let t = &self.times;
        Instants {
            publish_start: t.publish_start.load(Ordering::Relaxed),
            measure_start: t.measure_start.load(Ordering::Relaxed),
            publish_end: t.publish_end.load(Ordering::Relaxed),
        }
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for c in &self.counters {
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            t.ready += get(&c.ready);
            t.failed += get(&c.failed);
            t.errors += get(&c.errors);
            t.sent += get(&c.sent);
            t.acked += get(&c.acked);
            t.received += get(&c.received);
            t.received_new += get(&c.received_new);
            t.publishers_done += get(&c.publishers_done);
        }
        t
    }
}
