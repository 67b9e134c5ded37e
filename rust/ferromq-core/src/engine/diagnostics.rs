//! Reason Strings and User Properties on packets the broker originates, and the
//! client's Maximum Packet Size.
//!
//! A Reason String explains a refusal for a human. CONNACK and DISCONNECT may always
//! carry one; other packets only while the client's Request Problem Information is
//! 1 [MQTT-3.1.2-29]. Whatever a packet carries, these two properties are the first
//! to go when the packet would exceed the client's Maximum Packet Size
//! [MQTT-3.2.2-19, 3.2.2-20, 3.4.2-2, 3.4.2-3 and the like for each packet]; a packet
//! that still does not fit is not sent [MQTT-3.1.2-25].

use bytes::BytesMut;

use crate::codec::{Packet, Properties, Property, PropertyId, ProtocolVersion, Utf8Bytes};

use super::{ConnId, Engine};

/// The properties of a broker-originated packet that may be dropped to fit.
fn diagnostics_mut(packet: &mut Packet) -> Option<&mut Properties> {
    match packet {
        Packet::ConnAck(p) => Some(&mut p.properties),
        Packet::PubAck(p) | Packet::PubRec(p) | Packet::PubRel(p) | Packet::PubComp(p) => {
            Some(&mut p.properties)
        }
        Packet::SubAck(p) => Some(&mut p.properties),
        Packet::UnsubAck(p) => Some(&mut p.properties),
        Packet::Disconnect(p) | Packet::Auth(p) => Some(&mut p.properties),
        _ => None,
    }
}

fn has_diagnostics(properties: &Properties) -> bool {
    properties
        .iter()
        .any(|p| p.kind() == PropertyId::ReasonString || p.kind() == PropertyId::UserProperty)
}

/// Encode `packet` into `out` within `limit` bytes, leaving out Reason String and
/// User Properties if that makes it fit. False (and `out` unchanged) otherwise.
pub(super) fn encode_fitting(
    packet: &Packet,
    version: ProtocolVersion,
    out: &mut BytesMut,
    limit: u32,
) -> bool {
    let before = out.len();
    let fits = |out: &BytesMut| (out.len() - before) as u64 <= u64::from(limit);
    if packet.encode(version, out).is_ok() && fits(out) {
        return true;
    }
    out.truncate(before);
    let mut slim = packet.clone();
    match diagnostics_mut(&mut slim) {
        Some(properties) if has_diagnostics(properties) => {
            properties.0.retain(|p| {
                p.kind() != PropertyId::ReasonString && p.kind() != PropertyId::UserProperty
            });
        }
        _ => return false,
    }
    if slim.encode(version, out).is_ok() && fits(out) {
        return true;
    }
    out.truncate(before);
    false
}

impl Engine {
    /// A Reason String for a packet other than CONNACK and DISCONNECT, if the
    /// client asked for problem information [MQTT-3.1.2-29].
    pub(super) fn ack_reason_string(&self, conn: ConnId, detail: &'static str) -> Properties {
        let wanted = self
            .conns
            .get(conn as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.version.is_v5() && c.request_problem_info);
        if wanted {
            Properties(vec![Property::ReasonString(Utf8Bytes::from_static(detail))])
        } else {
            Properties::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{ReasonCode, ReasonOnly};

    #[test]
    fn reason_string_is_dropped_to_fit() {
        let mut disconnect = ReasonOnly::new(ReasonCode::QuotaExceeded);
        disconnect.properties = Properties(vec![Property::ReasonString(Utf8Bytes::from_static(
            "a long explanation",
        ))]);
        let packet = Packet::Disconnect(disconnect);
        let mut out = BytesMut::new();
        assert!(encode_fitting(&packet, ProtocolVersion::V5, &mut out, 1000));
        let full = out.len();
        out.clear();
        assert!(encode_fitting(&packet, ProtocolVersion::V5, &mut out, 4));
        assert!(out.len() < full && out.len() <= 4);
        out.clear();
        assert!(!encode_fitting(&packet, ProtocolVersion::V5, &mut out, 2));
        assert!(out.is_empty());
    }
}
