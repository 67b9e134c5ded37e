//! What the admin API asks of the engine: queries over sessions, subscriptions and
//! retained messages, and the operator's actions (kick, delete a session, subscribe
//! or unsubscribe on a client's behalf; clearing a retained message is
//! `Engine::clear_retained`).
//!
//! The engine runs on the broker's event loop, so every call here is work the
//! message path waits for. Each query is paginated here and bounded per call:
//!
//! - **Sessions** are listed in slot order (`Engine::sessions`), which is stable:
//!   a session keeps its slot for its life, so following `next` never repeats or
//!   skips one that lives throughout (a session created meanwhile may land before
//!   the cursor and be missed, as with Redis' SCAN). A call examines at most
//!   [`SCAN_BUDGET`] slots and returns at most `limit` (≤ [`MAX_PAGE`]) sessions,
//!   so a filter that matches little returns a short, even empty, page with a
//!   `next` cursor: follow `next` until it is None.
//! - **Retained messages** matching a filter are listed in retained-id order (the
//!   order they were stored; a replaced topic moves to the end): one walk of the
//!   retained trie for the filter, O(matching topics) with 8 bytes each, then the
//!   page's `limit` smallest ids above the cursor (`select_nth_unstable`).
//! - **A client's subscriptions**: O(its own subscriptions), as the index keeps
//!   them per client.
//!
//! Actions go through the same functions as the protocol: a subscription made for
//! a client is granted, journaled and sent its retained messages as a SUBSCRIBE's
//! would be (and checked against the ACL the same way); a kick is a v5 DISCONNECT
//! 0x98 Administrative action with the will published, as for a ban.

use bytes::Bytes;

use crate::codec::{Properties, QoS, ReasonCode, SubscriptionOptions};
use crate::topic::IndexError;

use super::subscribe::SubscribeRefusal;
use super::{ConnId, DisconnectReason, Engine};
use crate::durability::record::ClientType;

/// The most items one page holds.
pub const MAX_PAGE: usize = 1000;
/// The most session slots one listing call examines.
pub const SCAN_BUDGET: usize = 10_000;

/// One page of a listing and where the next one starts (None: the end).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<u64>,
}

/// Which sessions a listing returns; every condition given must hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionFilter<'a> {
    pub client_id_prefix: Option<&'a str>,
    pub client_id_contains: Option<&'a str>,
    pub username: Option<&'a str>,
    pub connected: Option<bool>,
}

impl SessionFilter<'_> {
    fn accepts(&self, client_id: &str, username: Option<&str>, connected: bool) -> bool {
        self.client_id_prefix
            .is_none_or(|prefix| client_id.starts_with(prefix))
            && self
                .client_id_contains
                .is_none_or(|part| client_id.contains(part))
            && self.username.is_none_or(|name| username == Some(name))
            && self.connected.is_none_or(|wanted| wanted == connected)
    }
}

/// The connection a session has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub conn: ConnId,
    /// The protocol level: 3 (3.1), 4 (3.1.1) or 5.
    pub protocol: u8,
    /// Granted in CONNACK, in seconds (0: none).
    pub keep_alive: u16,
    /// Engine time of its CONNACK.
    pub connected_at: u64,
}

/// A session as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub client_id: String,
    /// The user name of its last CONNECT.
    pub username: Option<String>,
    pub connection: Option<ConnectionInfo>,
    /// Seconds it outlives its connection (`u32::MAX`: never expires).
    pub expiry_interval: u32,
    /// Engine time it expires at, while offline with a finite expiry.
    pub expires_at: Option<u64>,
    pub client_type: ClientType,
    pub subscriptions: usize,
    /// QoS 1/2 deliveries sent and not yet completed.
    pub inflight: usize,
    /// Deliveries waiting in its queue, and their bytes.
    pub queued: usize,
    pub queued_bytes: u64,
}

/// One subscription of a session, as granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionInfo {
    pub filter: String,
    pub options: SubscriptionOptions,
    /// 0: none.
    pub subscription_id: u32,
}

