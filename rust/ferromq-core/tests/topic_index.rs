//! Behaviour of the subscription index: the worked example of seed 001, the '$' rule,
//! shared-subscription strategies and online state, and memory after churn.

use ferromq_core::codec::{QoS, SubscriptionOptions};
use ferromq_core::topic::{
    IndexError, IndexStats, MatchResult, ShareStrategy, SubscriptionIndex, TopicError,
    DELIVERY_RETAIN_AS_PUBLISHED, DELIVERY_SHARED,
};

fn qos(q: u8) -> SubscriptionOptions {
    SubscriptionOptions {
        qos: QoS::from_u8(q).unwrap_or_default(),
        ..SubscriptionOptions::default()
    }
}

fn matched(index: &mut SubscriptionIndex, topic: &str, publisher: Option<u32>) -> Vec<(u32, u8)> {
    let mut out = MatchResult::new();
    index.match_topic(topic, publisher, &mut out);
    out.clients()
        .iter()
        .copied()
        .zip(out.qos().iter().copied())
        .collect()
}

#[test]
fn seed_001_worked_example() {
    let (a, b, c, d) = (1, 2, 3, 4);
    let mut index = SubscriptionIndex::default();
    for (client, filter, q) in [
        (a, "abc/+/123", 0),
        (b, "abc/#", 1),
        (a, "abc/#", 0),
        (b, "abc/def", 0),
        (b, "abc/def/123", 0),
        (c, "abc/def/123", 1),
        (d, "abc/def/456", 0),
    ] {
        assert_eq!(index.subscribe(client, filter, qos(q), None), Ok(true));
    }
    // A once (two filters), B at its highest QoS, C; D does not match.
    assert_eq!(
        matched(&mut index, "abc/def/123", None),
        [(a, 0), (b, 1), (c, 1)]
    );
    assert_eq!(
        matched(&mut index, "abc", None),
        [(a, 0), (b, 1)],
        "'#' matches the parent"
    );
}

#[test]
fn flags_ids_and_no_local() {
    let mut index = SubscriptionIndex::default();
    let rap = SubscriptionOptions {
        retain_as_published: true,
        ..qos(1)
    };
    let no_local = SubscriptionOptions {
        no_local: true,
        ..qos(2)
    };
    index.subscribe(7, "s/+", rap, Some(11)).unwrap();
    index.subscribe(7, "s/#", qos(0), Some(12)).unwrap();
    index.subscribe(7, "s/x", qos(0), Some(11)).unwrap();
    index.subscribe(8, "s/x", no_local, None).unwrap();
    let mut out = MatchResult::new();
    index.match_topic("s/x", Some(8), &mut out);
    let rows: Vec<_> = out.iter().collect();
    assert_eq!(rows.len(), 1, "8 published with No Local");
    assert_eq!((rows[0].client, rows[0].qos), (7, QoS::AtLeastOnce));
    assert_eq!(rows[0].subscription_ids, [11, 12], "ids deduplicated");
    assert_eq!(out.flags(), [DELIVERY_RETAIN_AS_PUBLISHED]);
    assert_eq!(out.sub_id_offsets(), [0, 2]);
    index.match_topic("s/x", Some(7), &mut out);
    assert_eq!(out.clients(), [7, 8]);
    assert_eq!(
        index.subscribe(7, "s/+", qos(2), None),
        Ok(false),
        "a second subscribe replaces"
    );
    assert_eq!(matched(&mut index, "s/y", None), [(7, 2)]);
}

#[test]
fn dollar_topics_and_bad_input() {
    let mut index = SubscriptionIndex::default();
    for filter in ["#", "+/up", "$SYS/#", "$SYS/+", "+/+"] {
        index.subscribe(1, filter, qos(0), None).unwrap();
    }
    index.subscribe(2, "#", qos(0), None).unwrap();
    assert_eq!(matched(&mut index, "$SYS/up", None), [(1, 0)]);
    assert_eq!(matched(&mut index, "x/up", None), [(1, 0), (2, 0)]);
    assert!(
        matched(&mut index, "a/+", None).is_empty(),
        "no wildcard in names"
    );
    assert!(matched(&mut index, "", None).is_empty());
    assert_eq!(
        index.subscribe(1, "a/#/b", qos(0), None),
        Err(IndexError::Topic(TopicError::MisplacedMultiLevelWildcard))
    );
    assert!(!index.unsubscribe(1, "a/#/b"));
    assert!(!index.unsubscribe(1, "$share/g/#"));
    assert_eq!(index.shared_group_filter(u32::MAX), None);
}

