//! `RestoreReport`: what `Engine.restore` read back, as one frozen object with typed
//! attributes. The core's report is destructured field by field, so a field added in
//! `ferromq-core` does not compile here until Python can see it (and the stub, which
//! stubtest checks, says its type).

use ferromq_core::engine::RestoreReport as CoreReport;
use pyo3::prelude::*;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RestoreReport>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct RestoreReport {
    records: usize,
    sessions: usize,
    messages: usize,
    retained: usize,
    /// Bytes of whole records read; a torn tail starts here.
    valid_len: usize,
    /// Why reading stopped before the end, or None.
    error: Option<&'static str>,
}

impl From<CoreReport> for RestoreReport {
    fn from(report: CoreReport) -> RestoreReport {
        let CoreReport {
            records,
            sessions,
            messages,
            retained,
            valid_len,
            error,
        } = report;
        RestoreReport {
            records,
            sessions,
            messages,
            retained,
            valid_len,
            error: error.map(|e| e.0),
        }
    }
}
