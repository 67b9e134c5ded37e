//! `ferromq._core`: the thin pyo3 face of `ferromq-core` (and of the load generator
//! `ferromq-bench`).
//!
//! Each file registers one area of the core; `errors` maps every Rust error to a
//! Python exception in one place. Nothing here holds protocol logic: it converts at
//! the boundary, once per batch where the API allows it.

use pyo3::prelude::*;

mod bench;
mod buffer;
mod codec;
mod engine;
mod errors;
mod events;
mod raw_feed;
mod redis;
mod restore_report;
mod settings;
mod split;
mod topic;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    codec::register(m)?;
    bench::register(m)?;
    settings::register(m)?;
    engine::register(m)?;
    events::register(m)?;
    restore_report::register(m)?;
    topic::register(m)?;
    redis::register(m)?;
    split::register(m)?;
    Ok(())
}
