//! Behaviour of the retained index: the module's worked example, expiry, pruning.

use ferromq_core::retain::RetainedIndex;
use ferromq_core::topic::{IndexError, TopicError};

fn matched(index: &mut RetainedIndex, filter: &str, now: u64) -> Vec<u64> {
    let mut out = Vec::new();
    index.match_filter(filter, now, &mut out).unwrap();
    out.sort_unstable();
    out
}

#[test]
fn worked_example() {
    let mut index = RetainedIndex::new();
    for (id, topic) in [(1, "s/a/t"), (2, "s/b/t"), (3, "s/b/h"), (4, "$SYS/up")] {
        assert_eq!(index.set(topic, id, None), Ok(None));
    }
    assert_eq!(matched(&mut index, "s/+/t", 0), [1, 2]);
    assert_eq!(matched(&mut index, "#", 0), [1, 2, 3]);
    assert_eq!(matched(&mut index, "+/+/+", 0), [1, 2, 3]);
    assert_eq!(matched(&mut index, "$SYS/#", 0), [4]);
    assert_eq!(matched(&mut index, "s/b/#", 0), [2, 3]);
    assert_eq!(matched(&mut index, "$share/g/s/a/t", 0), [1]);
    assert_eq!(index.set("s/b", 5, None), Ok(None));
    assert_eq!(
        matched(&mut index, "s/b/#", 0),
        [2, 3, 5],
        "'#' matches the parent"
    );
    let mut out = Vec::new();
    assert_eq!(
        index.match_filter("s/#/x", 0, &mut out),
        Err(TopicError::MisplacedMultiLevelWildcard)
    );
    assert_eq!(
        index.set("s/+", 9, None),
        Err(IndexError::Topic(TopicError::WildcardInName))
    );
}

#[test]
fn replace_clear_expire_and_prune() {
    let mut index = RetainedIndex::new();
    assert_eq!(index.set("a/b/c", 1, Some(10)), Ok(None));
    assert_eq!(
        index.set("a/b/c", 2, Some(20)),
        Ok(Some(1)),
        "replaced id comes back"
    );
    assert_eq!(index.set("a/x", 3, Some(5)), Ok(None));
    assert_eq!(index.set("a", 4, None), Ok(None));
    assert_eq!(
        matched(&mut index, "a/#", 5),
        [2, 4],
        "expired at now >= deadline"
    );
    assert_eq!(index.get("a/x", 4), Some(3));
    assert_eq!(index.get("a/x", 5), None);
    let mut purged = Vec::new();
    index.purge_expired(19, &mut purged);
    assert_eq!(purged, [3], "the old deadline of 1 was dropped with it");
    assert_eq!(index.len(), 2);
    assert_eq!(index.clear("a/b/c"), Some(2));
    assert_eq!(index.clear("a/b/c"), None);
    assert_eq!(index.clear("a/+"), None);
    index.purge_expired(100, &mut purged);
    assert_eq!(purged, [3]);
    assert_eq!(index.clear("a"), Some(4));
    index.shrink_to_fit();
    let stats = index.stats();
    assert_eq!((stats.topics, stats.trie_nodes, stats.levels), (0, 1, 0));
    assert!(stats.heap_bytes < 1024, "{stats:?}");
}
