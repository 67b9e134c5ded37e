//! One direction of the cross-shard bus: a single-producer single-consumer byte ring
//! in memory both processes map (issue 16; `docs/architecture.md`, "Shards").
//!
//! Layout of the region (`Ring::region_size(capacity)` bytes, 64-byte aligned):
//!
//! | offset | field | written by |
//! |---|---|---|
//! | 0 | `tail`: bytes ever published (u64) | producer |
//! | 64 | `head`: bytes ever consumed (u64) | consumer |
//! | 72 | `parked`: the consumer sleeps and wants a wake-up (u32) | consumer (set), producer (clear) |
//! | 128 | data, `capacity` bytes (a power of two) | producer |
//!
//! `tail` and `head` sit on separate cache lines so neither side's stores invalidate the
//! other's line on every record. A record is a little-endian `u32` length and the bytes,
//! padded to 8; a record that would cross the end of the data area is preceded by a
//! [`WRAP`] marker and starts again at offset 0, so every record is contiguous and the
//! reader hands out plain slices.
//!
//! **Batches.** The producer writes many records (`Writer::push`) and makes them visible
//! with one release store of `tail` (`Writer::publish`): one atomic per batch, not per
//! record. The consumer takes everything published with one acquire load
//! (`Reader::drain`) and frees the space with one release store of `head`.
//!
//! **Wake-ups.** A consumer about to sleep sets `parked` and looks at `tail` once more
//! (`Reader::park`); a producer that publishes into a parked ring clears the flag and is
//! told to wake the consumer (an eventfd write, done by the caller). So a busy pair
//! exchanges batches with no system call at all.
//!
//! **Full.** `push` answers `false` when the record does not fit: the caller keeps the
//! rest for its next tick (back-pressure, nothing dropped).

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Offset of the data area in the region.
const DATA: usize = 128;
const TAIL: usize = 0;
const HEAD: usize = 64;
const PARKED: usize = 72;
/// A length word meaning "no record here: continue at offset 0".
pub const WRAP: u32 = u32::MAX;
const LEN: usize = 4;

/// The largest record `push` accepts for a ring of `capacity` bytes.
pub const fn max_record(capacity: usize) -> usize {
    capacity / 2 - LEN
}

const fn padded(len: usize) -> usize {
    (LEN + len + 7) & !7
}

/// A ring's region in memory: shared by exactly one [`Writer`] and one [`Reader`].
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    base: NonNull<u8>,
    capacity: usize,
}

// SAFETY: a Ring is a pointer to memory whose shared fields are only accessed through
// atomics, and whose data bytes are written by the one writer before the release store
// that publishes them and read by the one reader after the acquire load that sees them.
unsafe impl Send for Ring {}

impl Ring {
    /// Bytes of memory a ring with `capacity` data bytes needs.
    pub const fn region_size(capacity: usize) -> usize {
        DATA + capacity
    }

    /// A ring over `len` bytes at `base`, which must be zeroed on first use (a fresh
    /// mapping is), 64-byte aligned, valid for as long as the ring is used, and used
    /// by at most one `Writer` and one `Reader` at a time, in this or another process.
    ///
    /// # Safety
    /// The caller guarantees the conditions above.
    pub unsafe fn from_raw(base: NonNull<u8>, len: usize) -> Ring {
        assert_eq!(
            base.as_ptr() as usize % 64,
            0,
            "ring region must be 64-byte aligned"
        );
        let capacity = len
            .checked_sub(DATA)
            .expect("ring region smaller than its header");
        assert!(
            capacity.is_power_of_two() && capacity >= 64,
            "ring capacity {capacity} is not a power of two >= 64"
        );
        Ring { base, capacity }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offset is one of the header's 8-byte aligned u64 fields.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn parked(&self) -> &AtomicU32 {
        // SAFETY: PARKED is a 4-byte aligned u32 field of the header.
        unsafe { &*(self.base.as_ptr().add(PARKED) as *const AtomicU32) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data area starts DATA bytes into the region.
        unsafe { self.base.as_ptr().add(DATA) }
    }

    /// The producer's side. One per ring.
    pub fn writer(self) -> Writer {
        let tail = self.u64_at(TAIL).load(Ordering::Relaxed);
        Writer {
            ring: self,
            tail,
            published: tail,
            head: self.u64_at(HEAD).load(Ordering::Acquire),
        }
    }

    /// The consumer's side. One per ring.
    pub fn reader(self) -> Reader {
        Reader {
            ring: self,
            head: self.u64_at(HEAD).load(Ordering::Relaxed),
        }
    }
}

/// Appends records and publishes them in batches.
#[derive(Debug)]
pub struct Writer {
    ring: Ring,
    /// Where the next record goes (bytes ever written, published or not).
    tail: u64,
    /// What the reader may see.
    published: u64,
    /// The reader's position as last read (refreshed only when space looks short).
    head: u64,
}

impl Writer {
    fn free(&mut self, needed: usize) -> bool {
        let capacity = self.ring.capacity as u64;
        if self.tail + needed as u64 - self.head <= capacity {
            return true;
        }
        self.head = self.ring.u64_at(HEAD).load(Ordering::Acquire);
        self.tail + needed as u64 - self.head <= capacity
    }

