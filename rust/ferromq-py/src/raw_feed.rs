//! The read path's C entry: `Engine.raw_feed()` hands the Cython IO layer a capsule
//! holding a `RawFeed`, whose `feed` the `EngineReader` calls once per read with the
//! arena's pointer and length, so no Python object is made per read.
//!
//! `feed` also reports through `held` whether the engine now holds the connection's
//! input (a publish rate or the memory budget, `ferromq_core::engine` `hold`): the
//! reader then pauses the transport at once, before the loop reads it again, and
//! resumes it on the engine's `ResumeReading` event.
//!
//! The layout is declared once, in `include/ferromq_raw_feed.h`, which the Cython
//! module includes; `RawFeed` mirrors it with `#[repr(C)]`, and the tests below read
//! the header and check its version, capsule name and every field's offset against
//! this struct. The struct carries its version and size, which `IOHub` checks first.

use std::ffi::CStr;

use ferromq_core::engine::Engine as CoreEngine;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// `FERROMQ_RAW_FEED_VERSION` of the header: bump both with any change of layout.
pub(crate) const RAW_FEED_VERSION: u32 = 2;
/// `FERROMQ_RAW_FEED_CAPSULE` of the header.
const CAPSULE_NAME: &CStr = c"ferromq._core.RawFeed";

/// `ferromq_raw_feed` of `include/ferromq_raw_feed.h`.
#[repr(C)]
struct RawFeed {
    version: u32,
    size: u32,
    engine: *mut CoreEngine,
    feed: unsafe extern "C" fn(*mut CoreEngine, u32, *const u8, usize, u64, *mut u8) -> usize,
}

// SAFETY: a RawFeed is only dereferenced by the Cython IO layer on the thread that
// owns the (unsendable) Engine, with the GIL held; the capsule never crosses threads.
unsafe impl Send for RawFeed {}

/// The capsule for `engine`, the `inner` of a live `Engine`; the caller keeps that
/// `Engine` alive for as long as the capsule (`IOHub` holds both).
pub(crate) fn capsule(py: Python<'_>, engine: *mut CoreEngine) -> PyResult<Bound<'_, PyCapsule>> {
    let raw = RawFeed {
        version: RAW_FEED_VERSION,
        size: std::mem::size_of::<RawFeed>() as u32,
        engine,
        feed,
    };
    PyCapsule::new_with_value(py, raw, CAPSULE_NAME)
}

/// `ferromq_core::engine::Engine::feed` for C callers: handle every complete packet of
/// `data[..len]` for `conn` at `now`, return the bytes used, and set `*held` to 1 when
/// the engine holds the connection's input (stop reading it), else 0.
///
/// # Safety
/// `engine` must point to the `inner` engine of a live `Engine` object, `data` to
/// `len` readable bytes, `held` to one writable byte, and the caller must hold the GIL
/// on the engine's thread with no other borrow of that engine active (the engine
/// never calls back into Python).
unsafe extern "C" fn feed(
    engine: *mut CoreEngine,
    conn: u32,
    data: *const u8,
    len: usize,
    now: u64,
    held: *mut u8,
) -> usize {
    // SAFETY: guaranteed by the caller, as documented above.
    let (engine, bytes) = unsafe { (&mut *engine, std::slice::from_raw_parts(data, len)) };
    // A panic must not unwind into C: the read is dropped and the connection closed.
    let (used, is_held) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let used = engine.feed(conn, bytes, now);
        (used, engine.input_held(conn))
    }))
    .unwrap_or_else(|_| {
        engine.connection_lost(conn, now);
        (len, false)
    });
    // SAFETY: `held` points to one writable byte, as documented above.
    unsafe { *held = u8::from(is_held) };
    used
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;

    const HEADER: &str = include_str!("../include/ferromq_raw_feed.h");

    fn define(name: &str) -> &'static str {
        HEADER
            .lines()
            .find_map(|line| line.strip_prefix(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} is not defined in the header"))
            .trim()
    }

    /// The header's fields in order: (name, size and alignment of its C type).
    fn header_fields() -> Vec<(String, usize)> {
        let body = HEADER
            .split_once("typedef struct {")
            .and_then(|(_, rest)| rest.split_once("} ferromq_raw_feed;"))
            .expect("the header declares `typedef struct { ... } ferromq_raw_feed;`")
            .0;
        body.split(';')
            .map(|decl| {
                // Drop comments, then read `type name` or `ret (*name)(args)`.
                let mut code = String::new();
                let mut rest = decl;
                while let Some((before, after)) = rest.split_once("/*") {
                    code.push_str(before);
                    rest = after.split_once("*/").map_or("", |(_, a)| a);
                }
                code.push_str(rest);
                code.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .filter(|decl| !decl.is_empty())
            .map(|decl| {
                if let Some((_, pointer)) = decl.split_once("(*") {
                    let name = pointer.split_once(')').expect("a function pointer").0;
                    return (name.to_owned(), size_of::<usize>());
                }
                let (ty, name) = decl.rsplit_once(' ').expect("a field");
                let (ty, name) = match name.strip_prefix('*') {
                    Some(name) => ("void *", name),
                    None => (ty.trim_end_matches(' '), name),
                };
                let ty = if ty.ends_with('*') { "void *" } else { ty };
                let size = match ty {
                    "uint8_t" => 1,
                    "uint32_t" => 4,
                    "uint64_t" | "size_t" => 8,
                    "void *" => size_of::<usize>(),
                    other => panic!("field {name}: type {other} is not known to this test"),
                };
                (name.to_owned(), size)
            })
            .collect()
    }

    fn rust_offset(field: &str) -> usize {
        match field {
            "version" => offset_of!(RawFeed, version),
            "size" => offset_of!(RawFeed, size),
            "engine" => offset_of!(RawFeed, engine),
            "feed" => offset_of!(RawFeed, feed),
            other => panic!("the header's field {other} is not in RawFeed"),
        }
    }

    #[test]
    fn version_and_capsule_name_are_the_headers() {
        assert_eq!(
            define("FERROMQ_RAW_FEED_VERSION"),
            RAW_FEED_VERSION.to_string()
        );
        assert_eq!(
            define("FERROMQ_RAW_FEED_CAPSULE"),
            format!("{:?}", CAPSULE_NAME.to_str().unwrap())
        );
    }

    #[test]
    fn every_field_sits_where_the_header_puts_it() {
        let fields = header_fields();
        let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["version", "size", "engine", "feed"]);
        // C layout: each field at the next multiple of its alignment (its size here).
        let mut offset = 0usize;
        let mut align = 1;
        for (name, size) in &fields {
            offset = offset.next_multiple_of(*size);
            assert_eq!(rust_offset(name), offset, "offset of {name}");
            offset += size;
            align = align.max(*size);
        }
        assert_eq!(size_of::<RawFeed>(), offset.next_multiple_of(align));
        assert_eq!(align_of::<RawFeed>(), align);
    }
}
