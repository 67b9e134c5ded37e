//! UNSUBACK (§3.11): packet id; in 5.0 also properties and one reason per filter.

use super::error::DecodeError;
use super::packet::{ProtocolVersion, UnsubAck};
use super::properties::{Properties, PropertyContext};
use super::publish::read_packet_id;
use super::reason::allowed;
use super::suback::read_reason_list;
use super::wire::{Reader, Sink};

impl UnsubAck {
    pub(crate) fn read(
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<UnsubAck, DecodeError> {
        let packet_id = read_packet_id(r)?;
        if !version.is_v5() {
            r.finish()?;
            return Ok(UnsubAck {
                packet_id,
                properties: Properties::new(),
                reasons: Vec::new(),
            });
        }
        let properties = Properties::decode(r, PropertyContext::UnsubAck)?;
        let reasons = read_reason_list(r, allowed::UNSUBACK)?;
        Ok(UnsubAck {
            packet_id,
            properties,
            reasons,
        })
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u16(self.packet_id);
        if version.is_v5() {
            self.properties.encode(out);
            for reason in &self.reasons {
                out.put_u8(*reason as u8);
            }
        }
    }
}
