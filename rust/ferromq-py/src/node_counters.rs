//! The node's admission counters (issue 16, docs/shards.md): the counts the limits of
//! `ferromq.admission` rest on, shared by every shard of a node. The supervisor makes
//! one region (`NodeCounters.create`, a memfd every shard inherits) and each shard maps
//! it (`NodeCounters(fd, shard)`); every operation is a few atomic loads and one
//! compare-and-swap loop, so no lock is held that a killed shard could leave taken.
//!
//! Layout: a 64-byte header (`FMQC`, the slot count, the shard count), then `slots`
//! slots of 16 bytes (a key's 64-bit FNV-1a hash, 0 while the slot is empty, and its
//! value), then one column of `u32` per shard, `slots` long: what each shard holds of
//! each count.
//!
//! A key lives in the first slot of its probe sequence (linear, from its hash, at most
//! `PROBES` slots) that holds its hash or is empty; an empty slot is claimed with one
//! compare-and-swap of the hash, and a slot never changes key afterwards (a count back
//! at 0 keeps its slot), so every shard finds a key in the same slot. A key that finds
//! none of its `PROBES` slots free is **not tracked**: `take`, `rate` and `flapping`
//! return `None` (the caller admits as if that limit were not set) and `give` does
//! nothing, consistently, since those slots never free up.
//!
//! Values by use:
//! - **counts** (`take`/`give`/`count`): open connections; `take` increments only below
//!   the limit. The shard's column records what it holds, so a shard started again
//!   after dying (`NodeCounters(fd, shard)` with `reset=True`) gives back what its
//!   predecessor held.
//! - **token buckets** (`rate`): the time of the last take in milliseconds (40 bits)
//!   and the tokens in 1/256ths (24 bits: at most 65,535 tokens, a higher rate holds
//!   that many); 0 is a full bucket.
//! - **flapping** (`flapping`): a window's start in milliseconds (40 bits) and its
//!   connects (24 bits, saturating) under one key; the end of a ban in milliseconds
//!   under another.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pyo3::prelude::*;

use crate::errors;
use crate::shared_memory::{Header, Region, HEADER};

const MAGIC: [u8; 4] = *b"FMQC";
const SLOT: usize = 16;
/// Slots a key may look at before it is not tracked.
const PROBES: usize = 32;
const LOW_BITS: u32 = 24;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;
const TOKEN: u64 = 256;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NodeCounters>()?;
    Ok(())
}

fn region_len(slots: usize, shards: usize) -> usize {
    HEADER + slots * SLOT + shards * slots * 4
}

/// FNV-1a 64 of the key, never 0 (the empty slot).
fn hash(key: &str) -> u64 {
    ferromq_core::bus::fnv1a(key.as_bytes()).max(1)
}

fn millis(seconds: f64) -> u64 {
    (seconds * 1000.0) as u64
}

fn pack(high: u64, low: u64) -> u64 {
    (high << LOW_BITS) | low.min(LOW_MASK)
}

fn unpack(value: u64) -> (u64, u64) {
    (value >> LOW_BITS, value & LOW_MASK)
}

/// The node's admission counters as one shard sees them; see the module header.
#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct NodeCounters {
    slots: usize,
    shard: usize,
    region: Region,
}

impl NodeCounters {
    /// The atomic at byte `offset` of the region.
    fn atomic<T>(&self, offset: usize) -> &T {
        // SAFETY: the callers below pass offsets inside the mapping, aligned for `T`
        // (the header, a slot and a column entry are multiples of their size); the
        // region is only ever accessed atomically.
        unsafe { &*self.region.base().as_ptr().add(offset).cast() }
    }

    fn key_word(&self, slot: usize) -> &AtomicU64 {
        self.atomic(HEADER + slot * SLOT)
    }

    fn value(&self, slot: usize) -> &AtomicU64 {
        self.atomic(HEADER + slot * SLOT + 8)
    }

    /// What this shard holds of `slot`'s count (only this shard writes it).
    fn held(&self, slot: usize) -> &AtomicU32 {
        self.atomic(HEADER + self.slots * SLOT + (self.shard * self.slots + slot) * 4)
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
    /// returning `None` leaves it. Returns the value seen last.
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
}

#[pymethods]
impl NodeCounters {
    /// A new zeroed region of `slots` slots (a power of two) for `shards` shards;
    /// returns its memfd, which every shard maps.
    #[staticmethod]
    fn create(slots: usize, shards: u16) -> PyResult<i32> {
        if !slots.is_power_of_two() || slots < PROBES {
            return Err(errors::bad_argument(format!(
                "slots must be a power of two of at least {PROBES}"
            )));
        }
        if shards == 0 {
            return Err(errors::bad_argument("shards must be at least 1"));
        }
        Region::create(
            c"ferromq-counters",
            region_len(slots, usize::from(shards)),
            Header {
                magic: MAGIC,
                count: shards,
                size: slots as u64,
            },
        )
    }

