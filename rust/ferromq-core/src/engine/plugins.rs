//! Plugins (`ferromq.plugins`, docs/plugins.md): Python code that sees the client
//! messages of its topic filters in batches and, when it intercepts, decides each.
//!
//! Python registers each plugin's filters and whether it intercepts (`set_plugins`).
//! A client PUBLISH that passed every check (rate, limits, rewrite, ACL, validation,
//! retained quota) and whose topic matches an intercepting plugin is *set aside*: not
//! routed, copied into the plugin batch, and its connection's input held
//! (`Hold::Plugin`) until Python brings the plugin's verdict (`decide`): pass,
//! rewrite (topic, payload), drop (acknowledged as usual, not routed) or reject (a v5
//! QoS 1/2 PUBLISH hears the reason code; others are dropped). So:
//!
//! - a verdict is in order with the rest of that client's packets (what follows the
//!   PUBLISH is parked behind it, as for a rate hold);
//! - the acknowledgement leaves only once the verdict routed the message, through
//!   the barrier as for any message: what is acknowledged when is unchanged, and a
//!   crash before the verdict leaves nothing anywhere (the client, never answered,
//!   sends it again);
//! - several intercepting plugins whose filters match decide in turn, in the order
//!   Python registered them; a rewritten topic is matched again for the next ones.
//!
//! An observing plugin's message is copied once it is accepted (routed) and never
//! waits; at most `OBSERVED_MAX` copies wait for Python, beyond that they are counted
//! (`Stats::plugin_overflow`) and not kept. Python hears `Event::PluginReady` once per
//! batch and takes the batch (`take_plugin_batch`): never one call per message.
//!
//! A verdict for a connection that ended (or was replaced) routes a QoS 0 message
//! (a client that sent PUBLISH and closed at once), and drops a QoS 1/2 one: it was never acknowledged, so the client sends it again when
//! it resumes its session. Wills and the broker's own messages are not shown to
//! plugins. No plugin: one emptiness test per PUBLISH.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{Publish, QoS, ReasonCode, Utf8Bytes};
use crate::topic::{filter_matches, parse_shared_filter, validate_topic_filter};

use super::hold::Hold;
use super::message::Message;
use super::{ConnId, Engine, Event};

/// Observed copies kept for Python at most; more are counted, not kept.
pub const OBSERVED_MAX: usize = 100_000;

/// One plugin as the engine matches it: its topic filters and whether its
/// messages wait for its verdict.
#[derive(Debug, Clone)]
pub struct PluginFilters {
    filters: Vec<Box<str>>,
    intercepts: bool,
}

impl PluginFilters {
    pub fn new(filters: &[String], intercepts: bool) -> Result<Self, String> {
        for filter in filters {
            validate_topic_filter(filter)
                .map_err(|e| format!("filter {filter:?}: {}", e.as_str()))?;
            if matches!(parse_shared_filter(filter), Ok(Some(_))) {
                return Err(format!(
                    "filter {filter:?}: a shared filter; name the topics without $share/"
                ));
            }
        }
        Ok(PluginFilters {
            filters: filters.iter().map(|f| f.as_str().into()).collect(),
            intercepts,
        })
    }

    fn matches(&self, topic: &str) -> bool {
        self.filters.iter().any(|f| filter_matches(f, topic))
    }
}

/// A message as a plugin sees it. `intercepted`: Python must bring a verdict for
/// `id`; otherwise it is a copy of a message already routed.
#[derive(Debug, Clone)]
pub struct PluginMessage {
    pub id: u64,
    pub plugin: usize,
    pub intercepted: bool,
    pub client_id: String,
    pub username: Option<String>,
    pub topic: String,
    pub payload: Bytes,
    pub qos: u8,
    pub retain: bool,
}

/// What a plugin decided for an intercepted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Route it with this topic and/or payload instead.
    Rewrite {
        topic: Option<String>,
        payload: Option<Bytes>,
    },
    /// Acknowledge it as usual, route it nowhere.
    Drop,
    /// A v5 QoS 1/2 PUBLISH hears this reason code (≥ 0x80); others are dropped.
    Reject(ReasonCode),
}