    /// Appends one record, not yet visible to the reader; `false` (nothing written)
    /// when the ring has no room for it now.
    ///
    /// # Panics
    /// A record over [`max_record`] can never fit: that is the caller's bug.
    pub fn push(&mut self, record: &[u8]) -> bool {
        self.push_with(record.len(), |slot| slot.copy_from_slice(record))
    }

    /// As [`Writer::push`], the record's `len` bytes written by `fill` in place.
    pub fn push_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        let capacity = self.ring.capacity;
        assert!(
            len <= max_record(capacity),
            "bus record of {len} bytes exceeds {}",
            max_record(capacity)
        );
        let size = padded(len);
        let offset = (self.tail as usize) & (capacity - 1);
        let before_end = capacity - offset;
        let wrap = if size > before_end { before_end } else { 0 };
        if !self.free(wrap + size) {
            return false;
        }
        let data = self.ring.data();
        // SAFETY: the bytes from tail to tail + wrap + size are free (the reader is past
        // them) and unpublished, so only this writer touches them.
        unsafe {
            if wrap != 0 {
                data.add(offset).cast::<u32>().write(WRAP.to_le());
                self.tail += wrap as u64;
            }
            let at = data.add((self.tail as usize) & (capacity - 1));
            at.cast::<u32>().write((len as u32).to_le());
            fill(std::slice::from_raw_parts_mut(at.add(LEN), len));
        }
        self.tail += size as u64;
        true
    }

    /// Makes every pushed record visible; `true` when the reader was parked and must be
    /// woken by the caller (its flag is cleared here, so one wake-up per sleep).
    pub fn publish(&mut self) -> bool {
        if self.tail == self.published {
            return false;
        }
        self.published = self.tail;
        self.ring.u64_at(TAIL).store(self.tail, Ordering::Release);
        // The reader sets `parked` then re-reads `tail`; the writer stores `tail` then
        // reads `parked`. The SeqCst fences order each side's store before its load, so
        // at least one of them sees the other's store: no lost wake-up.
        fence(Ordering::SeqCst);
        self.ring.parked().load(Ordering::Relaxed) != 0
            && self.ring.parked().swap(0, Ordering::AcqRel) != 0
    }

    /// Bytes pushed but not yet published.
    pub fn pending(&self) -> usize {
        (self.tail - self.published) as usize
    }
}

/// Takes published records in order.
#[derive(Debug)]
pub struct Reader {
    ring: Ring,
    head: u64,
}

