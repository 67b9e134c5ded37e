//! SUBACK (§3.9): packet id, 5.0 properties, one reason code per requested filter.

use super::error::DecodeError;
use super::packet::{ProtocolVersion, SubAck};
use super::properties::{Properties, PropertyContext};
use super::publish::read_packet_id;
use super::reason::{allowed, ReasonCode};
use super::wire::{Reader, Sink};

impl SubAck {
    pub(crate) fn read(
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<SubAck, DecodeError> {
        let packet_id = read_packet_id(r)?;
        let properties = Properties::decode_for(r, version, PropertyContext::SubAck)?;
        let codes = if version.is_v5() {
            allowed::SUBACK
        } else {
            allowed::SUBACK_V3
        };
        let reasons = read_reason_list(r, codes)?;
        Ok(SubAck {
            packet_id,
            properties,
            reasons,
        })
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u16(self.packet_id);
        self.properties.encode_for(version, out);
        for reason in &self.reasons {
            out.put_u8(*reason as u8);
        }
    }
}

/// The reason-code list that closes SUBACK and 5.0 UNSUBACK: at least one, each allowed.
pub(crate) fn read_reason_list(
    r: &mut Reader<'_>,
    codes: &[ReasonCode],
) -> Result<Vec<ReasonCode>, DecodeError> {
    let mut reasons = Vec::with_capacity(r.remaining());
    while r.remaining() > 0 {
        let reason = ReasonCode::from_u8(r.u8()?)
            .filter(|reason| codes.contains(reason))
            .ok_or(DecodeError::malformed(
                "reason code not valid for this packet",
            ))?;
        reasons.push(reason);
    }
    if reasons.is_empty() {
        return Err(DecodeError::protocol(
            "acknowledgement without reason codes",
        ));
    }
    Ok(reasons)
}
