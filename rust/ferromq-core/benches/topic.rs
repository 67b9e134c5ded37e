//! Topic index benchmarks on the workload of `support/workload.rs`: match latency at
//! 1,000,000 subscriptions, subscribe and unsubscribe operations, retained lookups
//! among 1,000,000 retained topics, and the index against a brute-force scan of
//! 10,000 subscriptions.
//!
//! Run: `cargo bench -p ferromq-core --bench topic`

#[path = "support/workload.rs"]
mod workload;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferromq_core::topic::{MatchResult, SubscriptionIndex};

/// Match one topic per iteration, cycling through `topics`.
fn bench_match(c: &mut Criterion, name: &str, index: &mut SubscriptionIndex, topics: &[String]) {
    let mut out = MatchResult::new();
    let mut at = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            at = (at + 1) % topics.len();
            index.match_topic(black_box(&topics[at]), None, &mut out);
            out.len()
        })
    });
}

/// Fresh subscriptions of clients past the workload's: `n` of them.
fn fresh(n: u64, first: &mut u32) -> Vec<(u32, String)> {
    let clients = u32::try_from(n.div_ceil(10)).unwrap_or(u32::MAX);
    let subs = (*first..*first + clients)
        .flat_map(|c| workload::filters(c).into_iter().map(move |f| (c, f)))
        .take(n as usize)
        .collect();
    *first += clients;
    subs
}

fn subscription_index(c: &mut Criterion) {
    let subs = workload::flat_subscriptions(workload::CLIENTS);
    let mut index = workload::build(&subs);
    let topics = workload::random_topics(65_536, workload::CLIENTS);
    bench_match(c, "match/1M_subs", &mut index, &topics);

    let mut next_client = workload::CLIENTS;
    c.bench_function("subscribe/1M_subs", |b| {
        b.iter_custom(|iters| {
            let batch = fresh(iters, &mut next_client);
            let started = Instant::now();
            for (client, filter) in &batch {
                let _new = index.subscribe(*client, filter, workload::QOS1, None);
            }
            let elapsed = started.elapsed();
            batch.iter().for_each(|(client, _)| {
                index.remove_client(*client);
            });
            elapsed
        })
    });
    c.bench_function("unsubscribe/1M_subs", |b| {
        b.iter_custom(|iters| {
            let batch = fresh(iters, &mut next_client);
            for (client, filter) in &batch {
                let _new = index.subscribe(*client, filter, workload::QOS1, None);
            }
            let started = Instant::now();
            for (client, filter) in &batch {
                index.unsubscribe(*client, filter);
            }
            started.elapsed()
        })
    });
    drop(index);

    let small = workload::flat_subscriptions(1_000);
    let mut small_index = workload::build(&small);
    let small_topics = workload::random_topics(4_096, 1_000);
    bench_match(c, "match/10k_subs/index", &mut small_index, &small_topics);
    let mut clients = Vec::new();
    let mut at = 0;
    c.bench_function("match/10k_subs/brute_force", |b| {
        b.iter(|| {
            at = (at + 1) % small_topics.len();
            workload::brute_force(&small, black_box(&small_topics[at]), &mut clients);
            clients.len()
        })
    });
}

fn retained_index(c: &mut Criterion) {
    let mut retained = workload::build_retained(workload::CLIENTS);
    let mut ids = Vec::new();
    let mut group = c.benchmark_group("retained/1M_topics");
    for filter in [
        "tenant/1/site/7/device/10717/#",
        "tenant/1/site/7/device/+/temp",
        "tenant/1/+/+/device/#",
    ] {
        ids.clear();
        let _ok = retained.match_filter(filter, 0, &mut ids);
        group.throughput(Throughput::Elements(ids.len() as u64));
        group.bench_function(filter, |b| {
            b.iter(|| {
                ids.clear();
                let _ok = retained.match_filter(black_box(filter), 0, &mut ids);
                ids.len()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = subscription_index, retained_index
}
criterion_main!(benches);