/// A retained message.
#[derive(Debug, Clone, PartialEq)]
pub struct RetainedInfo {
    /// The page cursor of this message (its retained id).
    pub id: u64,
    pub topic: String,
    pub payload: Bytes,
    pub qos: QoS,
    /// As a subscriber would get them now: Message Expiry Interval is the time left.
    pub properties: Properties,
}

/// Why an admin action could not be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// No session has this client id.
    UnknownClient(String),
    /// The session is in use by a connection (deleting it needs a kick first).
    Connected(String),
    /// The ACL does not let the client subscribe to the filter.
    Denied { client_id: String, filter: String },
    /// A new filter beyond `max_subscriptions_per_client`.
    Quota(String),
    /// A topic filter the index refuses.
    Filter(IndexError),
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::UnknownClient(id) => write!(f, "no session for client id '{id}'"),
            AdminError::Connected(id) => write!(f, "client '{id}' is connected; kick it first"),
            AdminError::Denied { client_id, filter } => {
                write!(
                    f,
                    "the ACL denies client '{client_id}' the filter '{filter}'"
                )
            }
            AdminError::Quota(id) => write!(
                f,
                "client '{id}' holds limits.max_subscriptions_per_client subscriptions"
            ),
            AdminError::Filter(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for AdminError {}

impl Engine {
    /// Sessions `filter` accepts, from slot `cursor` on (0: the start): at most
    /// `limit` (capped at [`MAX_PAGE`]) after examining at most [`SCAN_BUDGET`]
    /// slots.
    pub fn sessions(
        &self,
        filter: &SessionFilter<'_>,
        cursor: u64,
        limit: usize,
    ) -> Page<SessionInfo> {
        let limit = limit.clamp(1, MAX_PAGE);
        let start = usize::try_from(cursor).unwrap_or(usize::MAX);
        let end = start.saturating_add(SCAN_BUDGET).min(self.sessions.len());
        let mut items = Vec::new();
        let mut slot = start;
        while slot < end && items.len() < limit {
            if let Some(state) = &self.sessions[slot] {
                let connected = state.conn.is_some();
                if filter.accepts(&state.client_id, state.username.as_deref(), connected) {
                    items.extend(self.session_info(slot as u32));
                }
            }
            slot += 1;
        }
        Page {
            items,
            next: (slot < self.sessions.len()).then_some(slot as u64),
        }
    }

    /// The session of `client_id`, if there is one.
    pub fn session(&self, client_id: &str) -> Option<SessionInfo> {
        self.session_info(*self.by_client_id.get(client_id)?)
    }

    fn session_info(&self, session: u32) -> Option<SessionInfo> {
        let state = self.sessions.get(session as usize)?.as_ref()?;
        let connection = state
            .conn
            .and_then(|conn| Some((conn, self.conns.get(conn as usize)?.as_ref()?)))
            .map(|(conn, c)| ConnectionInfo {
                conn,
                protocol: c.version.level(),
                keep_alive: c.keep_alive,
                connected_at: c.connected_at,
            });
        Some(SessionInfo {
            client_id: state.client_id.to_string(),
            username: state.username.as_deref().map(str::to_owned),
            connection,
            expiry_interval: state.expiry_interval,
            expires_at: state.expires_at,
            client_type: state.client_type,
            subscriptions: self.index.subscription_count(session),
            inflight: state.inflight.len(),
            queued: state.queue.len(),
            queued_bytes: state.queue.bytes(),
        })
    }

    fn session_of(&self, client_id: &str) -> Result<u32, AdminError> {
        self.by_client_id
            .get(client_id)
            .copied()
            .ok_or_else(|| AdminError::UnknownClient(client_id.to_owned()))
    }

    /// `client_id`'s subscriptions, in the order the index keeps them.
    pub fn subscriptions(&self, client_id: &str) -> Result<Vec<SubscriptionInfo>, AdminError> {
        let session = self.session_of(client_id)?;
        Ok(self
            .index
            .client_subscriptions(session)
            .into_iter()
            .map(|(filter, options, subscription_id)| SubscriptionInfo {
                filter,
                options,
                subscription_id,
            })
            .collect())
    }

    /// Subscribe `client_id`'s session to `filter` as a SUBSCRIBE from it would
    /// (QoS capped by the Maximum QoS, checked against the ACL and
    /// `max_subscriptions_per_client`, journaled; retained messages sent per Retain
    /// Handling when connected). True when it is new.
    pub fn subscribe_for(
        &mut self,
        client_id: &str,
        filter: &str,
        options: SubscriptionOptions,
        subscription_id: Option<u32>,
        now: u64,
    ) -> Result<bool, AdminError> {
        let session = self.session_of(client_id)?;
        self.subscribe_session(session, filter, options, subscription_id, now)
            .map_err(|refusal| match refusal {
                SubscribeRefusal::Filter(err) => AdminError::Filter(err),
                SubscribeRefusal::Quota => AdminError::Quota(client_id.to_owned()),
                SubscribeRefusal::Denied => AdminError::Denied {
                    client_id: client_id.to_owned(),
                    filter: filter.to_owned(),
                },
            })
    }

    /// Remove `client_id`'s subscription to `filter`; false when it had none.
    pub fn unsubscribe_for(&mut self, client_id: &str, filter: &str) -> Result<bool, AdminError> {
        let session = self.session_of(client_id)?;
        let conn = self.sessions[session as usize]
            .as_ref()
            .and_then(|s| s.conn);
        let existed = self.remove_subscription(session, conn, filter);
        self.forget_removed_groups();
        Ok(existed)
    }

    /// Close `client_id`'s connection: v5 DISCONNECT 0x98 Administrative action,
    /// the will published (the client did not ask to go), the session kept per its
    /// expiry. False when it is not connected.
    pub fn kick(&mut self, client_id: &str, now: u64) -> Result<bool, AdminError> {
        let session = self.session_of(client_id)?;
        let Some(conn) = self.sessions[session as usize]
            .as_ref()
            .and_then(|s| s.conn)
        else {
            return Ok(false);
        };
        self.disconnect_with(conn, ReasonCode::AdministrativeAction);
        self.close_connection(
            conn,
            DisconnectReason::Kicked(ReasonCode::AdministrativeAction),
            now,
        );
        Ok(true)
    }

    /// End `client_id`'s offline session: its queue, subscriptions and stored state
    /// go, a will it still holds back is published.
    pub fn delete_session(&mut self, client_id: &str, now: u64) -> Result<(), AdminError> {
        let session = self.session_of(client_id)?;
        if self.sessions[session as usize]
            .as_ref()
            .is_some_and(|s| s.conn.is_some())
        {
            return Err(AdminError::Connected(client_id.to_owned()));
        }
        self.end_session(session, now);
        Ok(())
    }

    /// Retained messages matching `filter`, in retained-id order after `cursor`
    /// (0: the start), at most `limit` (capped at [`MAX_PAGE`]).
    pub fn retained_messages(
        &mut self,
        filter: &str,
        cursor: u64,
        limit: usize,
        now: u64,
    ) -> Result<Page<RetainedInfo>, AdminError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let mut ids = Vec::new();
        self.retained
            .match_filter(filter, now, &mut ids)
            .map_err(|err| AdminError::Filter(err.into()))?;
        ids.retain(|&id| id > cursor);
        let more = ids.len() > limit;
        if more {
            ids.select_nth_unstable(limit);
            ids.truncate(limit);
        }
        ids.sort_unstable();
        let next = if more { ids.last().copied() } else { None };
        let items = ids
            .into_iter()
            .filter_map(|id| self.retained_info(id, now))
            .collect();
        Ok(Page { items, next })
    }

    /// The retained message of `topic`, if it has one.
    pub fn retained_message(&self, topic: &str, now: u64) -> Option<RetainedInfo> {
        self.retained_info(self.retained.get(topic, now)?, now)
    }

    fn retained_info(&self, id: u64, now: u64) -> Option<RetainedInfo> {
        let message = self.retained_messages.get(&id)?;
        Some(RetainedInfo {
            id,
            topic: message.topic.as_str().to_owned(),
            payload: message.payload.clone(),
            qos: message.qos,
            properties: message.delivery_properties(&[], now),
        })
    }
}
