//! The node's admission counters as Python sees them (`ferromq.admission`): a shared
//! region the supervisor makes (`NodeCounters.create`, a memfd every shard inherits)
//! and each shard maps (`NodeCounters(fd, shard)`), holding the core's admission table
//! (`ferromq_core::bus::admission`, where the layout and the operations are) after the
//! region's 64-byte header. Seconds from Python become the table's milliseconds here.

use std::ptr::NonNull;

use ferromq_core::bus::admission::{AdmissionTable, Flapping, PROBES};
use pyo3::prelude::*;

use crate::errors;
use crate::shared_memory::{Header, Region, HEADER};

const MAGIC: [u8; 4] = *b"FMQC";

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NodeCounters>()?;
    Ok(())
}

fn region_len(slots: usize, shards: usize) -> usize {
    HEADER + AdmissionTable::region_size(slots, shards)
}

fn millis(seconds: f64) -> u64 {
    (seconds * 1000.0) as u64
}

/// The node's admission counters as one shard sees them; see the module header.
#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct NodeCounters {
    table: AdmissionTable,
    /// Keeps the mapping the table points into.
    _region: Region,
}

#[pymethods]
impl NodeCounters {
    /// A new zeroed region of `slots` slots (a power of two) for `shards` shards;
    /// returns its memfd, which every shard maps.
    #[staticmethod]
    fn create(slots: usize, shards: u16) -> PyResult<i32> {
        if !AdmissionTable::valid_slots(slots) {
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
            || !AdmissionTable::valid_slots(slots)
            || region.len() != region_len(slots, usize::from(shards))
        {
            return Err(errors::bad_argument(format!(
                "node counters region is not one for shard {shard}"
            )));
        }
        // SAFETY: the mapping is the table's size past its header (checked above),
        // page-aligned plus 64, zeroed when made, kept alive by `_region`, and every
        // process accesses it through tables only.
        let table = unsafe {
            let base = NonNull::new(region.base().as_ptr().add(HEADER)).expect("mapped");
            AdmissionTable::from_raw(base, slots, usize::from(shard))
        };
        if reset {
            table.give_back_held();
        }
        Ok(NodeCounters {
            table,
            _region: region,
        })
    }

    /// Count one more of `key` unless it is at `limit` (0: no limit): `True` counted,
    /// `False` at the limit, `None` not tracked (no slot for it).
    fn take(&self, key: &str, limit: u64) -> Option<bool> {
        self.table.take(key, limit)
    }

    /// Count one less of `key` (one this shard took, or took over).
    fn give(&self, key: &str) {
        self.table.give(key);
    }

    /// The count of `key` (0 when not tracked).
    fn count(&self, key: &str) -> u64 {
        self.table.count(key)
    }

    /// Take a token from the bucket `key` of `rate` tokens a second holding one
    /// second's worth, at `now` (seconds of the monotonic clock): `True` taken, `False`
    /// empty, `None` not tracked.
    fn rate(&self, key: &str, rate: u64, now: f64) -> Option<bool> {
        self.table.rate(key, rate, millis(now))
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
        let seen = self.table.flapping(
            window_key,
            ban_key,
            millis(now),
            max_connects,
            millis(window),
            millis(ban),
        )?;
        Some(match seen {
            Flapping::No => 0,
            Flapping::Banned => 1,
            Flapping::BannedNow => 2,
        })
    }
}
