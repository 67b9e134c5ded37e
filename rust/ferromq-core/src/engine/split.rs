//! Splitting the journal between two stores (seed 000): APPLICATION clients' queues
//! go to the application store (Kafka, a topic per client), everything else —
//! sessions, subscriptions, device queues, inbound QoS 2 state, retained messages —
//! to the primary store.
//!
//! The splitter works on raw records (durability/record.rs wire format) and copies them; it
//! decodes only the fields it routes by. It keeps the set of application clients
//! from Session records (client type 1) across batches, so a batch is split by
//! what the journal said before it; after a restart `observe` relearns the set
//! from what the primary store loaded.
//!
//! **The primary store is where a batch commits.** `SplitStore` writes a batch's
//! primary part first and its application part after, so a new application delivery
//! goes to both: its Message and Enqueue records stay in the primary part (with
//! whatever else the batch holds: the publisher's inbound QoS 2 id, a shard's bus
//! cursor), which makes one write decide whether the batch happened. Once the
//! application store confirms a batch (`application_stored`), the next split starts
//! with an Ack record for each of its deliveries the primary still holds, so the
//! primary keeps a delivery only until Kafka has it. A crash between the two writes
//! leaves the delivery in the primary store, which restores it (and keeps it until it
//! is acknowledged: `held`); one after both restores it from each, as one delivery
//! (the engine keys restored deliveries by sequence). Nothing reaches Kafka that the
//! primary store did not take first.
//!
//! Routing, for a record naming an application client:
//! - Enqueue → the primary store (with the Message record it names) and an
//!   application operation whose value is that Message record followed by the
//!   Enqueue record itself, so each value reads on its own (`Engine::restore` takes
//!   the concatenated values as journal bytes);
//! - Ack → an application operation (the cursor moves past that delivery), and the
//!   primary store too while it holds the delivery or its PUBREL state;
//! - Release (PUBREC received) → the primary store, which keeps the PUBREL state,
//!   and an application Ack: the client has the message, the cursor moves on. The
//!   Ack that later completes it (PUBCOMP) then goes to the primary store too;
//! - SessionEnd, or a Session record turning the client into a device → the
//!   primary store and an application End (its topic's records are dropped);
//! - anything else → the primary store.
//!
//! A application group's records (engine/application_groups.rs) go to Kafka alone, as before
//! this design: the group's members' consumers complete them, not Acks.
//!
//! A Message record goes to the primary store only when a primary record (an
//! Enqueue, a Retain, an Outbox's kept route) in the batch names it. A snapshot's primary part
//! (`primary_part`, for compaction) leaves out the deliveries the application store
//! confirmed and keeps the rest.

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};

use super::shared::group_of_journal_name;
use crate::durability::log::RecordReader;
use crate::durability::record::{
    decode_record, ClientType, Journal, JournalError, Record, ACK, ENQUEUE, MESSAGE, OUTBOX,
    RELEASE, RETAIN, SESSION, SESSION_END,
};

/// What the application store must do, in journal order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplicationOp {
    /// Store a delivery; `value` is a Message record then an Enqueue record.
    Enqueue {
        client: String,
        packet_id: u16,
        value: Bytes,
    },
    /// The delivery under `packet_id` no longer needs storing.
    Ack { client: String, packet_id: u16 },
    /// The client's session is gone (or it is no longer an application client).
    End { client: String },
}

/// One batch, split.
#[derive(Debug, Default)]
pub struct Split {
    pub primary: Bytes,
    pub application: Vec<ApplicationOp>,
}

/// Where one record goes.
enum Route {
    Primary,
    Message(u64),
    Application(ApplicationOp),
    Both(ApplicationOp),
    /// An application delivery: its record (and message) to both stores.
    Delivery(ApplicationOp),
}

/// An application client's delivery: client and packet id.
type DeliveryKey = (String, u16);

