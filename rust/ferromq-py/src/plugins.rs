//! Plugins as the engine sees them (`ferromq_core::engine::plugins`): a plugin's
//! filters (`PluginFilters`, whose constructor raises `ValueError` naming a filter
//! that is not one), the messages handed to Python in batches (`PluginMessage`, a
//! frozen class per message of a batch) and the verdicts coming back as plain
//! tuples (`verdict_of`), so a batch crosses the binding in one call each way.

use ferromq_core::codec::ReasonCode;
use ferromq_core::engine::{
    PluginFilters as CorePluginFilters, PluginMessage as CorePluginMessage, Verdict,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PluginFilters>()?;
    m.add_class::<PluginMessage>()?;
    Ok(())
}

/// A plugin's topic filters and whether its messages wait for its verdict.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct PluginFilters {
    pub(crate) filters: CorePluginFilters,
}

#[pymethods]
impl PluginFilters {
    #[new]
    fn new(filters: Vec<String>, intercepts: bool) -> PyResult<Self> {
        let filters = CorePluginFilters::new(&filters, intercepts).map_err(errors::bad_argument)?;
        Ok(PluginFilters { filters })
    }
}

/// One message of a plugin batch: `intercepted` ones wait for a verdict on `id`.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct PluginMessage {
    id: u64,
    plugin: usize,
    intercepted: bool,
    client_id: String,
    username: Option<String>,
    topic: String,
    payload: Py<PyBytes>,
    qos: u8,
    retain: bool,
}

impl PluginMessage {
    pub(crate) fn new(py: Python<'_>, m: CorePluginMessage) -> PyResult<Self> {
        Ok(PluginMessage {
            id: m.id,
            plugin: m.plugin,
            intercepted: m.intercepted,
            client_id: m.client_id,
            username: m.username,
            topic: m.topic,
            payload: PyBytes::new(py, &m.payload).unbind(),
            qos: m.qos,
            retain: m.retain,
        })
    }
}

/// `(id, verdict, topic, payload, reason_code)` as `Engine.decide` takes it.
pub(crate) type VerdictTuple = (u64, String, Option<String>, Option<Vec<u8>>, u8);

/// One verdict tuple as the core's `Verdict`; `ValueError` names what is wrong.
pub(crate) fn verdict_of(
    (id, verdict, topic, payload, reason_code): VerdictTuple,
) -> PyResult<(u64, Verdict)> {
    let verdict = match verdict.as_str() {
        "pass" => Verdict::Pass,
        "drop" => Verdict::Drop,
        "rewrite" => {
            if let Some(topic) = &topic {
                ferromq_core::topic::validate_topic_name(topic).map_err(|e| {
                    errors::bad_argument(format!("rewrite topic {topic:?}: {}", e.as_str()))
                })?;
            }
            Verdict::Rewrite {
                topic,
                payload: payload.map(Into::into),
            }
        }
        "reject" => match ReasonCode::from_u8(reason_code) {
            Some(reason) if reason_code >= 0x80 => Verdict::Reject(reason),
            _ => {
                return Err(errors::bad_argument(format!(
                    "reject reason code 0x{reason_code:02X} is not an error reason code"
                )))
            }
        },
        other => {
            return Err(errors::bad_argument(format!(
                "verdict {other:?} is not pass, rewrite, drop or reject"
            )))
        }
    };
    Ok((id, verdict))
}
