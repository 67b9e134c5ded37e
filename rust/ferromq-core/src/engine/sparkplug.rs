//! Sparkplug B "Aware" (Sparkplug 3.0 §10, as Mosquitto 2.1's plugin, HiveMQ's
//! extension and TBMQ 2.4 do it), on with `[sparkplug] aware`:
//!
//! - a birth certificate routed through the broker, `spBv1.0/{group}/NBIRTH/{node}` or
//!   `spBv1.0/{group}/DBIRTH/{node}/{device}`, is also published by the broker as a
//!   retained message on `$sparkplug/certificates/` + its topic (same payload, QoS
//!   and properties), so a host application that connects later reads every node's
//!   and device's last birth at once. It takes the ordinary publish path (`route`),
//!   so it is stored, replicated to every shard and node, and survives a restart as
//!   any retained message does;
//! - with `ndeath_timestamp`, an NDEATH (`spBv1.0/{group}/NDEATH/{node}`, most often
//!   the will an edge node set at CONNECT, hours before it is sent) has its payload's
//!   `timestamp` (field 1 of the Sparkplug B Payload, a protobuf uint64 of unix
//!   milliseconds) set to the wall-clock time the broker routes it [Sparkplug 3.0:
//!   tck-id-conformance-mqtt-aware-ndeath-timestamp]. A payload that is not a
//!   protobuf message is left as it is.
//!
//! Cost when off: one flag test per routed message; when on, a prefix compare.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::Utf8Bytes;

use super::message::Message;

/// `[sparkplug]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sparkplug {
    pub aware: bool,
    pub ndeath_timestamp: bool,
}

const NAMESPACE: &str = "spBv1.0/";
const CERTIFICATES: &str = "$sparkplug/certificates/";

/// The message type level of a Sparkplug B topic, with the level count it needs.
fn message_type(topic: &str) -> Option<(&str, usize)> {
    let rest = topic.strip_prefix(NAMESPACE)?;
    let mut levels = rest.split('/');
    let _group = levels.next()?;
    let kind = levels.next()?;
    Some((kind, 2 + levels.count()))
}

/// The retained copy the broker publishes for a birth certificate.
pub(super) fn birth_certificate(message: &Message) -> Option<Message> {
    match message_type(&message.topic)? {
        ("NBIRTH", 3) | ("DBIRTH", 4) => {}
        _ => return None,
    }
    let topic = format!("{CERTIFICATES}{}", &*message.topic);
    Some(Message {
        topic: Utf8Bytes::try_from(topic.as_str()).expect("a prefix on a valid topic"),
        retain: true,
        publisher: None, // the broker's own publication
        ..message.copy()
    })
}

/// An NDEATH with its payload's timestamp set to `unix_ms`; None for another topic
/// or a payload that is not a protobuf message.
pub(super) fn stamped_death(message: &Message, unix_ms: u64) -> Option<Message> {
    if message_type(&message.topic)? != ("NDEATH", 3) {
        return None;
    }
    Some(Message {
        payload: with_timestamp(&message.payload, unix_ms)?,
        ..message.copy()
    })
}

const TIMESTAMP_KEY: u64 = 1 << 3; // field 1, wire type 0 (varint)

fn read_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// The protobuf message `payload` with field 1 (varint) set to `unix_ms`: written
/// first, every earlier field 1 dropped, every other field kept as it was.
fn with_timestamp(payload: &[u8], unix_ms: u64) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(payload.len() + 11);
    put_varint(&mut out, TIMESTAMP_KEY);
    put_varint(&mut out, unix_ms);
    let mut at = 0;
    while at < payload.len() {
        let start = at;
        let key = read_varint(payload, &mut at)?;
        match key & 7 {
            0 => {
                read_varint(payload, &mut at)?;
            }
            1 => at += 8,
            2 => {
                let len = usize::try_from(read_varint(payload, &mut at)?).ok()?;
                at = at.checked_add(len)?;
            }
            5 => at += 4,
            _ => return None, // groups (3, 4) are not in Sparkplug B; 6, 7 do not exist
        }
        if at > payload.len() || key >> 3 == 0 {
            return None;
        }
        if key != TIMESTAMP_KEY {
            out.extend_from_slice(&payload[start..at]);
        }
    }
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Properties, QoS};

    fn message(topic: &str, payload: &[u8]) -> Message {
        Message::from_publish(
            topic,
            payload,
            QoS::AtLeastOnce,
            false,
            &Properties::new(),
            Some(3),
            0,
        )
    }

    #[test]
    fn births_get_a_retained_certificate_other_types_none() {
        let node = birth_certificate(&message("spBv1.0/plant/NBIRTH/edge-1", b"b")).unwrap();
        assert_eq!(
            &*node.topic,
            "$sparkplug/certificates/spBv1.0/plant/NBIRTH/edge-1"
        );
        assert!(node.retain);
        assert_eq!(node.publisher, None);
        assert_eq!(node.qos, QoS::AtLeastOnce);
        let device = birth_certificate(&message("spBv1.0/plant/DBIRTH/edge-1/pump", b"d"));
        assert_eq!(
            &*device.unwrap().topic,
            "$sparkplug/certificates/spBv1.0/plant/DBIRTH/edge-1/pump"
        );
        for other in [
            "spBv1.0/plant/NDATA/edge-1",
            "spBv1.0/plant/NBIRTH/edge-1/extra",
            "spBv1.0/plant/DBIRTH/edge-1",
            "spAv1.0/plant/NBIRTH/edge-1",
            "spBv1.0/NBIRTH",
        ] {
            assert!(birth_certificate(&message(other, b"")).is_none(), "{other}");
        }
    }

    #[test]
    fn an_ndeath_timestamp_is_replaced_and_the_rest_kept() {
        // timestamp 5, metric (field 2, bytes "ab"), seq (field 3) 7.
        let payload = [0x08, 0x05, 0x12, 0x02, b'a', b'b', 0x18, 0x07];
        let death = message("spBv1.0/plant/NDEATH/edge-1", &payload);
        let stamped = stamped_death(&death, 1_700_000_000_123).unwrap();
        let mut expected = BytesMut::new();
        put_varint(&mut expected, TIMESTAMP_KEY);
        put_varint(&mut expected, 1_700_000_000_123);
        expected.extend_from_slice(&[0x12, 0x02, b'a', b'b', 0x18, 0x07]);
        assert_eq!(stamped.payload, expected.freeze());
        assert_eq!(stamped.topic, death.topic);
        // Without a timestamp one is added; not a protobuf message: left alone.
        let without = message("spBv1.0/plant/NDEATH/edge-1", &[0x18, 0x07]);
        assert_eq!(
            &stamped_death(&without, 1).unwrap().payload[..],
            &[0x08, 0x01, 0x18, 0x07]
        );
        for garbage in [&b"\xff"[..], b"\x12\x05ab", b"\x0b", b"\x00\x01"] {
            let odd = message("spBv1.0/plant/NDEATH/edge-1", garbage);
            assert!(stamped_death(&odd, 1).is_none(), "{garbage:?}");
        }
        assert!(stamped_death(&message("spBv1.0/plant/DDEATH/e/d", &payload), 1).is_none());
    }
}
