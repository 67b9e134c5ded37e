//! Shared memory a node's shards map (the bus, `bus.rs`; the admission counters,
//! `node_counters.rs`): a memfd the supervisor creates and every shard inherits and
//! maps whole. Each region starts with a 64-byte [`Header`] — a 4-byte magic naming
//! what it holds, the shard count (`u16` at byte 4) and one size (`u64` at byte 8: the
//! ring capacity, the slot count) — which `attach` reads back, so a shard can refuse a
//! region of another kind or shape.

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3::prelude::*;

use crate::errors;

pub(crate) const HEADER: usize = 64;

/// What a region's first 64 bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub magic: [u8; 4],
    pub count: u16,
    pub size: u64,
}

/// A shared mapping of a whole memfd, unmapped when dropped.
pub(crate) struct Region {
    base: NonNull<u8>,
    len: usize,
}

impl Region {
    /// A new zeroed memfd of `len` bytes called `name`, with `header` written; returns
    /// the descriptor (close-on-exec: a child gets it through `pass_fds`).
    pub(crate) fn create(name: &CStr, len: usize, header: Header) -> PyResult<i32> {
        assert!(len >= HEADER, "a region holds at least its header");
        // SAFETY: plain system calls on a descriptor this function owns until it returns.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(errors::os_error("memfd_create"));
        }
        // SAFETY: as above; `fd` is open and ours.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let error = errors::os_error("ftruncate");
            // SAFETY: closes the descriptor made above, used nowhere else.
            unsafe { libc::close(fd) };
            return Err(error);
        }
        // SAFETY: closes the descriptor made above when mapping it failed.
        let region = Region::map(fd, len).inspect_err(|_| unsafe {
            libc::close(fd);
        })?;
        // SAFETY: the header lies within the fresh mapping.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.base.as_ptr(), HEADER) };
        bytes[..4].copy_from_slice(&header.magic);
        bytes[4..6].copy_from_slice(&header.count.to_le_bytes());
        bytes[8..16].copy_from_slice(&header.size.to_le_bytes());
        Ok(fd)
    }

    /// Map all of `fd`'s region; with the header it starts with.
    pub(crate) fn attach(fd: i32) -> PyResult<(Region, Header)> {
        // SAFETY: fstat into a zeroed struct.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes only into `stat`, a valid struct of its type.
        if unsafe { libc::fstat(fd, &mut stat) } != 0 {
            return Err(errors::os_error("fstat"));
        }
        let len = stat.st_size as usize;
        if len < HEADER {
            return Err(errors::bad_argument(
                "shared memory region smaller than its header",
            ));
        }
        let region = Region::map(fd, len)?;
        // SAFETY: the header lies within the mapping (len >= HEADER).
        let bytes = unsafe { std::slice::from_raw_parts(region.base.as_ptr(), HEADER) };
        let header = Header {
            magic: bytes[..4].try_into().expect("4 bytes"),
            count: u16::from_le_bytes([bytes[4], bytes[5]]),
            size: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        };
        Ok((region, header))
    }

    fn map(fd: i32, len: usize) -> PyResult<Region> {
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(errors::os_error("mmap"));
        }
        Ok(Region {
            base: NonNull::new(base.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// The first byte (64-byte aligned: a mapping is page aligned).
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
