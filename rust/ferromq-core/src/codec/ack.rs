//! PUBACK, PUBREC, PUBREL, PUBCOMP (§3.4-3.7): packet id, then in 5.0 an optional
//! reason code and optional properties. Encoding omits what the spec lets us omit
//! (Success with no properties is two bytes), which is also what peers send.

use super::error::DecodeError;
use super::packet::{Ack, PacketType, ProtocolVersion};
use super::properties::{Properties, PropertyContext};
use super::publish::read_packet_id;
use super::reason::{allowed, ReasonCode};
use super::wire::{Reader, Sink};

fn allowed_and_context(kind: PacketType) -> (&'static [ReasonCode], PropertyContext) {
    match kind {
        PacketType::PubAck => (allowed::PUBACK, PropertyContext::PubAck),
        PacketType::PubRec => (allowed::PUBREC, PropertyContext::PubRec),
        PacketType::PubRel => (allowed::PUBREL, PropertyContext::PubRel),
        _ => (allowed::PUBCOMP, PropertyContext::PubComp),
    }
}

impl Ack {
    pub(crate) fn read(
        kind: PacketType,
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<Ack, DecodeError> {
        let packet_id = read_packet_id(r)?;
        let mut ack = Ack::new(packet_id);
        if version.is_v5() && r.remaining() > 0 {
            let (codes, context) = allowed_and_context(kind);
            ack.reason = ReasonCode::from_u8(r.u8()?)
                .filter(|reason| codes.contains(reason))
                .ok_or(DecodeError::malformed(
                    "reason code not valid for this packet",
                ))?;
            if r.remaining() > 0 {
                ack.properties = Properties::decode(r, context)?;
            }
        }
        r.finish()?;
        Ok(ack)
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u16(self.packet_id);
        write_reason_and_properties(self.reason, &self.properties, version, out);
    }
}

/// The 5.0 tail shared by the acks, DISCONNECT and AUTH: reason code and properties,
/// each left out when it is the default and nothing follows it.
pub(crate) fn write_reason_and_properties<S: Sink>(
    reason: ReasonCode,
    properties: &Properties,
    version: ProtocolVersion,
    out: &mut S,
) {
    if !version.is_v5() || (reason == ReasonCode::Success && properties.is_empty()) {
        return;
    }
    out.put_u8(reason as u8);
    if !properties.is_empty() {
        properties.encode(out);
    }
}
