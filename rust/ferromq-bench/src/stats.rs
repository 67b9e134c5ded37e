//! Delivery accounting and latency histograms.
//!
//! - [`SeqTracker`]: what one subscriber received from one publisher, as a bitset of
//!   sequence numbers. Recording is O(1); a sequence seen before is a duplicate, a new
//!   one below the highest seen so far is reordered. Memory is one bit per sequence.
//! - [`account`]: at the end, per publisher, compares what it sent with what its
//!   audience received. Subscribers that each get the whole stream are checked one by
//!   one; a `$share` group is checked as the union of its members' bitsets, because
//!   the broker splits the stream among them (a message two members both got is a
//!   duplicate, one none got is lost).
//! - [`Latency`]: an HDR histogram in nanoseconds (3 significant digits, up to 60 s),
//!   one per worker thread, merged at the end.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Whether a delivery was new to its subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    New,
    Duplicate,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqTracker {
    seen: Vec<u64>,
    highest: Option<u64>,
    pub received: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub reordered: u64,
}

impl SeqTracker {
    pub fn record(&mut self, seq: u64) -> Delivery {
        self.received += 1;
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & bit != 0 {
            self.duplicates += 1;
            return Delivery::Duplicate;
        }
        self.seen[word] |= bit;
        self.distinct += 1;
        match self.highest {
            Some(highest) if seq < highest => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
        Delivery::New
    }

    /// Fold another member's view of the same stream into this one (a `$share`
    /// group): sequences both received become duplicates.
    pub fn merge(&mut self, other: &SeqTracker) {
        if other.seen.len() > self.seen.len() {
            self.seen.resize(other.seen.len(), 0);
        }
        let mut overlap = 0u64;
        for (mine, theirs) in self.seen.iter_mut().zip(&other.seen) {
            overlap += u64::from((*mine & theirs).count_ones());
            *mine |= theirs;
        }
        self.received += other.received;
        self.distinct += other.distinct - overlap;
        self.duplicates += other.duplicates + overlap;
        self.reordered += other.reordered;
        self.highest = self.highest.max(other.highest);
    }
}

/// Which subscribers are meant to receive a publisher's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Subscriber `i` alone receives publisher `i` (P2P).
    Paired,
    /// Every subscriber receives every stream (fan-in, fan-out).
    Everyone,
    /// The subscribers share every stream as one group (`$share`).
    SharedGroup,
}

/// One publisher's stream as its audience saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReport {
    pub publisher: u32,
    pub sent: u64,
    /// Deliveries the publisher's messages should have made.
    pub expected: u64,
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
}

impl StreamReport {
    fn add(&mut self, tracker: &SeqTracker) {
        self.expected += self.sent;
        self.received += tracker.received;
        self.lost += self.sent.saturating_sub(tracker.distinct);
        self.duplicates += tracker.duplicates;
        self.reordered += tracker.reordered;
    }
}

/// Per publisher: `sent` is `(publisher id, messages sent)`, `subscribers[i]` the
/// trackers of subscriber `i` keyed by publisher id.
pub fn account(
    sent: &[(u32, u64)],
    subscribers: &[HashMap<u32, SeqTracker>],
    audience: Audience,
) -> Vec<StreamReport> {
    let empty = SeqTracker::default();
    let stream = |subscriber: &HashMap<u32, SeqTracker>, publisher: u32| {
        subscriber.get(&publisher).unwrap_or(&empty).clone()
    };
    sent.iter()
        .map(|&(publisher, sent)| {
            let mut report = StreamReport {
                publisher,
                sent,
                ..StreamReport::default()
            };
            match audience {
                Audience::Paired => {
                    let own = subscribers.get(publisher as usize);
                    report.add(&own.map_or(empty.clone(), |s| stream(s, publisher)));
                }
                Audience::Everyone => {
                    for subscriber in subscribers {
                        report.add(&stream(subscriber, publisher));
                    }
                }
                Audience::SharedGroup => {
                    let mut union = SeqTracker::default();
                    for subscriber in subscribers {
                        union.merge(&stream(subscriber, publisher));
                    }
                    report.add(&union);
                }
            }
            report
        })
        .collect()
}

/// Latency percentiles of one histogram, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone)]
pub struct Latency(Histogram<u64>);

