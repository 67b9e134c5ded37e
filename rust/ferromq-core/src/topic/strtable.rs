//! A string-keyed table that stores each key once.
//!
//! Entries `(key, value)` live in a [`Slab`]; a raw `HashTable<u32>` holds only their
//! ids and hashes the key through the slab. A `HashMap<Box<str>, u32>` next to a slab
//! would store every key twice; here a key costs its bytes plus 4 bytes of table.
//! Used for exact filters (key = whole filter, value = subscriber list) and for the
//! level interner of both tries (key = one level, value = reference count).
//!
//! Keys hash with SipHash under a random key (std `RandomState`): topic strings come
//! from clients, so the table must resist chosen-collision floods.
//! `find` is O(|key|) expected, `insert` and `remove` amortised O(|key|).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::slab::{CapacityError, Slab};

pub(crate) struct StrTable<T> {
    entries: Slab<(Box<str>, T)>,
    table: HashTable<u32>,
    hasher: RandomState,
    key_bytes: usize,
}

impl<T: Default> StrTable<T> {
    pub(crate) fn new() -> Self {
        StrTable {
            entries: Slab::new(),
            table: HashTable::new(),
            hasher: RandomState::new(),
            key_bytes: 0,
        }
    }

    pub(crate) fn find(&self, key: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&id| &*self.entries.get(id).0 == key)
            .copied()
    }

    /// The id of `key`, inserting `(key, T::default())` when absent.
    pub(crate) fn find_or_insert(&mut self, key: &str) -> Result<u32, CapacityError> {
        if let Some(id) = self.find(key) {
            return Ok(id);
        }
        let id = self.entries.insert((key.into(), T::default()))?;
        self.key_bytes += key.len();
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.table
            .insert_unique(hasher.hash_one(key), id, |&other| {
                hasher.hash_one(&*entries.get(other).0)
            });
        Ok(id)
    }

    /// Drop the entry `id` (live by the caller's guarantee) and return its value.
    pub(crate) fn remove(&mut self, id: u32) -> T {
        let hash = self.hasher.hash_one(&*self.entries.get(id).0);
        if let Ok(slot) = self.table.find_entry(hash, |&other| other == id) {
            slot.remove();
        }
        let (key, value) = self.entries.remove(id);
        self.key_bytes -= key.len();
        value
    }

    pub(crate) fn key(&self, id: u32) -> &str {
        &self.entries.get(id).0
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

    /// Every slot's value, freed slots included (they hold `T::default()`).
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, value)| value)
    }

    /// Slab + table + key bytes (values' own heap parts are the caller's to add).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes() + self.table.allocation_size() + self.key_bytes
    }
}
