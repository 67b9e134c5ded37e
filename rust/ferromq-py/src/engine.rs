//! The broker engine's Python face: one `Engine` per event loop, called per read
//! buffer, per loop tick and per event, never per message.
//!
//! Reads reach the engine through `raw_feed`, a C entry in a capsule that the Cython
//! IO layer calls with a pointer and a length: no Python object per read.

use ferromq_core::codec::{QoS, ReasonCode, Utf8Bytes};
use ferromq_core::engine::{
    ClientType, DropPolicy, Engine as CoreEngine, EngineConfig, Event, Features, Redirect,
};
use ferromq_core::topic::ShareStrategy;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyList, PyTuple};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct Engine {
    inner: CoreEngine,
}

fn share_strategy(name: &str) -> PyResult<ShareStrategy> {
    Ok(match name {
        "round_robin" => ShareStrategy::RoundRobin,
        "random" => ShareStrategy::Random,
        "hash_client" => ShareStrategy::HashClient,
        "hash_topic" => ShareStrategy::HashTopic,
        "sticky" => ShareStrategy::Sticky,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown share strategy {other:?}"
            )))
        }
    })
}

fn drop_policy(name: &str) -> PyResult<DropPolicy> {
    Ok(match name {
        "drop_oldest" => DropPolicy::DropOldest,
        "refuse_newest" => DropPolicy::RefuseNewest,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown drop policy {other:?}"
            )))
        }
    })
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (
        *,
        max_packet_size = 1024 * 1024,
        max_inflight = 1024,
        receive_maximum = 1024,
        max_topic_alias = 64,
        max_keepalive = 0,
        connect_timeout_ms = 10_000,
        queue_limit = 1000,
        drop_policy = "drop_oldest",
        queue_qos0_offline = false,
        max_session_expiry = u32::MAX,
        persistent_session_expiry = 7 * 24 * 3600,
        max_client_id_length = 65_535,
        allow_control_characters = false,
        authenticate = false,
        write_high_water = 1024 * 1024,
        share_strategy = "round_robin",
        journal = false,
        application_client_prefixes = Vec::new(),
        stream_application_groups = false,
        maximum_qos = 2,
        retain_available = true,
        wildcard_subscription_available = true,
        subscription_identifiers_available = true,
        shared_subscription_available = true,
        assign_client_id = true,
        response_information_prefix = String::new(),
        outbound_topic_aliases = 16,
        validate_utf8_payload = false,
        max_publish_rate = 0,
        redirect_server_reference = String::new(),
        redirect_permanent = false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_packet_size: u32,
        max_inflight: u16,
        receive_maximum: u16,
        max_topic_alias: u16,
        max_keepalive: u16,
        connect_timeout_ms: u64,
        queue_limit: u16,
        drop_policy: &str,
        queue_qos0_offline: bool,
        max_session_expiry: u32,
        persistent_session_expiry: u32,
        max_client_id_length: usize,
        allow_control_characters: bool,
        authenticate: bool,
        write_high_water: usize,
        share_strategy: &str,
        journal: bool,
        application_client_prefixes: Vec<String>,
        stream_application_groups: bool,
        maximum_qos: u8,
        retain_available: bool,
        wildcard_subscription_available: bool,
        subscription_identifiers_available: bool,
        shared_subscription_available: bool,
        assign_client_id: bool,
        response_information_prefix: String,
        outbound_topic_aliases: u16,
        validate_utf8_payload: bool,
        max_publish_rate: u32,
        redirect_server_reference: String,
        redirect_permanent: bool,
    ) -> PyResult<Engine> {
        let features = Features {
            maximum_qos: QoS::from_u8(maximum_qos).ok_or_else(|| {
                PyValueError::new_err(format!("maximum_qos must be 0, 1 or 2, got {maximum_qos}"))
            })?,
            retain_available,
            wildcard_subscription_available,
            subscription_identifiers_available,
            shared_subscription_available,
            assign_client_id,
            response_information_prefix,
            outbound_topic_aliases,
            validate_utf8_payload,
            max_publish_rate,
            // An empty server reference: no redirect.
            redirect: (!redirect_server_reference.is_empty()).then_some(Redirect {
                server_reference: redirect_server_reference,
                permanent: redirect_permanent,
            }),
        };
        let config = EngineConfig {
            max_packet_size,
            max_inflight,
            receive_maximum,
            max_topic_alias,
            max_keepalive,
            connect_timeout_ms,
            queue_limit,
            drop_policy: self::drop_policy(drop_policy)?,
            queue_qos0_offline,
            max_session_expiry,
            persistent_session_expiry,
            max_client_id_length,
            allow_control_characters,
            authenticate,
            write_high_water,
            journal,
            application_client_prefixes,
            stream_application_groups,
            features,
        };
        Ok(Engine {
            inner: CoreEngine::new(config, self::share_strategy(share_strategy)?),
        })
    }

    /// Register an accepted socket; returns its connection id.
    fn open(&mut self, now: u64) -> u32 {
        self.inner.open(now)
    }

    fn connection_lost(&mut self, conn: u32, now: u64) {
        self.inner.connection_lost(conn, now);
    }

    /// Answer an ("authenticate" | "auth", conn, token, ...) event finally: reason
    /// code 0 accepts, with `data` as the final Authentication Data. Ignored when
    /// `token` is not the connection's (the socket it was for is gone).
    /// `client_type` ("device" or "application") is the accepted user's, for the
    /// store its persistent session goes to.
    #[pyo3(signature = (conn, token, reason_code, now, data = None, client_type = None))]
    fn complete_auth(
        &mut self,
        conn: u32,
        token: u64,
        reason_code: u8,
        now: u64,
        data: Option<&[u8]>,
        client_type: Option<&str>,
    ) -> PyResult<()> {
        let reason = reason_of(reason_code)?;
        if let Some(name) = client_type {
            let client_type = match name {
                "device" => ClientType::Device,
                "application" => ClientType::Application,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "client type must be \"device\" or \"application\", got {other:?}"
                    )))
                }
            };
            self.inner.set_client_type(conn, token, client_type);
        }
        self.inner.complete_auth(conn, token, reason, data, now);
        Ok(())
    }

    /// Close the connected client `conn` (the socket of `token`) with `reason_code`:
    /// v5 clients get DISCONNECT with it, the will is published. Ignored when the
    /// socket is gone or not connected yet.
    fn disconnect(&mut self, conn: u32, token: u64, reason_code: u8, now: u64) -> PyResult<()> {
        let reason = reason_of(reason_code)?;
        self.inner.disconnect(conn, token, reason, now);
        Ok(())
    }

    /// Answer an ("authenticate" | "auth", ...) event with AUTH 0x18 carrying `data`.
    fn continue_auth(&mut self, conn: u32, token: u64, data: &[u8], now: u64) {
        self.inner.continue_auth(conn, token, data, now);
    }

    fn set_writable(&mut self, conn: u32, writable: bool, now: u64) {
        self.inner.set_writable(conn, writable, now);
    }

    fn tick(&mut self, now: u64) {
        self.inner.tick(now);
    }

    /// Publish from the broker itself; returns the number of sessions reached.
    #[pyo3(signature = (topic, payload, qos = 0, retain = false, now = 0))]
    fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: u8,
        retain: bool,
        now: u64,
    ) -> PyResult<usize> {
        ferromq_core::topic::validate_topic_name(topic)
            .map_err(|err| PyValueError::new_err(format!("topic {topic:?}: {err}")))?;
        // The engine keeps topics as MQTT strings, which may not hold U+0000.
        Utf8Bytes::try_from(topic)
            .map_err(|err| PyValueError::new_err(format!("topic {topic:?}: {}", err.detail)))?;
        let qos =
            QoS::from_u8(qos).ok_or_else(|| PyValueError::new_err("qos must be 0, 1 or 2"))?;
        Ok(self.inner.publish(topic, payload, qos, retain, now))
    }

    fn has_output(&self) -> bool {
        self.inner.has_output()
    }

    /// `[(conn, bytes), ...]`: each dirty connection's output, once.
    fn take_output<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let mut result = Ok(());
        self.inner.take_output(|conn, bytes| {
            if result.is_ok() {
                result = list.append((conn, PyBytes::new(py, &bytes)));
            }
        });
        result.map(|()| list)
    }

    /// `[("authenticate", conn, token, client_id, username, password, protocol,
    /// clean_start, method, data) | ("auth", conn, token, reauthenticate, data)
    /// | ("rejected", conn, reason_code, reason_name, detail) | ("close", conn), ...]`.
    fn take_events<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for event in self.inner.take_events() {
            let item = match event {
                Event::Authenticate {
                    conn,
                    token,
                    client_id,
                    username,
                    password,
                    protocol,
                    clean_start,
                    method,
                    data,
                } => PyTuple::new(
                    py,
                    [
                        "authenticate".into_pyobject(py)?.into_any(),
                        conn.into_pyobject(py)?.into_any(),
                        token.into_pyobject(py)?.into_any(),
                        client_id.into_pyobject(py)?.into_any(),
                        username.into_pyobject(py)?.into_any(),
                        optional_bytes(py, password)?,
                        protocol.into_pyobject(py)?.into_any(),
                        clean_start.into_pyobject(py)?.to_owned().into_any(),
                        method.into_pyobject(py)?.into_any(),
                        optional_bytes(py, data)?,
                    ],
                )?,
                Event::Auth {
                    conn,
                    token,
                    reauthenticate,
                    data,
                } => PyTuple::new(
                    py,
                    [
                        "auth".into_pyobject(py)?.into_any(),
                        conn.into_pyobject(py)?.into_any(),
                        token.into_pyobject(py)?.into_any(),
                        reauthenticate.into_pyobject(py)?.to_owned().into_any(),
                        optional_bytes(py, data)?,
                    ],
                )?,
                Event::Rejected {
                    conn,
                    reason,
                    detail,
                } => PyTuple::new(
                    py,
                    [
                        "rejected".into_pyobject(py)?.into_any(),
                        conn.into_pyobject(py)?.into_any(),
                        (reason as u8).into_pyobject(py)?.into_any(),
                        reason.name().into_pyobject(py)?.into_any(),
                        detail.into_pyobject(py)?.into_any(),
                    ],
                )?,
                Event::Close { conn } => PyTuple::new(
                    py,
                    [
                        "close".into_pyobject(py)?.into_any(),
                        conn.into_pyobject(py)?.into_any(),
                    ],
                )?,
                Event::Persist => PyTuple::new(py, ["persist"])?,
                Event::StreamMember {
                    client,
                    share_filter,
                    online,
                } => PyTuple::new(
                    py,
                    [
                        "stream_member".into_pyobject(py)?.into_any(),
                        client.into_pyobject(py)?.into_any(),
                        share_filter.into_pyobject(py)?.into_any(),
                        online.into_pyobject(py)?.to_owned().into_any(),
                    ],
                )?,
                Event::StreamDone => PyTuple::new(py, ["stream_done"])?,
            };
            list.append(item)?;
        }
        Ok(list)
    }

    /// A capsule named `ferromq._core.RawFeed` holding a `RawFeed`: the C entry the
    /// Cython IO layer calls per read, with no Python object made per call.
    fn raw_feed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyCapsule>> {
        let engine: *mut CoreEngine = &mut slf.borrow_mut().inner;
        let raw = RawFeed {
            engine,
            feed: raw_feed,
        };
        PyCapsule::new_with_value(slf.py(), raw, c"ferromq._core.RawFeed")
    }

    fn set_wall_clock(&mut self, unix_ms: u64, now: u64) {
        self.inner.set_wall_clock(unix_ms, now);
    }

    /// The journal records since the last call as `(batch, bytes)`, or None.
    fn take_journal<'py>(&mut self, py: Python<'py>) -> Option<(u64, Bound<'py, PyBytes>)> {
        self.inner
            .take_journal()
            .map(|(batch, bytes)| (batch, PyBytes::new(py, &bytes)))
    }

    /// Raise `persist` again once `records` are pending (0: never): a store's batch size.
    fn set_journal_flush_records(&mut self, records: usize) {
        self.inner.set_journal_flush_records(records);
    }

    fn journal_pending(&self) -> usize {
        self.inner.journal_pending()
    }

    fn journal_done(&mut self, batch: u64) {
        self.inner.journal_done(batch);
    }

    /// Hand `client` one record of `share_filter`'s streamed group under `token`;
    /// False when it is not online for that group (engine/stream.rs).
    fn deliver_streamed(
        &mut self,
        client: &str,
        share_filter: &str,
        record: &[u8],
        token: u64,
        now: u64,
    ) -> bool {
        self.inner.deliver_streamed(
            client,
            share_filter,
            bytes::Bytes::copy_from_slice(record),
            token,
            now,
        )
    }

    /// Tokens of streamed deliveries done with since the last call.
    fn take_stream_done(&mut self) -> Vec<u64> {
        self.inner.take_stream_done()
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.snapshot())
    }

    /// Rebuild state from journal bytes; returns a dict of counts, `valid_len` (bytes
    /// up to the last whole record), `error` (None, or why reading stopped) and
    /// `damaged` (the `(offset, length, error)` ranges skipped).
    fn restore<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
        now: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let report = self.inner.restore(bytes::Bytes::copy_from_slice(data), now);
        let d = PyDict::new(py);
        d.set_item("records", report.records)?;
        d.set_item("sessions", report.sessions)?;
        d.set_item("messages", report.messages)?;
        d.set_item("retained", report.retained)?;
        d.set_item("valid_len", report.valid_len)?;
        d.set_item("error", report.error.map(|e| e.0))?;
        let damaged: Vec<(usize, usize, &str)> = report
            .damaged
            .iter()
            .map(|d| (d.offset, d.len, d.error.0))
            .collect();
        d.set_item("damaged", damaged)?;
        Ok(d)
    }

    fn shutdown(&mut self, now: u64) {
        self.inner.shutdown(now);
    }

    /// Counters and gauges for $SYS and metrics.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        for (key, value) in [
            ("bytes_received", s.bytes_received),
            ("bytes_sent", s.bytes_sent),
            ("packets_received", s.packets_received),
            ("publish_received", s.publish_received),
            ("publish_sent", s.publish_sent),
            ("publish_dropped", s.publish_dropped),
            ("shared_released", s.shared_released),
            ("connections_opened", s.connections_opened),
            ("protocol_errors", s.protocol_errors),
            ("sessions_expired", s.sessions_expired),
            ("clients_connected", s.clients_connected),
            ("clients_maximum", s.clients_maximum),
            ("clients_disconnected", s.clients_disconnected),
            ("messages_inflight", s.messages_inflight),
            ("messages_queued", s.messages_queued),
            ("shared_queued", s.shared_queued),
            ("retained_messages", s.retained_messages),
            ("subscriptions", s.subscriptions),
        ] {
            d.set_item(key, value)?;
        }
        Ok(d)
    }
}

