//! `JournalSplitter`: the journal split between the primary store and the
//! application (Kafka) store, once per batch in Rust (`engine/split.rs`).
//!
//! `split` returns the primary store's bytes and the application store's
//! operations as tuples `(op, client, packet_id, value)`: `("enqueue", client,
//! packet id, record bytes)`, `("ack", client, packet id, None)`, `("end", client,
//! 0, None)`. Device traffic never becomes a Python object.

use bytes::Bytes;
use ferromq_core::engine::{ApplicationOp, JournalSplit};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<JournalSplitter>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct JournalSplitter {
    inner: JournalSplit,
}

#[pymethods]
impl JournalSplitter {
    #[new]
    fn new() -> JournalSplitter {
        JournalSplitter {
            inner: JournalSplit::new(),
        }
    }

    /// Split one batch: `(primary bytes, application operations)`. Raises
    /// ValueError for bytes that are not whole journal records.
    fn split<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyList>)> {
        let split = self
            .inner
            .split(&Bytes::copy_from_slice(data))
            .map_err(|e| errors::journal_error(&e))?;
        let ops = PyList::empty(py);
        for op in split.application {
            let item = match op {
                ApplicationOp::Enqueue {
                    client,
                    packet_id,
                    value,
                } => PyTuple::new(
                    py,
                    [
                        "enqueue".into_pyobject(py)?.into_any(),
                        client.into_pyobject(py)?.into_any(),
                        packet_id.into_pyobject(py)?.into_any(),
                        PyBytes::new(py, &value).into_any(),
                    ],
                )?,
                ApplicationOp::Ack { client, packet_id } => PyTuple::new(
                    py,
                    [
                        "ack".into_pyobject(py)?.into_any(),
                        client.into_pyobject(py)?.into_any(),
                        packet_id.into_pyobject(py)?.into_any(),
                        py.None().into_bound(py),
                    ],
                )?,
                ApplicationOp::End { client } => PyTuple::new(
                    py,
                    [
                        "end".into_pyobject(py)?.into_any(),
                        client.into_pyobject(py)?.into_any(),
                        0u16.into_pyobject(py)?.into_any(),
                        py.None().into_bound(py),
                    ],
                )?,
            };
            ops.append(item)?;
        }
        Ok((PyBytes::new(py, &split.primary), ops))
    }

    /// Learn the application clients from what the primary store loaded.
    fn observe(&mut self, data: &[u8]) {
        self.inner.observe(&Bytes::copy_from_slice(data));
    }

    /// The application clients known now, sorted.
    fn application_clients(&self) -> Vec<String> {
        self.inner.application_clients()
    }

    /// The part of a snapshot (the engine's whole state) the primary store keeps.
    #[staticmethod]
    fn primary_part<'py>(py: Python<'py>, snapshot: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let primary = JournalSplit::primary_part(&Bytes::copy_from_slice(snapshot))
            .map_err(|e| errors::journal_error(&e))?;
        Ok(PyBytes::new(py, &primary))
    }
}