/// An intercepted PUBLISH waiting for its verdict.
#[derive(Debug)]
struct SetAside {
    conn: ConnId,
    /// The connection's token: a verdict for an id reused since is not its own.
    token: u64,
    session: u32,
    /// The session's client id: a session slot reused since is not its own.
    client_id: Box<str>,
    publish: Publish,
    plugin: usize,
}

/// The engine's plugin state.
#[derive(Debug, Default)]
pub(super) struct Plugins {
    filters: Vec<PluginFilters>,
    batch: Vec<PluginMessage>,
    observed: usize,
    set_aside: HashMap<u64, SetAside>,
    next_id: u64,
    signalled: bool,
}

impl Plugins {
    pub(super) fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// The first intercepting plugin from `from` on whose filters match `topic`.
    fn interceptor(&self, topic: &str, from: usize) -> Option<usize> {
        (from..self.filters.len())
            .find(|&p| self.filters[p].intercepts && self.filters[p].matches(topic))
    }
}

impl Engine {
    /// Match every later client PUBLISH against these plugins (replacing any
    /// before). Messages set aside for plugins no longer registered pass.
    pub fn set_plugins(&mut self, plugins: Vec<PluginFilters>, now: u64) {
        self.plugins.filters = plugins;
        let count = self.plugins.filters.len();
        let orphans: Vec<u64> = (self.plugins.set_aside.iter())
            .filter(|(_, s)| s.plugin >= count)
            .map(|(id, _)| *id)
            .collect();
        self.plugins.batch.retain(|m| m.plugin < count);
        for id in orphans {
            self.decide(id, Verdict::Pass, now);
        }
    }

    /// The messages for plugins since the last call, in the order they came.
    pub fn take_plugin_batch(&mut self) -> Vec<PluginMessage> {
        self.plugins.signalled = false;
        self.plugins.observed = 0;
        std::mem::take(&mut self.plugins.batch)
    }

    /// Intercepted messages waiting for a verdict.
    pub fn plugin_pending(&self) -> usize {
        self.plugins.set_aside.len()
    }

    /// Set a client's PUBLISH aside for the first intercepting plugin from `from`
    /// that matches it, holding the connection's input; false when none matches.
    pub(super) fn set_aside(
        &mut self,
        conn_id: ConnId,
        session: u32,
        publish: Publish,
        from: usize,
    ) -> Result<(), Publish> {
        let Some(plugin) = self.plugins.interceptor(publish.topic.as_str(), from) else {
            return Err(publish);
        };
        let Some(conn) = self.conn_mut(conn_id) else {
            return Ok(()); // gone: never acknowledged, sent again on resumption
        };
        conn.hold = Some(Hold::Plugin);
        let token = conn.token;
        let id = self.plugins.next_id;
        self.plugins.next_id += 1;
        let message = self.plugin_message(id, plugin, true, session, &publish);
        let waiting = SetAside {
            conn: conn_id,
            token,
            session,
            client_id: message.client_id.as_str().into(),
            publish,
            plugin,
        };
        self.plugins.batch.push(message);
        self.plugins.set_aside.insert(id, waiting);
        self.signal_plugins();
        Ok(())
    }

    /// Copy an accepted message for each observing plugin whose filters match it.
    pub(super) fn observe(&mut self, session: u32, publish: &Publish) {
        if self.plugins.is_empty() {
            return;
        }
        for plugin in 0..self.plugins.filters.len() {
            let filters = &self.plugins.filters[plugin];
            if filters.intercepts || !filters.matches(publish.topic.as_str()) {
                continue;
            }
            if self.plugins.observed >= OBSERVED_MAX {
                self.stats.plugin_overflow += 1;
                continue;
            }
            self.plugins.observed += 1;
            let message = self.plugin_message(0, plugin, false, session, publish);
            self.plugins.batch.push(message);
            self.signal_plugins();
        }
    }

