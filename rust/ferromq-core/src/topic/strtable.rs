//! A string-keyed table that stores each key once.
//!
//! Entries `(key, value)` live in a [`Slab`]; a raw `HashTable<u32>` holds only their
//! ids and hashes the key through the slab. A `HashMap<Box<str>, u32>` next to a slab
//! would store every key twice; here a key costs its bytes plus 4 bytes of table.
//! Keys of up to `N` bytes are stored inline in the slab entry ([`SmallStr`]), so the
//! probe that finds the entry also has the key: no heap block, one cache miss less.
//! Used for exact filters (key = whole filter, value = subscriber list) and for the
//! level interner of both tries (key = one level, value = reference count).
//!
//! Keys hash with foldhash under a per-table random seed (hashbrown's default
//! hasher): several times faster than SipHash on short keys, and seeded so clients
//! cannot precompute colliding topics.
//! `find` is O(|key|) expected, `insert` and `remove` amortised O(|key|).

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::slab::{CapacityError, Slab};

/// A string stored inline when it has at most `N` bytes (`N` < 256).
#[derive(Debug)]
pub(crate) enum SmallStr<const N: usize> {
    Inline(u8, [u8; N]),
    Heap(Box<str>),
}

impl<const N: usize> Default for SmallStr<N> {
    fn default() -> Self {
        SmallStr::Inline(0, [0; N])
    }
}

impl<const N: usize> SmallStr<N> {
    fn new(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= N => {
                let mut bytes = [0; N];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                SmallStr::Inline(len, bytes)
            }
            _ => SmallStr::Heap(s.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            SmallStr::Inline(len, bytes) => &bytes[..usize::from(*len)],
            SmallStr::Heap(s) => s.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Inline bytes are a whole copied `&str`, so this never fails.
            SmallStr::Inline(..) => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            SmallStr::Heap(s) => s,
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            SmallStr::Inline(..) => 0,
            SmallStr::Heap(s) => s.len(),
        }
    }
}

pub(crate) struct StrTable<T, const N: usize> {
    entries: Slab<(SmallStr<N>, T)>,
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
    key_bytes: usize,
}

impl<T: Default, const N: usize> StrTable<T, N> {
    pub(crate) fn new() -> Self {
        StrTable {
            entries: Slab::new(),
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            key_bytes: 0,
        }
    }

    pub(crate) fn find(&self, key: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(key.as_bytes());
        self.table
            .find(hash, |&id| {
                self.entries.get(id).0.as_bytes() == key.as_bytes()
            })
            .copied()
    }

    /// The id of `key`, inserting `(key, T::default())` when absent.
    pub(crate) fn find_or_insert(&mut self, key: &str) -> Result<u32, CapacityError> {
        if let Some(id) = self.find(key) {
            return Ok(id);
        }
        let key = SmallStr::new(key);
        let hash = self.hasher.hash_one(key.as_bytes());
        self.key_bytes += key.heap_bytes();
        let id = self.entries.insert((key, T::default()))?;
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.table.insert_unique(hash, id, |&other| {
            hasher.hash_one(entries.get(other).0.as_bytes())
        });
        Ok(id)
    }

    /// Drop the entry `id` (live by the caller's guarantee) and return its value.
    pub(crate) fn remove(&mut self, id: u32) -> T {
        let hash = self.hasher.hash_one(self.entries.get(id).0.as_bytes());
        if let Ok(slot) = self.table.find_entry(hash, |&other| other == id) {
            slot.remove();
        }
        let (key, value) = self.entries.remove(id);
        self.key_bytes -= key.heap_bytes();
        value
    }

    pub(crate) fn key(&self, id: u32) -> &str {
        self.entries.get(id).0.as_str()
    }

    pub(crate) fn value(&self, id: u32) -> &T {
        &self.entries.get(id).1
    }

    pub(crate) fn value_mut(&mut self, id: u32) -> &mut T {
        &mut self.entries.get_mut(id).1
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.table
            .shrink_to_fit(|&id| hasher.hash_one(entries.get(id).0.as_bytes()));
    }

    /// Every slot's value, freed slots included (they hold `T::default()`).
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, value)| value)
    }

    /// Slab + table + heap key bytes (values' own heap parts are the caller's to add).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes() + self.table.allocation_size() + self.key_bytes
    }
}
