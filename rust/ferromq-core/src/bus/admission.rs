//! The node's admission table (issue 16, docs/shards.md): the counts the limits of
//! `ferromq.admission` rest on, shared by every shard of a node through one region of
//! shared memory the binding maps (`NodeCounters` in ferromq-py: a memfd the
//! supervisor makes and every shard inherits). Every operation is a few atomic loads
//! and one compare-and-swap loop, so no lock is held that a killed shard could leave
//! taken.
//!
//! Layout (after the binding's 64-byte header): `slots` slots of 16 bytes (a key's
//! 64-bit FNV-1a hash, 0 while the slot is empty, and its value), then one column of
//! `u32` per shard, `slots` long: what each shard holds of each count.
//!
//! A key lives in the first slot of its probe sequence (linear, from its hash, at most
//! [`PROBES`] slots) that holds its hash or is empty; an empty slot is claimed with one
//! compare-and-swap of the hash, and a slot never changes key afterwards (a count back
//! at 0 keeps its slot), so every shard finds a key in the same slot. A key that finds
//! none of its slots free is **not tracked**: `take`, `rate` and `flapping` return
//! `None` (the caller admits as if that limit were not set) and `give` does nothing,
//! consistently, since those slots never free up.
//!
//! Values by use:
//! - **counts** (`take`/`give`/`count`): open connections; `take` increments only below
//!   the limit. The shard's column records what it holds, so a shard started again
//!   after dying gives back what its predecessor held (`give_back_held`).
//! - **token buckets** (`rate`): the time of the last take in milliseconds (40 bits)
//!   and the tokens in 1/256ths (24 bits: at most 65,535 tokens, a higher rate holds
//!   that many); 0 is a full bucket.
//! - **flapping** (`flapping`): a window's start in milliseconds (40 bits) and its
//!   connects (24 bits, saturating) under one key; the end of a ban in milliseconds
//!   under another.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::fnv1a;

const SLOT: usize = 16;
/// Slots a key may look at before it is not tracked.
pub const PROBES: usize = 32;
const LOW_BITS: u32 = 24;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;
const TOKEN: u64 = 256;

/// FNV-1a 64 of the key, never 0 (the empty slot).
fn hash(key: &str) -> u64 {
    fnv1a(key.as_bytes()).max(1)
}

fn pack(high: u64, low: u64) -> u64 {
    (high << LOW_BITS) | low.min(LOW_MASK)
}

fn unpack(value: u64) -> (u64, u64) {
    (value >> LOW_BITS, value & LOW_MASK)
}

/// What one connect from an address says about flapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flapping {
    No,
    /// The address is serving a ban.
    Banned,
    /// This connect was one too many in the window: banned from now.
    BannedNow,
}

/// One shard's view of the table; see the module header.
#[derive(Debug)]
pub struct AdmissionTable {
    base: NonNull<u8>,
    slots: usize,
    shard: usize,
}

// SAFETY: the region is only ever accessed through atomics.
unsafe impl Send for AdmissionTable {}

impl AdmissionTable {
    /// Bytes of memory a table of `slots` slots for `shards` shards needs.
    pub const fn region_size(slots: usize, shards: usize) -> usize {
        slots * SLOT + shards * slots * 4
    }

    /// Whether `slots` is a size a table can have: a power of two of at least
    /// [`PROBES`].
    pub fn valid_slots(slots: usize) -> bool {
        slots.is_power_of_two() && slots >= PROBES
    }

    /// Shard `shard`'s view of the table of `slots` slots at `base`, which must be
    /// `region_size(slots, shards)` bytes, 8-byte aligned, zeroed on first use (a fresh
    /// mapping is), valid for as long as the view is used, and accessed only through
    /// these views, in this or another process; `shard < shards`.
    ///
    /// # Safety
    /// The caller guarantees the conditions above.
    pub unsafe fn from_raw(base: NonNull<u8>, slots: usize, shard: usize) -> AdmissionTable {
        assert_eq!(
            base.as_ptr() as usize % 8,
            0,
            "admission table must be 8-byte aligned"
        );
        assert!(Self::valid_slots(slots), "{slots} slots");
        AdmissionTable { base, slots, shard }
    }

    /// The atomic at byte `offset` of the region.
    fn atomic<T>(&self, offset: usize) -> &T {
        // SAFETY: the callers below pass offsets inside the region (from_raw's
        // contract), aligned for `T` (a slot and a column entry are multiples of their
        // size); the region is only ever accessed atomically.
        unsafe { &*self.base.as_ptr().add(offset).cast() }
    }

