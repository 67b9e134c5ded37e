//! DISCONNECT (§3.14) and AUTH (§3.15): in 5.0 an optional reason code and optional
//! properties (a remaining length of 0 means Success); in 3.1.1 DISCONNECT is empty
//! and AUTH does not exist.

use super::ack::write_reason_and_properties;
use super::error::DecodeError;
use super::packet::{PacketType, ProtocolVersion, ReasonOnly};
use super::properties::{Properties, PropertyContext};
use super::reason::{allowed, ReasonCode};
use super::wire::{Reader, Sink};

impl ReasonOnly {
    pub(crate) fn read(
        kind: PacketType,
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<ReasonOnly, DecodeError> {
        let mut packet = ReasonOnly::new(ReasonCode::Success);
        if version.is_v5() && r.remaining() > 0 {
            let (codes, context) = if kind == PacketType::Auth {
                (allowed::AUTH, PropertyContext::Auth)
            } else {
                (allowed::DISCONNECT, PropertyContext::Disconnect)
            };
            packet.reason = ReasonCode::from_u8(r.u8()?)
                .filter(|reason| codes.contains(reason))
                .ok_or(DecodeError::malformed(
                    "reason code not valid for this packet",
                ))?;
            if r.remaining() > 0 {
                packet.properties = Properties::decode(r, context)?;
            }
        }
        r.finish()?;
        Ok(packet)
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        write_reason_and_properties(self.reason, &self.properties, version, out);
    }
}
