//! CONNECT (§3.1): protocol name and level, connect flags, keep alive, properties,
//! then client id, will, username and password.

use super::error::DecodeError;
use super::frame::INVALID_FLAGS;
use super::packet::{Connect, ProtocolVersion, QoS, Will};
use super::properties::{Properties, PropertyContext};
use super::reason::ReasonCode;
use super::wire::{Reader, Sink};
use crate::topic::validate_topic_name;

const RESERVED: u8 = 0x01;
const CLEAN_START: u8 = 0x02;
const WILL_FLAG: u8 = 0x04;
const WILL_RETAIN: u8 = 0x20;
const PASSWORD_FLAG: u8 = 0x40;
const USERNAME_FLAG: u8 = 0x80;

/// A CONNECT of "MQTT" above level 5: a newer protocol than this server's, so the
/// refusal is MQTT 5's CONNACK 0x84 [MQTT-3.1.2-2]; an older or unknown one gets
/// 3.1.1's return code 1, which every earlier client reads.
pub const NEWER_PROTOCOL_LEVEL: DecodeError = unsupported("protocol level above 5");

const fn unsupported(detail: &'static str) -> DecodeError {
    DecodeError {
        reason: ReasonCode::UnsupportedProtocolVersion,
        detail,
    }
}

impl Connect {
    /// Read a CONNECT whose fixed header carried `header_flags`. Those flags and the
    /// reserved connect flag must be 0 in 3.1.1 and 5.0 [MQTT-2.2.2-1, 3.1.2-3]; MQTT 3.1
    /// calls both "not used" (§3.1), so a 3.1 client's values are ignored.
    pub(crate) fn read(header_flags: u8, r: &mut Reader<'_>) -> Result<Connect, DecodeError> {
        let name = r.string()?;
        let level = r.u8()?;
        let protocol = match (name.as_str(), ProtocolVersion::from_level(level)) {
            ("MQTT", Some(v @ (ProtocolVersion::V3_1_1 | ProtocolVersion::V5))) => v,
            ("MQIsdp", Some(ProtocolVersion::V3_1)) => ProtocolVersion::V3_1,
            ("MQTT", None) if level > 5 => return Err(NEWER_PROTOCOL_LEVEL),
            ("MQTT" | "MQIsdp", _) => return Err(unsupported("unsupported protocol level")),
            _ => return Err(unsupported("unknown protocol name")),
        };
        let strict = protocol != ProtocolVersion::V3_1;
        if strict && header_flags != 0 {
            return Err(INVALID_FLAGS); // [MQTT-2.2.2-1, 2.2.2-2]
        }
        let flags = r.u8()?;
        if strict && flags & RESERVED != 0 {
            return Err(DecodeError::malformed("CONNECT reserved flag is set")); // [MQTT-3.1.2-3]
        }
        let will_qos =
            QoS::from_u8((flags >> 3) & 0x03).ok_or(DecodeError::malformed("will QoS is 3"))?; // [MQTT-3.1.2-14]
        let has_will = flags & WILL_FLAG != 0;
        if !has_will && (will_qos != QoS::AtMostOnce || flags & WILL_RETAIN != 0) {
            // [MQTT-3.1.2-11, 3.1.2-13, 3.1.2-15]
            return Err(DecodeError::malformed(
                "will QoS or retain set without a will",
            ));
        }
        let has_username = flags & USERNAME_FLAG != 0;
        let has_password = flags & PASSWORD_FLAG != 0;
        if !protocol.is_v5() && has_password && !has_username {
            // [MQTT-3.1.2-22]
            return Err(DecodeError::malformed(
                "password flag set without username flag",
            ));
        }
        let keep_alive = r.u16()?;
        let properties = Properties::decode_for(r, protocol, PropertyContext::Connect)?;
        let client_id = r.string()?;
        let will = if has_will {
            let properties = Properties::decode_for(r, protocol, PropertyContext::Will)?;
            let topic = r.string()?;
            validate_topic_name(&topic).map_err(DecodeError::topic_name)?;
            Some(Will {
                topic,
                payload: r.binary()?,
                qos: will_qos,
                retain: flags & WILL_RETAIN != 0,
                properties,
            })
        } else {
            None
        };
        let username = if has_username {
            Some(r.string()?)
        } else {
            None
        };
        let password = if has_password {
            Some(r.binary()?)
        } else {
            None
        };
        r.finish()?;
        Ok(Connect {
            protocol,
            clean_start: flags & CLEAN_START != 0,
            keep_alive,
            properties,
            client_id,
            will,
            username,
            password,
        })
    }

    pub(crate) fn write<S: Sink>(&self, out: &mut S) {
        let version = self.protocol;
        out.put_string(self.protocol.protocol_name());
        out.put_u8(self.protocol.level());
        let mut flags = 0;
        if self.clean_start {
            flags |= CLEAN_START;
        }
        if let Some(will) = &self.will {
            flags |= WILL_FLAG | ((will.qos as u8) << 3);
            if will.retain {
                flags |= WILL_RETAIN;
            }
        }
        if self.username.is_some() {
            flags |= USERNAME_FLAG;
        }
        if self.password.is_some() {
            flags |= PASSWORD_FLAG;
        }
        out.put_u8(flags);
        out.put_u16(self.keep_alive);
        self.properties.encode_for(version, out);
        out.put_string(&self.client_id);
        if let Some(will) = &self.will {
            will.properties.encode_for(version, out);
            out.put_string(&will.topic);
            out.put_binary(&will.payload);
        }
        if let Some(username) = &self.username {
            out.put_string(username);
        }
        if let Some(password) = &self.password {
            out.put_binary(password);
        }
    }
}
