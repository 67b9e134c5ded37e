//! The topic indexes' Python face: `SubscriptionIndex` and `RetainedIndex`.
//!
//! Clients are the compact `u32` ids the engine assigns. A match crosses the
//! boundary once, as six flat lists of ints (clients, qos, flags, subscription-id
//! offsets, subscription ids, unserved shared groups), never as one object per
//! delivery. The router matches inside Rust; these classes serve the control plane,
//! tests and benchmarks.

use ferromq_core::codec::{QoS, RetainHandling, SubscriptionOptions};
use ferromq_core::retain::RetainedIndex as CoreRetained;
use ferromq_core::topic::{MatchResult, ShareStrategy, SubscriptionIndex as CoreIndex};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{self, index_error};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SubscriptionIndex>()?;
    m.add_class::<RetainedIndex>()?;
    m.add(
        "DELIVERY_RETAIN_AS_PUBLISHED",
        ferromq_core::topic::DELIVERY_RETAIN_AS_PUBLISHED,
    )?;
    m.add("DELIVERY_SHARED", ferromq_core::topic::DELIVERY_SHARED)?;
    Ok(())
}

/// The six parallel lists of one match.
type MatchLists<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
);

/// Subscriptions by topic filter; see `ferromq_core::topic`.
#[pyclass(module = "ferromq._core")]
pub(crate) struct SubscriptionIndex {
    inner: CoreIndex,
    result: MatchResult,
}

#[pymethods]
impl SubscriptionIndex {
    #[new]
    #[pyo3(signature = (strategy = "round_robin"))]
    fn new(strategy: &str) -> PyResult<SubscriptionIndex> {
        let strategy: ShareStrategy = strategy.parse().map_err(|e| errors::unknown_name(&e))?;
        Ok(SubscriptionIndex {
            inner: CoreIndex::new(strategy),
            result: MatchResult::new(),
        })
    }

    /// The shared-subscription strategy's name.
    #[getter]
    fn strategy(&self) -> &'static str {
        self.inner.strategy().name()
    }

    /// Add or replace a subscription; True when it is new.
    #[pyo3(signature = (
        client, filter, qos = 0, *, no_local = false, retain_as_published = false,
        retain_handling = 0, subscription_identifier = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn subscribe(
        &mut self,
        py: Python<'_>,
        client: u32,
        filter: &str,
        qos: u8,
        no_local: bool,
        retain_as_published: bool,
        retain_handling: u8,
        subscription_identifier: Option<u32>,
    ) -> PyResult<bool> {
        let qos = QoS::from_u8(qos).ok_or_else(|| errors::bad_argument("qos must be 0, 1 or 2"))?;
        let retain_handling = match retain_handling {
            0 => RetainHandling::SendAtSubscribe,
            1 => RetainHandling::SendAtSubscribeIfNew,
            2 => RetainHandling::DoNotSend,
            _ => return Err(errors::bad_argument("retain_handling must be 0, 1 or 2")),
        };
        let options = SubscriptionOptions {
            qos,
            no_local,
            retain_as_published,
            retain_handling,
        };
        self.inner
            .subscribe(client, filter, options, subscription_identifier)
            .map_err(|e| index_error(py, e, true))
    }

    /// Remove a subscription; False when there was none.
    fn unsubscribe(&mut self, client: u32, filter: &str) -> bool {
        self.inner.unsubscribe(client, filter)
    }

    /// Remove every subscription of a client; returns how many.
    fn remove_client(&mut self, client: u32) -> usize {
        self.inner.remove_client(client)
    }

    fn set_client_online(&mut self, client: u32, online: bool) {
        self.inner.set_client_online(client, online);
    }

    fn is_client_online(&self, client: u32) -> bool {
        self.inner.is_client_online(client)
    }

    /// Match a published topic: `(clients, qos, flags, sub_id_offsets, sub_ids,
    /// unserved_groups)`; the identifiers of delivery `i` are
    /// `sub_ids[sub_id_offsets[i]:sub_id_offsets[i + 1]]`.
    #[pyo3(signature = (topic, publisher = None))]
    fn r#match<'py>(
        &mut self,
        py: Python<'py>,
        topic: &str,
        publisher: Option<u32>,
    ) -> PyResult<MatchLists<'py>> {
        self.inner.match_topic(topic, publisher, &mut self.result);
        let r = &self.result;
        Ok((
            PyList::new(py, r.clients())?,
            PyList::new(py, r.qos())?,
            PyList::new(py, r.flags())?,
            PyList::new(py, r.sub_id_offsets())?,
            PyList::new(py, r.sub_ids())?,
            PyList::new(py, r.unserved_groups())?,
        ))
    }

    /// `$share/{group}/{filter}` of a group id from `unserved_groups`.
    fn shared_group_filter(&self, group: u32) -> Option<String> {
        self.inner.shared_group_filter(group)
    }

    fn shrink_to_fit(&mut self) {
        self.inner.shrink_to_fit();
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let dict = PyDict::new(py);
        dict.set_item("subscriptions", s.subscriptions)?;
        dict.set_item("clients", s.clients)?;
        dict.set_item("exact_filters", s.exact_filters)?;
        dict.set_item("trie_nodes", s.trie_nodes)?;
        dict.set_item("levels", s.levels)?;
        dict.set_item("groups", s.groups)?;
        dict.set_item("heap_bytes", s.heap_bytes)?;
        Ok(dict)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// Retained message ids by topic; see `ferromq_core::retain`.
#[pyclass(module = "ferromq._core")]
pub(crate) struct RetainedIndex {
    inner: CoreRetained,
}

#[pymethods]
impl RetainedIndex {
    #[new]
    fn new() -> RetainedIndex {
        RetainedIndex {
            inner: CoreRetained::new(),
        }
    }

    /// Store `message_id` for `topic`; returns the id it replaced.
    #[pyo3(signature = (topic, message_id, deadline = None))]
    fn set(
        &mut self,
        py: Python<'_>,
        topic: &str,
        message_id: u64,
        deadline: Option<u64>,
    ) -> PyResult<Option<u64>> {
        self.inner
            .set(topic, message_id, deadline)
            .map_err(|e| index_error(py, e, false))
    }

    /// Remove the message of `topic`; returns its id.
    fn clear(&mut self, topic: &str) -> Option<u64> {
        self.inner.clear(topic)
    }

    #[pyo3(signature = (topic, now = 0))]
    fn get(&self, topic: &str, now: u64) -> Option<u64> {
        self.inner.get(topic, now)
    }

    /// Ids of the unexpired messages whose topic matches `filter`.
    #[pyo3(signature = (filter, now = 0))]
    fn match_filter(&mut self, py: Python<'_>, filter: &str, now: u64) -> PyResult<Vec<u64>> {
        let mut out = Vec::new();
        self.inner
            .match_filter(filter, now, &mut out)
            .map_err(|e| index_error(py, e.into(), true))?;
        Ok(out)
    }

    /// Drop the messages expired at `now`; returns their ids.
    fn purge_expired(&mut self, now: u64) -> Vec<u64> {
        let mut out = Vec::new();
        self.inner.purge_expired(now, &mut out);
        out
    }

    fn shrink_to_fit(&mut self) {
        self.inner.shrink_to_fit();
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let dict = PyDict::new(py);
        dict.set_item("topics", s.topics)?;
        dict.set_item("trie_nodes", s.trie_nodes)?;
        dict.set_item("levels", s.levels)?;
        dict.set_item("heap_bytes", s.heap_bytes)?;
        Ok(dict)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}
