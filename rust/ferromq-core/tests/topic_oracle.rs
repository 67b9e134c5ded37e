//! Property tests: the subscription index and the retained index against brute-force
//! oracles that compare filter levels to topic levels one by one (seed 001, §1).
//!
//! Levels come from a small alphabet with empty levels and a '$' level, filters put
//! '+' and '#' at every position, clients hold several subscriptions, and random
//! operation sequences interleave subscribe, unsubscribe, remove_client, online
//! changes and matches, so every match is checked against the model at that point.

use std::collections::{BTreeMap, BTreeSet};

use ferromq_core::codec::{QoS, RetainHandling, SubscriptionOptions};
use ferromq_core::retain::RetainedIndex;
use ferromq_core::topic::{MatchResult, ShareStrategy, SubscriptionIndex};
use proptest::prelude::*;

/// The oracle: does `filter` (plain, validated) match topic name `topic`?
fn oracle_matches(filter: &str, topic: &str) -> bool {
    let filter: Vec<&str> = filter.split('/').collect();
    let topic_levels: Vec<&str> = topic.split('/').collect();
    // [MQTT-4.7.2-1]
    if topic.starts_with('$') && (filter[0] == "+" || filter[0] == "#") {
        return false;
    }
    for (i, level) in filter.iter().enumerate() {
        if *level == "#" {
            return true; // the levels before matched, so the parent and all below match
        }
        match topic_levels.get(i) {
            Some(t) if *level == "+" || level == t => {}
            _ => return false,
        }
    }
    filter.len() == topic_levels.len()
}

const LEVELS: [&str; 4] = ["a", "b", "", "$s"];

fn topic_strategy() -> impl Strategy<Value = String> {
    // A lone empty level would be the empty topic, which is no valid name.
    prop::collection::vec(prop::sample::select(&LEVELS[..]), 1..5).prop_map(|l| {
        if l == [""] {
            "a".into()
        } else {
            l.join("/")
        }
    })
}

fn plain_filter_strategy() -> impl Strategy<Value = String> {
    let level = prop::sample::select(&["a", "b", "", "$s", "+", "+"][..]);
    (prop::collection::vec(level, 0..4), any::<bool>()).prop_map(|(mut levels, multi)| {
        if multi || levels.is_empty() || levels == [""] {
            levels.push("#");
        }
        levels.join("/")
    })
}

fn filter_strategy() -> impl Strategy<Value = String> {
    (plain_filter_strategy(), 0..4u8).prop_map(|(f, share)| match share {
        1 => format!("$share/g1/{f}"),
        2 => format!("$share/g2/{f}"),
        _ => f,
    })
}

fn options_strategy() -> impl Strategy<Value = SubscriptionOptions> {
    (0..3u8, any::<bool>(), any::<bool>()).prop_map(|(q, no_local, rap)| SubscriptionOptions {
        qos: QoS::from_u8(q).unwrap_or_default(),
        no_local,
        retain_as_published: rap,
        retain_handling: RetainHandling::SendAtSubscribe,
    })
}

#[derive(Debug, Clone)]
enum Op {
    Subscribe(u32, String, SubscriptionOptions, Option<u32>),
    Unsubscribe(u32, String),
    RemoveClient(u32),
    Online(u32, bool),
    Match(String, Option<u32>),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let client = 0..5u32;
    prop_oneof![
        5 => (client.clone(), filter_strategy(), options_strategy(), prop::option::of(1..4u32))
            .prop_map(|(c, f, o, i)| Op::Subscribe(c, f, o, i)),
        2 => (client.clone(), filter_strategy()).prop_map(|(c, f)| Op::Unsubscribe(c, f)),
        1 => client.clone().prop_map(Op::RemoveClient),
        1 => (client.clone(), any::<bool>()).prop_map(|(c, o)| Op::Online(c, o)),
        6 => (topic_strategy(), prop::option::of(client)).prop_map(|(t, p)| Op::Match(t, p)),
    ]
}

type Row = (u32, u8, bool, Vec<u32>);

