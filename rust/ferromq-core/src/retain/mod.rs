//! The retained-message index: the last retained message of every topic name, found
//! by the filter of a new subscription (§3.3.1.3).
//!
//! The index stores only a caller-chosen `u64` message id and an optional expiry
//! deadline per topic; the engine owns the payloads. Topic names are kept in the
//! level [`Trie`] shared with the subscription index, one node per level, with the
//! value at the node of the topic's last level. Empty payloads clear: the engine
//! calls [`RetainedIndex::clear`] for a retained PUBLISH with an empty payload
//! [MQTT-3.3.1-6].
//!
//! Invariants: every trie node except the root holds a message or has a child (clear
//! and purge prune emptied paths), so no walk enters an empty subtree; `expiry`
//! holds `(deadline, node)` for exactly the stored messages that have a deadline.
//! A message with deadline `d` is expired at `now >= d`; expired messages are never
//! returned, and are dropped by [`RetainedIndex::purge_expired`] or when replaced.
//!
//! Matching a filter of F levels walks the trie with an explicit stack: a literal
//! level is one probe, '+' iterates the children of the node, '#' yields the node
//! itself (`a/#` matches `a`) and its whole subtree. At the root, '+' and '#' skip
//! children whose level starts with '$' [MQTT-4.7.2-1]. Cost: O(F + nodes visited),
//! and since no subtree is empty the nodes visited under '#' are at most (depth ×
//! matches); '+' costs the fan-out of the nodes it stands on.
//!
//! Worked example: topics `s/a/t`, `s/b/t`, `s/b/h`, `$SYS/up`.
//!
//! ```text
//!   root ─s─▶ n1 ─a─▶ n2 ─t─▶ n3 [id 1]
//!        │       └─b─▶ n4 ─t─▶ n5 [id 2]
//!        │                └─h─▶ n6 [id 3]
//!        └─$SYS─▶ n7 ─up─▶ n8 [id 4]
//! ```
//!
//! `s/+/t`: n1, then '+' pushes n2 and n4, each probes `t`: ids 1, 2. `#`: every
//! child of the root but n7: ids 1, 2, 3. `$SYS/#`: n7 and its subtree: id 4.
//!
//! A `$share/{group}/{filter}` filter matches as its inner filter; whether a shared
//! subscription gets retained messages at all is the engine's decision (MQTT 5.0
//! sends them to new non-shared subscriptions only, §3.3.1.3).

use std::collections::BTreeSet;

use crate::topic::slab::CapacityError;
use crate::topic::trie::{NodeValue, Trie, ROOT};
use crate::topic::{
    parse_shared_filter, validate_topic_filter, validate_topic_name, IndexError, TopicError,
};

/// Deadline of a message that never expires.
const NEVER: u64 = u64::MAX;
/// Stack depth marker: emit the node and everything below it.
const SUBTREE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, Default)]
struct Message {
    id: u64,
    deadline: u64,
}

#[derive(Debug, Default)]
struct Slot(Option<Message>);

impl NodeValue for Slot {
    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn heap_bytes(&self) -> usize {
        0
    }
}

/// One filter level, resolved before the walk.
#[derive(Debug, Clone, Copy)]
enum Step {
    Level(u32),
    AnyLevel,
    Subtree,
}

/// Sizes of the retained index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetainedStats {
    /// Stored messages, expired ones not yet purged included.
    pub topics: usize,
    /// Live trie nodes, the root included.
    pub trie_nodes: usize,
    pub levels: usize,
    /// Heap bytes computed from capacities (the expiry B-tree is estimated).
    pub heap_bytes: usize,
}

/// Retained messages by topic name. See the module documentation.
pub struct RetainedIndex {
    trie: Trie<Slot>,
    expiry: BTreeSet<(u64, u32)>,
    topics: usize,
    steps: Vec<Step>,
    stack: Vec<(u32, u32)>,
}

impl Default for RetainedIndex {
    fn default() -> Self {
        RetainedIndex::new()
    }
}

impl RetainedIndex {
    pub fn new() -> RetainedIndex {
        RetainedIndex {
            trie: Trie::new(),
            expiry: BTreeSet::new(),
            topics: 0,
            steps: Vec::new(),
            stack: Vec::new(),
        }
    }

    /// Store message `id` as the retained message of `topic`, expiring at
    /// `deadline` (seconds on the caller's clock) if given. Returns the id it
    /// replaced, whose payload the caller can now drop.
    pub fn set(
        &mut self,
        topic: &str,
        id: u64,
        deadline: Option<u64>,
    ) -> Result<Option<u64>, IndexError> {
        validate_topic_name(topic)?;
        let node = match self.trie.insert_path(topic.split('/')) {
            Ok(node) => node,
            Err((CapacityError, reached)) => {
                self.trie.prune(reached);
                return Err(IndexError::Full);
            }
        };
        let deadline = deadline.unwrap_or(NEVER);
        let old = self
            .trie
            .value_mut(node)
            .0
            .replace(Message { id, deadline });
        match old {
            Some(old) => self.forget_deadline(old, node),
            None => self.topics += 1,
        }
        if deadline != NEVER {
            self.expiry.insert((deadline, node));
        }
        Ok(old.map(|m| m.id))
    }

