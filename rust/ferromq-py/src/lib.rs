//! `ferromq._core`: the thin pyo3 face of `ferromq-core` (and of the load generator
//! `ferromq-bench`).
//!
//! Each file registers one area of the core; `errors` maps every Rust error to a
//! Python exception in one place. Nothing here holds protocol logic: it converts at
//! the boundary, once per batch (or, for the admin API, once per page) where the
//! API allows it.

use pyo3::prelude::*;
use pyo3::types::PyType;

mod acl;
mod admin;
mod bench;
mod bridge;
mod buffer;
mod bus;
mod cluster;
mod codec;
mod engine;
mod errors;
mod events;
mod journal;
mod logfmt;
mod node_counters;
mod plugins;
mod proxy;
mod raw_feed;
mod redis;
mod restore_report;
mod rewrite;
mod settings;
mod shard_owner;
mod shared_memory;
mod sockets;
mod split;
mod stats;
mod stream;
mod stream_kafka;
mod topic;
mod validation;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    codec::register(m)?;
    bench::register(m)?;
    settings::register(m)?;
    engine::register(m)?;
    stats::register(m)?;
    bus::register(m)?;
    cluster::register(m)?;
    node_counters::register(m)?;
    shard_owner::register(m)?;
    acl::register(m)?;
    rewrite::register(m)?;
    bridge::register(m)?;
    plugins::register(m)?;
    validation::register(m)?;
    admin::register(m)?;
    events::register(m)?;
    restore_report::register(m)?;
    topic::register(m)?;
    journal::register(m)?;
    logfmt::register(m)?;
    redis::register(m)?;
    split::register(m)?;
    stream::register(m)?;
    stream_kafka::register(m)?;
    proxy::register(m)?;
    sockets::register(m)?;
    Ok(())
}

/// Register `classes` and the union of them as `name` (`A | B | ...`, a
/// `types.UnionType`): the runtime twin of a stub alias, which
/// tests/unit/test_binding_unions.py compares with the stub.
fn add_union<'py, const N: usize>(
    m: &Bound<'py, PyModule>,
    name: &str,
    classes: [Bound<'py, PyType>; N],
) -> PyResult<()> {
    let mut union: Option<Bound<'py, PyAny>> = None;
    for class in classes {
        m.add(class.name()?, &class)?;
        union = Some(match union {
            None => class.into_any(),
            Some(union) => union.bitor(class)?,
        });
    }
    match union {
        Some(union) => m.add(name, union),
        None => Ok(()),
    }
}
