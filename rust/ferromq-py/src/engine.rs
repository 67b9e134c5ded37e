//! The broker engine's Python face: one `Engine` per event loop, built from one
//! `EngineSettings` (settings.rs), called per read buffer, per loop tick and per
//! event, never per message.
//!
//! Reads reach the engine through `raw_feed` (raw_feed.rs), a C entry in a capsule
//! that the Cython IO layer calls with a pointer and a length: no Python object per
//! read. Events leave as typed objects (events.rs).

use ferromq_core::codec::{
    Properties, QoS, ReasonCode, RetainHandling, SubscriptionOptions, Utf8Bytes,
};
use ferromq_core::durability::ClientType;
use ferromq_core::engine::{Engine as CoreEngine, Framing, SessionFilter, StreamConfig, StreamKey};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyList};

use crate::acl::{AclBinding, AclRules, AutoSubscription};
use crate::admin::{
    MessageProperties, RetainedMessage, RetainedPage, SessionInfo, SessionPage, Subscription,
};
use crate::bridge::BridgeLink;
use crate::errors;
use crate::events::events_from_core;
use crate::plugins::{verdict_of, PluginFilters, PluginMessage, VerdictTuple};
use crate::raw_feed;
use crate::restore_report::RestoreReport;
use crate::rewrite::RewriteRule;
use crate::settings::EngineSettings;
use crate::stats::EngineStats;
use crate::stream::StreamBatch;
use crate::validation::ValidationRule;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", unsendable)]
pub(crate) struct Engine {
    pub(crate) inner: CoreEngine,
}

#[pymethods]
impl Engine {
    /// An engine with `settings` (`ferromq.engine.engine_settings` builds them from
    /// the config).
    #[new]
    fn new(settings: PyRef<'_, EngineSettings>) -> Engine {
        Engine {
            inner: CoreEngine::new(settings.config.clone(), settings.share_strategy),
        }
    }

    /// Register an accepted socket whose bytes carry MQTT in `framing` ("mqtt" for
    /// TCP and TLS, "websocket" after an HTTP upgrade); returns its connection id.
    #[pyo3(signature = (now, framing = "mqtt"))]
    fn open(&mut self, now: u64, framing: &str) -> PyResult<u32> {
        let framing: Framing = framing.parse().map_err(|e| errors::unknown_name(&e))?;
        Ok(self.inner.open_framed(now, framing))
    }

    /// Make this engine shard `index` of `count` (before its store restores: it then
    /// keeps only the sessions it owns).
    fn set_shards(&mut self, index: u16, count: u16) -> PyResult<()> {
        if index >= count {
            return Err(errors::bad_argument(format!(
                "shard index {index} is not below the shard count {count}"
            )));
        }
        self.inner.set_shards(index, count);
        Ok(())
    }

    /// Another node (its `ClusterPort` slot `to`) claimed `client_id`: close its
    /// connection here with 0x8E; a persistent session stays as a forwarding stub for
    /// `grace_ms`, its state left to the store. Returns the journal batch the store
    /// must confirm before the new owner reads it (0: none pending); None when there
    /// is no such session here.
    fn evict(&mut self, client_id: &str, to: u16, grace_ms: u64, now: u64) -> Option<u64> {
        self.inner.evict(client_id, to, grace_ms, now)
    }

    /// The journal batch holding everything journaled so far (0: all stored).
    fn journal_mark(&self) -> u64 {
        self.inner.journal_mark()
    }

    /// Whether the store has confirmed journal batch `batch`.
    fn journal_confirmed(&self, batch: u64) -> bool {
        self.inner.journal_confirmed(batch)
    }

    /// Client ids the broker assigns start with `prefix` (default "ferromq-").
    fn set_assigned_id_prefix(&mut self, prefix: &str) {
        self.inner.set_assigned_id_prefix(prefix);
    }

    /// Tell the other shards this one (re)started, once its store is restored.
    fn bus_hello(&mut self) {
        self.inner.bus_hello();
    }

    /// Every other shard's subscriptions arrived since `bus_hello` (its `SYNC`).
    fn bus_synced(&self) -> bool {
        self.inner.bus_synced()
    }

