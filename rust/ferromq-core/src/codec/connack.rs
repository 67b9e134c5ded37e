//! CONNACK (§3.2): acknowledge flags, then a 3.1.1 return code or a 5.0 reason code
//! with properties.

use super::error::DecodeError;
use super::packet::{ConnAck, ProtocolVersion};
use super::properties::{Properties, PropertyContext};
use super::reason::{allowed, ConnectReturnCode, ReasonCode};
use super::wire::{Reader, Sink};

impl ConnAck {
    pub(crate) fn read(
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<ConnAck, DecodeError> {
        let flags = r.u8()?;
        if flags & 0xFE != 0 {
            // [MQTT-3.2.2-1]
            return Err(DecodeError::malformed("CONNACK reserved flags are set"));
        }
        let code = r.u8()?;
        let accepted = if version.is_v5() {
            let reason = ReasonCode::from_u8(code)
                .filter(|reason| allowed::CONNACK.contains(reason))
                .ok_or(DecodeError::malformed("reason code not valid in CONNACK"))?;
            reason == ReasonCode::Success
        } else {
            let code = ConnectReturnCode::from_u8(code)
                .ok_or(DecodeError::malformed("unknown CONNACK return code"))?;
            code == ConnectReturnCode::Accepted
        };
        let session_present = flags & 0x01 != 0;
        if session_present && !accepted {
            // [MQTT-3.2.2-6] (3.1.1: [MQTT-3.2.2-4])
            return Err(DecodeError::protocol(
                "session present on a refused connection",
            ));
        }
        let properties = Properties::decode_for(r, version, PropertyContext::ConnAck)?;
        r.finish()?;
        Ok(ConnAck {
            session_present,
            code,
            properties,
        })
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u8(u8::from(self.session_present));
        out.put_u8(self.code);
        self.properties.encode_for(version, out);
    }
}