    /// Map the region of `fd` as shard `shard`; with `reset`, first give back every
    /// count a previous process of this shard held (it died holding them).
    #[new]
    #[pyo3(signature = (fd, shard, reset=false))]
    fn new(fd: i32, shard: u16, reset: bool) -> PyResult<NodeCounters> {
        let (region, header) = Region::attach(fd)?;
        let (shards, slots) = (header.count, header.size as usize);
        if header.magic != MAGIC
            || shard >= shards
            || !slots.is_power_of_two()
            || region.len() != region_len(slots, usize::from(shards))
        {
            return Err(errors::bad_argument(format!(
                "node counters region is not one for shard {shard}"
            )));
        }
        let counters = NodeCounters {
            slots,
            shard: usize::from(shard),
            region,
        };
        if reset {
            for slot in 0..slots {
                let held = counters.held(slot).swap(0, Ordering::AcqRel);
                if held > 0 {
                    counters.update(slot, |v| Some(v.saturating_sub(u64::from(held))));
                }
            }
        }
        Ok(counters)
    }

    /// Count one more of `key` unless it is at `limit` (0: no limit): `True` counted,
    /// `False` at the limit, `None` not tracked (no slot for it).
    fn take(&self, key: &str, limit: u64) -> Option<bool> {
        let slot = self.slot(key, true)?;
        let (_, taken) = self.update(slot, |v| (limit == 0 || v < limit).then_some(v + 1));
        if taken {
            self.held(slot).fetch_add(1, Ordering::AcqRel);
        }
        Some(taken)
    }

    /// Count one less of `key` (one this shard took, or took over).
    fn give(&self, key: &str) {
        if let Some(slot) = self.slot(key, false) {
            self.update(slot, |v| v.checked_sub(1));
            let held = self.held(slot);
            let _ = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(1));
        }
    }

    /// The count of `key` (0 when not tracked).
    fn count(&self, key: &str) -> u64 {
        self.slot(key, false)
            .map_or(0, |slot| self.value(slot).load(Ordering::Acquire))
    }

    /// Take a token from the bucket `key` of `rate` tokens a second holding one
    /// second's worth, at `now` (seconds of the monotonic clock): `True` taken, `False`
    /// empty, `None` not tracked.
    fn rate(&self, key: &str, rate: u64, now: f64) -> Option<bool> {
        let slot = self.slot(key, true)?;
        let full = rate.saturating_mul(TOKEN).min(LOW_MASK);
        let now = millis(now);
        let (_, taken) = self.update(slot, |v| {
            let tokens = if v == 0 {
                full
            } else {
                let (at, tokens) = unpack(v);
                let refill = now
                    .saturating_sub(at)
                    .saturating_mul(rate.saturating_mul(TOKEN))
                    / 1000;
                tokens.saturating_add(refill).min(full)
            };
            (tokens >= TOKEN).then(|| pack(now, tokens - TOKEN))
        });
        Some(taken)
    }

    /// Count a connect from the address whose keys are `window_key` and `ban_key` at
    /// `now` (seconds): 0 not flapping, 1 serving a ban, 2 banned by this connect
    /// (the `max_connects`-plus-first within `window` seconds, banned for `ban`
    /// seconds); `None` not tracked.
    fn flapping(
        &self,
        window_key: &str,
        ban_key: &str,
        now: f64,
        max_connects: u64,
        window: f64,
        ban: f64,
    ) -> Option<u8> {
        let ban_slot = self.slot(ban_key, true)?;
        let window_slot = self.slot(window_key, true)?;
        let (now, window, ban) = (millis(now), millis(window), millis(ban));
        if now < self.value(ban_slot).load(Ordering::Acquire) {
            return Some(1);
        }
        let (seen, _) = self.update(window_slot, |v| {
            let (start, connects) = unpack(v);
            Some(if v == 0 || now.saturating_sub(start) >= window {
                pack(now, 1)
            } else {
                pack(start, connects + 1)
            })
        });
        let (start, connects) = unpack(seen);
        let connects = if seen == 0 || now.saturating_sub(start) >= window {
            1
        } else {
            connects + 1
        };
        if connects <= max_connects {
            return Some(0);
        }
        self.value(window_slot).store(0, Ordering::Release);
        self.value(ban_slot).fetch_max(now + ban, Ordering::AcqRel);
        Some(2)
    }
}
