//! SUBSCRIBE (§3.8): packet id, 5.0 properties, then topic filters each with an
//! options byte (QoS only in 3.1.1; plus No Local, Retain As Published and Retain
//! Handling in 5.0).

use super::error::DecodeError;
use super::packet::{ProtocolVersion, QoS, RetainHandling, Subscribe, SubscriptionOptions};
use super::properties::{Properties, PropertyContext};
use super::publish::read_packet_id;
use super::wire::{Reader, Sink};
use crate::topic::{parse_shared_filter, validate_topic_filter};

pub(crate) const NO_LOCAL: u8 = 0x04;
pub(crate) const RETAIN_AS_PUBLISHED: u8 = 0x08;

impl SubscriptionOptions {
    fn read(byte: u8, version: ProtocolVersion) -> Result<SubscriptionOptions, DecodeError> {
        let reserved = if version.is_v5() { 0xC0 } else { 0xFC };
        if byte & reserved != 0 {
            // [MQTT-3.8.3-5] (3.1.1: [MQTT-3-8.3-4])
            return Err(DecodeError::malformed(
                "subscription options reserved bits are set",
            ));
        }
        let qos =
            QoS::from_u8(byte & 0x03).ok_or(DecodeError::malformed("subscription QoS is 3"))?;
        let retain_handling = match (byte >> 4) & 0x03 {
            0 => RetainHandling::SendAtSubscribe,
            1 => RetainHandling::SendAtSubscribeIfNew,
            2 => RetainHandling::DoNotSend,
            _ => return Err(DecodeError::protocol("retain handling is 3")),
        };
        Ok(SubscriptionOptions {
            qos,
            no_local: byte & NO_LOCAL != 0,
            retain_as_published: byte & RETAIN_AS_PUBLISHED != 0,
            retain_handling,
        })
    }

    /// Options from a 5.0 options byte (as the journal stores them).
    pub fn from_byte(byte: u8) -> Result<SubscriptionOptions, DecodeError> {
        SubscriptionOptions::read(byte, ProtocolVersion::V5)
    }

    pub fn to_byte(self, version: ProtocolVersion) -> u8 {
        let mut byte = self.qos as u8;
        if version.is_v5() {
            if self.no_local {
                byte |= NO_LOCAL;
            }
            if self.retain_as_published {
                byte |= RETAIN_AS_PUBLISHED;
            }
            byte |= (self.retain_handling as u8) << 4;
        }
        byte
    }
}

impl Subscribe {
    pub(crate) fn read(
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<Subscribe, DecodeError> {
        let packet_id = read_packet_id(r)?;
        let properties = Properties::decode_for(r, version, PropertyContext::Subscribe)?;
        let mut filters = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string()?;
            validate_topic_filter(&filter).map_err(DecodeError::topic_filter)?;
            let options = SubscriptionOptions::read(r.u8()?, version)?;
            if options.no_local && matches!(parse_shared_filter(&filter), Ok(Some(_))) {
                // [MQTT-3.8.3-4]
                return Err(DecodeError::protocol(
                    "No Local set on a shared subscription",
                ));
            }
            filters.push((filter, options));
        }
        if filters.is_empty() {
            // [MQTT-3.8.3-3]
            return Err(DecodeError::protocol("SUBSCRIBE without a topic filter"));
        }
        Ok(Subscribe {
            packet_id,
            properties,
            filters,
        })
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u16(self.packet_id);
        self.properties.encode_for(version, out);
        for (filter, options) in &self.filters {
            out.put_string(filter);
            out.put_u8(options.to_byte(version));
        }
    }
}