fn optional_bytes(py: Python<'_>, value: Option<Vec<u8>>) -> PyResult<Bound<'_, PyAny>> {
    Ok(value
        .map(|v| PyBytes::new(py, &v))
        .into_pyobject(py)?
        .into_any())
}

/// The C view of an engine for `_protocol.pyx` (which declares the same layout).
#[repr(C)]
pub(crate) struct RawFeed {
    engine: *mut CoreEngine,
    feed: unsafe extern "C" fn(*mut CoreEngine, u32, *const u8, usize, u64) -> usize,
}

// SAFETY: a RawFeed is only dereferenced by the Cython IO layer on the thread that
// owns the (unsendable) Engine, with the GIL held; the capsule never crosses threads.
unsafe impl Send for RawFeed {}

/// `ferromq_core::engine::Engine::feed` for C callers: handle every complete packet of
/// `data[..len]` for `conn` at `now`, return the bytes used.
///
/// # Safety
/// `engine` must point to the `inner` engine of a live `Engine` object, `data` to
/// `len` readable bytes, and the caller must hold the GIL on the engine's thread with
/// no other borrow of that engine active (the engine never calls back into Python).
unsafe extern "C" fn raw_feed(
    engine: *mut CoreEngine,
    conn: u32,
    data: *const u8,
    len: usize,
    now: u64,
) -> usize {
    // SAFETY: guaranteed by the caller, as documented above.
    let (engine, bytes) = unsafe { (&mut *engine, std::slice::from_raw_parts(data, len)) };
    // A panic must not unwind into C: the read is dropped and the connection closed.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.feed(conn, bytes, now)
    }))
    .unwrap_or_else(|_| {
        engine.connection_lost(conn, now);
        len
    })
}

fn reason_of(code: u8) -> PyResult<ReasonCode> {
    ReasonCode::from_u8(code)
        .ok_or_else(|| PyValueError::new_err(format!("0x{code:02X} is not a reason code")))
}
