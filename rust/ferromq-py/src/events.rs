//! Engine events as Python sees them: one frozen class per variant of
//! `ferromq_core::engine::Event`, with the variant's fields as typed attributes.
//!
//! `Engine.take_events` returns a list of these once per flush (events come per
//! connection, per auth step or per journal batch, never per message), and Python
//! dispatches with `match`/`isinstance`. `events_from_core` matches the core enum
//! exhaustively, so a new core variant does not compile until it has a class here;
//! `event_classes` registers them and exports the same list as the union
//! `EngineEvent` (`Authenticate | Auth | ...`, a `types.UnionType` usable with
//! `isinstance`), which a test compares with the stub's `EngineEvent` alias
//! (tests/unit/test_binding_unions.py).

use ferromq_core::engine::Event;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyType};

/// Decide a CONNECT: answer with `Engine.complete_auth` (or `continue_auth` when
/// it carries an Authentication Method), bringing `token` back.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Authenticate {
    conn: u32,
    token: u64,
    client_id: String,
    username: Option<String>,
    password: Option<Py<PyBytes>>,
    protocol: u8,
    clean_start: bool,
    has_will: bool,
    method: Option<String>,
    data: Option<Py<PyBytes>>,
}

/// The client's AUTH in an exchange: 0x18 with its data, or 0x19 when
/// `reauthenticate` (a connected client starts again). Answered like `Authenticate`.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Auth {
    conn: u32,
    token: u64,
    reauthenticate: bool,
    data: Option<Py<PyBytes>>,
}

/// The broker refused or ended a connection: logged once, with the reason code,
/// its specification name and what was wrong.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Rejected {
    conn: u32,
    reason_code: u8,
    reason_name: &'static str,
    detail: &'static str,
}

/// Close the transport once its pending output is written (handled in `IOHub`).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Close {
    conn: u32,
}

/// The journal has records: take them (`Engine.take_journal`) and store them.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct Persist;

/// A member of an application group came online for it or stopped.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ApplicationMember {
    client: String,
    share_filter: String,
    online: bool,
}

/// Streamed deliveries were done with: take their tokens (`Engine.take_application_done`).
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct ApplicationDone;

/// The `[stream]` export has records: take them (`Engine.take_stream`) and hand
/// the batch to the sink. Once per batch.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct StreamReady;

/// Plugins have messages: take them (`Engine.take_plugin_batch`). Once per batch.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct PluginReady;

/// The connection's input is no longer held: read its transport again (handled in
/// `IOHub`; the raw feed said when to stop).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ResumeReading {
    conn: u32,
}

/// Call `Engine.wake` at engine time `at` (milliseconds; handled in `IOHub`).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Wake {
    at: u64,
}

/// A CONNECT was accepted (only while the engine reports client events): logged
/// with the peer and listener the IO layer knows.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ClientConnected {
    conn: u32,
    client_id: String,
    username: Option<String>,
    protocol: u8,
    keep_alive: u16,
    clean_start: bool,
    session_expiry: u32,
    session_present: bool,
}

/// A connected client's connection ended: `reason` is `client_disconnect`,
/// `keep_alive_timeout`, `protocol_error`, `taken_over`, `server_shutdown`,
/// `socket_closed` or `kicked`, with the reason code that goes with it, if any.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ClientDisconnected {
    conn: u32,
    client_id: String,
    reason: &'static str,
    reason_code: Option<u8>,
    reason_name: Option<&'static str>,
}

/// A SUBSCRIBE was answered: `(filter, QoS asked for, SUBACK code)` per filter.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Subscribed {
    conn: u32,
    client_id: String,
    filters: Vec<(String, u8, u8)>,
}

/// An UNSUBSCRIBE was answered.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct Unsubscribed {
    conn: u32,
    client_id: String,
    filters: Vec<String>,
}

/// A packet read from (`inbound`) or written to a traced client (`Engine.trace`),
/// summarised: `packet_type` is the lower-case packet name; the payload preview is
/// its first bytes.
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct PacketTrace {
    conn: u32,
    client_id: String,
    inbound: bool,
    packet_type: &'static str,
    packet_id: Option<u16>,
    topic: Option<String>,
    filters: Vec<String>,
    qos: Option<u8>,
    reason_codes: Vec<u8>,
    payload_size: Option<usize>,
    payload_preview: Option<Py<PyBytes>>,
}

/// A client's PUBLISH failed a `[[validation.rules]]` schema: logged, at most once a
/// second per rule (`unlogged` failures of the rule since the last one logged).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct PayloadInvalid {
    client_id: String,
    topic: String,
    rule: usize,
    filter: String,
    problem: String,
    action: &'static str,
    unlogged: u64,
}

