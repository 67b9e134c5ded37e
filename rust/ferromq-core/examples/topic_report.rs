//! Prints the numbers of the topic indexes on the workload of `benches/support`:
//! match latency percentiles at 1,000,000 subscriptions, subscribe and unsubscribe
//! operations per second, bytes per subscription (RSS delta and the index's own
//! accounting), retained lookups among 1,000,000 retained topics, and the ratio to
//! a brute-force scan of 10,000 subscriptions.
//!
//! Run: `cargo run --release -p ferromq-core --example topic_report`

#[path = "../benches/support/workload.rs"]
mod workload;

use std::time::{Duration, Instant};

use ferromq_core::topic::MatchResult;

/// Resident set size in bytes (Linux `/proc/self/statm`, 4 KiB pages).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn per_sec(ops: usize, elapsed: Duration) -> f64 {
    ops as f64 / elapsed.as_secs_f64()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn main() {
    let subs = workload::flat_subscriptions(workload::CLIENTS);
    let before = rss();
    let started = Instant::now();
    let mut index = workload::build(&subs);
    let built = started.elapsed();
    let grown = rss().saturating_sub(before);
    let stats = index.stats();
    println!("subscriptions: {}  {stats:?}", subs.len());
    println!(
        "subscribe: {:.2} M ops/s ({:.0} ms for {})",
        per_sec(subs.len(), built) / 1e6,
        built.as_secs_f64() * 1e3,
        subs.len()
    );
    println!(
        "memory: {:.1} B/sub by RSS delta, {:.1} B/sub by the index's heap accounting",
        grown as f64 / subs.len() as f64,
        stats.heap_bytes as f64 / subs.len() as f64
    );

    let topics = workload::random_topics(1_000_000, workload::CLIENTS);
    let mut out = MatchResult::new();
    for topic in topics.iter().take(10_000) {
        index.match_topic(topic, None, &mut out);
    }
    let mut latencies = Vec::with_capacity(topics.len());
    let mut deliveries = 0;
    for topic in &topics {
        let t = Instant::now();
        index.match_topic(topic, None, &mut out);
        latencies.push(t.elapsed().as_nanos() as u64);
        deliveries += out.len();
    }
    let started = Instant::now();
    for topic in &topics {
        index.match_topic(topic, None, &mut out);
    }
    let mean = started.elapsed().as_nanos() as f64 / topics.len() as f64;
    latencies.sort_unstable();
    println!(
        "match at 1M subs: p50 {} ns, p99 {} ns, p99.9 {} ns, mean {mean:.0} ns (loop), {:.2} deliveries/match",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
        deliveries as f64 / topics.len() as f64
    );

    let started = Instant::now();
    for (client, filter) in &subs {
        index.unsubscribe(*client, filter);
    }
    let elapsed = started.elapsed();
    let after = index.stats();
    index.shrink_to_fit();
    println!(
        "unsubscribe: {:.2} M ops/s; after: {after:?}; heap after shrink_to_fit: {} B",
        per_sec(subs.len(), elapsed) / 1e6,
        index.stats().heap_bytes
    );
    drop(index);

    let small = workload::flat_subscriptions(1_000);
    let mut small_index = workload::build(&small);
    let small_topics = workload::random_topics(10_000, 1_000);
    let mut clients = Vec::new();
    let started = Instant::now();
    for topic in &small_topics {
        workload::brute_force(&small, topic, &mut clients);
    }
    let brute = started.elapsed().as_nanos() as f64 / small_topics.len() as f64;
    let started = Instant::now();
    for topic in &small_topics {
        small_index.match_topic(topic, None, &mut out);
    }
    let indexed = started.elapsed().as_nanos() as f64 / small_topics.len() as f64;
    println!(
        "10k subs: brute-force scan {brute:.0} ns/match, index {indexed:.0} ns/match, ratio {:.0}x",
        brute / indexed
    );

    let before = rss();
    let started = Instant::now();
    let mut retained = workload::build_retained(workload::CLIENTS);
    let built = started.elapsed();
    let grown = rss().saturating_sub(before);
    let rstats = retained.stats();
    println!(
        "retained: {} topics set at {:.2} M ops/s, {:.1} B/topic by RSS delta, {:.1} by accounting; {rstats:?}",
        rstats.topics,
        per_sec(rstats.topics, built) / 1e6,
        grown as f64 / rstats.topics as f64,
        rstats.heap_bytes as f64 / rstats.topics as f64
    );
    let mut ids = Vec::new();
    for filter in [
        "tenant/1/site/7/device/10717/#",
        "tenant/1/site/7/device/+/temp",
        "tenant/1/+/+/device/#",
        "+/+/site/+/device/+/co2",
    ] {
        let runs = 20;
        let started = Instant::now();
        for _ in 0..runs {
            ids.clear();
            let _ok = retained.match_filter(filter, 0, &mut ids);
        }
        let each = started.elapsed() / runs;
        println!(
            "retained {filter}: {} matches in {:.1} µs ({:.0} ns/match)",
            ids.len(),
            each.as_secs_f64() * 1e6,
            each.as_nanos() as f64 / ids.len().max(1) as f64
        );
    }
}