const HIGHEST_NS: u64 = 60_000_000_000;

impl Default for Latency {
    fn default() -> Latency {
        // The bounds are constants that hdrhistogram accepts; this cannot fail.
        Latency(Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("valid histogram bounds"))
    }
}

impl Latency {
    /// Record one latency; values past 60 s count as 60 s.
    pub fn record_ns(&mut self, ns: u64) {
        self.0.saturating_record(ns.clamp(1, HIGHEST_NS));
    }

    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot overflow the range.
        self.0.add(&other.0).expect("histograms share bounds");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    pub fn summary(&self) -> LatencySummary {
        let ms = |ns: u64| ns as f64 / 1e6;
        if self.0.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.0.len(),
            mean: self.0.mean() / 1e6,
            p50: ms(self.0.value_at_quantile(0.50)),
            p90: ms(self.0.value_at_quantile(0.90)),
            p99: ms(self.0.value_at_quantile(0.99)),
            max: ms(self.0.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(seqs: &[u64]) -> SeqTracker {
        let mut tracker = SeqTracker::default();
        for &seq in seqs {
            tracker.record(seq);
        }
        tracker
    }

    #[test]
    fn tracker_counts_duplicates_and_reorders() {
        let mut t = SeqTracker::default();
        assert_eq!(t.record(0), Delivery::New);
        assert_eq!(t.record(2), Delivery::New);
        assert_eq!(t.record(1), Delivery::New); // below the highest: reordered
        assert_eq!(t.record(2), Delivery::Duplicate); // a duplicate is not a reorder
        assert_eq!(t.record(200), Delivery::New); // grows past one word
        assert_eq!(
            (t.received, t.distinct, t.duplicates, t.reordered),
            (5, 4, 1, 1)
        );
    }

    #[test]
    fn merge_turns_overlap_into_duplicates() {
        let mut a = tracker(&[0, 1, 2, 100]);
        a.merge(&tracker(&[2, 3, 3]));
        assert_eq!(
            (a.received, a.distinct, a.duplicates, a.reordered),
            (7, 5, 2, 0)
        );
    }

    fn streams(entries: &[(u32, &[u64])]) -> HashMap<u32, SeqTracker> {
        entries.iter().map(|(p, s)| (*p, tracker(s))).collect()
    }

    #[test]
    fn paired_streams_only_count_their_own_subscriber() {
        let subs = [streams(&[(0, &[0, 1, 2])]), streams(&[(1, &[0, 0, 2, 1])])];
        let reports = account(&[(0, 3), (1, 4)], &subs, Audience::Paired);
        assert_eq!((reports[0].lost, reports[0].duplicates), (0, 0));
        let r = &reports[1];
        assert_eq!(
            (r.expected, r.received, r.lost, r.duplicates, r.reordered),
            (4, 4, 1, 1, 1)
        );
    }

    #[test]
    fn everyone_counts_each_subscriber_and_silent_ones_lose_all() {
        let subs = [streams(&[(7, &[0, 1])]), HashMap::new()];
        let r = &account(&[(7, 2)], &subs, Audience::Everyone)[0];
        assert_eq!((r.expected, r.received, r.lost), (4, 2, 2));
    }

    #[test]
    fn shared_group_is_checked_as_a_union() {
        let subs = [streams(&[(0, &[0, 2])]), streams(&[(0, &[1, 2])])];
        let r = &account(&[(0, 4)], &subs, Audience::SharedGroup)[0];
        assert_eq!((r.expected, r.received, r.lost, r.duplicates), (4, 4, 1, 1));
    }

    #[test]
    fn latency_percentiles_in_milliseconds() {
        let mut a = Latency::default();
        let mut b = Latency::default();
        for i in 1..=99 {
            a.record_ns(i * 1_000_000);
        }
        b.record_ns(1_000_000_000);
        b.record_ns(u64::MAX); // saturates at the bound instead of failing
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 101);
        assert!((s.p50 - 51.0).abs() < 0.1, "{s:?}");
        assert!((s.p90 - 91.0).abs() < 0.1, "{s:?}");
        assert!((s.max - 60_000.0).abs() < 60.0, "{s:?}");
        assert_eq!(Latency::default().summary(), LatencySummary::default());
    }
}
