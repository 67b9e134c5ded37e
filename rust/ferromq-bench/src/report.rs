//! The result of a run, as the JSON document the CLI and the harness read.
//!
//! Rates come from the workers' 100 ms timeline, counted over the measured window
//! only: sends in [measure start, publish end), deliveries in [measure start, publish
//! end) for a duration run and [measure start, last delivery] for a count run (a
//! broker that lags is then charged for its backlog). Latency percentiles cover the
//! messages sent inside the window; loss, duplicates and reordering cover every
//! message of the run, warm-up included.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::client::{Tally, BUCKET_NS};
use crate::config::{Config, Scenario};
use crate::scenario::Plan;
use crate::shared::{Instants, Totals};
use crate::stats::{account, LatencySummary, SeqTracker, StreamReport};
use crate::worker::WorkerResult;

/// Streams with loss, duplicates or reordering listed by publisher in the report.
const MAX_LISTED_STREAMS: usize = 20;

/// How the coordinator saw the run go.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every client connected (and subscribed).
    pub all_ready: u64,
    /// Zero for `conn`, which publishes nothing.
    pub instants: Instants,
    pub received_end: u64,
    pub drain_complete: bool,
    pub finished: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientsReport {
    pub planned: u64,
    pub publishers: u32,
    pub subscribers: u32,
    pub connected: u64,
    pub connect_failures: u64,
    /// Connections lost after they were up.
    pub connection_errors: u64,
    pub reconnects: u64,
    /// Of the connections, those whose TLS handshake resumed a session (0 without TLS).
    pub tls_resumed: u64,
    pub connect_per_s: f64,
    pub first_errors: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub expected: u64,
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Deliveries queued by an earlier run for a persistent session.
    pub stale: u64,
    /// Every expected delivery and acknowledgement arrived before the drain timeout.
    pub drain_complete: bool,
    /// Per-publisher detail of the streams with loss, duplicates or reordering.
    pub anomalies: Vec<StreamReport>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds since publishing started (the end of this one-second bucket).
    pub t: f64,
    pub sent: u64,
    pub received: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GeneratorReport {
    pub threads: usize,
    pub cpu_s: f64,
    /// CPU time over threads × wall time: near 1.0 means the generator may be the
    /// bottleneck.
    pub busy: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub scenario: Scenario,
    pub config: Config,
    pub clients: ClientsReport,
    pub window_s: f64,
    pub sent: u64,
    pub received: u64,
    pub sent_per_s: f64,
    pub received_per_s: f64,
    /// PUBLISH packets into the broker plus out of it, per second.
    pub in_out_per_s: f64,
    pub latency_ms: LatencySummary,
    /// Publish to PUBACK (QoS 1) or PUBCOMP (QoS 2); empty for QoS 0.
    pub ack_latency_ms: LatencySummary,
    pub connect_latency_ms: LatencySummary,
    pub delivery: DeliveryReport,
    pub timeline: Vec<TimelinePoint>,
    pub generator: GeneratorReport,
}

fn merge_tallies(results: &mut [WorkerResult]) -> Tally {
    let mut total = Tally::default();
    for r in results.iter_mut() {
        let t = std::mem::take(&mut r.tally);
        total.e2e.merge(&t.e2e);
        total.ack.merge(&t.ack);
        total.connect.merge(&t.connect);
        if t.timeline.len() > total.timeline.len() {
            total.timeline.resize(t.timeline.len(), [0, 0]);
        }
        for (sum, bucket) in total.timeline.iter_mut().zip(&t.timeline) {
            sum[0] += bucket[0];
            sum[1] += bucket[1];
        }
        total.stale += t.stale;
        total.reconnects += t.reconnects;
        total.tls_resumed += t.tls_resumed;
    }
    total
}

/// Buckets `[from, to)` of the timeline for instants `start .. end` after `origin`.
fn bucket_range(origin: u64, start: u64, end: u64) -> (usize, usize) {
    let from = start.saturating_sub(origin).div_ceil(BUCKET_NS);
    let to = end.saturating_sub(origin) / BUCKET_NS;
    (from as usize, to.max(from) as usize)
}

fn per_second(count: u64, buckets: usize) -> f64 {
    match buckets {
        0 => 0.0,
        n => count as f64 / (n as f64 * BUCKET_NS as f64 / 1e9),
    }
}

pub fn build_report(
    config: &Config,
    plan: &Plan,
    outcome: &Outcome,
    totals: &Totals,
    mut results: Vec<WorkerResult>,
    threads: usize,
) -> Report {
    let tally = merge_tallies(&mut results);
    let mut sent: Vec<(u32, u64)> = results.iter().flat_map(|r| r.publishers.clone()).collect();
    sent.sort_unstable();
    let mut subscribers: Vec<HashMap<u32, SeqTracker>> =
        vec![HashMap::new(); plan.subscribers as usize];
    for r in &mut results {
        for (index, streams) in r.subscribers.drain(..) {
            subscribers[index as usize] = streams;
        }
    }
    let streams = account(&sent, &subscribers, plan.audience);
    let mut delivery = DeliveryReport {
        stale: tally.stale,
        drain_complete: outcome.drain_complete,
        ..DeliveryReport::default()
    };
    for s in &streams {
        delivery.expected += s.expected;
        delivery.received += s.received;
        delivery.lost += s.lost;
        delivery.duplicates += s.duplicates;
        delivery.reordered += s.reordered;
    }
    delivery.anomalies = streams
        .into_iter()
        .filter(|s| s.lost + s.duplicates + s.reordered > 0)
        .take(MAX_LISTED_STREAMS)
        .collect();

    let i = outcome.instants;
    let (from, sent_to) = bucket_range(i.publish_start, i.measure_start, i.publish_end);
    let (_, received_to) = bucket_range(i.publish_start, i.measure_start, outcome.received_end);
    let window_sum = |column: usize, to: usize| -> u64 {
        let end = to.min(tally.timeline.len());
        tally
            .timeline
            .get(from..end)
            .map_or(0, |b| b.iter().map(|x| x[column]).sum())
    };
    let sent_per_s = per_second(window_sum(0, sent_to), sent_to - from);
    let received_per_s = per_second(window_sum(1, received_to), received_to - from);

    let timeline = tally
        .timeline
        .chunks(10)
        .enumerate()
        .map(|(second, chunk)| TimelinePoint {
            t: (second + 1) as f64,
            sent: chunk.iter().map(|b| b[0]).sum(),
            received: chunk.iter().map(|b| b[1]).sum(),
        })
        .collect();

    let connected = tally.connect.count();
    let clients = ClientsReport {
        planned: plan.clients.len() as u64,
        publishers: plan.publishers,
        subscribers: plan.subscribers,
        connected,
        connect_failures: totals.failed,
        connection_errors: totals.errors,
        reconnects: tally.reconnects,
        tls_resumed: tally.tls_resumed,
        connect_per_s: match outcome.all_ready {
            0 => 0.0,
            ns => connected as f64 / (ns as f64 / 1e9),
        },
        first_errors: results
            .iter()
            .flat_map(|r| r.errors.clone())
            .take(10)
            .collect(),
    };
    let cpu_ns: u64 = results.iter().filter_map(|r| r.cpu_ns).sum();
    let wall = outcome.finished.max(1) as f64;
    Report {
        scenario: config.scenario,
        config: config.clone(),
        clients,
        window_s: (sent_to - from) as f64 * BUCKET_NS as f64 / 1e9,
        sent: sent.iter().map(|s| s.1).sum(),
        received: delivery.received,
        sent_per_s,
        received_per_s,
        in_out_per_s: sent_per_s + received_per_s,
        latency_ms: tally.e2e.summary(),
        ack_latency_ms: tally.ack.summary(),
        connect_latency_ms: tally.connect.summary(),
        delivery,
        timeline,
        generator: GeneratorReport {
            threads,
            cpu_s: cpu_ns as f64 / 1e9,
            busy: cpu_ns as f64 / (threads as f64 * wall),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_buckets_round_inwards() {
        let b = BUCKET_NS;
        assert_eq!(bucket_range(0, b / 2, 3 * b + 1), (1, 3));
        assert_eq!(bucket_range(10, 10, 10), (0, 0));
        assert_eq!(bucket_range(0, 5 * b, 2 * b), (5, 5));
        assert_eq!(per_second(50, 5), 100.0);
        assert_eq!(per_second(50, 0), 0.0);
    }
}
