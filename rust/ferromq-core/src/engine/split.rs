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
//! Routing, for a record naming an application client:
//! - Enqueue → an application operation whose value is the Message record it
//!   names followed by the Enqueue record itself, so each value reads on its own
//!   (`Engine::restore` takes the concatenated values as journal bytes);
//! - Ack → an application operation (the cursor moves past that delivery);
//! - Release (PUBREC received) → the primary store, which keeps the PUBREL state,
//!   and an application Ack: the client has the message, the cursor moves on. The
//!   Ack that later completes it (PUBCOMP) then goes to the primary store too;
//! - SessionEnd, or a Session record turning the client into a device → the
//!   primary store and an application End (its topic's records are dropped);
//! - anything else → the primary store.
//!
//! A Message record goes to the primary store only when a primary record (a
//! device Enqueue, a Retain) in the batch names it.

use std::collections::{HashMap, HashSet};

use bytes::{Bytes, BytesMut};

use crate::durability::log::RecordReader;
use crate::durability::record::{
    ClientType, JournalError, ACK, ENQUEUE, MESSAGE, RELEASE, RETAIN, SESSION, SESSION_END,
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
}

/// The set of application clients and the routing of each batch.
#[derive(Debug, Default, Clone)]
pub struct JournalSplit {
    application: HashSet<String>,
    /// Application deliveries in PUBCOMP wait, held by the primary store.
    released: HashSet<(String, u16)>,
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

    /// The part of `snapshot` (a whole state) the primary store keeps.
    pub fn primary_part(snapshot: &Bytes) -> Result<Bytes, JournalError> {
        Ok(JournalSplit::new().split(snapshot)?.primary)
    }

    /// Split one batch.
    pub fn split(&mut self, data: &Bytes) -> Result<Split, JournalError> {
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
                Route::Primary if kind == ENQUEUE || kind == RETAIN => {
                    primary_needs.insert(message_id_of(kind, &body)?);
                }
                _ => {}
            }
            routed.push((route, whole));
            at = next;
        }
        let mut primary = BytesMut::new();
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
                Route::Application(ApplicationOp::Enqueue {
                    client, packet_id, ..
                }) => {
                    let id = message_id_of(ENQUEUE, &whole.slice(5..))?;
                    let message = messages
                        .get(&id)
                        .ok_or(JournalError("enqueue names a message not in its batch"))?;
                    let mut value = BytesMut::with_capacity(message.len() + whole.len());
                    value.extend_from_slice(message);
                    value.extend_from_slice(&whole);
                    application.push(ApplicationOp::Enqueue {
                        client,
                        packet_id,
                        value: value.freeze(),
                    });
                }
                Route::Application(op) => application.push(op),
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
            ENQUEUE if is_application => Route::Application(ApplicationOp::Enqueue {
                client: client.to_owned(),
                packet_id: u16_at(rest, 8)?,
                value: Bytes::new(),
            }),
            ACK if is_application => {
                let packet_id = u16_at(rest, 0)?;
                let op = ApplicationOp::Ack {
                    client: client.to_owned(),
                    packet_id,
                };
                if self.released.remove(&(client.to_owned(), packet_id)) {
                    Route::Both(op)
                } else {
                    Route::Application(op)
                }
            }
            RELEASE if is_application => {
                let packet_id = u16_at(rest, 0)?;
                self.released.insert((client.to_owned(), packet_id));
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

/// The message id an Enqueue (after client, sequence, packet id) or a Retain
/// (after topic) names.
fn message_id_of(kind: u8, body: &[u8]) -> Result<u64, JournalError> {
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
    use crate::durability::record::{ClientType, Journal, Record};
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
    fn application_deliveries_leave_the_primary_batch_with_their_messages() {
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
        assert_eq!(primary.len(), 6, "{primary:?}");
        assert!(matches!(&primary[3], Record::Message(m) if m.id == 1));
        assert!(matches!(&primary[4], Record::Enqueue { client, .. } if client == "dev"));
        assert!(
            !primary
                .iter()
                .any(|r| matches!(r, Record::Message(m) if m.id == 2)),
            "a message only an application client names stays out of the primary store"
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
        assert_eq!(
            primary,
            vec![Record::Release {
                client: "app".into(),
                packet_id: 7
            }],
            "PUBREL state stays with the primary store"
        );
        assert!(matches!(
            &out.application[..],
            [
                ApplicationOp::Enqueue { .. },
                ApplicationOp::Ack { packet_id: 7, .. }
            ]
        ));

        // Its PUBCOMP goes to both; the session end ends the application side.
        j.ack("app", 7);
        j.session_end("app");
        let (_, third) = j.take().unwrap();
        let out = split.split(&third).unwrap();
        assert_eq!(records(out.primary).len(), 2);
        assert_eq!(
            out.application[1],
            ApplicationOp::End {
                client: "app".into()
            }
        );
        assert!(split.application_clients().is_empty());
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
    fn a_snapshot_keeps_everything_but_application_deliveries() {
        let mut j = Journal::detached();
        let m = message(4, "t");
        j.session("app", 60, ClientType::Application);
        enqueue(&mut j, "app", 1, &m);
        j.retain("t", Some(&m), 0);
        let (_, snapshot) = j.take().unwrap();
        let primary = records(JournalSplit::primary_part(&snapshot).unwrap());
        assert_eq!(
            primary.len(),
            3,
            "session, message (for the retain), retain"
        );
        assert!(matches!(&primary[2], Record::Retain { message_id: 4, .. }));
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