/// Every event class, in the stub's `EngineEvent` order.
fn event_classes(py: Python<'_>) -> [Bound<'_, PyType>; 17] {
    [
        py.get_type::<Authenticate>(),
        py.get_type::<Auth>(),
        py.get_type::<Rejected>(),
        py.get_type::<Close>(),
        py.get_type::<Persist>(),
        py.get_type::<ApplicationMember>(),
        py.get_type::<ApplicationDone>(),
        py.get_type::<StreamReady>(),
        py.get_type::<PluginReady>(),
        py.get_type::<ResumeReading>(),
        py.get_type::<Wake>(),
        py.get_type::<ClientConnected>(),
        py.get_type::<ClientDisconnected>(),
        py.get_type::<Subscribed>(),
        py.get_type::<Unsubscribed>(),
        py.get_type::<PacketTrace>(),
        py.get_type::<PayloadInvalid>(),
    ]
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::add_union(m, "EngineEvent", event_classes(m.py()))
}

fn bytes(py: Python<'_>, value: Option<Vec<u8>>) -> Option<Py<PyBytes>> {
    value.map(|v| PyBytes::new(py, &v).unbind())
}

/// The engine's events as a list of event objects.
pub(crate) fn events_from_core(
    py: Python<'_>,
    events: impl IntoIterator<Item = Event>,
) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for event in events {
        let item = match event {
            Event::Authenticate {
                conn,
                token,
                client_id,
                username,
                password,
                protocol,
                clean_start,
                has_will,
                method,
                data,
            } => Authenticate {
                conn,
                token,
                client_id,
                username,
                password: bytes(py, password),
                protocol,
                clean_start,
                has_will,
                method,
                data: bytes(py, data),
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Auth {
                conn,
                token,
                reauthenticate,
                data,
            } => Auth {
                conn,
                token,
                reauthenticate,
                data: bytes(py, data),
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Rejected {
                conn,
                reason,
                detail,
            } => Rejected {
                conn,
                reason_code: reason as u8,
                reason_name: reason.name(),
                detail,
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Close { conn } => Close { conn }.into_pyobject(py)?.into_any(),
            Event::Persist => Persist.into_pyobject(py)?.into_any(),
            Event::ApplicationMember {
                client,
                share_filter,
                online,
            } => ApplicationMember {
                client,
                share_filter,
                online,
            }
            .into_pyobject(py)?
            .into_any(),
            Event::ApplicationDone => ApplicationDone.into_pyobject(py)?.into_any(),
            Event::StreamReady => StreamReady.into_pyobject(py)?.into_any(),
            Event::PluginReady => PluginReady.into_pyobject(py)?.into_any(),
            Event::ResumeReading { conn } => ResumeReading { conn }.into_pyobject(py)?.into_any(),
            Event::Wake { at } => Wake { at }.into_pyobject(py)?.into_any(),
            Event::ClientConnected {
                conn,
                client_id,
                username,
                protocol,
                keep_alive,
                clean_start,
                session_expiry,
                session_present,
            } => ClientConnected {
                conn,
                client_id,
                username,
                protocol,
                keep_alive,
                clean_start,
                session_expiry,
                session_present,
            }
            .into_pyobject(py)?
            .into_any(),
            Event::ClientDisconnected {
                conn,
                client_id,
                reason,
            } => ClientDisconnected {
                conn,
                client_id,
                reason: reason.name(),
                reason_code: reason.code().map(|code| code as u8),
                reason_name: reason.code_name(),
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Subscribed {
                conn,
                client_id,
                filters,
            } => Subscribed {
                conn,
                client_id,
                filters: filters
                    .into_iter()
                    .map(|(filter, qos, reason)| (filter, qos, reason as u8))
                    .collect(),
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Unsubscribed {
                conn,
                client_id,
                filters,
            } => Unsubscribed {
                conn,
                client_id,
                filters,
            }
            .into_pyobject(py)?
            .into_any(),
            Event::Trace {
                conn,
                client_id,
                inbound,
                packet,
            } => PacketTrace {
                conn,
                client_id,
                inbound,
                packet_type: packet.packet_type.name(),
                packet_id: packet.packet_id,
                topic: packet.topic,
                filters: packet.filters,
                qos: packet.qos,
                reason_codes: packet.reason_codes,
                payload_size: packet.payload_size,
                payload_preview: packet
                    .payload_preview
                    .map(|b| PyBytes::new(py, &b).unbind()),
            }
            .into_pyobject(py)?
            .into_any(),
            Event::PayloadInvalid {
                client_id,
                topic,
                rule,
                filter,
                problem,
                action,
                unlogged,
            } => PayloadInvalid {
                client_id,
                topic,
                rule,
                filter,
                problem,
                action,
                unlogged,
            }
            .into_pyobject(py)?
            .into_any(),
        };
        list.append(item)?;
    }
    Ok(list)
}