#[derive(Default)]
struct Model {
    subs: BTreeMap<(u32, String), (SubscriptionOptions, Option<u32>)>,
    offline: BTreeSet<u32>,
}

impl Model {
    /// Plain deliveries by client, and per matching group (name, filter) its eligible
    /// members' rows.
    fn expect(
        &self,
        topic: &str,
        publisher: Option<u32>,
    ) -> (Vec<Row>, BTreeMap<String, Vec<Row>>) {
        let mut plain: BTreeMap<u32, (u8, bool, BTreeSet<u32>)> = BTreeMap::new();
        let mut groups: BTreeMap<String, Vec<Row>> = BTreeMap::new();
        for ((client, filter), (opts, sub_id)) in &self.subs {
            let shared = filter
                .strip_prefix("$share/")
                .and_then(|r| r.split_once('/'));
            let inner = shared.map_or(filter.as_str(), |(_, f)| f);
            if !oracle_matches(inner, topic) {
                continue;
            }
            let own = opts.no_local && publisher == Some(*client);
            if shared.is_some() {
                let rows = groups.entry(filter.clone()).or_default();
                if !own && !self.offline.contains(client) {
                    let ids = sub_id.iter().copied().collect();
                    rows.push((*client, opts.qos as u8, opts.retain_as_published, ids));
                }
                continue;
            }
            if own {
                continue;
            }
            let entry = plain.entry(*client).or_default();
            entry.0 = entry.0.max(opts.qos as u8);
            entry.1 |= opts.retain_as_published;
            entry.2.extend(sub_id.iter().copied());
        }
        let plain = plain
            .into_iter()
            .map(|(c, (q, rap, ids))| (c, q, rap, ids.into_iter().collect()))
            .collect();
        (plain, groups)
    }
}

fn rows(result: &MatchResult, shared: bool) -> Vec<Row> {
    let mut rows: Vec<Row> = result
        .iter()
        .filter(|d| d.shared == shared)
        .map(|d| {
            let mut ids = d.subscription_ids.to_vec();
            ids.sort_unstable();
            (d.client, d.qos as u8, d.retain_as_published, ids)
        })
        .collect();
    rows.sort();
    rows
}

fn run_ops(strategy: ShareStrategy, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut index = SubscriptionIndex::new(strategy);
    let mut model = Model::default();
    let mut result = MatchResult::new();
    for op in ops {
        match op {
            Op::Subscribe(client, filter, opts, id) => {
                let new = index.subscribe(*client, filter, *opts, *id);
                let was = model.subs.insert((*client, filter.clone()), (*opts, *id));
                prop_assert_eq!(new, Ok(was.is_none()), "subscribe {} {}", client, filter);
            }
            Op::Unsubscribe(client, filter) => {
                let had = model.subs.remove(&(*client, filter.clone())).is_some();
                prop_assert_eq!(index.unsubscribe(*client, filter), had);
            }
            Op::RemoveClient(client) => {
                let before = model.subs.len();
                model.subs.retain(|(c, _), _| c != client);
                model.offline.remove(client);
                prop_assert_eq!(index.remove_client(*client), before - model.subs.len());
            }
            Op::Online(client, online) => {
                index.set_client_online(*client, *online);
                if *online {
                    model.offline.remove(client);
                } else {
                    model.offline.insert(*client);
                }
            }
            Op::Match(topic, publisher) => {
                index.match_topic(topic, *publisher, &mut result);
                let (plain, groups) = model.expect(topic, *publisher);
                prop_assert_eq!(rows(&result, false), plain, "topic {:?}", topic);
                let unserved: BTreeSet<String> = result
                    .unserved_groups()
                    .iter()
                    .filter_map(|&g| index.shared_group_filter(g))
                    .collect();
                let expect_unserved: BTreeSet<String> = groups
                    .iter()
                    .filter(|(_, rows)| rows.is_empty())
                    .map(|(f, _)| f.clone())
                    .collect();
                prop_assert_eq!(unserved, expect_unserved, "topic {:?}", topic);
                let shared = rows(&result, true);
                prop_assert_eq!(shared.len(), groups.len() - result.unserved_groups().len());
                for row in &shared {
                    prop_assert!(
                        groups.values().any(|rows| rows.contains(row)),
                        "{:?} is no eligible member of a matching group",
                        row
                    );
                }
            }
        }
        prop_assert_eq!(index.len(), model.subs.len());
    }
    // Everything removed: the index is back to its empty shape.
    let clients: BTreeSet<u32> = (0..5).collect();
    for client in clients {
        index.remove_client(client);
    }
    let stats = index.stats();
    prop_assert_eq!(
        (stats.subscriptions, stats.clients, stats.exact_filters),
        (0, 0, 0)
    );
    prop_assert_eq!((stats.trie_nodes, stats.levels, stats.groups), (1, 1, 0));
    Ok(())
}

