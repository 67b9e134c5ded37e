//! Exactly once per arrival: a route from another shard, or a record of a cluster
//! node's topic, is taken by each local session at most once, across restarts of
//! either side and reads of a topic again.
//!
//! Each session keeps, per source (a node topic, or `shard:<n>` for shard `n` of
//! this node when the store is kept per client), the position of the last arrival
//! it took (`Session::applied`: the Kafka offset, or the route number), journaled
//! (`Applied`) with the deliveries that arrival brought it, which the Redis store
//! writes in the same call. An arrival at or below it is skipped. A QoS 1/2
//! delivery to a journaled session waits for that batch before it is sent
//! ([`Engine::held_routed`]): a client never holds what the store may not.
//!
//! A node of shards on the embedded store needs none of this for its routes: its
//! journal batches are whole, so one `BusCursor` per batch says which routes the
//! shard's sessions hold (`shards.rs`, "Exactly once across the bus").

use std::sync::Arc;

use crate::codec::QoS;

use super::message::Message;
use super::session::Session;
use super::Engine;

/// A route or node topic record being applied: where it comes from (a node topic,
/// or `shard:<n>`), its position there (Kafka offset or route number), and for a
/// node topic how far its sender had read the subscription topic when it matched
/// what it carries, and whether that topic is a dead node's this node adopted
/// (`cluster.rs`, "Adoption").
#[derive(Debug)]
pub(super) struct Arriving {
    pub(super) source: Arc<str>,
    pub(super) position: u64,
    pub(super) seen: Option<(u64, bool)>,
}

/// Whether `state` refuses `arriving`: it holds that position already, or the node
/// topic record is not its to take (`cluster.rs`, "Adoption"): a dead node's record
/// goes only to the sessions adopted from that node, matched before their marker;
/// an adopted session takes this node's own records matched from its marker on. A
/// session that took the arrival before (earlier in the same one) is checked by the
/// caller.
fn refuses(state: &Session, arriving: &Arriving) -> bool {
    if let Some((seen, adopted_topic)) = arriving.seen {
        let adopted_from = state.adopted_from.as_deref();
        let takes = if adopted_topic {
            adopted_from.is_some_and(|(dead, marker)| **dead == *arriving.source && seen < *marker)
        } else {
            adopted_from.is_none_or(|(_, marker)| seen >= *marker)
        };
        if !takes {
            return true;
        }
    }
    state
        .applied
        .iter()
        .any(|(source, at)| **source == *arriving.source && *at >= arriving.position)
}

impl Engine {
    /// Records applied from now until [`Engine::end_arrival`] are one arrival.
    pub(super) fn begin_arrival(
        &mut self,
        source: Arc<str>,
        position: u64,
        seen: Option<(u64, bool)>,
    ) {
        if let Some(shards) = self.shards.as_mut() {
            shards.arrivals += 1;
            shards.arriving = Some(Arriving {
                source,
                position,
                seen,
            });
        }
    }

    pub(super) fn end_arrival(&mut self) {
        if let Some(shards) = self.shards.as_mut() {
            shards.arriving = None;
        }
    }

    /// The arrival being applied, and its count.
    pub(super) fn arriving(&self) -> Option<(&Arriving, u64)> {
        let shards = self.shards.as_ref()?;
        Some((shards.arriving.as_ref()?, shards.arrivals))
    }

    /// Whether local session `session` takes what the arrival being applied brings
    /// (true outside one). Taking it moves the session's position for that source,
    /// journaled with the deliveries, once per arrival.
    pub(super) fn accepts_arrival(&mut self, session: u32) -> bool {
        let Some(shards) = self.shards.as_ref() else {
            return true;
        };
        let Some(arriving) = shards.arriving.as_ref() else {
            return true;
        };
        let arrival = shards.arrivals;
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if state.accepted_arrival == arrival {
            return true;
        }
        if refuses(state, arriving) {
            return false;
        }
        match state
            .applied
            .iter_mut()
            .find(|(source, _)| **source == *arriving.source)
        {
            Some((_, at)) => *at = arriving.position,
            None => state
                .applied
                .push((arriving.source.as_ref().into(), arriving.position)),
        }
        state.accepted_arrival = arrival;
        if state.journaled {
            self.journal
                .applied(&state.client_id, &arriving.source, arriving.position);
        }
        true
    }

    /// `message` as another shard's route or a node topic record brings it to local
    /// sessions: a QoS 1/2 one reaching a journaled session is sent to nobody before
    /// the store has its delivery (and the route's number, or the session's position
    /// of the source) (`Message::held_for_batch`), so a crash never leaves a client
    /// holding what the bus or the topic will bring again under a new packet id.
    pub(super) fn held_routed(
        &self,
        message: Arc<Message>,
        mut sessions: impl Iterator<Item = u32>,
    ) -> Arc<Message> {
        if message.qos == QoS::AtMostOnce || message.held_for_batch != 0 {
            return message;
        }
        // Within an arrival: only the sessions that take it (not held already).
        let arriving = self.arriving();
        // Only a journaled session that takes it writes a record the hold waits for.
        let takes_and_journals = |session: u32| {
            self.sessions
                .get(session as usize)
                .and_then(Option::as_ref)
                .is_some_and(|state| {
                    state.journaled
                        && arriving.is_none_or(|(arriving, arrival)| {
                            state.accepted_arrival == arrival || !refuses(state, arriving)
                        })
                })
        };
        if !sessions.any(takes_and_journals) {
            return message;
        }
        Arc::new(message.held_until(self.journal.current_batch()))
    }
}