impl Reader {
    /// Hands every published record to `each`, in order, then frees their space;
    /// returns how many there were.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        let tail = self.ring.u64_at(TAIL).load(Ordering::Acquire);
        let capacity = self.ring.capacity;
        let data = self.ring.data();
        let mut count = 0;
        while self.head < tail {
            let offset = (self.head as usize) & (capacity - 1);
            // SAFETY: bytes below `tail` were written before the writer's release store
            // of `tail`, which the acquire load above saw; the writer does not reuse them
            // until `head` passes them.
            let len = u32::from_le(unsafe { data.add(offset).cast::<u32>().read() });
            if len == WRAP {
                self.head += (capacity - offset) as u64;
                continue;
            }
            let len = len as usize;
            // SAFETY: the record's `len` bytes follow its length word, below `tail` as
            // the word is (see above), and stay untouched until `head` passes them.
            each(unsafe { std::slice::from_raw_parts(data.add(offset + LEN), len) });
            self.head += padded(len) as u64;
            count += 1;
        }
        if count != 0 {
            self.ring.u64_at(HEAD).store(self.head, Ordering::Release);
        }
        count
    }

    /// Asks for a wake-up before sleeping: `true` when records arrived meanwhile (drain
    /// again instead of sleeping; the flag is withdrawn).
    pub fn park(&mut self) -> bool {
        self.ring.parked().store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.ring.u64_at(TAIL).load(Ordering::Acquire) != self.head {
            self.ring.parked().store(0, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// A ring's region on this process's heap: zeroed and 64-byte aligned. For a ring
/// between threads (tests, benches); shards map theirs from shared memory.
pub struct OwnedRegion(Vec<Line>);

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

impl OwnedRegion {
    pub fn new(capacity: usize) -> OwnedRegion {
        OwnedRegion(vec![
            Line([0; 64]);
            Ring::region_size(capacity).div_ceil(64)
        ])
    }

    /// The ring over this region; the region must outlive every use of it.
    pub fn ring(&mut self) -> Ring {
        let len = self.0.len() * 64;
        // SAFETY: zeroed, 64-byte aligned, `len` bytes; the caller keeps the region.
        unsafe {
            Ring::from_raw(
                NonNull::new(self.0.as_mut_ptr().cast()).expect("vec pointer"),
                len,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(reader: &mut Reader) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        reader.drain(|r| out.push(r.to_vec()));
        out
    }

    #[test]
    fn records_are_invisible_until_published_then_read_in_order() {
        let mut region = OwnedRegion::new(256);
        let ring = region.ring();
        let (mut w, mut r) = (ring.writer(), ring.reader());
        assert!(w.push(b"one"));
        assert!(w.push(b""));
        assert!(drained(&mut r).is_empty());
        w.publish();
        assert_eq!(drained(&mut r), vec![b"one".to_vec(), Vec::new()]);
        assert!(drained(&mut r).is_empty());
    }

    #[test]
    fn a_record_that_would_cross_the_end_starts_again_at_zero() {
        let mut region = OwnedRegion::new(64);
        let ring = region.ring();
        let (mut w, mut r) = (ring.writer(), ring.reader());
        let mut expected = Vec::new();
        for i in 0..50u8 {
            let record = vec![i; (i as usize * 7) % 29];
            assert!(w.push(&record), "record {i} should fit an empty ring");
            w.publish();
            expected.push(record);
            assert_eq!(drained(&mut r), vec![expected.last().unwrap().clone()]);
        }
    }

    #[test]
    fn a_full_ring_refuses_until_the_reader_frees_space() {
        let mut region = OwnedRegion::new(64);
        let ring = region.ring();
        let (mut w, mut r) = (ring.writer(), ring.reader());
        let mut pushed = 0;
        while w.push(&[7; 12]) {
            pushed += 1;
        }
        assert_eq!(pushed, 4, "64 bytes hold four 16-byte slots");
        w.publish();
        assert_eq!(r.drain(|_| {}), 4);
        assert!(w.push(&[7; 12]));
    }

    #[test]
    fn a_parked_reader_is_woken_once_and_park_sees_records_that_raced_it() {
        let mut region = OwnedRegion::new(256);
        let ring = region.ring();
        let (mut w, mut r) = (ring.writer(), ring.reader());
        assert!(!r.park(), "nothing published: sleep");
        w.push(b"x");
        assert!(w.publish(), "the parked reader must be woken");
        w.push(b"y");
        assert!(!w.publish(), "one wake-up per sleep");
        assert!(r.park(), "records are waiting: do not sleep");
        assert_eq!(drained(&mut r).len(), 2);
    }

    #[test]
    fn two_threads_exchange_a_million_records_in_order_with_nothing_lost() {
        let mut region = OwnedRegion::new(4096);
        let ring = region.ring();
        let (mut w, mut r) = (ring.writer(), ring.reader());
        const N: u64 = 1_000_000;
        let producer = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < N {
                while i < N
                    && w.push_with(8 + (i % 40) as usize, |s| {
                        s[..8].copy_from_slice(&i.to_le_bytes())
                    })
                {
                    i += 1;
                }
                w.publish();
            }
        });
        let mut next = 0u64;
        while next < N {
            r.drain(|record| {
                let got = u64::from_le_bytes(record[..8].try_into().unwrap());
                assert_eq!(got, next);
                assert_eq!(record.len(), 8 + (got % 40) as usize);
                next += 1;
            });
        }
        producer.join().unwrap();
    }
}
