//! The `[stream]` export's Python face: the engine's batches (`StreamBatch`) and the
//! Avro object container framing the file sink writes around them.
//!
//! A batch stays in Rust: Python reads its counts and asks for one container block
//! per kind (`avro_block`), built in one pass over the records; the Kafka sink's
//! binding reads the records themselves (`StreamBatch::records`). Nothing here
//! makes a Python object per record.

use ferromq_core::export::avro::{container_block, container_header, SYNC_LEN};
use ferromq_core::export::{ExportBatch, RecordList};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StreamBatch>()?;
    m.add_function(wrap_pyfunction!(avro_container_header, m)?)?;
    Ok(())
}

/// Which of a batch's two record lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Messages,
    Events,
}

impl StreamKind {
    pub(crate) fn parse(kind: &str) -> PyResult<StreamKind> {
        match kind {
            "messages" => Ok(StreamKind::Messages),
            "events" => Ok(StreamKind::Events),
            other => Err(errors::bad_argument(format!(
                "kind: expected \"messages\" or \"events\", got {other:?}"
            ))),
        }
    }
}

/// One batch of the stream, as `Engine.take_stream` returns it.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct StreamBatch {
    batch: ExportBatch,
}

impl StreamBatch {
    pub(crate) fn new(batch: ExportBatch) -> StreamBatch {
        StreamBatch { batch }
    }

    /// The records of `kind`, for a sink's own encoding (the Kafka record batches).
    pub(crate) fn records(&self, kind: StreamKind) -> &RecordList {
        match kind {
            StreamKind::Messages => &self.batch.messages,
            StreamKind::Events => &self.batch.events,
        }
    }
}

#[pymethods]
impl StreamBatch {
    /// The batch's number; `Engine.stream_done(number)` reports it stored.
    #[getter]
    fn number(&self) -> u64 {
        self.batch.number
    }

    #[getter]
    fn message_count(&self) -> usize {
        self.batch.messages.len()
    }

    #[getter]
    fn event_count(&self) -> usize {
        self.batch.events.len()
    }

    /// Bytes of the records of both kinds (their Avro values).
    #[getter]
    fn value_bytes(&self) -> usize {
        self.batch.messages.value_bytes() + self.batch.events.value_bytes()
    }

    /// One object container data block holding every record of `kind` (record
    /// count, byte size, the values, `sync`); empty bytes when it has none.
    fn avro_block<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        sync: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let sync = sync_marker(sync)?;
        let block = container_block(self.records(StreamKind::parse(kind)?), &sync);
        Ok(PyBytes::new(py, &block))
    }

    fn __repr__(&self) -> String {
        format!(
            "StreamBatch(number={}, message_count={}, event_count={})",
            self.batch.number,
            self.batch.messages.len(),
            self.batch.events.len()
        )
    }
}

fn sync_marker(sync: &[u8]) -> PyResult<[u8; SYNC_LEN]> {
    sync.try_into().map_err(|_| {
        errors::bad_argument(format!(
            "sync: expected {SYNC_LEN} bytes, got {}",
            sync.len()
        ))
    })
}

/// The header of an Avro object container file of stream records: magic, the
/// metadata (`avro.schema` = record-v1.avsc, `avro.codec` = null), `sync`.
#[pyfunction]
fn avro_container_header<'py>(py: Python<'py>, sync: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let sync = sync_marker(sync)?;
    Ok(PyBytes::new(py, &container_header(&sync)))
}