    fn key_word(&self, slot: usize) -> &AtomicU64 {
        self.atomic(slot * SLOT)
    }

    fn value(&self, slot: usize) -> &AtomicU64 {
        self.atomic(slot * SLOT + 8)
    }

    /// What this shard holds of `slot`'s count (only this shard writes it).
    fn held(&self, slot: usize) -> &AtomicU32 {
        self.atomic(self.slots * SLOT + (self.shard * self.slots + slot) * 4)
    }

    /// The slot of `key`, claiming an empty one when `claim`; `None` when it has none.
    fn slot(&self, key: &str, claim: bool) -> Option<usize> {
        let wanted = hash(key);
        let mask = self.slots - 1;
        let home = (wanted as usize) & mask;
        for probe in 0..PROBES.min(self.slots) {
            let slot = (home + probe) & mask;
            let word = self.key_word(slot);
            match word.load(Ordering::Acquire) {
                found if found == wanted => return Some(slot),
                0 if claim => {
                    match word.compare_exchange(0, wanted, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return Some(slot),
                        Err(found) if found == wanted => return Some(slot),
                        Err(_) => {}
                    }
                }
                0 => return None,
                _ => {}
            }
        }
        None
    }

    /// Compare-and-swap `slot`'s value with `next(value)` until it holds; `next`
    /// returning `None` leaves it. Returns the value seen last and whether it changed.
    fn update(&self, slot: usize, next: impl Fn(u64) -> Option<u64>) -> (u64, bool) {
        let value = self.value(slot);
        let mut seen = value.load(Ordering::Acquire);
        loop {
            let Some(new) = next(seen) else {
                return (seen, false);
            };
            match value.compare_exchange_weak(seen, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (seen, true),
                Err(now) => seen = now,
            }
        }
    }

    /// Give back every count a previous process of this shard held (it died holding
    /// them).
    pub fn give_back_held(&self) {
        for slot in 0..self.slots {
            let held = self.held(slot).swap(0, Ordering::AcqRel);
            if held > 0 {
                self.update(slot, |v| Some(v.saturating_sub(u64::from(held))));
            }
        }
    }

    /// Count one more of `key` unless it is at `limit` (0: no limit): `Some(true)`
    /// counted, `Some(false)` at the limit, `None` not tracked.
    pub fn take(&self, key: &str, limit: u64) -> Option<bool> {
        let slot = self.slot(key, true)?;
        let (_, taken) = self.update(slot, |v| (limit == 0 || v < limit).then_some(v + 1));
        if taken {
            self.held(slot).fetch_add(1, Ordering::AcqRel);
        }
        Some(taken)
    }

