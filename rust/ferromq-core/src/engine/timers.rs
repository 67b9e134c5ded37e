//! Time-driven work, once per `tick`: CONNECT timeout, authentication exchanges
//! past the connect timeout (`auth.rs`), keep alive (1.5 × the
//! interval [MQTT-3.1.2-24], DISCONNECT 0x8D in 5.0), delayed wills, session expiry
//! (counted), expired retained messages, and held connections that are due
//! (`hold`; the IO layer also calls `wake` at the time the engine asks for).
//!
//! Cost: O(connections + sessions) per tick; the broker ticks about once a second.

use crate::codec::ReasonCode;

use super::connection::ConnState;
use super::lifecycle::DisconnectReason;
use super::{ConnId, Engine, Event};

impl Engine {
    pub fn tick(&mut self, now: u64) {
        self.clock = now;
        for conn_id in 0..self.conns.len() as ConnId {
            let Some(conn) = self.conns[conn_id as usize].as_ref() else {
                continue;
            };
            if conn.auth.as_ref().is_some_and(|a| now >= a.deadline) {
                self.auth_timed_out(conn_id, now);
                continue;
            }
            match conn.state {
                ConnState::AwaitingConnect { deadline } if now >= deadline => {
                    self.stats.connect_timeouts += 1;
                    self.close_connection(conn_id, DisconnectReason::ConnectTimeout, now);
                }
                // A held connection is not being read: its silence is the broker's.
                ConnState::Connected { .. }
                    if conn.hold.is_none()
                        && conn.keepalive_grace_ms > 0
                        && now.saturating_sub(conn.last_received) > conn.keepalive_grace_ms =>
                {
                    self.events.push(Event::Rejected {
                        conn: conn_id,
                        reason: ReasonCode::KeepAliveTimeout,
                        detail: "no packet within 1.5 x the keep alive",
                    });
                    self.disconnect_with(conn_id, ReasonCode::KeepAliveTimeout);
                    self.close_connection(conn_id, DisconnectReason::KeepAliveTimeout, now);
                }
                _ => {}
            }
        }
        for session in 0..self.sessions.len() as u32 {
            let Some(state) = self.sessions[session as usize].as_mut() else {
                continue;
            };
            if state.pending_will.as_ref().is_some_and(|w| now >= w.due_at) {
                let will = state.pending_will.take().expect("checked above").will;
                if self
                    .acl
                    .will_allowed(&mut state.acl, &will, &mut self.stats)
                {
                    let client_id = state.client_id.clone();
                    self.publish_will(&client_id, will, now);
                }
                // After it was published: a crash between publishes it again.
                self.journal_will(session, None);
            }
            let expired = self.sessions[session as usize]
                .as_ref()
                .is_some_and(|s| s.conn.is_none() && s.expires_at.is_some_and(|at| now >= at));
            if expired {
                self.stats.sessions_expired += 1;
                self.export_session_expired(session, now);
                self.end_session(session, now);
            }
        }
        self.forward_moved(now);
        self.wake(now);
        self.relieve_memory(now);
        let mut expired = Vec::new();
        self.retained.purge_expired(now, &mut expired);
        for id in expired {
            self.retained_messages.remove(&id, &mut self.users);
        }
    }
}
