//! The retained messages a connection's new subscriptions still have to receive,
//! sent as the socket and the client's window allow, never dropped for buffer
//! space or the queue limit [MQTT-3.3.1-9, MQTT-3.8.4-4].
//!
//! A SUBSCRIBE adds one run per filter: the retained ids the filter matched (8
//! bytes each, not a copy of the message), the granted QoS and the subscription
//! identifier. `delivery` drains the cursor where it drains the session's queue:
//! each id is looked up when its turn comes, so a retained message cleared or
//! replaced meanwhile is skipped (its replacement reached the client live), and an
//! expired one is dropped [MQTT-3.3.2-5].
//!
//! Order: deliveries queued before the first pending SUBSCRIBE leave first
//! (`after`: the queue's push count then), then the retained messages, then what
//! arrived since; while the cursor is not empty live deliveries queue behind it.
//! So a topic's live messages never overtake its retained one, which was
//! published before them [MQTT-4.6.0-6].
//!
//! The cursor belongs to the connection: a retained send is not session state
//! (a reconnect's SUBSCRIBE sends them again). An UNSUBSCRIBE drops the filter's
//! run: the server may stop sending what it had not sent yet [MQTT-3.10.4-3].

use std::collections::VecDeque;

use crate::codec::QoS;

#[derive(Debug, Default)]
pub struct RetainedCursor {
    runs: VecDeque<Run>,
    after: u64,
}

#[derive(Debug)]
struct Run {
    filter: Box<str>,
    qos: QoS,
    subscription_ids: Vec<u32>,
    ids: Vec<u64>,
    next: usize,
}

/// The next retained message to send: its id and how the subscription takes it.
pub struct Pending<'a> {
    pub id: u64,
    pub qos: QoS,
    pub subscription_ids: &'a [u32],
}

impl RetainedCursor {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Retained ids `filter` matched, for a subscription granted `qos`; they go
    /// after the deliveries queued so far (`queue_pushed`). A filter already
    /// pending starts again.
    pub fn add(
        &mut self,
        filter: &str,
        qos: QoS,
        subscription_ids: Vec<u32>,
        ids: Vec<u64>,
        queue_pushed: u64,
    ) {
        self.remove(filter);
        if ids.is_empty() {
            return;
        }
        if self.runs.is_empty() {
            self.after = queue_pushed;
        }
        self.runs.push_back(Run {
            filter: filter.into(),
            qos,
            subscription_ids,
            ids,
            next: 0,
        });
    }

    /// The filter was unsubscribed: what it still had to send is dropped.
    pub fn remove(&mut self, filter: &str) {
        self.runs.retain(|run| &*run.filter != filter);
    }

    /// The next message, once the queue has let go of everything queued before
    /// the cursor (`queue_removed`: the queue's removal count).
    pub fn due(&self, queue_removed: u64) -> Option<Pending<'_>> {
        if queue_removed < self.after {
            return None;
        }
        let run = self.runs.front()?;
        Some(Pending {
            id: run.ids[run.next],
            qos: run.qos,
            subscription_ids: &run.subscription_ids,
        })
    }

    /// The message `due` returned was sent or skipped.
    pub fn advance(&mut self) {
        if let Some(run) = self.runs.front_mut() {
            run.next += 1;
            if run.next == run.ids.len() {
                self.runs.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(cursor: &mut RetainedCursor, removed: u64) -> Vec<u64> {
        let mut sent = Vec::new();
        while let Some(pending) = cursor.due(removed) {
            sent.push(pending.id);
            cursor.advance();
        }
        sent
    }

    #[test]
    fn runs_drain_in_subscribe_order_after_what_was_queued_before() {
        let mut cursor = RetainedCursor::default();
        cursor.add("a/#", QoS::AtLeastOnce, vec![], vec![1, 2], 5);
        cursor.add("b", QoS::AtMostOnce, vec![7], vec![3], 9);
        assert!(cursor.due(4).is_none(), "5 queued before: they leave first");
        assert_eq!(drain(&mut cursor, 5), vec![1, 2, 3]);
        assert!(cursor.is_empty());
    }

    #[test]
    fn unsubscribe_and_resubscribe_replace_a_run() {
        let mut cursor = RetainedCursor::default();
        cursor.add("a", QoS::AtLeastOnce, vec![], vec![1, 2], 0);
        cursor.add("b", QoS::AtLeastOnce, vec![], vec![3], 0);
        cursor.advance();
        cursor.add("a", QoS::AtLeastOnce, vec![], vec![4], 0);
        cursor.remove("b");
        assert_eq!(drain(&mut cursor, 0), vec![4]);
    }
}