/// The set of application clients, where their deliveries are, and the routing of
/// each batch.
#[derive(Debug, Default, Clone)]
pub struct JournalSplit {
    application: HashSet<String>,
    /// Application deliveries in PUBCOMP wait, held by the primary store.
    released: HashSet<DeliveryKey>,
    /// Application deliveries the primary store holds, by sequence.
    held: HashMap<DeliveryKey, u64>,
    /// Application deliveries the application store confirmed, by sequence.
    in_application: HashMap<DeliveryKey, u64>,
    /// The application deliveries of the last split, until `application_stored`.
    last_split: Vec<(DeliveryKey, u64)>,
    /// Deliveries the application store has and the primary still holds: the next
    /// split drops them from the primary store.
    moved: Vec<(DeliveryKey, u64)>,
    /// Splitting a snapshot: deliveries in `in_application` stay out of the primary.
    snapshot: bool,
}

impl JournalSplit {
    pub fn new() -> JournalSplit {
        JournalSplit::default()
    }

    /// Application clients known now, sorted.
    pub fn application_clients(&self) -> Vec<String> {
        let mut clients: Vec<String> = self.application.iter().cloned().collect();
        clients.sort();
        clients
    }

    /// Learn the application clients (and PUBCOMP waits) from records the primary
    /// store loaded (in either framing, durability/log.rs), reading past damage as the
    /// restore does; a torn tail ends the reading quietly, as it ends the restore.
    pub fn observe(&mut self, data: &Bytes) {
        let mut reader = RecordReader::recovering(data.clone());
        while let Some(Ok((kind, body))) = reader.next_raw() {
            let _ = self.route(kind, &body);
        }
    }

    /// Learn which deliveries the application store holds from what it loaded
    /// (Message and Enqueue records).
    pub fn observe_application(&mut self, data: &Bytes) {
        let mut reader = RecordReader::recovering(data.clone());
        while let Some(Ok((kind, body))) = reader.next_raw() {
            if kind != ENQUEUE {
                continue;
            }
            if let Ok((key, sequence)) = delivery_of(&body) {
                self.in_application.insert(key, sequence);
            }
        }
    }

    /// The application store has the last split's deliveries: the primary store
    /// drops those it still holds at the next split.
    pub fn application_stored(&mut self) {
        for (key, sequence) in std::mem::take(&mut self.last_split) {
            if self.held.get(&key) == Some(&sequence) {
                self.in_application.insert(key.clone(), sequence);
                self.moved.push((key, sequence));
            }
        }
    }

    /// The part of `snapshot` (a whole state) the primary store keeps: all of it but
    /// the application deliveries the application store confirmed.
    pub fn primary_part(&self, snapshot: &Bytes) -> Result<Bytes, JournalError> {
        let mut split = JournalSplit {
            in_application: self.in_application.clone(),
            snapshot: true,
            ..JournalSplit::default()
        };
        Ok(split.split(snapshot)?.primary)
    }

