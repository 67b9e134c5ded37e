//! `RestoreReport`: what `Engine.restore` read back, as one frozen object with typed
//! attributes, and `DamagedRange`, one stretch of stored bytes recovery skipped. The
//! core's report is destructured field by field, so a field added in `ferromq-core`
//! does not compile here until Python can see it (and the stub, which stubtest
//! checks, says its type).

use ferromq_core::durability::Damage;
use ferromq_core::engine::RestoreReport as CoreReport;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RestoreReport>()?;
    m.add_class::<DamagedRange>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct RestoreReport {
    records: usize,
    sessions: usize,
    messages: usize,
    retained: usize,
    /// Bytes up to the end of the last whole record; a torn tail starts here.
    valid_len: usize,
    /// Why reading ended before the end (a torn tail, an unknown format version).
    error: Option<&'static str>,
    /// The damaged ranges skipped, in file order: a tuple of `DamagedRange`.
    damaged: Py<PyTuple>,
}

/// Stored bytes recovery skipped (`length` bytes at `offset`), and why; the intact
/// records after them were kept.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct DamagedRange {
    offset: usize,
    length: usize,
    error: &'static str,
}

impl RestoreReport {
    pub(crate) fn from_core(py: Python<'_>, report: CoreReport) -> PyResult<RestoreReport> {
        let CoreReport {
            records,
            sessions,
            messages,
            retained,
            valid_len,
            error,
            damaged,
        } = report;
        let damaged = damaged
            .into_iter()
            .map(|Damage { offset, len, error }| DamagedRange {
                offset,
                length: len,
                error: error.0,
            });
        Ok(RestoreReport {
            records,
            sessions,
            messages,
            retained,
            valid_len,
            error: error.map(|e| e.0),
            damaged: PyTuple::new(py, damaged)?.unbind(),
        })
    }
}
