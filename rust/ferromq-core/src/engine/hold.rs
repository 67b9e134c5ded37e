//! Holding a connection's input: how the engine reads less from a publisher.
//!
//! A connection is *held* when a PUBLISH finds its publish rate spent (`rate`; a
//! 3.x client, which has no reason code for it: MQTT 5.0 clients get DISCONNECT
//! 0x96 instead) or the memory budget exceeded (`memory`). The PUBLISH and every
//! packet decoded after it are parked on the connection, in order, except
//! acknowledgements and PINGREQ, which are handled at once (they free memory and
//! keep the session alive, and their order against the client's PUBLISHes does not
//! matter). `Engine::input_held` tells the IO layer, right after the `feed` that
//! held it, to stop reading the transport, so what is parked is at most one read.
//!
//! Release: a rate hold at the time its buckets have the PUBLISH's cost (the engine
//! raises `Event::Wake { at }` when its earliest such time changes; the IO layer
//! calls `Engine::wake` then, and `tick` does too), a memory hold once the total is
//! at or below the low-water mark (checked in `take_output` and `wake`). Releasing
//! handles the parked packets in order; if one holds the connection again the rest
//! stay parked, else `Event::ResumeReading { conn }` tells the IO layer to read it
//! again. So the IO layer hears of a transition only, never per message. Keep alive
//! is not checked on a held connection (the broker is the one not reading it).
//!
//! Cost: one branch per packet while nothing is held; O(held connections) per wake.

use crate::codec::{Packet, Publish, ReasonCode};

use super::rate;
use super::{ConnId, Engine, Event};

/// Why a connection's input is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Until this engine time, when the publish rate has the PUBLISH's cost.
    Rate { until: u64 },
    /// Until the memory used is at or below the low-water mark.
    Memory,
    /// Until a plugin's verdict on the PUBLISH it set aside (`plugins`).
    Plugin,
}

/// Packets handled even while the connection's input is held.
pub(super) fn passes_hold(packet: &Packet) -> bool {
    matches!(
        packet,
        Packet::PubAck(_)
            | Packet::PubRec(_)
            | Packet::PubRel(_)
            | Packet::PubComp(_)
            | Packet::PingReq
    )
}

impl Engine {
    /// The IO layer should stop reading `conn` until `Event::ResumeReading`.
    pub fn input_held(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.hold.is_some())
    }

    /// Release the holds that are due at `now`: rate holds whose time has come,
    /// memory holds when the memory used is at or below the low-water mark.
    pub fn wake(&mut self, now: u64) {
        self.clock = now;
        self.wake_at = None;
        let memory_ok = self.below_memory_low_water();
        let mut next = None::<u64>;
        for conn_id in std::mem::take(&mut self.held) {
            let hold = self.conn_mut(conn_id).and_then(|c| c.hold);
            let due = match hold {
                Some(Hold::Rate { until }) => until <= now,
                Some(Hold::Memory) => memory_ok,
                Some(Hold::Plugin) | None => continue,
            };
            if due {
                self.release(conn_id, now);
            } else {
                self.held.push(conn_id);
                if let Some(Hold::Rate { until }) = hold {
                    next = Some(next.map_or(until, |n| n.min(until)));
                }
            }
        }
        if let Some(at) = next {
            self.schedule_wake(at);
        }
    }

    /// Release memory holds if the memory used fell to the low-water mark.
    pub(super) fn release_memory_holds(&mut self) {
        if self.memory_held > 0 && self.below_memory_low_water() {
            self.wake(self.clock);
        }
    }

    /// Admit an inbound PUBLISH against the memory budget and the publish rates.
    /// None when it was parked (the connection is held) or the connection ended.
    pub(super) fn admit_publish(
        &mut self,
        conn_id: ConnId,
        session: u32,
        publish: Publish,
        now: u64,
    ) -> Option<Publish> {
        if self.over_memory_budget() && self.session_is_idle(session) {
            self.stats.publishers_paused += 1;
            self.hold_input(conn_id, Hold::Memory, Packet::Publish(publish));
            return None;
        }
        let per_user = self.config.publish_rate.per_user();
        let conn = self.conns.get_mut(conn_id as usize)?.as_mut()?;
        let user_id = conn.user.filter(|_| per_user);
        if conn.rate.is_none() && user_id.is_none() {
            return Some(publish);
        }
        let user = user_id
            .and_then(|id| self.users.get_mut(id))
            .and_then(|u| u.rate.as_mut());
        let bytes = (publish.topic.len() + publish.payload.len()) as u64;
        let Err(wait) = rate::admit(conn.rate.as_deref_mut(), user, bytes, now) else {
            return Some(publish);
        };
        self.stats.publish_rate_exceeded += 1;
        if conn.version.is_v5() {
            self.refuse_with(
                conn_id,
                ReasonCode::MessageRateTooHigh,
                "PUBLISH rate above limits.max_publish_rate or max_publish_bytes_rate",
                now,
            );
        } else {
            let until = now + wait;
            self.hold_input(conn_id, Hold::Rate { until }, Packet::Publish(publish));
            self.schedule_wake(until);
        }
        None
    }

    /// Park `packet` (and, through `feed`, what follows it) until the hold ends.
    fn hold_input(&mut self, conn_id: ConnId, hold: Hold, packet: Packet) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let was = conn.hold.replace(hold);
        conn.parked.push_front(packet);
        if was.is_none() {
            self.held.push(conn_id);
        }
        if hold == Hold::Memory && was != Some(Hold::Memory) {
            if self.memory_held == 0 {
                self.memory_held_since = self.clock;
            }
            self.memory_held += 1;
        } else if hold != Hold::Memory && was == Some(Hold::Memory) {
            self.memory_held -= 1;
        }
    }

    /// End the connection's hold: handle what it parked, then resume reading it.
    pub(super) fn release(&mut self, conn_id: ConnId, now: u64) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let was = conn.hold.take();
        conn.last_received = now;
        if was == Some(Hold::Memory) {
            self.memory_held -= 1;
        }
        self.handle_parked(conn_id, now);
        if self
            .conn_mut(conn_id)
            .is_some_and(|c| !c.is_closed() && c.hold.is_none())
        {
            self.events.push(Event::ResumeReading { conn: conn_id });
        }
    }

    /// Handle parked packets in order until none is left or one holds the
    /// connection again.
    pub(super) fn handle_parked(&mut self, conn_id: ConnId, now: u64) {
        loop {
            let Some(conn) = self.conn_mut(conn_id) else {
                return;
            };
            if conn.is_closed() || conn.hold.is_some() {
                return;
            }
            let Some(session) = conn.session() else {
                return;
            };
            let Some(packet) = conn.parked.pop_front() else {
                return;
            };
            self.handle_connected(conn_id, session, packet, now);
        }
    }

    /// The connection's hold ends with it.
    pub(super) fn forget_hold(&mut self, conn_id: ConnId) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        conn.parked.clear();
        if conn.hold.take() == Some(Hold::Memory) {
            self.memory_held -= 1;
        }
    }

    /// Ask the IO layer to call `wake` at `at` unless an earlier wake is due.
    fn schedule_wake(&mut self, at: u64) {
        if self.wake_at.is_none_or(|w| at < w) {
            self.wake_at = Some(at);
            self.events.push(Event::Wake { at });
        }
    }

    /// The session has no delivery queued or in flight (`memory`: only such a
    /// publisher is held for memory).
    fn session_is_idle(&self, session: u32) -> bool {
        self.sessions
            .get(session as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.queue.is_empty() && s.inflight.is_empty())
    }
}
