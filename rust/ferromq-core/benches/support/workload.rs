//! The topic workload shared by `benches/topic.rs` and `examples/topic_report.rs`.
//!
//! 100,000 clients, one device each, on `tenant/{t}/site/{s}/device/{d}/{metric}`
//! (10 tenants × 100 sites × 100 devices, 10 metrics). Each client holds 10
//! subscriptions: 7 exact (its first 7 metrics), 2 with '+' (its metric 7 on any
//! site, any metric of its device) and 1 with '#' (everything of its device): 70 %
//! exact, 20 % '+', 10 % '#'. A publish on a device matches 1 to 3 subscriptions of
//! that device's client, so every match has at most 5 subscriptions.

use ferromq_core::codec::{QoS, RetainHandling, SubscriptionOptions};
use ferromq_core::retain::RetainedIndex;
use ferromq_core::topic::{ShareStrategy, SubscriptionIndex};

pub const CLIENTS: u32 = 100_000;
pub const METRICS: [&str; 10] = [
    "temp", "hum", "pres", "volt", "amp", "rssi", "batt", "co2", "lux", "wind",
];

fn place(device: u32) -> (u32, u32) {
    (device / 10_000, (device / 100) % 100)
}

/// The 10 filters of `client` (its device has the same number).
pub fn filters(client: u32) -> [String; 10] {
    let (t, s) = place(client);
    std::array::from_fn(|k| match k {
        0..=6 => format!("tenant/{t}/site/{s}/device/{client}/{}", METRICS[k]),
        7 => format!("tenant/{t}/site/+/device/{client}/{}", METRICS[7]),
        8 => format!("tenant/{t}/site/{s}/device/{client}/+"),
        _ => format!("tenant/{t}/site/{s}/device/{client}/#"),
    })
}

pub fn topic(device: u32, metric: usize) -> String {
    let (t, s) = place(device);
    format!(
        "tenant/{t}/site/{s}/device/{device}/{}",
        METRICS[metric % 10]
    )
}

/// An index holding `subs` at QoS 1.
pub fn build(subs: &[(u32, String)]) -> SubscriptionIndex {
    let mut index = SubscriptionIndex::new(ShareStrategy::RoundRobin);
    for (client, filter) in subs {
        let _new = index.subscribe(*client, filter, QOS1, None);
    }
    index
}

pub const QOS1: SubscriptionOptions = SubscriptionOptions {
    qos: QoS::AtLeastOnce,
    no_local: false,
    retain_as_published: false,
    retain_handling: RetainHandling::SendAtSubscribe,
};

/// `devices` devices × 10 metrics of retained messages, id = position.
pub fn build_retained(devices: u32) -> RetainedIndex {
    let mut index = RetainedIndex::new();
    for device in 0..devices {
        for metric in 0..10 {
            let id = u64::from(device) * 10 + metric as u64;
            let _old = index.set(&topic(device, metric), id, None);
        }
    }
    index
}

/// Random publish topics over all devices (xorshift64, fixed seed).
pub fn random_topics(n: usize, devices: u32) -> Vec<String> {
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            topic((state % u64::from(devices)) as u32, (state >> 32) as usize)
        })
        .collect()
}

/// The brute-force matcher of seed 001, allocation-free.
pub fn filter_matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut levels = topic.split('/');
    for level in filter.split('/') {
        if level == "#" {
            return true;
        }
        match levels.next() {
            Some(t) if level == "+" || level == t => {}
            _ => return false,
        }
    }
    levels.next().is_none()
}

/// A linear scan over `subs`: the clients whose filter matches (not deduplicated).
pub fn brute_force(subs: &[(u32, String)], topic: &str, out: &mut Vec<u32>) {
    out.clear();
    out.extend(
        subs.iter()
            .filter(|(_, filter)| filter_matches(filter, topic))
            .map(|(client, _)| *client),
    );
}

/// The subscriptions of `clients` clients as a flat list for [`brute_force`].
pub fn flat_subscriptions(clients: u32) -> Vec<(u32, String)> {
    (0..clients)
        .flat_map(|c| filters(c).into_iter().map(move |f| (c, f)))
        .collect()
}
