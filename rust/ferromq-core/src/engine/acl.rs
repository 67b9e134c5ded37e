//! Access control in the engine: the configured rule table, each session's
//! binding, and the checks on the message path (ACL rules: `crate::acl`).
//!
//! Python compiles the rules file into an [`AclTable`] and hands it over with
//! `set_acl` (at start and on every reload); the authentication answer of a
//! connection may add the binding of its placeholders and rules of its own
//! (`set_acl_binding`, before `complete_auth`), checked before the table. Without
//! either, every check is the default (allow unless `[acl] default = "deny"`),
//! answered without a lookup.
//!
//! Checks, each counted when it denies (`Stats::acl_denied_*`):
//! - PUBLISH (`publish.rs`): v5 QoS 1/2 get PUBACK/PUBREC 0x87; 3.1.1 is acked as
//!   usual (it has no refusal code) and the message is dropped; QoS 0 is dropped;
//! - a will, when it is due to be published (`connect.rs`, `timers.rs`);
//! - each SUBSCRIBE filter (`subscribe.rs`), by what it reaches (`Reach`): every
//!   topic allowed, granted; none, SUBACK 0x87 (v5) / 0x80 (3.1.1) for that filter
//!   only; some (`#` beside a denied `a/secret`), granted and the session marked
//!   `withholds`, or refused under `[acl] wildcards = "refuse"`; a
//!   `$share/{group}/f` is checked as `f`;
//! - each message delivered to a session marked `withholds` (`delivery.rs`), as a
//!   subscription to its topic alone: withheld when denied (`acl_withheld`);
//!   checked as it is delivered and again as a queued one is sent;
//! - each retained message as the retained cursor sends it (`delivery.rs`).
//!
//! A session keeps one cached publish decision (topic and rules generation): a
//! publisher repeating its topic pays one string compare, not a walk. A new table
//! bumps the generation, so the next PUBLISH is checked against it.
//!
//! Revocation: `set_acl` checks every subscription of every session bound in this
//! process again and removes those now denied from the index at once (no later
//! message reaches them); a session restored from the store, whose binding is not
//! known yet, and every resumed session, is checked again when it reconnects.
//! MQTT has no server-side UNSUBSCRIBE, so the client is not told; each removal is
//! counted (`acl_revoked`) and `set_acl` returns them for the log.

use std::sync::Arc;

use crate::acl::{verdict, AclTable, Action, Binding, Permission, Reach, Verdict};
use crate::codec::Will;
use crate::topic::parse_shared_filter;

use super::stats::Stats;
use super::{ConnId, Engine};

/// The configured rules, shared by every check.
#[derive(Debug)]
pub struct AclState {
    table: Option<Arc<AclTable>>,
    default_allow: bool,
    /// A wildcard filter that reaches some allowed topics is granted and the rest
    /// withheld per message (`[acl] wildcards = "withhold"`); false: refused.
    withhold: bool,
    generation: u64,
    /// A session has been marked `withholds` since the engine started; until one
    /// is, no delivery looks up its session for the withhold test (never reset:
    /// one flag on the engine, not a count to keep right).
    narrowed: bool,
}

impl Default for AclState {
    fn default() -> AclState {
        AclState {
            table: None,
            default_allow: true,
            withhold: true,
            generation: 0,
            narrowed: false,
        }
    }
}

/// One session's side: who it is for the rules, and its cached publish decision.
#[derive(Debug, Default)]
pub struct SessionAcl {
    pub binding: Binding,
    /// Rules the authentication answer carried, checked before the table.
    pub own: Option<Arc<AclTable>>,
    /// Bound by a CONNECT in this process (a restored session is not, until it
    /// reconnects).
    pub bound: bool,
    /// One of its subscriptions reaches topics the rules deny: every message is
    /// checked as it is delivered (`Engine::withheld`).
    pub withholds: bool,
    /// The last PUBLISH decision (rules generation, topic, allowed); boxed, so a
    /// session that never publishes under rules keeps 8 bytes for it, not 40.
    last_publish: Option<Box<(u64, String, bool)>>,
}

