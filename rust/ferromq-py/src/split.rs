//! `JournalSplitter`: the journal split between the primary store and the
//! application (Kafka) store, once per batch in Rust (`engine/split.rs`).
//!
//! `split` returns the primary store's bytes and the application store's
//! operations, one frozen object each (`ApplicationEnqueue`, `ApplicationAck`,
//! `ApplicationEnd`; the runtime union `ApplicationOp`, checked against the stub like
//! the engine's events). Device traffic never becomes a Python object.

use bytes::Bytes;
use ferromq_core::engine::{ApplicationOp, JournalSplit};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<JournalSplitter>()?;
    let py = m.py();
    crate::add_union(
        m,
        "ApplicationOp",
        [
            py.get_type::<ApplicationEnqueue>(),
            py.get_type::<ApplicationAck>(),
            py.get_type::<ApplicationEnd>(),
        ],
    )
}

/// Store this delivery for `client`: `record` is its Message and Enqueue records.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ApplicationEnqueue {
    client: String,
    packet_id: u16,
    record: Py<PyBytes>,
}

/// `client` acknowledged (or completed) the delivery with `packet_id`.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ApplicationAck {
    client: String,
    packet_id: u16,
}

/// `client`'s session ended: what is stored for it goes.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ApplicationEnd {
    client: String,
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
            .map_err(errors::journal_error)?;
        let ops = PyList::empty(py);
        for op in split.application {
            let item = match op {
                ApplicationOp::Enqueue {
                    client,
                    packet_id,
                    value,
                } => ApplicationEnqueue {
                    client,
                    packet_id,
                    record: PyBytes::new(py, &value).unbind(),
                }
                .into_pyobject(py)?
                .into_any(),
                ApplicationOp::Ack { client, packet_id } => ApplicationAck { client, packet_id }
                    .into_pyobject(py)?
                    .into_any(),
                ApplicationOp::End { client } => {
                    ApplicationEnd { client }.into_pyobject(py)?.into_any()
                }
            };
            ops.append(item)?;
        }
        Ok((PyBytes::new(py, &split.primary), ops))
    }

    /// Learn the application clients, and the deliveries the primary store holds,
    /// from what it loaded.
    fn observe(&mut self, data: &[u8]) {
        self.inner.observe(&Bytes::copy_from_slice(data));
    }

    /// Learn the deliveries the application store holds from what it loaded.
    fn observe_application(&mut self, data: &[u8]) {
        self.inner
            .observe_application(&Bytes::copy_from_slice(data));
    }

    /// The application store has the last split's deliveries: the next split drops
    /// them from the primary store.
    fn application_stored(&mut self) {
        self.inner.application_stored();
    }

    /// The application clients known now, sorted.
    fn application_clients(&self) -> Vec<String> {
        self.inner.application_clients()
    }

    /// The part of a snapshot (the engine's whole state) the primary store keeps:
    /// everything but the application deliveries the application store has.
    fn primary_part<'py>(&self, py: Python<'py>, snapshot: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let primary = self
            .inner
            .primary_part(&Bytes::copy_from_slice(snapshot))
            .map_err(errors::journal_error)?;
        Ok(PyBytes::new(py, &primary))
    }
}
