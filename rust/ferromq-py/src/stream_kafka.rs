//! The Kafka sink's compiled half (`ferromq.stream.kafka_sink`): the records of stream
//! batches as Kafka record batches, one call per send (never per record).
//!
//! `kafka_record_batches(batches, kind, partitions, max_batch_bytes, schema_id)` takes every
//! `StreamBatch` the sink gathered since its last send, so one produce request carries
//! them all: Kafka takes one record batch per partition per request, and a sink that
//! sent each loop tick's batch on its own would send one tick per round trip. It
//! returns `[(partition, batch_bytes)]` by ascending partition, records in stream order
//! within a partition (`ferromq_core::export::kafka::partition_batches`). With a
//! `schema_id` (the id a schema registry gave `record-v1`, `[stream.kafka] registry`)
//! every value is in the Confluent wire format: magic byte 0, the id, the Avro body.

use std::num::NonZeroU32;

use ferromq_core::export::kafka::{partition_batches, ValueFormat};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;
use crate::stream::{StreamBatch, StreamKind};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kafka_record_batches, m)?)?;
    Ok(())
}

/// The `kind` records of `batches`, in order, as Kafka record batches by partition;
/// values framed for a schema registry when `schema_id` is given.
#[pyfunction]
#[pyo3(signature = (batches, kind, partitions, max_batch_bytes = 1_000_000, schema_id = None))]
fn kafka_record_batches<'py>(
    py: Python<'py>,
    batches: Vec<PyRef<'py, StreamBatch>>,
    kind: &str,
    partitions: u32,
    max_batch_bytes: usize,
    schema_id: Option<u32>,
) -> PyResult<Vec<(u32, Bound<'py, PyBytes>)>> {
    let partitions = NonZeroU32::new(partitions)
        .ok_or_else(|| errors::bad_argument("partitions: must be at least 1"))?;
    let kind = StreamKind::parse(kind)?;
    let format = schema_id.map_or(ValueFormat::Plain, |schema_id| ValueFormat::Confluent {
        schema_id,
    });
    let records = batches.iter().flat_map(|batch| batch.records(kind).iter());
    Ok(
        partition_batches(records, partitions, max_batch_bytes, format)
            .into_iter()
            .map(|batch| (batch.partition, PyBytes::new(py, &batch.bytes)))
            .collect(),
    )
}
