//! What the admin API's engine queries return, as frozen classes with typed
//! attributes (`ferromq_core::engine::admin`), and `MessageProperties`, the MQTT
//! 5.0 properties of a message the broker publishes or a retained message shows.
//!
//! One call returns one page (at most 1,000 items), so the objects made here are
//! per request, never per message.

use ferromq_core::codec::{Properties, Property, Utf8Bytes};
use ferromq_core::engine::{Page, RetainedInfo, SessionInfo as CoreSession, SubscriptionInfo};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ADMIN_MAX_PAGE", ferromq_core::engine::MAX_PAGE)?;
    m.add_class::<SessionInfo>()?;
    m.add_class::<SessionPage>()?;
    m.add_class::<Subscription>()?;
    m.add_class::<RetainedMessage>()?;
    m.add_class::<RetainedPage>()?;
    m.add_class::<MessageProperties>()?;
    Ok(())
}

/// A session and, while it has one, its connection (`conn`, `protocol`,
/// `keep_alive`, `connected_at` in engine milliseconds; None offline).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct SessionInfo {
    client_id: String,
    username: Option<String>,
    connected: bool,
    conn: Option<u32>,
    protocol: Option<u8>,
    keep_alive: Option<u16>,
    connected_at: Option<u64>,
    expiry_interval: u32,
    expires_at: Option<u64>,
    client_type: &'static str,
    subscriptions: usize,
    inflight: usize,
    queued: usize,
    queued_bytes: u64,
}

impl From<CoreSession> for SessionInfo {
    fn from(info: CoreSession) -> SessionInfo {
        let connection = info.connection.as_ref();
        SessionInfo {
            connected: connection.is_some(),
            conn: connection.map(|c| c.conn),
            protocol: connection.map(|c| c.protocol),
            keep_alive: connection.map(|c| c.keep_alive),
            connected_at: connection.map(|c| c.connected_at),
            client_id: info.client_id,
            username: info.username,
            expiry_interval: info.expiry_interval,
            expires_at: info.expires_at,
            client_type: info.client_type.name(),
            subscriptions: info.subscriptions,
            inflight: info.inflight,
            queued: info.queued,
            queued_bytes: info.queued_bytes,
        }
    }
}

/// One page of sessions; `next` is the cursor of the following page (None: the end).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct SessionPage {
    items: Py<PyTuple>,
    next: Option<u64>,
}

impl SessionPage {
    pub(crate) fn from_core(py: Python<'_>, page: Page<CoreSession>) -> PyResult<SessionPage> {
        let items = page.items.into_iter().map(SessionInfo::from);
        Ok(SessionPage {
            items: PyTuple::new(py, items)?.unbind(),
            next: page.next,
        })
    }
}

/// A subscription as granted (`subscription_id` None: without one).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Subscription {
    filter: String,
    qos: u8,
    no_local: bool,
    retain_as_published: bool,
    retain_handling: u8,
    subscription_id: Option<u32>,
}

impl From<SubscriptionInfo> for Subscription {
    fn from(info: SubscriptionInfo) -> Subscription {
        Subscription {
            filter: info.filter,
            qos: info.options.qos as u8,
            no_local: info.options.no_local,
            retain_as_published: info.options.retain_as_published,
            retain_handling: info.options.retain_handling as u8,
            subscription_id: (info.subscription_id != 0).then_some(info.subscription_id),
        }
    }
}

/// The MQTT 5.0 properties of an application message: given to `Engine.publish`,
/// shown for a retained message (`message_expiry`: seconds left).
#[pyclass(module = "ferromq._core", frozen, get_all)]
#[derive(Clone, Default)]
pub(crate) struct MessageProperties {
    content_type: Option<String>,
    response_topic: Option<String>,
    correlation_data: Option<Vec<u8>>,
    user_properties: Vec<(String, String)>,
    message_expiry: Option<u32>,
    payload_format_indicator: Option<u8>,
}

