//! `run_bench`: the load generator of `ferromq-bench`, for `ferromq bench`.
//!
//! One call runs a whole benchmark: JSON config in, JSON report out. The run happens
//! in the generator's own threads with the GIL released, so Python threads (a broker
//! under test in the same process, a progress UI) keep running meanwhile.

use pyo3::prelude::*;

use crate::errors;

/// Run one benchmark described by `config_json`; return the report as JSON.
#[pyfunction]
fn run_bench(py: Python<'_>, config_json: &str) -> PyResult<String> {
    py.detach(|| ferromq_bench::run_json(config_json))
        .map_err(|err| errors::bench_error(&err))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_bench, m)?)?;
    Ok(())
}
