//! `EngineStats`: the engine's counters and gauges at one instant (`Engine.stats()`),
//! one frozen object with typed attributes, and the names by which the per-type and
//! per-reason figures are published (`PACKET_TYPES`, `DROP_REASONS`).
//!
//! Read per `$SYS` interval, scrape or admin call, never per message. The core's
//! `Stats` is destructured field by field, so a counter added in `ferromq-core` does
//! not compile here until Python can see it (and the stub, which stubtest checks, says
//! its type). The names come from the core's enums (`PacketType::ALL`,
//! `DropReason::ALL`), so a drop reason added there is a `dropped` key, a `$SYS` topic
//! and a metric label without a second list to keep in step.
//!
//! `as_dict()` flattens the figures to the keys the broker merges with the
//! listeners', admission's, bridges' and plugins' (`Broker.stats()`: `$SYS`, metrics,
//! the admin API, a node's aggregation across shards): each attribute by its name,
//! then `dropped_<reason>`, then `packets_received_<type>`, `bytes_received_<type>`,
//! `packets_sent_<type>`, `bytes_sent_<type>`.

use ferromq_core::codec::PacketType;
use ferromq_core::engine::{AuthFailures, DropReason, Drops, PacketCounts as CoreCounts, Stats};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<EngineStats>()?;
    m.add_class::<PacketCounts>()?;
    m.add(
        "PACKET_TYPES",
        PyTuple::new(py, PacketType::ALL.iter().map(|kind| kind.name()))?,
    )?;
    m.add(
        "DROP_REASONS",
        PyTuple::new(py, DropReason::ALL.iter().map(|reason| reason.name()))?,
    )?;
    Ok(())
}

/// The struct, its figures' names and its construction from the core's `Stats`, from
/// one list. `plain` fields keep their name; the `nested` fields' patterns bind the
/// `derived` figures (the four authentication failures, the connections by protocol
/// version). The destructuring is exhaustive, so a field added to the core's `Stats`
/// does not compile here until it is listed.
macro_rules! engine_stats {
    (
        plain: [$($plain:ident,)*],
        nested: [$($nested:ident: $pattern:pat,)*],
        derived: [$($derived:ident,)*],
    ) => {
        /// The engine's counters and gauges (`ferromq_core::engine::Stats`), as
        /// `Engine.stats()` read them.
        #[pyclass(module = "ferromq._core", frozen)]
        pub(crate) struct EngineStats {
            $(#[pyo3(get)] $plain: u64,)*
            $(#[pyo3(get)] $derived: u64,)*
            dropped: Drops,
            /// By packet type: frames decoded, packets encoded.
            #[pyo3(get)]
            received: Py<PacketCounts>,
            #[pyo3(get)]
            sent: Py<PacketCounts>,
        }

        impl EngineStats {
            /// Every one-number figure with its attribute name, in declaration order.
            fn figures(&self) -> Vec<(&'static str, u64)> {
                vec![
                    $((stringify!($plain), self.$plain),)*
                    $((stringify!($derived), self.$derived),)*
                ]
            }

            pub(crate) fn from_core(py: Python<'_>, stats: Stats) -> PyResult<EngineStats> {
                let Stats {
                    $($plain,)*
                    $($nested: $pattern,)*
                    dropped,
                    received,
                    sent,
                } = stats;
                Ok(EngineStats {
                    $($plain,)*
                    $($derived,)*
                    dropped,
                    received: Py::new(py, PacketCounts(received))?,
                    sent: Py::new(py, PacketCounts(sent))?,
                })
            }
        }
    };
}

engine_stats! {
    plain: [
        bytes_received,
        bytes_sent,
        packets_received,
        publish_received,
        publish_sent,
        publish_dropped,
        publish_rate_exceeded,
        publishers_paused,
        subscriptions_refused,
        retained_refused,
        memory_used,
        queued_bytes,
        connections_held,
        shared_released,
        connections_opened,
        protocol_errors,
        connect_timeouts,
        sessions_expired,
        acl_denied_publish,
        acl_denied_subscribe,
        acl_denied_read,
        acl_withheld,
        auto_subscribe_skipped,
        topics_rewritten,
        payloads_invalid,
        plugin_dropped,
        plugin_overflow,
        acl_revoked,
        clients_connected,
        clients_maximum,
        clients_disconnected,
        messages_inflight,
        messages_queued,
        shared_queued,
        retained_messages,
        retained_bytes,
        subscriptions,
    ],
    nested: [
        auth_failed: AuthFailures {
            bad_credentials: auth_failed_bad_credentials,
            not_authorized: auth_failed_not_authorized,
            bad_method: auth_failed_bad_method,
            unavailable: auth_failed_unavailable,
        },
        clients_connected_by_version: [
            clients_connected_mqtt31,
            clients_connected_mqtt311,
            clients_connected_mqtt5,
        ],
    ],
    derived: [
        auth_failed_bad_credentials,
        auth_failed_not_authorized,
        auth_failed_bad_method,
        auth_failed_unavailable,
        clients_connected_mqtt31,
        clients_connected_mqtt311,
        clients_connected_mqtt5,
    ],
}

#[pymethods]
impl EngineStats {
    /// Deliveries dropped, by reason (`DROP_REASONS`); they sum to `publish_dropped`.
    #[getter]
    fn dropped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for &reason in DropReason::ALL {
            d.set_item(reason.name(), self.dropped.get(reason))?;
        }
        Ok(d)
    }

    /// Every figure under the key `Broker.stats()` gives it (the module header).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, value) in self.figures() {
            d.set_item(name, value)?;
        }
        for &reason in DropReason::ALL {
            d.set_item(
                format!("dropped_{}", reason.name()),
                self.dropped.get(reason),
            )?;
        }
        for (direction, counts) in [("received", &self.received), ("sent", &self.sent)] {
            let counts = &counts.get().0;
            for kind in PacketType::ALL {
                let (name, i) = (kind.name(), kind as usize);
                d.set_item(format!("packets_{direction}_{name}"), counts.packets[i])?;
                d.set_item(format!("bytes_{direction}_{name}"), counts.bytes[i])?;
            }
        }
        Ok(d)
    }
}

/// MQTT packets and their bytes in one direction (whole frames, before any WebSocket
/// framing), by packet type (`PACKET_TYPES`).
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct PacketCounts(CoreCounts);

#[pymethods]
impl PacketCounts {
    #[getter]
    fn packets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        by_type(py, &self.0.packets)
    }

    #[getter]
    fn bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        by_type(py, &self.0.bytes)
    }
}

fn by_type<'py>(py: Python<'py>, counts: &[u64; 16]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for kind in PacketType::ALL {
        d.set_item(kind.name(), counts[kind as usize])?;
    }
    Ok(d)
}
