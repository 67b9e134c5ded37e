//! `BridgeLink`: what Python tells the engine about a `[[bridges]]` connection it
//! dialled (`ferromq_core::engine::BridgeLink`): the session's client id, the
//! protocol version, the topics each way as (pattern, qos, local prefix, remote
//! prefix), the keep alive and the queue bound. The constructor raises `ValueError`
//! (one line naming the topic) for a filter that is not one.

use ferromq_core::codec::{ProtocolVersion, QoS};
use ferromq_core::engine::{BridgeLink as CoreBridgeLink, BridgeTopic};
use ferromq_core::topic::validate_topic_filter;
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BridgeLink>()?;
    Ok(())
}

type TopicTuple = (String, u8, String, String);

#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct BridgeLink {
    pub(crate) link: CoreBridgeLink,
}

fn topics(list: Vec<TopicTuple>) -> PyResult<Vec<BridgeTopic>> {
    list.into_iter()
        .map(|(pattern, qos, local_prefix, remote_prefix)| {
            let topic = BridgeTopic {
                qos: QoS::from_u8(qos)
                    .ok_or_else(|| errors::bad_argument(format!("qos {qos} is not 0, 1 or 2")))?,
                pattern,
                local_prefix,
                remote_prefix,
            };
            for filter in [topic.local_filter(), topic.remote_filter()] {
                validate_topic_filter(&filter).map_err(|e| {
                    errors::bad_argument(format!("{filter:?} is no topic filter: {}", e.as_str()))
                })?;
            }
            Ok(topic)
        })
        .collect()
}

#[pymethods]
impl BridgeLink {
    #[new]
    fn new(
        client_id: String,
        version: u8,
        out: Vec<TopicTuple>,
        inbound: Vec<TopicTuple>,
        keep_alive: u16,
        max_queued_bytes: u64,
    ) -> PyResult<BridgeLink> {
        let version = match version {
            4 => ProtocolVersion::V3_1_1,
            5 => ProtocolVersion::V5,
            other => {
                return Err(errors::bad_argument(format!(
                    "version {other} is not 4 or 5"
                )))
            }
        };
        Ok(BridgeLink {
            link: CoreBridgeLink {
                client_id,
                version,
                out: topics(out)?,
                inbound: topics(inbound)?,
                keep_alive,
                max_queued_bytes,
            },
        })
    }

    #[getter]
    fn client_id(&self) -> &str {
        &self.link.client_id
    }

    #[getter]
    fn version(&self) -> u8 {
        self.link.version.level()
    }
}
