//! `ClusterPort`: the engine's cluster slots (`ferromq_core::engine::cluster`) for
//! Python's Kafka side (`ferromq.cluster.bus`), called once per tick and per Kafka
//! record (a batch of records), never per message.

use bytes::Bytes;
use ferromq_core::durability::{
    frame_batch, framed, open_frame, FrameKind, FRAME_VERSION, SUBSCRIPTION_VALUE,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::engine::Engine;
use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ClusterPort>()?;
    m.add("FRAME_VERSION", FRAME_VERSION)?;
    m.add(
        "SUBSCRIPTION_VALUE",
        PyBytes::new(m.py(), &SUBSCRIPTION_VALUE),
    )?;
    m.add_function(wrap_pyfunction!(subscription_present, m)?)?;
    m.add_function(wrap_pyfunction!(crossing_entries, m)?)?;
    Ok(())
}

/// The (publisher, route) entries of a node record's `kept_routes` header.
#[pyfunction]
fn crossing_entries(header: &[u8]) -> Vec<(String, u64)> {
    ferromq_core::engine::crossing_entries(header)
}

/// Whether a key of the subscription topic with this value is present (a tombstone,
/// None, is not); raises `FrameVersionError` for a value of a frame version this build
/// does not read.
#[pyfunction]
fn subscription_present(value: Option<&[u8]>) -> PyResult<bool> {
    let Some(value) = value else {
        return Ok(false);
    };
    open_frame(FrameKind::SubscriptionValue, Bytes::copy_from_slice(value))
        .map_err(errors::frame_version_error)?;
    Ok(true)
}

/// The other nodes' slots of one engine.
#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct ClusterPort {
    nodes: Vec<u16>,
}

#[pymethods]
impl ClusterPort {
    /// Make `engine` a node of a cluster.
    #[new]
    fn new(mut engine: PyRefMut<'_, Engine>) -> ClusterPort {
        engine.inner.enable_cluster();
        ClusterPort { nodes: Vec::new() }
    }

    /// A slot for node `name`; its pseudo-session holds that node's filters.
    fn add_node(&mut self, mut engine: PyRefMut<'_, Engine>, name: &str) -> u16 {
        let slot = engine.inner.add_peer(name);
        self.nodes.push(slot);
        slot
    }