/// Four members of `$share/g/t/#` (subscription id = client id) and a plain `t/+`.
fn group(strategy: ShareStrategy) -> SubscriptionIndex {
    let mut index = SubscriptionIndex::new(strategy);
    for client in 1..=4 {
        index
            .subscribe(client, "$share/g/t/#", qos(1), Some(client))
            .unwrap();
    }
    index.subscribe(9, "t/+", qos(0), None).unwrap();
    index
}

fn picks(index: &mut SubscriptionIndex, topic: &str, publisher: Option<u32>, n: usize) -> Vec<u32> {
    let mut out = MatchResult::new();
    (0..n)
        .map(|_| {
            index.match_topic(topic, publisher, &mut out);
            let shared: Vec<_> = out.iter().filter(|d| d.shared).collect();
            assert_eq!(shared.len(), 1, "one member per group");
            shared[0].client
        })
        .collect()
}

#[test]
fn round_robin_cycles_and_skips_offline() {
    let mut index = group(ShareStrategy::RoundRobin);
    let mut out = MatchResult::new();
    index.match_topic("t/x", None, &mut out);
    let rows: Vec<_> = out
        .iter()
        .map(|d| (d.client, d.shared, d.subscription_ids))
        .collect();
    assert_eq!(
        rows,
        [(9, false, &[][..]), (1, true, &[1][..])],
        "plain copy and one member"
    );
    assert_eq!(out.flags()[1], DELIVERY_SHARED);
    assert_eq!(picks(&mut index, "t/x", None, 5), [2, 3, 4, 1, 2]);
    index.set_client_online(3, false);
    assert!(!index.is_client_online(3));
    assert_eq!(picks(&mut index, "t/x", None, 3), [4, 1, 2]);
    for client in [1, 2, 4] {
        index.set_client_online(client, false);
    }
    index.match_topic("t/x", None, &mut out);
    assert_eq!(out.flags(), [0], "only the plain delivery");
    assert_eq!(out.unserved_groups().len(), 1);
    let group = out.unserved_groups()[0];
    assert_eq!(
        index.shared_group_filter(group).as_deref(),
        Some("$share/g/t/#")
    );
    index.set_client_online(4, true);
    assert_eq!(picks(&mut index, "t/x", None, 2), [4, 4]);
}

#[test]
fn sticky_keeps_its_member_while_online() {
    let mut index = group(ShareStrategy::Sticky);
    let first = picks(&mut index, "t/x", None, 3);
    assert!(first.iter().all(|&c| c == first[0]));
    index.set_client_online(first[0], false);
    let second = picks(&mut index, "t/y", None, 3);
    assert!(second.iter().all(|&c| c == second[0] && c != first[0]));
    index.set_client_online(first[0], true);
    assert_eq!(
        picks(&mut index, "t/x", None, 1),
        [second[0]],
        "stays on the new one"
    );
}

#[test]
fn hashes_are_stable_and_random_spreads() {
    let mut index = group(ShareStrategy::HashClient);
    let by_publisher: Vec<u32> = (0..8)
        .map(|p| picks(&mut index, "t/x", Some(p), 3)[0])
        .collect();
    for p in 0..8 {
        assert_eq!(
            picks(&mut index, "t/z", Some(p), 2),
            [by_publisher[p as usize]; 2]
        );
    }
    let mut index = group(ShareStrategy::HashTopic);
    for topic in ["t/a", "t/b", "t/c"] {
        let first = picks(&mut index, topic, Some(1), 1)[0];
        assert_eq!(picks(&mut index, topic, Some(2), 3), [first; 3]);
    }
    let mut index = group(ShareStrategy::Random);
    let mut seen = picks(&mut index, "t/x", None, 200);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, [1, 2, 3, 4]);
}