fn strategy_strategy() -> impl Strategy<Value = ShareStrategy> {
    prop::sample::select(
        &[
            ShareStrategy::RoundRobin,
            ShareStrategy::Random,
            ShareStrategy::HashClient,
            ShareStrategy::HashTopic,
            ShareStrategy::Sticky,
        ][..],
    )
}

#[derive(Debug, Clone)]
enum RetainOp {
    Set(String, u64, Option<u64>),
    Clear(String),
    Purge(u64),
    Match(String, u64),
}

fn retain_op_strategy() -> impl Strategy<Value = RetainOp> {
    prop_oneof![
        4 => (topic_strategy(), any::<u64>(), prop::option::of(0..10u64))
            .prop_map(|(t, id, d)| RetainOp::Set(t, id, d)),
        1 => topic_strategy().prop_map(RetainOp::Clear),
        1 => (0..10u64).prop_map(RetainOp::Purge),
        4 => (plain_filter_strategy(), 0..10u64).prop_map(|(f, now)| RetainOp::Match(f, now)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn match_topic_equals_oracle(
        strategy in strategy_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..80),
    ) {
        run_ops(strategy, &ops)?;
    }

    #[test]
    fn match_filter_equals_oracle(ops in prop::collection::vec(retain_op_strategy(), 1..80)) {
        let mut index = RetainedIndex::new();
        let mut model: BTreeMap<String, (u64, Option<u64>)> = BTreeMap::new();
        let mut out = Vec::new();
        for op in &ops {
            match op {
                RetainOp::Set(topic, id, deadline) => {
                    let old = model.insert(topic.clone(), (*id, *deadline)).map(|(id, _)| id);
                    prop_assert_eq!(index.set(topic, *id, *deadline), Ok(old));
                }
                RetainOp::Clear(topic) => {
                    let old = model.remove(topic).map(|(id, _)| id);
                    prop_assert_eq!(index.clear(topic), old);
                }
                RetainOp::Purge(now) => {
                    let mut expect: Vec<u64> = model
                        .values()
                        .filter(|(_, d)| d.is_some_and(|d| d <= *now))
                        .map(|(id, _)| *id)
                        .collect();
                    model.retain(|_, (_, d)| !d.is_some_and(|d| d <= *now));
                    out.clear();
                    index.purge_expired(*now, &mut out);
                    out.sort_unstable();
                    expect.sort_unstable();
                    prop_assert_eq!(&out, &expect);
                }
                RetainOp::Match(filter, now) => {
                    let mut expect: Vec<u64> = model
                        .iter()
                        .filter(|(t, (_, d))| oracle_matches(filter, t) && d.is_none_or(|d| d > *now))
                        .map(|(_, (id, _))| *id)
                        .collect();
                    out.clear();
                    prop_assert_eq!(index.match_filter(filter, *now, &mut out), Ok(()));
                    out.sort_unstable();
                    expect.sort_unstable();
                    prop_assert_eq!(&out, &expect, "filter {:?}", filter);
                }
            }
            prop_assert_eq!(index.len(), model.len());
        }
        let topics: Vec<String> = model.keys().cloned().collect();
        for topic in topics {
            index.clear(&topic);
        }
        let stats = index.stats();
        prop_assert_eq!((stats.topics, stats.trie_nodes, stats.levels), (0, 1, 0));
    }
}
