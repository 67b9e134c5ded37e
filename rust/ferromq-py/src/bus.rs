//! The cross-shard bus as a shard process sees it (issue 16, docs/shards.md): one
//! shared-memory region holding a ring per ordered pair of shards, created once by the
//! supervisor (`Bus.create`, a memfd every shard inherits) and mapped by each shard
//! (`Bus(fd, index, count)`).
//!
//! Layout: a 64-byte header (`FMQB`, the shard count, the ring capacity), then
//! `count * count` ring regions, the ring from shard *a* to shard *b* at position
//! `a * count + b` (the diagonal is unused).
//!
//! Per loop tick the shard calls `send` once: every other shard's outbox of the
//! engine is cut into ring records, each a versioned frame (`durability::frame_batch`),
//! pushed, and published with one release store per ring; a batch that does not fit
//! waits in a backlog for the next tick (back-pressure, nothing dropped). `receive`
//! drains every incoming ring straight into the engine, refusing a frame of a version
//! this build does not read. No Python object per record either way.

use std::collections::VecDeque;
use std::ptr::NonNull;

use bytes::Bytes;
use ferromq_core::bus::ring::{max_record, Reader, Ring, Writer};
use ferromq_core::durability::{frame_batch, open_frame, FrameKind};
use pyo3::prelude::*;

use crate::engine::Engine;
use crate::errors;
use crate::shared_memory::{Header, Region, HEADER};

const MAGIC: [u8; 4] = *b"FMQB";

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Bus>()?;
    Ok(())
}

fn region_len(count: usize, capacity: usize) -> usize {
    HEADER + count * count * Ring::region_size(capacity)
}

#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct Bus {
    index: u16,
    /// Indexed by the other shard (None at this shard's own index).
    writers: Vec<Option<Writer>>,
    readers: Vec<Option<Reader>>,
    backlog: Vec<VecDeque<Bytes>>,
    max_record: usize,
    // Last: the rings point into it.
    _region: Region,
}

#[pymethods]
impl Bus {
    /// A new zeroed region for `count` shards with rings of `ring_capacity` bytes (a
    /// power of two); returns its memfd, which every shard maps.
    #[staticmethod]
    fn create(count: u16, ring_capacity: usize) -> PyResult<i32> {
        if count < 2 {
            return Err(errors::bad_argument("a bus joins at least 2 shards"));
        }
        if !ring_capacity.is_power_of_two() || ring_capacity < 4096 {
            return Err(errors::bad_argument(
                "ring_capacity must be a power of two of at least 4096",
            ));
        }
        Region::create(
            c"ferromq-bus",
            region_len(usize::from(count), ring_capacity),
            Header {
                magic: MAGIC,
                count,
                size: ring_capacity as u64,
            },
        )
    }

    /// Map the region of `fd` as shard `index` of `count`.
    #[new]
    fn new(fd: i32, index: u16, count: u16) -> PyResult<Bus> {
        let (region, header) = Region::attach(fd)?;
        let capacity = header.size as usize;
        if header.magic != MAGIC
            || header.count != count
            || index >= count
            || region.len() != region_len(usize::from(count), capacity)
        {
            return Err(errors::bad_argument(format!(
                "bus region is not one for shard {index} of {count}"
            )));
        }
        let ring = |from: u16, to: u16| {
            let at = HEADER + usize::from(from * count + to) * Ring::region_size(capacity);
            // SAFETY: inside the mapping, 64-byte aligned (HEADER and the region size
            // are multiples of 64), zeroed at creation; the one writer of ring
            // (from, to) is shard `from`, its one reader shard `to`.
            unsafe {
                Ring::from_raw(
                    NonNull::new(region.base().as_ptr().add(at)).expect("inside mapping"),
                    Ring::region_size(capacity),
                )
            }
        };
        let others = |each: &dyn Fn(u16) -> Ring| -> Vec<Option<Ring>> {
            (0..count)
                .map(|other| (other != index).then(|| each(other)))
                .collect()
        };
        Ok(Bus {
            index,
            writers: others(&|to| ring(index, to))
                .into_iter()
                .map(|r| r.map(Ring::writer))
                .collect(),
            readers: others(&|from| ring(from, index))
                .into_iter()
                .map(|r| r.map(Ring::reader))
                .collect(),
            backlog: (0..count).map(|_| VecDeque::new()).collect(),
            max_record: max_record(capacity),
            _region: region,
        })
    }

    #[getter]
    fn index(&self) -> u16 {
        self.index
    }

    /// Move the engine's records for every other shard into their rings; returns the
    /// shards to wake (parked, and sent something).
    fn send(&mut self, mut engine: PyRefMut<'_, Engine>) -> PyResult<Vec<u16>> {
        let mut wake = Vec::new();
        for (to, writer) in self.writers.iter_mut().enumerate() {
            let Some(writer) = writer else { continue };
            let backlog = &mut self.backlog[to];
            if let Some(batch) = engine.inner.take_bus(to as u16) {
                backlog.extend(frame_batch(batch, self.max_record).map_err(errors::journal_error)?);
            }
            while let Some(piece) = backlog.front() {
                if !writer.push(piece) {
                    break;
                }
                backlog.pop_front();
            }
            if writer.publish() {
                wake.push(to as u16);
            }
        }
        Ok(wake)
    }

    /// Hand every record the other shards published to the engine; returns how many
    /// records. The rest of the rings are still drained past a frame that cannot be
    /// read, then the first error is raised: `FrameVersionError` for a frame of a
    /// version this build does not read (another build's shard: the node must stop),
    /// before `ValueError` for records the engine cannot read (a bug).
    fn receive(&mut self, mut engine: PyRefMut<'_, Engine>, now: u64) -> PyResult<usize> {
        let mut total = 0;
        let mut refused = None;
        let mut unreadable = None;
        for (from, reader) in self.readers.iter_mut().enumerate() {
            let Some(reader) = reader else { continue };
            reader.drain(|frame| {
                let records = match open_frame(FrameKind::BusBatch, Bytes::copy_from_slice(frame)) {
                    Ok(records) => records,
                    Err(error) => {
                        refused.get_or_insert(error);
                        return;
                    }
                };
                match engine.inner.bus_receive(from as u16, records, now) {
                    Ok(records) => total += records,
                    Err(error) => {
                        unreadable.get_or_insert(error);
                    }
                }
            });
        }
        if let Some(error) = refused {
            return Err(errors::frame_version_error(error));
        }
        match unreadable {
            Some(error) => Err(errors::journal_error(error)),
            None => Ok(total),
        }
    }

    /// Ask to be woken (through this shard's eventfd) when records arrive; `True` when
    /// some arrived meanwhile, so `receive` must run again instead of sleeping.
    fn park(&mut self) -> bool {
        let mut arrived = false;
        for reader in self.readers.iter_mut().flatten() {
            arrived |= reader.park();
        }
        arrived
    }

    /// Bytes waiting for room in the rings (back-pressure).
    fn backlog(&self) -> usize {
        self.backlog.iter().flatten().map(Bytes::len).sum()
    }
}
