//! The one place where Rust errors become Python exceptions.
//!
//! `CodecError(ValueError)` carries `reason_code` (the MQTT reason code the broker
//! answers with) and `detail`; each classified decode error has its own subclass so
//! callers can `except MalformedPacket`. `BenchError(RuntimeError)` is a benchmark run
//! that could not be carried out. An admin action on a client (`Engine.kick`, ...)
//! raises `UnknownClient(LookupError)` for a client id without a session,
//! `SessionConflict(RuntimeError)` to delete a connected one or to subscribe one
//! past its subscription quota, and
//! `NotAuthorized(PermissionError)` for a subscription the ACL denies.
//! `FrameVersionError(ValueError)` is a frame from another shard or node in a format
//! version this build does not read. Everything else is a `ValueError` (an argument or a
//! setting out of its range, an unknown name, bytes a store cannot read) or an
//! `IndexError`, made by the functions below. The binding's other files raise nothing
//! themselves: `clippy.toml` disallows `new_err` outside this file.

#![allow(clippy::disallowed_methods)] // the one file allowed to make exceptions

use std::fmt::Display;

use ferromq_bench::BenchError as CoreBenchError;
use ferromq_core::choice::UnknownName;
use ferromq_core::codec::{DecodeError, EncodeError as CoreEncodeError, ReasonCode};
use ferromq_core::durability::{FrameVersionError as CoreFrameVersionError, JournalError};
use ferromq_core::engine::{AdminError, StreamSettingError};
use ferromq_core::topic::IndexError;
use ferromq_core::transport::proxy::ProxyError;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyIndexError, PyLookupError, PyMemoryError, PyPermissionError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