    /// Count one less of `key` (one this shard took, or took over).
    pub fn give(&self, key: &str) {
        if let Some(slot) = self.slot(key, false) {
            self.update(slot, |v| v.checked_sub(1));
            let held = self.held(slot);
            let _ = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(1));
        }
    }

    /// The count of `key` (0 when not tracked).
    pub fn count(&self, key: &str) -> u64 {
        self.slot(key, false)
            .map_or(0, |slot| self.value(slot).load(Ordering::Acquire))
    }

    /// Take a token from the bucket `key` of `rate` tokens a second holding one
    /// second's worth, at `now_ms` (a monotonic clock): `Some(true)` taken,
    /// `Some(false)` empty, `None` not tracked.
    pub fn rate(&self, key: &str, rate: u64, now_ms: u64) -> Option<bool> {
        let slot = self.slot(key, true)?;
        let full = rate.saturating_mul(TOKEN).min(LOW_MASK);
        let (_, taken) = self.update(slot, |v| {
            let tokens = if v == 0 {
                full
            } else {
                let (at, tokens) = unpack(v);
                let refill = now_ms
                    .saturating_sub(at)
                    .saturating_mul(rate.saturating_mul(TOKEN))
                    / 1000;
                tokens.saturating_add(refill).min(full)
            };
            (tokens >= TOKEN).then(|| pack(now_ms, tokens - TOKEN))
        });
        Some(taken)
    }

    /// Count a connect from the address whose keys are `window_key` and `ban_key` at
    /// `now_ms`: banned for `ban_ms` by the `max_connects`-plus-first within
    /// `window_ms`; `None` not tracked.
    pub fn flapping(
        &self,
        window_key: &str,
        ban_key: &str,
        now_ms: u64,
        max_connects: u64,
        window_ms: u64,
        ban_ms: u64,
    ) -> Option<Flapping> {
        let ban_slot = self.slot(ban_key, true)?;
        let window_slot = self.slot(window_key, true)?;
        if now_ms < self.value(ban_slot).load(Ordering::Acquire) {
            return Some(Flapping::Banned);
        }
        let (seen, _) = self.update(window_slot, |v| {
            let (start, connects) = unpack(v);
            Some(if v == 0 || now_ms.saturating_sub(start) >= window_ms {
                pack(now_ms, 1)
            } else {
                pack(start, connects + 1)
            })
        });
        let (start, connects) = unpack(seen);
        let connects = if seen == 0 || now_ms.saturating_sub(start) >= window_ms {
            1
        } else {
            connects + 1
        };
        if connects <= max_connects {
            return Some(Flapping::No);
        }
        self.value(window_slot).store(0, Ordering::Release);
        self.value(ban_slot)
            .fetch_max(now_ms + ban_ms, Ordering::AcqRel);
        Some(Flapping::BannedNow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table's region on the heap, 8-byte aligned and zeroed: shards are views.
    struct Region(Vec<u64>);

    impl Region {
        fn new(slots: usize, shards: usize) -> Region {
            Region(vec![
                0;
                AdmissionTable::region_size(slots, shards).div_ceil(8)
            ])
        }

        fn shard(&mut self, slots: usize, shard: usize) -> AdmissionTable {
            let base = NonNull::new(self.0.as_mut_ptr().cast()).expect("vec pointer");
            // SAFETY: sized, aligned and zeroed above; the region outlives the views.
            unsafe { AdmissionTable::from_raw(base, slots, shard) }
        }
    }

    #[test]
    fn a_limit_holds_across_shards_and_a_dead_shard_gives_back_what_it_held() {
        let mut region = Region::new(64, 2);
        let (a, b) = (region.shard(64, 0), region.shard(64, 1));
        assert_eq!(a.take("ip:10.0.0.1", 3), Some(true));
        assert_eq!(b.take("ip:10.0.0.1", 3), Some(true));
        assert_eq!(b.take("ip:10.0.0.1", 3), Some(true));
        assert_eq!(
            a.take("ip:10.0.0.1", 3),
            Some(false),
            "at the limit on any shard"
        );
        assert_eq!(a.count("ip:10.0.0.1"), 3);
        b.give("ip:10.0.0.1");
        assert_eq!(a.count("ip:10.0.0.1"), 2);
        // Shard 1 dies holding one; its successor gives it back.
        let b_again = region.shard(64, 1);
        b_again.give_back_held();
        assert_eq!(a.count("ip:10.0.0.1"), 1);
        assert_eq!(a.count("never seen"), 0);
    }

    #[test]
    fn a_key_without_a_free_slot_is_not_tracked_consistently() {
        let mut region = Region::new(PROBES, 1);
        let table = region.shard(PROBES, 0);
        for n in 0..PROBES {
            assert_eq!(table.take(&format!("k{n}"), 0), Some(true));
        }
        assert_eq!(table.take("one more", 1), None);
        assert_eq!(table.rate("one more", 10, 0), None);
        table.give("one more"); // nothing to give back, no panic
        assert_eq!(table.count("one more"), 0);
    }

    #[test]
    fn a_token_bucket_refills_at_its_rate() {
        let mut region = Region::new(64, 1);
        let table = region.shard(64, 0);
        let taken: Vec<_> = (0..3).map(|_| table.rate("user:ann", 2, 1_000)).collect();
        assert_eq!(
            taken,
            [Some(true), Some(true), Some(false)],
            "a second's worth"
        );
        assert_eq!(
            table.rate("user:ann", 2, 1_400),
            Some(false),
            "0.8 of a token"
        );
        assert_eq!(
            table.rate("user:ann", 2, 1_500),
            Some(true),
            "one token after 0.5 s"
        );
    }

    #[test]
    fn too_many_connects_in_a_window_ban_the_address_for_the_ban() {
        let mut region = Region::new(64, 2);
        let (a, b) = (region.shard(64, 0), region.shard(64, 1));
        let connect = |table: &AdmissionTable, at| table.flapping("w", "b", at, 2, 1_000, 5_000);
        assert_eq!(connect(&a, 0), Some(Flapping::No));
        assert_eq!(connect(&b, 100), Some(Flapping::No));
        assert_eq!(
            connect(&a, 200),
            Some(Flapping::BannedNow),
            "the third within 1 s"
        );
        assert_eq!(connect(&b, 4_000), Some(Flapping::Banned));
        assert_eq!(connect(&a, 5_200), Some(Flapping::No), "the ban is over");
        assert_eq!(connect(&a, 7_000), Some(Flapping::No), "a new window");
    }
}