    /// Split one batch. The primary part starts with the Acks that drop the
    /// deliveries the application store confirmed since the last split.
    pub fn split(&mut self, data: &Bytes) -> Result<Split, JournalError> {
        let mut moved_out = Journal::detached();
        for (key, sequence) in std::mem::take(&mut self.moved) {
            if self.held.get(&key) == Some(&sequence) {
                self.held.remove(&key);
                moved_out.ack(&key.0, key.1);
            }
        }
        let mut primary = BytesMut::new();
        if let Some((_, acks)) = moved_out.take() {
            primary.extend_from_slice(&acks);
        }
        let mut routed = Vec::new();
        let mut messages: HashMap<u64, Bytes> = HashMap::new();
        let mut primary_needs: HashSet<u64> = HashSet::new();
        let mut at = 0;
        while let Some(record) = raw_record(data, at) {
            let (kind, body, next) = record?;
            let whole = data.slice(at..next);
            let route = self.route(kind, &body)?;
            match &route {
                Route::Message(id) => {
                    messages.insert(*id, whole.clone());
                }
                Route::Primary | Route::Delivery(_)
                    if kind == ENQUEUE || kind == RETAIN || kind == OUTBOX =>
                {
                    primary_needs.insert(message_id_of(kind, &body)?);
                }
                _ => {}
            }
            routed.push((route, whole));
            at = next;
        }
        let mut application = Vec::new();
        for (route, whole) in routed {
            match route {
                Route::Primary => primary.extend_from_slice(&whole),
                Route::Message(id) => {
                    if primary_needs.contains(&id) {
                        primary.extend_from_slice(&whole);
                    }
                }
                Route::Both(op) => {
                    primary.extend_from_slice(&whole);
                    application.push(op);
                }
                Route::Delivery(ApplicationOp::Enqueue {
                    client, packet_id, ..
                }) => {
                    primary.extend_from_slice(&whole);
                    self.last_split.push(delivery_of(&whole[5..])?);
                    let value = application_value(&messages, &whole)?;
                    application.push(ApplicationOp::Enqueue {
                        client,
                        packet_id,
                        value,
                    });
                }
                Route::Application(ApplicationOp::Enqueue {
                    client, packet_id, ..
                }) => {
                    let value = application_value(&messages, &whole)?;
                    application.push(ApplicationOp::Enqueue {
                        client,
                        packet_id,
                        value,
                    });
                }
                Route::Application(op) | Route::Delivery(op) => application.push(op),
            }
        }
        Ok(Split {
            primary: primary.freeze(),
            application,
        })
    }

    fn route(&mut self, kind: u8, body: &Bytes) -> Result<Route, JournalError> {
        if kind == MESSAGE {
            return Ok(Route::Message(u64_at(body, 0)?));
        }
        if kind == RETAIN || !(SESSION..=RELEASE).contains(&kind) {
            return Ok(Route::Primary);
        }
        let (client, rest) = client_of(body)?;
        let is_application = self.application.contains(client);
        Ok(match kind {
            SESSION => {
                let client_type = *rest.get(4).ok_or(JournalError("field cut short"))?;
                if client_type == ClientType::Application.code() {
                    self.application.insert(client.to_owned());
                    Route::Primary
                } else if is_application {
                    Route::Both(self.forget(client))
                } else {
                    Route::Primary
                }
            }
            SESSION_END if is_application => Route::Both(self.forget(client)),
            ENQUEUE if is_application => {
                let (key, sequence) = delivery_of(body)?;
                let op = ApplicationOp::Enqueue {
                    client: client.to_owned(),
                    packet_id: key.1,
                    value: Bytes::new(),
                };
                if group_of_journal_name(client).is_some()
                    || (self.snapshot && self.in_application.get(&key) == Some(&sequence))
                {
                    // A application group's record (its members' consumers complete it), or
                    // one the application store has: the primary store goes without.
                    return Ok(Route::Application(op));
                }
                self.in_application.remove(&key);
                self.held.insert(key, sequence);
                Route::Delivery(op)
            }
            ACK if is_application => {
                let packet_id = u16_at(rest, 0)?;
                let key = (client.to_owned(), packet_id);
                self.in_application.remove(&key);
                let primary_holds = self.released.remove(&key) | self.held.remove(&key).is_some();
                let op = ApplicationOp::Ack {
                    client: key.0,
                    packet_id,
                };
                if primary_holds {
                    Route::Both(op)
                } else {
                    Route::Application(op)
                }
            }
            RELEASE if is_application => {
                let packet_id = u16_at(rest, 0)?;
                let key = (client.to_owned(), packet_id);
                self.held.remove(&key);
                self.in_application.remove(&key);
                self.released.insert(key);
                Route::Both(ApplicationOp::Ack {
                    client: client.to_owned(),
                    packet_id,
                })
            }
            _ => Route::Primary,
        })
    }

    fn forget(&mut self, client: &str) -> ApplicationOp {
        self.application.remove(client);
        self.released.retain(|(c, _)| c != client);
        self.held.retain(|(c, _), _| c != client);
        self.in_application.retain(|(c, _), _| c != client);
        self.moved.retain(|((c, _), _)| c != client);
        ApplicationOp::End {
            client: client.to_owned(),
        }
    }
}