#[pymethods]
impl MessageProperties {
    #[new]
    #[pyo3(signature = (*, content_type = None, response_topic = None, correlation_data = None,
        user_properties = Vec::new(), message_expiry = None, payload_format_indicator = None))]
    fn new(
        content_type: Option<String>,
        response_topic: Option<String>,
        correlation_data: Option<Vec<u8>>,
        user_properties: Vec<(String, String)>,
        message_expiry: Option<u32>,
        payload_format_indicator: Option<u8>,
    ) -> PyResult<MessageProperties> {
        if let Some(topic) = &response_topic {
            // A Response Topic is a topic name [MQTT-3.3.2-14].
            ferromq_core::topic::validate_topic_name(topic)
                .map_err(|err| errors::bad_argument(format!("response topic {topic:?}: {err}")))?;
        }
        if payload_format_indicator.is_some_and(|v| v > 1) {
            return Err(errors::bad_argument(
                "payload format indicator must be 0 or 1",
            ));
        }
        Ok(MessageProperties {
            content_type,
            response_topic,
            correlation_data,
            user_properties,
            message_expiry,
            payload_format_indicator,
        })
    }
}

impl MessageProperties {
    /// As the codec holds them; strings that are not MQTT strings (U+0000) refused.
    pub(crate) fn to_core(&self) -> PyResult<Properties> {
        let text = |name: &str, value: &str| {
            Utf8Bytes::try_from(value)
                .map_err(|err| errors::bad_argument(format!("{name} {value:?}: {}", err.detail)))
        };
        let mut items = Vec::new();
        if let Some(v) = self.payload_format_indicator {
            items.push(Property::PayloadFormatIndicator(v));
        }
        if let Some(v) = self.message_expiry {
            items.push(Property::MessageExpiryInterval(v));
        }
        if let Some(v) = &self.content_type {
            items.push(Property::ContentType(text("content type", v)?));
        }
        if let Some(v) = &self.response_topic {
            items.push(Property::ResponseTopic(text("response topic", v)?));
        }
        if let Some(v) = &self.correlation_data {
            items.push(Property::CorrelationData(bytes::Bytes::copy_from_slice(v)));
        }
        for (key, value) in &self.user_properties {
            items.push(Property::UserProperty(
                text("user property", key)?,
                text("user property", value)?,
            ));
        }
        Ok(Properties(items))
    }

    fn from_core(properties: &Properties) -> MessageProperties {
        let mut out = MessageProperties::default();
        for property in properties.iter() {
            match property {
                Property::PayloadFormatIndicator(v) => out.payload_format_indicator = Some(*v),
                Property::MessageExpiryInterval(v) => out.message_expiry = Some(*v),
                Property::ContentType(v) => out.content_type = Some(v.as_str().to_owned()),
                Property::ResponseTopic(v) => out.response_topic = Some(v.as_str().to_owned()),
                Property::CorrelationData(v) => out.correlation_data = Some(v.to_vec()),
                Property::UserProperty(k, v) => out
                    .user_properties
                    .push((k.as_str().to_owned(), v.as_str().to_owned())),
                _ => {}
            }
        }
        out
    }
}

/// A retained message and its properties.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct RetainedMessage {
    topic: String,
    payload: Py<PyBytes>,
    qos: u8,
    properties: Py<MessageProperties>,
}

impl RetainedMessage {
    pub(crate) fn from_core(py: Python<'_>, info: RetainedInfo) -> PyResult<RetainedMessage> {
        Ok(RetainedMessage {
            payload: PyBytes::new(py, &info.payload).unbind(),
            qos: info.qos as u8,
            properties: Py::new(py, MessageProperties::from_core(&info.properties))?,
            topic: info.topic,
        })
    }
}

/// One page of retained messages; `next` is the cursor of the following page.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct RetainedPage {
    items: Py<PyTuple>,
    next: Option<u64>,
}

impl RetainedPage {
    pub(crate) fn from_core(py: Python<'_>, page: Page<RetainedInfo>) -> PyResult<RetainedPage> {
        let items = page
            .items
            .into_iter()
            .map(|info| RetainedMessage::from_core(py, info))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(RetainedPage {
            items: PyTuple::new(py, items)?.unbind(),
            next: page.next,
        })
    }
}
