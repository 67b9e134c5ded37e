//! A level trie shared by the subscription index (wildcard filters) and the retained
//! index (stored topic names).
//!
//! Shape: a node per level of a path; the edge into a node is labelled with an
//! interned level id. Three structures, all addressed by `u32` ids:
//!
//! - `nodes`: a slab of `{parent, level, first_child, next, prev, children, value}`
//!   (24 bytes of links plus `V`). Siblings form a doubly linked list so a node's
//!   children can be enumerated ('+' and '#' in the retained index) and unlinked in
//!   O(1).
//! - `edges`: one hash table of node ids keyed by `(parent, level)`, so a step is
//!   one probe whatever the fan-out (no per-node map, 4 bytes per edge). A node with
//!   at most [`SCAN_LIMIT`] children is stepped by scanning its sibling list instead:
//!   the child that matches is read anyway, so the scan saves the table's cache miss
//!   on the deep, narrow paths where most of a large trie's nodes sit.
//! - `levels`: every level string stored once with a reference count (one per node
//!   labelled with it), so `device` under a million parents costs one string.
//!
//! Invariants: the root (id 0) is never removed; every other node either holds a
//! non-empty value or has a child, because [`Trie::prune`] removes nodes that become
//! empty on the way back to the root (memory returns after unsubscribe churn).
//!
//! Complexity: a literal step is O(|level|) to find the level id plus O(1) for the
//! edge; insert and prune are O(levels of the path); enumerating children is
//! O(children).
//!
//! Worked example: inserting `a/+/c` then `a/b` gives
//!
//! ```text
//!   root ──a──▶ n1 ──+──▶ n2 ──c──▶ n3        edges: (0,a)→n1 (n1,+)→n2 (n2,c)→n3
//!                 └──b──▶ n4                         (n1,b)→n4
//! ```
//!
//! `n1.first_child = n4`, `n4.next = n2` (new children go first). Pruning `n3` after
//! its value empties removes `n3` and then `n2` (now empty and childless), stopping
//! at `n1` because `n4` still hangs below it.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::slab::{CapacityError, Slab};
use super::strtable::StrTable;

/// Children a step scans before it uses the edge table.
const SCAN_LIMIT: u32 = 2;

/// "No node": the end of a sibling list, the root's parent.
pub(crate) const NONE: u32 = u32::MAX;
/// The root node's id; it stands for the empty path.
pub(crate) const ROOT: u32 = 0;

/// What a trie node carries; empty values let [`Trie::prune`] drop the node.
pub(crate) trait NodeValue: Default {
    fn is_empty(&self) -> bool;
    fn heap_bytes(&self) -> usize;
}

struct Node<V> {
    parent: u32,
    level: u32,
    first_child: u32,
    next: u32,
    prev: u32,
    children: u32,
    value: V,
}

impl<V: Default> Default for Node<V> {
    fn default() -> Self {
        Node {
            parent: NONE,
            level: NONE,
            first_child: NONE,
            next: NONE,
            prev: NONE,
            children: 0,
            value: V::default(),
        }
    }
}

/// Levels up to 22 bytes (device ids, metric names, UUIDs without dashes fall
/// short of it) are stored inline: 24 bytes, the size of a `Box<str>` plus length.
const LEVEL_INLINE: usize = 22;

pub(crate) struct Trie<V> {
    nodes: Slab<Node<V>>,
    edges: HashTable<u32>,
    seed: u64,
    levels: StrTable<u32, LEVEL_INLINE>,
}

/// Hash of an edge key. Level ids and parent ids are dense small integers, so a
/// keyed multiply-fold mixes them well and costs a few cycles (no SipHash here).
fn edge_hash(seed: u64, parent: u32, level: u32) -> u64 {
    let key = ((u64::from(parent) << 32) | u64::from(level)) ^ seed;
    let product = u128::from(key) * 0x9E37_79B9_7F4A_7C15;
    (product as u64) ^ ((product >> 64) as u64)
}

impl<V: NodeValue> Trie<V> {
    pub(crate) fn new() -> Self {
        let mut nodes = Slab::new();
        // The first insert into an empty slab cannot fail and yields ROOT.
        let _root = nodes.insert(Node::default());
        Trie {
            nodes,
            edges: HashTable::new(),
            seed: RandomState::new().hash_one(0x5EED_u64),
            levels: StrTable::new(),
        }
    }

    /// The interned id of a level string, if some node is labelled with it.
    pub(crate) fn level_id(&self, level: &str) -> Option<u32> {
        self.levels.find(level)
    }

    /// Intern `level` and take a reference on it (released by [`Trie::release_level`]).
    pub(crate) fn retain_level(&mut self, level: &str) -> Result<u32, CapacityError> {
        let id = self.levels.find_or_insert(level)?;
        *self.levels.value_mut(id) += 1;
        Ok(id)
    }

    fn release_level(&mut self, id: u32) {
        let refs = self.levels.value_mut(id);
        *refs -= 1;
        if *refs == 0 {
            self.levels.remove(id);
        }
    }