/// The record at `at`: kind, body and where the next one starts.
fn raw_record(data: &Bytes, at: usize) -> Option<Result<(u8, Bytes, usize), JournalError>> {
    let rest = data.get(at..).filter(|r| !r.is_empty())?;
    if rest.len() < 5 {
        return Some(Err(JournalError("record header cut short")));
    }
    let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    if rest.len() < 5 + len {
        return Some(Err(JournalError("record body cut short")));
    }
    Some(Ok((
        rest[0],
        data.slice(at + 5..at + 5 + len),
        at + 5 + len,
    )))
}

/// The leading client string of a body and the fields after it.
fn client_of(body: &[u8]) -> Result<(&str, &[u8]), JournalError> {
    let len = usize::from(u16_at(body, 0)?);
    let end = 2 + len;
    let client = body
        .get(2..end)
        .ok_or(JournalError("field cut short"))
        .and_then(|b| std::str::from_utf8(b).map_err(|_| JournalError("string not UTF-8")))?;
    Ok((client, &body[end..]))
}

/// An application Enqueue's value: the Message record it names (from its batch),
/// then the Enqueue record itself.
fn application_value(
    messages: &HashMap<u64, Bytes>,
    enqueue: &Bytes,
) -> Result<Bytes, JournalError> {
    let id = message_id_of(ENQUEUE, &enqueue.slice(5..))?;
    let message = messages
        .get(&id)
        .ok_or(JournalError("enqueue names a message not in its batch"))?;
    let mut value = BytesMut::with_capacity(message.len() + enqueue.len());
    value.extend_from_slice(message);
    value.extend_from_slice(enqueue);
    Ok(value.freeze())
}

/// The delivery an Enqueue body names, and its sequence.
fn delivery_of(body: &[u8]) -> Result<(DeliveryKey, u64), JournalError> {
    let (client, rest) = client_of(body)?;
    Ok(((client.to_owned(), u16_at(rest, 8)?), u64_at(rest, 0)?))
}