    /// Remove the retained message of `topic`; returns its id.
    pub fn clear(&mut self, topic: &str) -> Option<u64> {
        validate_topic_name(topic).ok()?;
        let node = self.trie.find_path(topic.split('/'))?;
        let old = self.take(node)?;
        Some(old.id)
    }

    /// The retained message id of `topic`, unless expired at `now`.
    pub fn get(&self, topic: &str, now: u64) -> Option<u64> {
        let node = self.trie.find_path(topic.split('/'))?;
        self.trie
            .value(node)
            .0
            .filter(|m| m.deadline > now)
            .map(|m| m.id)
    }

    /// Append to `out` the ids of every unexpired retained message whose topic
    /// matches `filter`.
    pub fn match_filter(
        &mut self,
        filter: &str,
        now: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), TopicError> {
        validate_topic_filter(filter)?;
        let filter = parse_shared_filter(filter)?.map_or(filter, |s| s.filter);
        // Resolve every literal level once; one the trie has never seen means no
        // stored topic can match.
        self.steps.clear();
        for level in filter.split('/') {
            let step = match level {
                "+" => Step::AnyLevel,
                "#" => Step::Subtree,
                literal => match self.trie.level_id(literal) {
                    Some(id) => Step::Level(id),
                    None => return Ok(()),
                },
            };
            self.steps.push(step);
        }
        let last = self.steps.len() as u32;
        let trie = &self.trie;
        let emit = |node: u32, out: &mut Vec<u64>| {
            if let Some(m) = trie.value(node).0.filter(|m| m.deadline > now) {
                out.push(m.id);
            }
        };
        // [MQTT-4.7.2-1]: wildcards at the first level skip '$' topics.
        let visible =
            |parent: u32, child: u32| parent != ROOT || !trie.level(child).starts_with('$');
        self.stack.clear();
        self.stack.push((ROOT, 0));
        while let Some((node, depth)) = self.stack.pop() {
            if depth == SUBTREE || depth == last {
                emit(node, out);
                if depth == SUBTREE {
                    self.stack
                        .extend(trie.children(node).map(|child| (child, SUBTREE)));
                }
                continue;
            }
            match self.steps[depth as usize] {
                Step::Subtree => {
                    emit(node, out);
                    self.stack.extend(
                        trie.children(node)
                            .filter(|&child| visible(node, child))
                            .map(|child| (child, SUBTREE)),
                    );
                }
                Step::AnyLevel => self.stack.extend(
                    trie.children(node)
                        .filter(|&child| visible(node, child))
                        .map(|child| (child, depth + 1)),
                ),
                Step::Level(id) => {
                    self.stack
                        .extend(trie.child(node, id).map(|child| (child, depth + 1)));
                }
            }
        }
        Ok(())
    }

    /// Drop every message expired at `now`, appending their ids to `out`.
    /// O(expired × (log n + depth)).
    pub fn purge_expired(&mut self, now: u64, out: &mut Vec<u64>) {
        while let Some(&(deadline, node)) = self.expiry.first() {
            if deadline > now {
                return;
            }
            if let Some(old) = self.take(node) {
                out.push(old.id);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.topics
    }

    pub fn is_empty(&self) -> bool {
        self.topics == 0
    }

    /// Give memory left unused by clears and purges back to the allocator.
    pub fn shrink_to_fit(&mut self) {
        self.trie.shrink_to_fit();
        self.steps = Vec::new();
        self.stack = Vec::new();
    }

    pub fn stats(&self) -> RetainedStats {
        // A B-tree entry is 16 bytes; nodes are at least half full.
        let expiry = self.expiry.len() * 2 * std::mem::size_of::<(u64, u32)>();
        RetainedStats {
            topics: self.topics,
            trie_nodes: self.trie.node_count(),
            levels: self.trie.level_count(),
            heap_bytes: self.trie.heap_bytes()
                + expiry
                + self.steps.capacity() * std::mem::size_of::<Step>()
                + self.stack.capacity() * 8,
        }
    }

    /// Remove the message at `node` with its deadline, and prune the path.
    fn take(&mut self, node: u32) -> Option<Message> {
        let old = self.trie.value_mut(node).0.take()?;
        self.forget_deadline(old, node);
        self.topics -= 1;
        self.trie.prune(node);
        Some(old)
    }

    fn forget_deadline(&mut self, old: Message, node: u32) {
        if old.deadline != NEVER {
            self.expiry.remove(&(old.deadline, node));
        }
    }
}