create_exception!(
    _core,
    CodecError,
    PyValueError,
    "A packet could not be decoded."
);
create_exception!(_core, MalformedPacket, CodecError, "Reason code 0x81.");
create_exception!(_core, ProtocolError, CodecError, "Reason code 0x82.");
create_exception!(
    _core,
    UnsupportedProtocolVersion,
    CodecError,
    "Reason code 0x84."
);
create_exception!(_core, TopicFilterInvalid, CodecError, "Reason code 0x8F.");
create_exception!(_core, TopicNameInvalid, CodecError, "Reason code 0x90.");
create_exception!(_core, PacketTooLarge, CodecError, "Reason code 0x95.");
create_exception!(
    _core,
    EncodeError,
    PyValueError,
    "A packet could not be encoded."
);
create_exception!(
    _core,
    FrameVersionError,
    PyValueError,
    "A frame from another process (shard or node) in a format version this build does not read."
);
create_exception!(
    _core,
    BenchError,
    PyRuntimeError,
    "A benchmark run could not be carried out."
);
create_exception!(
    _core,
    UnknownClient,
    PyLookupError,
    "No session has this client id."
);
create_exception!(
    _core,
    SessionConflict,
    PyRuntimeError,
    "The session's state forbids it: connected, or at its subscription quota."
);
create_exception!(
    _core,
    NotAuthorized,
    PyPermissionError,
    "The ACL denies it."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CodecError", py.get_type::<CodecError>())?;
    m.add("MalformedPacket", py.get_type::<MalformedPacket>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add(
        "UnsupportedProtocolVersion",
        py.get_type::<UnsupportedProtocolVersion>(),
    )?;
    m.add("TopicFilterInvalid", py.get_type::<TopicFilterInvalid>())?;
    m.add("TopicNameInvalid", py.get_type::<TopicNameInvalid>())?;
    m.add("PacketTooLarge", py.get_type::<PacketTooLarge>())?;
    m.add("EncodeError", py.get_type::<EncodeError>())?;
    m.add("BenchError", py.get_type::<BenchError>())?;
    m.add("UnknownClient", py.get_type::<UnknownClient>())?;
    m.add("SessionConflict", py.get_type::<SessionConflict>())?;
    m.add("NotAuthorized", py.get_type::<NotAuthorized>())?;
    m.add("FrameVersionError", py.get_type::<FrameVersionError>())?;
    Ok(())
}

/// The exception for a decode error, with `reason_code` and `detail` set.
pub(crate) fn decode_error(py: Python<'_>, err: &DecodeError) -> PyErr {
    let message = err.to_string();
    let exc = match err.reason {
        ReasonCode::MalformedPacket => MalformedPacket::new_err(message),
        ReasonCode::ProtocolError => ProtocolError::new_err(message),
        ReasonCode::UnsupportedProtocolVersion => UnsupportedProtocolVersion::new_err(message),
        ReasonCode::TopicFilterInvalid => TopicFilterInvalid::new_err(message),
        ReasonCode::TopicNameInvalid => TopicNameInvalid::new_err(message),
        ReasonCode::PacketTooLarge => PacketTooLarge::new_err(message),
        _ => CodecError::new_err(message),
    };
    with_reason(py, exc, err.reason, err.detail)
}

/// Set `reason_code` and `detail` on a fresh exception.
fn with_reason(py: Python<'_>, exc: PyErr, reason: ReasonCode, detail: &str) -> PyErr {
    let value = exc.value(py);
    // Setting attributes on a fresh exception instance cannot fail in practice; if it
    // did, the exception without them is still the right one to raise.
    let _ = value.setattr("reason_code", reason as u8);
    let _ = value.setattr("detail", detail);
    exc
}

/// A topic index refusal: `TopicFilterInvalid` (a subscription's filter) or
/// `TopicNameInvalid` (a retained topic), `MemoryError` when an index is full.
pub(crate) fn index_error(py: Python<'_>, err: IndexError, filter: bool) -> PyErr {
    let IndexError::Topic(topic) = err else {
        return PyMemoryError::new_err(err.to_string());
    };
    let (exc, reason) = if filter {
        (
            TopicFilterInvalid::new_err(topic.as_str()),
            ReasonCode::TopicFilterInvalid,
        )
    } else {
        (
            TopicNameInvalid::new_err(topic.as_str()),
            ReasonCode::TopicNameInvalid,
        )
    };
    with_reason(py, exc, reason, topic.as_str())
}

pub(crate) fn encode_error(err: &CoreEncodeError) -> PyErr {
    EncodeError::new_err(err.to_string())
}

/// A packet dict that does not describe a valid packet.
pub(crate) fn bad_packet(message: impl Into<String>) -> PyErr {
    EncodeError::new_err(message.into())
}

/// An invalid benchmark config is a `ValueError`; a run that could not complete is a
/// `BenchError`.
pub(crate) fn bench_error(err: &CoreBenchError) -> PyErr {
    match err {
        CoreBenchError::Config(message) => PyValueError::new_err(message.clone()),
        CoreBenchError::Run(message) => BenchError::new_err(message.clone()),
    }
}

/// An argument outside what it may be (a QoS of 3, a reason code that does not
/// exist, a topic name with a wildcard); `message` names the argument.
pub(crate) fn bad_argument(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// A name that is not one of a setting's names (`ferromq_core::choice`).
pub(crate) fn unknown_name(err: &UnknownName) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// An index past the end of a sequence.
pub(crate) fn out_of_range(what: &str) -> PyErr {
    PyIndexError::new_err(format!("{what} index out of range"))
}

/// Bytes that are not whole journal records.
pub(crate) fn journal_error(err: JournalError) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// A frame another shard or node wrote in a format version this build does not read:
/// the node must stop (`durability/frame.rs`), not skip it.
pub(crate) fn frame_version_error(err: CoreFrameVersionError) -> PyErr {
    FrameVersionError::new_err(err.to_string())
}

/// What a store sent back or was given that its codec cannot use (RESP that is not
/// RESP, an error reply while loading, a slot map with a gap).
pub(crate) fn store_error(err: impl Display) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// A `[stream]` setting the engine refuses (`ferromq_core::engine::export`).
pub(crate) fn stream_setting(err: StreamSettingError) -> PyErr {
    PyValueError::new_err(err.0)
}

/// Bytes at the front of a proxy listener's connection that are not a PROXY header.
pub(crate) fn proxy_header(err: ProxyError) -> PyErr {
    PyValueError::new_err(err.detail)
}

/// An admin action that could not be done (`ferromq_core::engine::admin`).
pub(crate) fn admin_error(py: Python<'_>, err: AdminError) -> PyErr {
    let message = err.to_string();
    match err {
        AdminError::UnknownClient(_) => UnknownClient::new_err(message),
        AdminError::Connected(_) | AdminError::Quota(_) => SessionConflict::new_err(message),
        AdminError::Denied { .. } => NotAuthorized::new_err(message),
        AdminError::Filter(err) => index_error(py, err, true),
    }
}

/// A system call a node's shared memory needs failed (`what` names it): the `OSError`
/// subclass of its kind.
pub(crate) fn os_error(what: &str) -> PyErr {
    let error = std::io::Error::last_os_error();
    std::io::Error::new(error.kind(), format!("shared memory: {what}: {error}")).into()
}

/// A socket call of the socket set failed: the `OSError` subclass of its errno, with
/// `errno` and `strerror` set as Python's own calls set them (pyo3's conversion of an
/// `io::Error` keeps only the message for some kinds), so callers can tell "out of
/// descriptors" from "peer gone".
pub(crate) fn socket_error(error: std::io::Error) -> PyErr {
    let Some(code) = error.raw_os_error() else {
        return error.into();
    };
    let text = error.to_string();
    let strerror = text.split(" (os error").next().unwrap_or(&text).to_owned();
    pyo3::exceptions::PyOSError::new_err((code, strerror))
}
