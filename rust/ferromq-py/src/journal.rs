//! The stored journal format (`durability/log.rs`, "Stored log format") for the
//! embedded store: the header that starts each file, the version a file's header
//! names, and a batch turned into checksummed records — in Rust, once per batch.

use ferromq_core::durability::{log_header, log_records, log_version, LOG_VERSION};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::journal_error;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("JOURNAL_FORMAT_VERSION", LOG_VERSION)?;
    m.add_function(wrap_pyfunction!(journal_header, m)?)?;
    m.add_function(wrap_pyfunction!(journal_format_version, m)?)?;
    m.add_function(wrap_pyfunction!(journal_log_records, m)?)?;
    Ok(())
}

/// The header every stored journal file starts with (magic and format version);
/// version 0 switches a reader back to batch framing.
#[pyfunction]
#[pyo3(signature = (version = LOG_VERSION))]
fn journal_header(py: Python<'_>, version: u16) -> Bound<'_, PyBytes> {
    PyBytes::new(py, &log_header(version))
}

/// The format version of a stored file from its first bytes; 0 without a header
/// (the format before headers).
#[pyfunction]
fn journal_format_version(head: &[u8]) -> u16 {
    log_version(head)
}

/// A journal batch framed for the stored log: each record with its CRC32C. Runs
/// without the GIL (the store calls it from its IO thread).
#[pyfunction]
fn journal_log_records<'py>(py: Python<'py>, batch: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let framed = py.detach(|| log_records(batch)).map_err(journal_error)?;
    Ok(PyBytes::new(py, &framed))
}