/// The message id an Enqueue (after client, sequence, packet id), a Retain (after
/// topic) or an Outbox (a kept route) names.
fn message_id_of(kind: u8, body: &Bytes) -> Result<u64, JournalError> {
    if kind == OUTBOX {
        return match decode_record(kind, body.clone())? {
            Record::Outbox { message_id, .. } => Ok(message_id),
            _ => Err(JournalError("not an outbox record")),
        };
    }
    let (_, rest) = client_of(body)?;
    u64_at(rest, if kind == ENQUEUE { 10 } else { 0 })
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, JournalError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(JournalError("field cut short"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, JournalError> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or(JournalError("field cut short"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Properties, QoS};
    use crate::durability::log::{log_header, log_records, RecordReader, LOG_VERSION};
    use crate::durability::record::{BusPlace, ClientType, Journal, KeptRoute, Record};
    use crate::engine::message::Message;

    fn message(id: u64, topic: &str) -> Message {
        let mut m = Message::from_publish(
            topic,
            b"payload",
            QoS::AtLeastOnce,
            false,
            &Properties::new(),
            None,
            0,
        );
        m.id = id;
        m
    }

    fn records(data: Bytes) -> Vec<Record> {
        RecordReader::new(data).map(Result::unwrap).collect()
    }

    fn enqueue(j: &mut Journal, client: &str, packet_id: u16, m: &Message) {
        j.enqueue(
            client,
            u64::from(packet_id),
            packet_id,
            m,
            QoS::AtLeastOnce,
            false,
            &[],
            0,
        );
    }

    #[test]
    fn application_deliveries_go_to_both_stores_until_the_application_store_has_them() {
        let mut j = Journal::new(true);
        let shared = message(1, "both");
        let only_app = message(2, "app");
        j.session("app", 60, ClientType::Application);
        j.session("dev", 60, ClientType::Device);
        j.subscribe("app", "#", 1, 0);
        enqueue(&mut j, "app", 1, &shared);
        enqueue(&mut j, "dev", 1, &shared);
        enqueue(&mut j, "app", 2, &only_app);
        j.ack("app", 1);
        j.ack("dev", 1);
        let (_, batch) = j.take().unwrap();

        let mut split = JournalSplit::new();
        let out = split.split(&batch).unwrap();

        let primary = records(out.primary);
        assert_eq!(primary.len(), 10, "{primary:?}");
        assert!(matches!(&primary[3], Record::Message(m) if m.id == 1));
        assert!(matches!(&primary[4], Record::Enqueue { client, .. } if client == "app"));
        assert!(matches!(&primary[6], Record::Message(m) if m.id == 2));
        assert!(
            matches!(&primary[8], Record::Ack { client, packet_id: 1 } if client == "app"),
            "the primary store holds the delivery, so it takes its Ack"
        );
        assert_eq!(out.application.len(), 3);
        let ApplicationOp::Enqueue {
            client,
            packet_id,
            value,
        } = &out.application[1]
        else {
            panic!("{:?}", out.application[1]);
        };
        assert_eq!((client.as_str(), *packet_id), ("app", 2));
        let value = records(value.clone());
        assert!(matches!(&value[0], Record::Message(m) if m.id == 2 && m.topic == "app"));
        assert!(matches!(
            &value[1],
            Record::Enqueue {
                packet_id: 2,
                message_id: 2,
                ..
            }
        ));
        assert_eq!(
            out.application[2],
            ApplicationOp::Ack {
                client: "app".into(),
                packet_id: 1
            }
        );
        assert_eq!(split.application_clients(), vec!["app".to_owned()]);

        // Kafka has the batch: the next split drops what the primary still holds (2).
        split.application_stored();
        j.subscribe("dev", "t", 1, 0);
        let (_, next) = j.take().unwrap();
        let primary = records(split.split(&next).unwrap().primary);
        assert!(
            matches!(&primary[..], [Record::Ack { client, packet_id: 2 }, Record::Subscribe { .. }] if client == "app"),
            "{primary:?}"
        );
        split.application_stored();
        j.ack("app", 2);
        let (_, last) = j.take().unwrap();
        let out = split.split(&last).unwrap();
        assert!(out.primary.is_empty(), "its Ack now goes to Kafka alone");
        assert_eq!(out.application.len(), 1);
    }

    #[test]
    fn the_client_set_survives_batches_and_a_restart() {
        let mut j = Journal::new(true);
        j.session("app", 60, ClientType::Application);
        let (_, first) = j.take().unwrap();
        let m = message(3, "t");
        enqueue(&mut j, "app", 7, &m);
        j.release("app", 7);
        let (_, second) = j.take().unwrap();

        // A new process learns the set from what the primary store loaded.
        let mut split = JournalSplit::new();
        split.observe(&first);
        let out = split.split(&second).unwrap();
        let primary = records(out.primary);
        assert!(
            matches!(
                &primary[..],
                [
                    Record::Message(_),
                    Record::Enqueue { .. },
                    Record::Release { packet_id: 7, .. }
                ]
            ),
            "PUBREL state stays with the primary store: {primary:?}"
        );
        assert!(matches!(
            &out.application[..],
            [
                ApplicationOp::Enqueue { .. },
                ApplicationOp::Ack { packet_id: 7, .. }
            ]
        ));
        split.application_stored();

        // Its PUBCOMP goes to both; the session end ends the application side.
        j.ack("app", 7);
        j.session_end("app");
        let (_, third) = j.take().unwrap();
        let out = split.split(&third).unwrap();
        assert_eq!(
            records(out.primary).len(),
            2,
            "a released delivery is not dropped as moved"
        );
        assert_eq!(
            out.application[1],
            ApplicationOp::End {
                client: "app".into()
            }
        );
        assert!(split.application_clients().is_empty());
    }

    #[test]
    fn a_delivery_the_primary_store_holds_at_a_restart_stays_until_acknowledged() {
        let mut j = Journal::new(true);
        j.session("app", 60, ClientType::Application);
        enqueue(&mut j, "app", 5, &message(5, "t"));
        let (_, stored) = j.take().unwrap();
        let mut split = JournalSplit::new();
        split.observe(&stored); // the crash came before Kafka had it
        split.application_stored();
        j.ack("app", 5);
        let (_, ack) = j.take().unwrap();
        let out = split.split(&ack).unwrap();
        assert!(matches!(
            &records(out.primary)[..],
            [Record::Ack { packet_id: 5, .. }]
        ));
    }

    #[test]
    fn observe_reads_the_embedded_stores_checksummed_log() {
        let mut j = Journal::new(true);
        j.session("dev", 60, ClientType::Device);
        j.session("app", 60, ClientType::Application);
        let (_, batch) = j.take().unwrap();
        let mut stored = log_header(LOG_VERSION).to_vec();
        stored.extend_from_slice(&log_records(&batch).unwrap());
        let mut split = JournalSplit::new();
        split.observe(&Bytes::from(stored));
        assert_eq!(split.application_clients(), ["app"]);
    }

    #[test]
    fn a_snapshot_keeps_everything_but_the_deliveries_kafka_has() {
        let mut j = Journal::detached();
        let in_kafka = message(4, "t");
        let not_yet = message(6, "u");
        j.session("app", 60, ClientType::Application);
        enqueue(&mut j, "app", 1, &in_kafka);
        enqueue(&mut j, "app", 2, &not_yet);
        j.retain("t", Some(&in_kafka), 0);
        let (_, snapshot) = j.take().unwrap();
        let mut split = JournalSplit::new();
        let mut loaded = Journal::detached();
        enqueue(&mut loaded, "app", 1, &in_kafka);
        split.observe_application(&loaded.take().unwrap().1);
        let primary = records(split.primary_part(&snapshot).unwrap());
        assert!(
            matches!(
                &primary[..],
                [
                    Record::Session { .. },
                    Record::Message(kept),
                    Record::Message(m),
                    Record::Enqueue { packet_id: 2, .. },
                    Record::Retain { message_id: 4, .. },
                ] if kept.id == 4 && m.id == 6
            ),
            "the retain keeps message 4; delivery 2 is not in Kafka yet: {primary:?}"
        );
    }

    #[test]
    fn a_kept_routes_message_stays_with_the_primary_store() {
        let mut j = Journal::new(true);
        let m = message(8, "t");
        let kept = KeptRoute {
            shard: BusPlace { me: 0, shards: 2 },
            to: 1,
            to_node: None,
            route: 3,
            share_filter: None,
            publisher: "pub",
        };
        j.outbox(&kept, &m, 0);
        let (_, batch) = j.take().unwrap();
        let primary = records(JournalSplit::new().split(&batch).unwrap().primary);
        assert!(
            matches!(&primary[..], [Record::Message(kept), Record::Outbox { message_id: 8, .. }] if kept.id == 8),
            "a restart resends the route with its message: {primary:?}"
        );
    }

    #[test]
    fn an_application_groups_records_go_to_kafka_alone() {
        let mut j = Journal::new(true);
        j.session("\0$share/g/t", 0, ClientType::Application);
        enqueue(&mut j, "\0$share/g/t", 1, &message(9, "t"));
        let (_, batch) = j.take().unwrap();
        let out = JournalSplit::new().split(&batch).unwrap();
        assert!(matches!(
            &records(out.primary)[..],
            [Record::Session { .. }]
        ));
        assert!(matches!(
            &out.application[..],
            [ApplicationOp::Enqueue { .. }]
        ));
    }

    #[test]
    fn a_malformed_batch_is_an_error() {
        let mut j = Journal::new(true);
        j.session("app", 60, ClientType::Application);
        let (_, batch) = j.take().unwrap();
        let torn = batch.slice(..batch.len() - 1);
        assert!(JournalSplit::new().split(&torn).is_err());
    }
}