    /// The records for each node since the last call, as Kafka record values (frames,
    /// `durability/frame.rs`) of at most `max_bytes` (a single larger record alone):
    /// (slot, records, round, crossings), the round and the crossings
    /// (`Engine::take_crossings`: the kept QoS 2 routes they carry, for a record
    /// header) on a node's last piece, which Kafka has only once it has the pieces
    /// before it (0 and None: no QoS 1/2 message, no kept route among them).
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
        mut engine: PyRefMut<'_, Engine>,
        max_bytes: usize,
    ) -> Vec<(u16, Bound<'py, PyBytes>, u64, Option<Bound<'py, PyBytes>>)> {
        let mut pieces = Vec::new();
        for &slot in &self.nodes {
            let Some((records, round)) = engine.inner.take_peer(slot) else {
                continue;
            };
            let crossings = engine.inner.take_crossings(slot);
            let cut =
                frame_batch(records.clone(), max_bytes).unwrap_or_else(|_| vec![framed(&records)]);
            let last = cut.len() - 1;
            for (at, piece) in cut.into_iter().enumerate() {
                let (round, crossings) = if at == last {
                    (round, crossings.as_deref().map(|c| PyBytes::new(py, c)))
                } else {
                    (0, None)
                };
                pieces.push((slot, PyBytes::new(py, &piece), round, crossings));
            }
        }
        pieces
    }

    /// The kept QoS 2 routes to other nodes that restored sessions' stores hold:
    /// (publisher, route, destination node) each, to settle with `settled` once the
    /// destination's topic has each (sent again with `records` when it had not).
    fn restored(&self, engine: PyRef<'_, Engine>) -> Vec<(String, u64, String)> {
        engine.inner.restored_crossings()
    }

    /// Restored route `route` as a node record value (a frame) and its crossings
    /// header, to produce again.
    fn records<'py>(
        &self,
        py: Python<'py>,
        engine: PyRef<'_, Engine>,
        route: u64,
    ) -> Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let (records, listed) = engine.inner.crossing_records(route)?;
        Some((
            PyBytes::new(py, &framed(&records)),
            PyBytes::new(py, &listed),
        ))
    }

    /// Restored route `route` is in its destination's topic: the store drops it.
    fn settled(&self, mut engine: PyRefMut<'_, Engine>, route: u64) {
        engine.inner.crossing_settled(route);
    }

    /// Whether `publisher` has QoS 2 routes to other nodes Kafka has not confirmed.
    fn pending(&self, engine: PyRef<'_, Engine>, publisher: &str) -> bool {
        engine.inner.crossings_pending(publisher)
    }

    /// Apply the records node `slot` sent (one Kafka record, at `offset` of node
    /// `topic`'s topic) when it had read the subscription topic up to `seen`;
    /// returns how many. A session that holds that offset already skips them. Raises
    /// `FrameVersionError` for a value of a frame version this build does not read.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        mut engine: PyRefMut<'_, Engine>,
        slot: u16,
        records: &[u8],
        topic: &str,
        offset: u64,
        seen: u64,
        now: u64,
    ) -> PyResult<usize> {
        let records = open_frame(FrameKind::NodeRecord, Bytes::copy_from_slice(records))
            .map_err(errors::frame_version_error)?;
        engine
            .inner
            .peer_receive(slot, records, topic, offset, seen, now)
            .map_err(errors::journal_error)
    }

    /// Sessions restored from dead node `dead` (`clients`) take its topic's records
    /// matched before subscription topic position `marker`, and other records
    /// matched from it on, until `adoption_done(dead)`.
    fn adopt_sessions(
        &self,
        mut engine: PyRefMut<'_, Engine>,
        clients: Vec<String>,
        dead: &str,
        marker: u64,
    ) {
        engine.inner.adopt_sessions(&clients, dead, marker);
    }

    /// The adopter finished reading dead node `dead`'s topic.
    fn adoption_done(&self, mut engine: PyRefMut<'_, Engine>, dead: &str) {
        engine.inner.adoption_done(dead);
    }

    /// This node has read the subscription topic up to `position` (the next offset).
    fn set_seen(&self, mut engine: PyRefMut<'_, Engine>, position: u64) {
        engine.inner.set_subscriptions_seen(position);
    }

    /// Kafka has round `round` of slot `slot`.
    fn confirmed(&self, mut engine: PyRefMut<'_, Engine>, slot: u16, round: u64) {
        engine.inner.peer_confirmed(slot, round);
    }

    /// This node's subscription changes since the last call and the round that SUBACKs
    /// wait for (confirm it with `confirmed(subscription_slot, round)` once Kafka has
    /// the changes); None when there is nothing.
    fn take_subscriptions(
        &self,
        mut engine: PyRefMut<'_, Engine>,
    ) -> Option<(Vec<(String, bool)>, u64)> {
        engine.inner.take_cluster_subscriptions()
    }

    /// The slot whose rounds are the subscription topic's.
    fn subscription_slot(&self, engine: PyRef<'_, Engine>) -> u16 {
        engine.inner.cluster_slot()
    }

    /// Node `slot`'s keys from the subscription topic: (filter, present, offset) each.
    fn apply_subscriptions(
        &self,
        mut engine: PyRefMut<'_, Engine>,
        slot: u16,
        changes: Vec<(String, bool, u64)>,
    ) {
        for (filter, present, offset) in changes {
            engine
                .inner
                .peer_subscription(slot, &filter, present, offset);
        }
    }

    /// Every filter this node has a subscriber of.
    fn filters(&self, engine: PyRef<'_, Engine>) -> Vec<String> {
        engine.inner.cluster_filters()
    }
}