impl SessionAcl {
    pub fn new(binding: Binding, own: Option<Arc<AclTable>>) -> SessionAcl {
        SessionAcl {
            binding,
            own,
            bound: true,
            withholds: false,
            last_publish: None,
        }
    }
}

impl AclState {
    /// Whether `session` may do `action` on `request` (a topic name, or a filter
    /// without its `$share/{group}/` prefix).
    pub fn allows(&self, session: &mut SessionAcl, action: Action, request: &str) -> bool {
        if self.table.is_none() && session.own.is_none() {
            return self.default_allow;
        }
        if action == Action::Publish {
            if let Some((generation, topic, allowed)) = session.last_publish.as_deref() {
                if *generation == self.generation && topic == request {
                    return *allowed;
                }
            }
        }
        let allowed = self
            .verdict(session, action, request)
            .permission()
            .map_or(self.default_allow, |p| p == Permission::Allow);
        if action == Action::Publish {
            let (generation, topic, cached) = &mut **session
                .last_publish
                .get_or_insert_with(|| Box::new((0, String::new(), false)));
            *generation = self.generation;
            topic.clear();
            topic.push_str(request);
            *cached = allowed;
        }
        allowed
    }

    /// What a subscription of `session` to `request` (a filter without its
    /// `$share/{group}/` prefix) may receive. Without withholding, a filter is
    /// reached in full or not at all.
    pub fn reach(&self, session: &SessionAcl, request: &str) -> Reach {
        match self
            .verdict(session, Action::Subscribe, request)
            .reach(self.default_allow)
        {
            Reach::Some if !self.withhold => Reach::None,
            reach => reach,
        }
    }

    fn verdict(&self, session: &SessionAcl, action: Action, request: &str) -> Verdict {
        let binding = &session.binding;
        match (session.own.as_deref(), self.table.as_deref()) {
            (Some(own), Some(table)) => verdict(&[own, table], binding, action, request),
            (Some(one), None) | (None, Some(one)) => verdict(&[one], binding, action, request),
            (None, None) => Verdict::default(),
        }
    }

    /// A will may be published: checked and counted like a PUBLISH.
    pub fn will_allowed(&self, session: &mut SessionAcl, will: &Will, stats: &mut Stats) -> bool {
        let allowed = self.allows(session, Action::Publish, &will.topic);
        if !allowed {
            stats.acl_denied_publish += 1;
        }
        allowed
    }
}

/// What a SUBSCRIBE filter is checked as: `$share/{group}/f` as `f`.
pub fn subscribe_request(filter: &str) -> &str {
    match parse_shared_filter(filter) {
        Ok(Some(shared)) => shared.filter,
        _ => filter,
    }
}

impl Engine {
    /// Use `table` (None: no rules file), `default_allow` and `withhold` (a
    /// wildcard filter that reaches some allowed topics is granted, the rest
    /// withheld per message; false: refused) for every later check, and remove
    /// the subscriptions they deny from every session bound in this process.
    /// Returns the removed (client id, filter) pairs.
    pub fn set_acl(
        &mut self,
        table: Option<Arc<AclTable>>,
        default_allow: bool,
        withhold: bool,
    ) -> Vec<(String, String)> {
        self.acl = AclState {
            table,
            default_allow,
            withhold,
            generation: self.acl.generation + 1,
            narrowed: self.acl.narrowed, // sessions keep their marks across a reload
        };
        let mut revoked = Vec::new();
        for session in 0..self.sessions.len() as u32 {
            let bound = self
                .sessions
                .get(session as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.acl.bound);
            if bound {
                revoked.extend(self.revoke_denied(session));
            }
        }
        revoked
    }

    /// The binding and own rules Python's authentication answer gives `conn` (the
    /// socket of `token`), applied when its CONNECT is accepted. Ignored for
    /// another token.
    pub fn set_acl_binding(
        &mut self,
        conn_id: ConnId,
        token: u64,
        binding: Binding,
        own: Option<Arc<AclTable>>,
    ) {
        if let Some(conn) = self.conn_mut(conn_id).filter(|c| c.token == token) {
            conn.acl = Some(Box::new(SessionAcl::new(binding, own)));
        }
    }

