//! Subscriber lists: the entries stored at one filter (an exact-filter slot or a trie
//! node) and the members of one shared group.
//!
//! An entry is 12 bytes: `id` (a client, or a shared group for [`SHARED`] entries),
//! the subscription identifier (0 = none; 0 is not a valid identifier on the wire
//! [MQTT-3.8.2.1.2]) and the options byte exactly as MQTT 5.0 encodes it (§3.8.3.1:
//! QoS bits 0-1, No Local bit 2, Retain As Published bit 3, Retain Handling bits
//! 4-5), with the two free bits used here: [`MULTI`] marks a `prefix/#` filter stored
//! at the node of `prefix`, [`SHARED`] marks a group entry.
//!
//! Invariant: entries are sorted by `(kind bits, id)` and that key is unique, so
//! lookups are binary searches and one kind is a contiguous run. A list with a single
//! entry stores it inline (most filters have one subscriber): 24 bytes, no heap.

use crate::codec::{NO_LOCAL, RETAIN_AS_PUBLISHED};

use super::trie::NodeValue;

/// The entry is a `prefix/#` subscription held at the node of `prefix`.
pub(crate) const MULTI: u8 = 0x40;
/// The entry's id is a shared group, not a client.
pub(crate) const SHARED: u8 = 0x80;
const KIND: u8 = MULTI | SHARED;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sub {
    pub(crate) id: u32,
    pub(crate) sub_id: u32,
    pub(crate) opts: u8,
}

impl Sub {
    pub(crate) fn key(kind: u8, id: u32) -> u64 {
        (u64::from(kind & KIND) << 32) | u64::from(id)
    }

    fn sort_key(&self) -> u64 {
        Sub::key(self.opts, self.id)
    }

    pub(crate) fn qos(&self) -> u8 {
        self.opts & 0x03
    }

    pub(crate) fn no_local(&self) -> bool {
        self.opts & NO_LOCAL != 0
    }

    pub(crate) fn retain_as_published(&self) -> bool {
        self.opts & RETAIN_AS_PUBLISHED != 0
    }

    pub(crate) fn is_shared(&self) -> bool {
        self.opts & SHARED != 0
    }
}

#[derive(Debug, Default)]
pub(crate) enum SubList {
    #[default]
    Empty,
    One(Sub),
    Many(Vec<Sub>),
}

impl SubList {
    pub(crate) fn as_slice(&self) -> &[Sub] {
        match self {
            SubList::Empty => &[],
            SubList::One(sub) => std::slice::from_ref(sub),
            SubList::Many(subs) => subs,
        }
    }

    /// Insert `sub`, or replace the entry with its key. True when it was new.
    pub(crate) fn upsert(&mut self, sub: Sub) -> bool {
        let key = sub.sort_key();
        match self {
            SubList::Empty => {
                *self = SubList::One(sub);
                true
            }
            SubList::One(old) if old.sort_key() == key => {
                *old = sub;
                false
            }
            SubList::One(old) => {
                let pair = if old.sort_key() < key {
                    vec![*old, sub]
                } else {
                    vec![sub, *old]
                };
                *self = SubList::Many(pair);
                true
            }
            SubList::Many(subs) => match subs.binary_search_by_key(&key, Sub::sort_key) {
                Ok(at) => {
                    subs[at] = sub;
                    false
                }
                Err(at) => {
                    subs.insert(at, sub);
                    true
                }
            },
        }
    }

    /// Remove the entry with `key` (see [`Sub::key`]); shrink back to inline storage.
    pub(crate) fn remove(&mut self, key: u64) -> Option<Sub> {
        match self {
            SubList::Empty => None,
            SubList::One(old) if old.sort_key() == key => {
                let removed = *old;
                *self = SubList::Empty;
                Some(removed)
            }
            SubList::One(_) => None,
            SubList::Many(subs) => {
                let at = subs.binary_search_by_key(&key, Sub::sort_key).ok()?;
                let removed = subs.remove(at);
                match subs.len() {
                    0 => *self = SubList::Empty,
                    1 => *self = SubList::One(subs[0]),
                    n if subs.capacity() >= 4 * n => subs.shrink_to(2 * n),
                    _ => {}
                }
                Some(removed)
            }
        }
    }

    pub(crate) fn find(&self, key: u64) -> Option<&Sub> {
        let subs = self.as_slice();
        subs.binary_search_by_key(&key, Sub::sort_key)
            .ok()
            .map(|at| &subs[at])
    }

    /// The contiguous run of entries whose kind bits equal `kind`.
    pub(crate) fn kind_run(&self, kind: u8) -> &[Sub] {
        let subs = self.as_slice();
        let start = subs.partition_point(|s| s.sort_key() < Sub::key(kind, 0));
        let len = subs[start..].partition_point(|s| s.opts & KIND == kind);
        &subs[start..start + len]
    }
}

impl NodeValue for SubList {
    fn is_empty(&self) -> bool {
        matches!(self, SubList::Empty)
    }

    fn heap_bytes(&self) -> usize {
        match self {
            SubList::Many(subs) => subs.capacity() * std::mem::size_of::<Sub>(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: u32, opts: u8) -> Sub {
        Sub {
            id,
            sub_id: 0,
            opts,
        }
    }

    #[test]
    fn inline_then_vec_then_inline() {
        assert_eq!(std::mem::size_of::<SubList>(), 24);
        let mut list = SubList::default();
        assert!(list.upsert(sub(5, 1)));
        assert!(!list.upsert(sub(5, 2)), "same key replaces");
        assert!(list.upsert(sub(3, MULTI)));
        assert!(list.upsert(sub(1, 0)));
        let ids: Vec<u32> = list.as_slice().iter().map(|s| s.id).collect();
        assert_eq!(ids, [1, 5, 3], "plain entries sort before MULTI ones");
        assert_eq!(list.kind_run(MULTI), &[sub(3, MULTI)]);
        assert_eq!(list.find(Sub::key(0, 5)).map(Sub::qos), Some(2));
        assert!(list.remove(Sub::key(0, 1)).is_some());
        assert!(
            list.remove(Sub::key(0, 3)).is_none(),
            "kind is part of the key"
        );
        assert!(list.remove(Sub::key(MULTI, 3)).is_some());
        assert!(matches!(list, SubList::One(_)));
        assert!(list.remove(Sub::key(0, 5)).is_some());
        assert!(NodeValue::is_empty(&list));
    }
}