    fn connection_lost(&mut self, conn: u32, now: u64) {
        self.inner.connection_lost(conn, now);
    }

    /// Answer an `Authenticate` or `Auth` event finally: reason
    /// code 0 accepts, with `data` as the final Authentication Data. Ignored when
    /// `token` is not the connection's (the socket it was for is gone).
    /// `client_type` ("device" or "application") is the accepted user's, for the
    /// store its persistent session goes to. `acl` binds the ACL rules'
    /// placeholders and carries the answer's own rules (else the CONNECT's user
    /// name binds `%u`).
    #[pyo3(signature = (conn, token, reason_code, now, data = None, client_type = None, acl = None))]
    #[allow(clippy::too_many_arguments)]
    fn complete_auth(
        &mut self,
        conn: u32,
        token: u64,
        reason_code: u8,
        now: u64,
        data: Option<&[u8]>,
        client_type: Option<&str>,
        acl: Option<PyRef<'_, AclBinding>>,
    ) -> PyResult<()> {
        let reason = reason_of(reason_code)?;
        if let Some(acl) = acl {
            self.inner
                .set_acl_binding(conn, token, acl.binding.clone(), acl.rules.clone());
        }
        if let Some(name) = client_type {
            let client_type: ClientType = name.parse().map_err(|e| errors::unknown_name(&e))?;
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

    /// Answer an `Authenticate` or `Auth` event with AUTH 0x18 carrying `data`.
    fn continue_auth(&mut self, conn: u32, token: u64, data: &[u8], now: u64) {
        self.inner.continue_auth(conn, token, data, now);
    }

    fn set_writable(&mut self, conn: u32, writable: bool, now: u64) {
        self.inner.set_writable(conn, writable, now);
    }

    fn tick(&mut self, now: u64) {
        self.inner.tick(now);
    }

    /// Release held connections that are due (a `Wake` event's time has come).
    fn wake(&mut self, now: u64) {
        self.inner.wake(now);
    }

    /// Publish from the broker itself ($SYS, the admin API), with `properties` for
    /// v5 subscribers; returns the number of sessions reached.
    #[pyo3(signature = (topic, payload, qos = 0, retain = false, now = 0, properties = None))]
    fn publish(
        &mut self,
        topic: &str,
        payload: &[u8],
        qos: u8,
        retain: bool,
        now: u64,
        properties: Option<PyRef<'_, MessageProperties>>,
    ) -> PyResult<usize> {
        ferromq_core::topic::validate_topic_name(topic)
            .map_err(|err| errors::bad_argument(format!("topic {topic:?}: {err}")))?;
        // The engine keeps topics as MQTT strings, which may not hold U+0000.
        Utf8Bytes::try_from(topic)
            .map_err(|err| errors::bad_argument(format!("topic {topic:?}: {}", err.detail)))?;
        let qos = qos_of(qos)?;
        let properties = match properties {
            Some(properties) => properties.to_core()?,
            None => Properties::new(),
        };
        Ok(self
            .inner
            .publish_with_properties(topic, payload, qos, retain, &properties, now))
    }

    /// Sessions in slot order from `cursor` (0: the start), at most `limit` (≤
    /// 1,000) that match every filter given; a page may be short: follow `next`.
    #[pyo3(signature = (cursor = 0, limit = 100, *, client_id_prefix = None,
        client_id_contains = None, username = None, connected = None))]
    #[allow(clippy::too_many_arguments)]
    fn sessions(
        &self,
        py: Python<'_>,
        cursor: u64,
        limit: usize,
        client_id_prefix: Option<&str>,
        client_id_contains: Option<&str>,
        username: Option<&str>,
        connected: Option<bool>,
    ) -> PyResult<SessionPage> {
        let filter = SessionFilter {
            client_id_prefix,
            client_id_contains,
            username,
            connected,
        };
        SessionPage::from_core(py, self.inner.sessions(&filter, cursor, limit))
    }

    /// The session of `client_id`, or None.
    fn session(&self, client_id: &str) -> Option<SessionInfo> {
        self.inner.session(client_id).map(SessionInfo::from)
    }

    /// `client_id`'s subscriptions as granted.
    fn subscriptions(&self, py: Python<'_>, client_id: &str) -> PyResult<Vec<Subscription>> {
        let subscriptions = self
            .inner
            .subscriptions(client_id)
            .map_err(|err| errors::admin_error(py, err))?;
        Ok(subscriptions.into_iter().map(Subscription::from).collect())
    }

    /// Subscribe `client_id` to `filter` as its own SUBSCRIBE would; True when new.
    #[pyo3(signature = (client_id, filter, qos, now, *, no_local = false,
        retain_as_published = false, retain_handling = 0, subscription_id = None))]
    #[allow(clippy::too_many_arguments)]
    fn subscribe_for(
        &mut self,
        py: Python<'_>,
        client_id: &str,
        filter: &str,
        qos: u8,
        now: u64,
        no_local: bool,
        retain_as_published: bool,
        retain_handling: u8,
        subscription_id: Option<u32>,
    ) -> PyResult<bool> {
        let retain_handling = match retain_handling {
            0 => RetainHandling::SendAtSubscribe,
            1 => RetainHandling::SendAtSubscribeIfNew,
            2 => RetainHandling::DoNotSend,
            _ => return Err(errors::bad_argument("retain_handling must be 0, 1 or 2")),
        };
        if subscription_id.is_some_and(|id| id == 0 || id > 268_435_455) {
            return Err(errors::bad_argument(
                "subscription_id must be 1 to 268,435,455",
            ));
        }
        let options = SubscriptionOptions {
            qos: qos_of(qos)?,
            no_local,
            retain_as_published,
            retain_handling,
        };
        self.inner
            .subscribe_for(client_id, filter, options, subscription_id, now)
            .map_err(|err| errors::admin_error(py, err))
    }

    /// Remove `client_id`'s subscription to `filter`; False when it had none.
    fn unsubscribe_for(&mut self, py: Python<'_>, client_id: &str, filter: &str) -> PyResult<bool> {
        self.inner
            .unsubscribe_for(client_id, filter)
            .map_err(|err| errors::admin_error(py, err))
    }

    /// Close `client_id`'s connection (v5 DISCONNECT 0x98, will published); False
    /// when it is not connected.
    fn kick(&mut self, py: Python<'_>, client_id: &str, now: u64) -> PyResult<bool> {
        self.inner
            .kick(client_id, now)
            .map_err(|err| errors::admin_error(py, err))
    }

    /// End `client_id`'s offline session (`SessionConflict` while it is connected).
    fn delete_session(&mut self, py: Python<'_>, client_id: &str, now: u64) -> PyResult<()> {
        self.inner
            .delete_session(client_id, now)
            .map_err(|err| errors::admin_error(py, err))
    }

    /// Retained messages matching `filter` in the order they were stored, from
    /// `cursor` (0: the start), at most `limit` (≤ 1,000).
    #[pyo3(signature = (filter, now, cursor = 0, limit = 100))]
    fn retained_messages(
        &mut self,
        py: Python<'_>,
        filter: &str,
        now: u64,
        cursor: u64,
        limit: usize,
    ) -> PyResult<RetainedPage> {
        let page = self
            .inner
            .retained_messages(filter, cursor, limit, now)
            .map_err(|err| errors::admin_error(py, err))?;
        RetainedPage::from_core(py, page)
    }

    /// The retained message of `topic`, or None.
    fn retained_message(
        &self,
        py: Python<'_>,
        topic: &str,
        now: u64,
    ) -> PyResult<Option<RetainedMessage>> {
        self.inner
            .retained_message(topic, now)
            .map(|info| RetainedMessage::from_core(py, info))
            .transpose()
    }

    /// Remove `topic`'s retained message; False when it had none.
    fn clear_retained(&mut self, topic: &str) -> bool {
        self.inner.clear_retained(topic)
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

    /// The events since the last call, one typed object each (events.rs).
    fn take_events<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        events_from_core(py, self.inner.take_events())
    }

    /// A capsule named `ferromq._core.RawFeed` holding the `ferromq_raw_feed` of
    /// `include/ferromq_raw_feed.h`: the C entry the Cython IO layer calls per read.
    fn raw_feed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyCapsule>> {
        let engine: *mut CoreEngine = &mut slf.borrow_mut().inner;
        raw_feed::capsule(slf.py(), engine)
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

    /// The store applies a batch per client, not whole (Redis): bus cursors are kept
    /// per session and confirmed outbox routes dropped explicitly.
    fn set_store_per_client(&mut self, per_client: bool) {
        self.inner.set_store_per_client(per_client);
    }

    fn journal_pending(&self) -> usize {
        self.inner.journal_pending()
    }

    fn journal_done(&mut self, batch: u64) {
        self.inner.journal_done(batch);
    }

    /// Start the `[stream]` export (engine/export.rs): messages of `topics`, events
    /// when `events`, keyed by `key` ("topic", "client", "level:N"); `acked` holds
    /// PUBACK/PUBREC until `stream_done` covers their batch; `boot_id` is the start
    /// time in wall clock microseconds. ValueError names a bad filter or key.
    #[pyo3(signature = (*, topics, events, node, key, acked, boot_id))]
    fn set_stream(
        &mut self,
        topics: Vec<String>,
        events: bool,
        node: String,
        key: &str,
        acked: bool,
        boot_id: u64,
    ) -> PyResult<()> {
        let key = key.parse::<StreamKey>().map_err(errors::stream_setting)?;
        let config = StreamConfig {
            filters: topics,
            events,
            node,
            key,
            acked,
            boot_id_us: boot_id,
        };
        self.inner
            .set_stream(Some(config))
            .map_err(errors::stream_setting)
    }

    /// The stream's records since the last call as the next batch; None when none.
    fn take_stream(&mut self) -> Option<StreamBatch> {
        self.inner.take_stream().map(StreamBatch::new)
    }

    /// The sink has batch `number` and all before it: acknowledgements waiting for
    /// them go out (at the next flush).
    fn stream_done(&mut self, number: u64) {
        self.inner.stream_done(number);
    }

    /// The listener `conn` came in on, for its stream records.
    fn set_listener(&mut self, conn: u32, name: &str) {
        self.inner.set_listener(conn, name);
    }

    /// The client's address for the stream's `connected` / `auth_refused` records.
    fn set_peer(&mut self, conn: u32, token: u64, peer: &str) {
        self.inner.set_peer(conn, token, peer);
    }

    /// Hand `client` one record of `share_filter`'s application group under `token`;
    /// False when it is not online for that group (engine/application_groups.rs).
    fn deliver_application(
        &mut self,
        client: &str,
        share_filter: &str,
        record: &[u8],
        token: u64,
        now: u64,
    ) -> bool {
        self.inner.deliver_application(
            client,
            share_filter,
            bytes::Bytes::copy_from_slice(record),
            token,
            now,
        )
    }

    /// Tokens of application deliveries done with since the last call.
    fn take_application_done(&mut self) -> Vec<u64> {
        self.inner.take_application_done()
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.snapshot())
    }

    /// Rebuild state from journal bytes: what was read, the damaged ranges skipped,
    /// and where and why reading stopped (restore_report.rs).
    fn restore(&mut self, py: Python<'_>, data: &[u8], now: u64) -> PyResult<RestoreReport> {
        let report = self.inner.restore(bytes::Bytes::copy_from_slice(data), now);
        RestoreReport::from_core(py, report)
    }

    /// Give every later CONNECT these subscriptions (`[auto_subscribe]`).
    fn set_auto_subscribe(&mut self, subscriptions: Vec<PyRef<'_, AutoSubscription>>) {
        self.inner.set_auto_subscribe(
            subscriptions
                .iter()
                .map(|s| s.subscription.clone())
                .collect(),
        );
    }

    /// Serve `conn` (just opened on a transport Python dialled and handshook) as the
    /// bridge `link` (`[[bridges]]`); with `websocket_seed` (random, per connection)
    /// in WebSocket frames as their client side.
    #[pyo3(signature = (conn, link, now, websocket_seed = None))]
    fn open_bridge(
        &mut self,
        conn: u32,
        link: PyRef<'_, BridgeLink>,
        now: u64,
        websocket_seed: Option<u64>,
    ) {
        self.inner
            .open_bridge(conn, link.link.clone(), websocket_seed, now);
    }

    /// Rewrite every later PUBLISH, will, SUBSCRIBE and UNSUBSCRIBE by `rules`
    /// (`[[rewrite.rules]]`).
    fn set_rewrite(&mut self, rules: Vec<PyRef<'_, RewriteRule>>) {
        self.inner
            .set_rewrite(rules.iter().map(|r| r.rule.clone()).collect());
    }

    /// Check every later client PUBLISH's payload against `rules`
    /// (`[[validation.rules]]`).
    fn set_validation(&mut self, rules: Vec<PyRef<'_, ValidationRule>>) {
        self.inner
            .set_validation(rules.iter().map(|r| r.rule.clone()).collect());
    }

    /// Match every later client PUBLISH against these plugins' filters, in order
    /// (`ferromq.plugins`); messages set aside for plugins no longer here pass.
    fn set_plugins(&mut self, plugins: Vec<PyRef<'_, PluginFilters>>, now: u64) {
        let filters = plugins.iter().map(|p| p.filters.clone()).collect();
        self.inner.set_plugins(filters, now);
    }

    /// The messages for plugins since the last call, in the order they came.
    fn take_plugin_batch(&mut self, py: Python<'_>) -> PyResult<Vec<PluginMessage>> {
        let batch = self.inner.take_plugin_batch();
        batch
            .into_iter()
            .map(|m| PluginMessage::new(py, m))
            .collect()
    }

    /// Apply plugins' verdicts, each `(id, verdict, topic, payload, reason_code)`
    /// with verdict `pass`, `rewrite` (topic and/or payload not None), `drop` or
    /// `reject` (reason_code ≥ 0x80); ids decided already are ignored. Raises
    /// `ValueError` before applying any when one is malformed.
    fn decide(&mut self, verdicts: Vec<VerdictTuple>, now: u64) -> PyResult<()> {
        let verdicts = verdicts
            .into_iter()
            .map(verdict_of)
            .collect::<PyResult<Vec<_>>>()?;
        for (id, verdict) in verdicts {
            self.inner.decide(id, verdict, now);
        }
        Ok(())
    }

    /// Intercepted messages waiting for a plugin's verdict.
    fn plugin_pending(&self) -> usize {
        self.inner.plugin_pending()
    }

    /// Check every later message against `rules` (None: no rules file),
    /// `default_allow` and `withhold` (a wildcard filter reaching some allowed
    /// topics is granted and the rest withheld per message; false: refused), and
    /// remove the subscriptions they deny at once; returns the removed
    /// `(client_id, filter)` pairs.
    fn set_acl(
        &mut self,
        rules: Option<PyRef<'_, AclRules>>,
        default_allow: bool,
        withhold: bool,
    ) -> Vec<(String, String)> {
        self.inner
            .set_acl(rules.map(|r| r.table.clone()), default_allow, withhold)
    }

    /// Report client events (connect, disconnect, subscribe, unsubscribe) or stop:
    /// on while the broker logs them.
    fn set_client_events(&mut self, on: bool) {
        self.inner.set_client_events(on);
    }

    /// Trace every packet of `client_id`'s connection, now and when it connects
    /// again (`PacketTrace` events), or stop.
    fn trace(&mut self, client_id: &str, on: bool) {
        self.inner.trace(client_id, on);
    }

    /// The client ids traced now, sorted.
    fn traced(&self) -> Vec<String> {
        self.inner.traced()
    }

    fn shutdown(&mut self, now: u64) {
        self.inner.shutdown(now);
    }

    /// Counters and gauges for $SYS and metrics, read per interval or scrape.
    fn stats(&self, py: Python<'_>) -> PyResult<EngineStats> {
        EngineStats::from_core(py, self.inner.stats())
    }
}

fn reason_of(code: u8) -> PyResult<ReasonCode> {
    ReasonCode::from_u8(code)
        .ok_or_else(|| errors::bad_argument(format!("0x{code:02X} is not a reason code")))
}

fn qos_of(qos: u8) -> PyResult<QoS> {
    QoS::from_u8(qos).ok_or_else(|| errors::bad_argument("qos must be 0, 1 or 2"))
}