    /// Apply a plugin's verdict on the message set aside as `id`; an unknown id
    /// (decided already) is ignored. Then the client's parked packets go on.
    pub fn decide(&mut self, id: u64, verdict: Verdict, now: u64) {
        self.clock = now;
        let Some(waiting) = self.plugins.set_aside.remove(&id) else {
            return;
        };
        let (conn, token) = (waiting.conn, waiting.token);
        let live = self
            .conn_mut(conn)
            .is_some_and(|c| c.token == token && !c.is_closed() && c.hold == Some(Hold::Plugin));
        if !live {
            self.decide_orphan(waiting, verdict, now);
            return;
        }
        let SetAside {
            session,
            mut publish,
            plugin,
            ..
        } = waiting;
        match verdict {
            Verdict::Pass => {}
            Verdict::Rewrite { topic, payload } => rewrite(&mut publish, topic, payload),
            Verdict::Drop => {
                self.answer_unrouted(conn, &publish, ReasonCode::Success, "dropped by a plugin");
                self.stats.plugin_dropped += 1;
                return self.release(conn, now);
            }
            Verdict::Reject(reason) => {
                let v5 = self.conn_mut(conn).is_some_and(|c| c.version.is_v5());
                let reason = if v5 { reason } else { ReasonCode::Success };
                self.answer_unrouted(conn, &publish, reason, "refused by a plugin");
                self.stats.plugin_dropped += 1;
                return self.release(conn, now);
            }
        }
        // The next intercepting plugin decides in turn (the hold stays), else it goes.
        if let Err(publish) = self.set_aside(conn, session, publish, plugin + 1) {
            self.accept_publish(conn, session, publish, now);
            self.release(conn, now);
        }
    }

    /// A verdict for a connection that is gone: a passed QoS 0 message is routed (a
    /// client that sent PUBLISH and closed at once), as its session's if that lives on,
    /// else as nobody's; QoS 1/2 was never acknowledged and comes again.
    fn decide_orphan(&mut self, waiting: SetAside, verdict: Verdict, now: u64) {
        let SetAside {
            session,
            client_id,
            mut publish,
            ..
        } = waiting;
        if publish.qos != QoS::AtMostOnce {
            return;
        }
        match verdict {
            Verdict::Pass => {}
            Verdict::Rewrite { topic, payload } => rewrite(&mut publish, topic, payload),
            Verdict::Drop | Verdict::Reject(_) => return,
        }
        let lives_on = (self.sessions.get(session as usize))
            .and_then(Option::as_ref)
            .is_some_and(|s| *s.client_id == *client_id);
        if lives_on {
            // QoS 0: no acknowledgement, so no connection is needed.
            self.accept_publish(ConnId::MAX, session, publish, now);
        } else {
            let message = Message::from_publish(
                &publish.topic,
                &publish.payload,
                publish.qos,
                publish.retain,
                &publish.properties,
                None,
                now,
            );
            self.route(Arc::new(message), now);
        }
    }

    fn plugin_message(
        &self,
        id: u64,
        plugin: usize,
        intercepted: bool,
        session: u32,
        publish: &Publish,
    ) -> PluginMessage {
        let state = self.sessions.get(session as usize).and_then(Option::as_ref);
        PluginMessage {
            id,
            plugin,
            intercepted,
            client_id: state.map_or_else(String::new, |s| s.client_id.to_string()),
            username: state.and_then(|s| s.username.as_deref().map(str::to_owned)),
            topic: publish.topic.as_str().to_owned(),
            payload: publish.payload.clone(),
            qos: publish.qos as u8,
            retain: publish.retain,
        }
    }

    fn signal_plugins(&mut self) {
        if !self.plugins.signalled {
            self.plugins.signalled = true;
            self.events.push(Event::PluginReady);
        }
    }
}

/// A rewrite verdict applied; a topic that is not a valid MQTT string is ignored
/// (Python checks it as a topic name before it gets here).
fn rewrite(publish: &mut Publish, topic: Option<String>, payload: Option<Bytes>) {
    if let Some(topic) = topic.and_then(|t| Utf8Bytes::try_from(t.as_str()).ok()) {
        publish.topic = topic;
    }
    if let Some(payload) = payload {
        publish.payload = payload;
    }
}
