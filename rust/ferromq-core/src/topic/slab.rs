//! A slab: values addressed by compact `u32` ids, freed slots recycled.
//!
//! Every structure of the topic and retained indexes (trie nodes, filter entries,
//! interned levels, shared groups) lives in a slab so that links between them are
//! 4-byte ids instead of 8-byte pointers or owned keys.
//!
//! Invariants: an id handed out by `insert` stays valid until `remove(id)`; removed
//! slots are reset to `T::default()` (dropping their heap memory at once) and reused
//! by the next `insert`. Ids stay below [`MAX_ID`] so callers may spend the top two
//! bits of a `u32` on a tag. All operations are O(1); the backing `Vec` keeps its
//! high-water capacity, like any `Vec`.

/// Largest id a slab hands out: ids fit in 30 bits.
pub(crate) const MAX_ID: u32 = (1 << 30) - 1;

/// The slab reached [`MAX_ID`] live entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError;

pub(crate) struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Default> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> Result<u32, CapacityError> {
        if let Some(id) = self.free.pop() {
            self.items[id as usize] = value;
            return Ok(id);
        }
        let id = u32::try_from(self.items.len()).map_err(|_| CapacityError)?;
        if id > MAX_ID {
            return Err(CapacityError);
        }
        self.items.push(value);
        Ok(id)
    }

    /// Take the value out and recycle the slot. The caller guarantees `id` is live.
    pub(crate) fn remove(&mut self, id: u32) -> T {
        self.free.push(id);
        std::mem::take(&mut self.items[id as usize])
    }

    pub(crate) fn get(&self, id: u32) -> &T {
        &self.items[id as usize]
    }

    /// Like `get` for an id from outside the index: None when out of range.
    pub(crate) fn try_get(&self, id: u32) -> Option<&T> {
        self.items.get(id as usize)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> &mut T {
        &mut self.items[id as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Release freed slots at the end and spare capacity. Interior freed slots stay
    /// (live ids never move). O(freed × log freed).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.free.sort_unstable();
        while self
            .free
            .last()
            .is_some_and(|&id| id as usize + 1 == self.items.len())
        {
            self.free.pop();
            self.items.pop();
        }
        self.items.shrink_to_fit();
        self.free.shrink_to_fit();
    }

    /// Every slot, freed ones included (they hold `T::default()`).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }

    /// Bytes held by the slab's own vectors (not by the values' heap parts).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<T>() + self.free.capacity() * 4
    }
}