    /// Check `action` on `request` for `session`, counting a denial.
    pub(super) fn acl_allows(&mut self, session: u32, action: Action, request: &str) -> bool {
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        let allowed = self.acl.allows(&mut state.acl, action, request);
        if !allowed {
            match action {
                Action::Publish => self.stats.acl_denied_publish += 1,
                Action::Subscribe => self.stats.acl_denied_subscribe += 1,
                Action::Read => self.stats.acl_denied_read += 1,
            }
        }
        allowed
    }

    /// What a new subscription of `session` to `filter` may receive, counting a
    /// refusal; one that reaches only some topics has its messages checked as
    /// they are delivered from now on.
    pub(super) fn subscription_reach(&mut self, session: u32, filter: &str) -> Reach {
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return Reach::None;
        };
        let reach = self.acl.reach(&state.acl, subscribe_request(filter));
        match reach {
            Reach::None => self.stats.acl_denied_subscribe += 1,
            Reach::Some => {
                state.acl.withholds = true;
                self.acl.narrowed = true;
            }
            Reach::Every => {}
        }
        reach
    }

    /// A delivery of `topic` to `session` that the rules withhold (one of its
    /// subscriptions reaches only some topics, and not this one); counted. Asked
    /// as the delivery is made and again as a queued one is sent, so a message
    /// queued before a reload or for a restored session is checked against the
    /// rules and the identity of the connection that takes it.
    pub(super) fn withheld(&mut self, session: u32, topic: &str) -> bool {
        let withheld = self.withholds(session, topic);
        if withheld {
            self.stats.acl_withheld += 1;
        }
        withheld
    }

    /// `withheld` without counting: whether the rules would withhold `topic` from
    /// `session` (a shared group looks for a member that may read it).
    pub(super) fn withholds(&mut self, session: u32, topic: &str) -> bool {
        if !self.acl.narrowed {
            return false; // no session was ever narrowed: nothing to look up
        }
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
            .filter(|s| s.acl.withholds && s.acl.bound)
        else {
            return false;
        };
        !self.acl.allows(&mut state.acl, Action::Subscribe, topic)
    }

    /// Remove `session`'s subscriptions the rules now deny (a reload, or a
    /// session resumed by a new CONNECT): out of the index, the journal, the
    /// retained cursor and any application group.
    pub(super) fn revoke_denied(&mut self, session: u32) -> Vec<(String, String)> {
        let mut revoked = Vec::new();
        if let Some(state) = self.session_mut(session) {
            state.acl.withholds = false; // set again below by a filter that needs it
        }
        let unrestricted = self.acl.table.is_none()
            && self.acl.default_allow
            && self
                .sessions
                .get(session as usize)
                .and_then(Option::as_ref)
                .is_none_or(|s| s.acl.own.is_none());
        if unrestricted {
            return revoked; // no ACL: a reconnect costs nothing more than before
        }
        for filter in self.index.client_filters(session) {
            let Some(state) = self
                .sessions
                .get_mut(session as usize)
                .and_then(Option::as_mut)
            else {
                break;
            };
            match self.acl.reach(&state.acl, subscribe_request(&filter)) {
                Reach::Every => continue,
                Reach::Some => {
                    state.acl.withholds = true;
                    self.acl.narrowed = true;
                    continue;
                }
                Reach::None => {}
            }
            let client_id = state.client_id.to_string();
            if let Some(conn) = state.conn.and_then(|c| self.conn_mut(c)) {
                conn.retained.remove(&filter);
            }
            self.application_unsubscribing(session, &filter);
            if self.index.unsubscribe(session, &filter) {
                self.shards_unsubscribed(session, &filter);
            }
            self.journal_unsubscribe(session, &filter);
            self.stats.acl_revoked += 1;
            revoked.push((client_id, filter));
        }
        if !revoked.is_empty() {
            self.forget_removed_groups();
        }
        revoked
    }
}