    pub(crate) fn child(&self, parent: u32, level: u32) -> Option<u32> {
        if self.nodes.get(parent).children <= SCAN_LIMIT {
            return self
                .children(parent)
                .find(|&child| self.nodes.get(child).level == level);
        }
        let hash = edge_hash(self.seed, parent, level);
        self.edges
            .find(hash, |&id| {
                let node = self.nodes.get(id);
                node.parent == parent && node.level == level
            })
            .copied()
    }

    /// The node at the end of `levels`, if the whole path exists.
    pub(crate) fn find_path<'a>(&self, levels: impl IntoIterator<Item = &'a str>) -> Option<u32> {
        levels
            .into_iter()
            .try_fold(ROOT, |node, level| self.child(node, self.level_id(level)?))
    }

    /// The node at the end of `levels`, creating missing nodes. On error the nodes
    /// created so far are left valueless; the caller prunes from the returned path.
    pub(crate) fn insert_path<'a>(
        &mut self,
        levels: impl IntoIterator<Item = &'a str>,
    ) -> Result<u32, (CapacityError, u32)> {
        let mut node = ROOT;
        for level in levels {
            let existing = self.level_id(level).and_then(|id| self.child(node, id));
            node = match existing {
                Some(child) => child,
                None => self.add_child(node, level).map_err(|e| (e, node))?,
            };
        }
        Ok(node)
    }

    fn add_child(&mut self, parent: u32, level: &str) -> Result<u32, CapacityError> {
        let level = self.retain_level(level)?;
        let first = self.nodes.get(parent).first_child;
        let node = Node {
            parent,
            level,
            first_child: NONE,
            next: first,
            prev: NONE,
            children: 0,
            value: V::default(),
        };
        let id = match self.nodes.insert(node) {
            Ok(id) => id,
            Err(e) => {
                self.release_level(level);
                return Err(e);
            }
        };
        if first != NONE {
            self.nodes.get_mut(first).prev = id;
        }
        let parent_node = self.nodes.get_mut(parent);
        parent_node.first_child = id;
        parent_node.children += 1;
        let (nodes, seed) = (&self.nodes, self.seed);
        self.edges
            .insert_unique(edge_hash(seed, parent, level), id, |&other| {
                let n = nodes.get(other);
                edge_hash(seed, n.parent, n.level)
            });
        Ok(id)
    }

    /// Remove `node` and then its ancestors while they are empty and childless.
    pub(crate) fn prune(&mut self, mut node: u32) {
        while node != ROOT {
            let n = self.nodes.get(node);
            if n.first_child != NONE || !n.value.is_empty() {
                return;
            }
            let (parent, level, next, prev) = (n.parent, n.level, n.next, n.prev);
            let parent_node = self.nodes.get_mut(parent);
            parent_node.children -= 1;
            if prev == NONE {
                parent_node.first_child = next;
            } else {
                self.nodes.get_mut(prev).next = next;
            }
            if next != NONE {
                self.nodes.get_mut(next).prev = prev;
            }
            let hash = edge_hash(self.seed, parent, level);
            if let Ok(edge) = self.edges.find_entry(hash, |&other| other == node) {
                edge.remove();
            }
            self.release_level(level);
            self.nodes.remove(node);
            node = parent;
        }
    }

    pub(crate) fn value(&self, node: u32) -> &V {
        &self.nodes.get(node).value
    }

    pub(crate) fn value_mut(&mut self, node: u32) -> &mut V {
        &mut self.nodes.get_mut(node).value
    }

    pub(crate) fn has_children(&self, node: u32) -> bool {
        self.nodes.get(node).first_child != NONE
    }

    pub(crate) fn children(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        let first = self.nodes.get(node).first_child;
        std::iter::successors((first != NONE).then_some(first), move |&child| {
            let next = self.nodes.get(child).next;
            (next != NONE).then_some(next)
        })
    }

    /// The level string labelling the edge into `node` (empty for the root).
    pub(crate) fn level(&self, node: u32) -> &str {
        match self.nodes.get(node).level {
            NONE => "",
            id => self.levels.key(id),
        }
    }

    /// Append the path of `node` (levels joined by '/') to `out`.
    pub(crate) fn write_path(&self, node: u32, out: &mut String) {
        let mut path = Vec::new();
        let mut at = node;
        while at != ROOT {
            path.push(at);
            at = self.nodes.get(at).parent;
        }
        for (i, &at) in path.iter().rev().enumerate() {
            if i > 0 {
                out.push('/');
            }
            out.push_str(self.level(at));
        }
    }

    /// Give back memory that churn left unused (capacity, trailing free slots).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.nodes.shrink_to_fit();
        self.levels.shrink_to_fit();
        let (nodes, seed) = (&self.nodes, self.seed);
        self.edges.shrink_to_fit(|&id| {
            let n = nodes.get(id);
            edge_hash(seed, n.parent, n.level)
        });
    }

    /// Live nodes, the root included.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn level_count(&self) -> usize {
        self.levels.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let values: usize = self.nodes.iter().map(|n| n.value.heap_bytes()).sum();
        self.nodes.heap_bytes() + values + self.edges.allocation_size() + self.levels.heap_bytes()
    }
}
