//! `ValidationRule`: one `[[validation.rules]]` entry compiled by the core
//! (`ferromq_core::engine::ValidationRule` over `ferromq_core::schema`). Python reads
//! the config and the schema file (`ferromq.validation`); the constructor raises
//! `ValueError` (one line naming the part: `filter`, `schema`) for a bad one.

use ferromq_core::engine::{OnInvalid, ValidationRule as CoreValidationRule};
use ferromq_core::schema::{AvroSchema, JsonSchema, PayloadSchema};
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ValidationRule>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct ValidationRule {
    pub(crate) rule: CoreValidationRule,
}

#[pymethods]
impl ValidationRule {
    /// `format`: "json" (a JSON Schema) or "avro" (an Avro schema); `on_failure`:
    /// "drop", "reject" or "disconnect"; `schema`: the schema document's text.
    #[new]
    fn new(filter: &str, format: &str, schema: &str, on_failure: &str) -> PyResult<ValidationRule> {
        let schema = match format {
            "json" => JsonSchema::compile(schema).map(PayloadSchema::Json),
            "avro" => AvroSchema::compile(schema).map(PayloadSchema::Avro),
            other => Err(format!("expected \"json\" or \"avro\", got {other:?}")),
        }
        .map_err(|e| errors::bad_argument(format!("schema: {e}")))?;
        let on_invalid = match on_failure {
            "drop" => OnInvalid::Drop,
            "reject" => OnInvalid::Reject,
            "disconnect" => OnInvalid::Disconnect,
            other => {
                return Err(errors::bad_argument(format!(
                    "on_failure: expected \"drop\", \"reject\" or \"disconnect\", got {other:?}"
                )))
            }
        };
        let rule =
            CoreValidationRule::new(filter, schema, on_invalid).map_err(errors::bad_argument)?;
        Ok(ValidationRule { rule })
    }
}