#[test]
fn no_local_member_is_not_chosen_for_its_own_message() {
    let mut index = SubscriptionIndex::new(ShareStrategy::RoundRobin);
    let no_local = SubscriptionOptions {
        no_local: true,
        ..qos(0)
    };
    index.subscribe(1, "$share/g/t", no_local, None).unwrap();
    index.subscribe(2, "$share/g/t", qos(0), None).unwrap();
    assert_eq!(picks(&mut index, "t", Some(1), 3), [2, 2, 2]);
}

/// A million subscribe/unsubscribe cycles over exact, '+', '#' and shared filters,
/// with about a thousand live at a time: afterwards every count is back at the
/// baseline, the heap has not grown past the high-water mark of the window, and
/// `shrink_to_fit` gives the churn's memory back.
#[test]
fn churn_returns_to_baseline() {
    let mut index = SubscriptionIndex::default();
    for client in 0..100 {
        index
            .subscribe(client, &format!("base/{client}/+"), qos(1), None)
            .unwrap();
    }
    let baseline = index.stats();
    let filter = |i: u32| match i % 4 {
        0 => format!("churn/{i}/exact"),
        1 => format!("churn/+/{i}/x"),
        2 => format!("churn/{i}/#"),
        _ => format!("$share/g{}/churn/{i}/+", i % 7),
    };
    const CYCLES: u32 = 1_000_000;
    const WINDOW: u32 = 1_000;
    let mut peak = 0;
    for i in 0..CYCLES + WINDOW {
        if i < CYCLES {
            assert_eq!(
                index.subscribe(i % 5_000, &filter(i), qos(0), None),
                Ok(true)
            );
        }
        if i >= WINDOW {
            let old = i - WINDOW;
            assert!(index.unsubscribe(old % 5_000, &filter(old)));
        }
        if i == CYCLES / 2 {
            peak = index.stats().heap_bytes;
        }
    }
    let after = index.stats();
    assert_eq!(
        IndexStats {
            heap_bytes: 0,
            ..after
        },
        IndexStats {
            heap_bytes: 0,
            ..baseline
        }
    );
    assert!(after.heap_bytes <= peak, "{} > {peak}", after.heap_bytes);
    index.shrink_to_fit();
    let shrunk = index.stats().heap_bytes;
    assert!(
        shrunk <= 2 * baseline.heap_bytes,
        "{shrunk} vs {}",
        baseline.heap_bytes
    );
}

#[test]
fn a_group_ref_names_one_group_and_picks_among_members_that_can_take() {
    let mut index = SubscriptionIndex::new(ShareStrategy::RoundRobin);
    for client in [1, 2, 3] {
        index.subscribe(client, "$share/g/t", qos(1), None).unwrap();
    }
    let mut out = MatchResult::new();
    index.match_topic("t", None, &mut out);
    assert_eq!(out.shared_groups().len(), 1);
    let id = out.shared_groups()[0];
    assert_eq!(out.iter().next().unwrap().group, Some(id));
    let group = index.group_ref(id).unwrap();
    assert!(index.is_member(group, 2) && !index.is_member(group, 9));
    assert_eq!(index.members(group).collect::<Vec<_>>(), [1, 2, 3]);
    let pick = index.pick_member(group, None, "t", |client| client == 3);
    assert_eq!(pick.map(|m| (m.client, m.qos)), Some((3, QoS::AtLeastOnce)));
    assert_eq!(index.pick_member(group, None, "t", |_| false), None);

    // The group ends; a new group reusing its id is not the old one.
    for client in [1, 2, 3] {
        index.unsubscribe(client, "$share/g/t");
    }
    assert!(!index.is_group_live(group));
    index.subscribe(4, "$share/h/t", qos(1), None).unwrap();
    let reused = index.group_ref(id).unwrap();
    assert_ne!(reused, group);
    assert!(!index.is_member(group, 4));
    assert_eq!(index.pick_member(group, None, "t", |_| true), None);
}
