//! PUBLISH (§3.3): flags DUP/QoS/RETAIN in the fixed header, topic name, packet id for
//! QoS > 0, 5.0 properties, and the payload as a zero-copy slice of the frame.

use super::error::DecodeError;
use super::packet::{ProtocolVersion, Publish, QoS};
use super::properties::{Properties, PropertyContext, PropertyId};
use super::wire::{Reader, Sink};
use crate::topic::{validate_topic_name, TopicError};

impl Publish {
    pub(crate) fn read(
        flags: u8,
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<Publish, DecodeError> {
        let qos =
            QoS::from_u8((flags >> 1) & 0x03).ok_or(DecodeError::malformed("PUBLISH QoS is 3"))?; // [MQTT-3.3.1-4]
        let dup = flags & 0x08 != 0;
        if dup && qos == QoS::AtMostOnce {
            return Err(DecodeError::malformed("DUP set on a QoS 0 PUBLISH")); // [MQTT-3.3.1-2]
        }
        let topic = r.string()?;
        let packet_id = if qos == QoS::AtMostOnce {
            0
        } else {
            read_packet_id(r)?
        };
        let properties = Properties::decode_for(r, version, PropertyContext::Publish)?;
        match validate_topic_name(&topic) {
            Ok(()) => {}
            // An empty topic stands for a Topic Alias in 5.0 [MQTT-3.3.2-8] ...
            Err(TopicError::Empty) if properties.get(PropertyId::TopicAlias).is_some() => {}
            Err(TopicError::Empty) if version.is_v5() => {
                // ... and without one it is a Protocol Error.
                return Err(DecodeError::protocol(
                    "empty topic name without a topic alias",
                ));
            }
            Err(err) => return Err(DecodeError::topic_name(err)),
        }
        Ok(Publish {
            dup,
            qos,
            retain: flags & 0x01 != 0,
            topic,
            packet_id,
            properties,
            payload: r.rest(),
        })
    }

    pub(crate) fn flags(&self) -> u8 {
        (u8::from(self.dup) << 3) | ((self.qos as u8) << 1) | u8::from(self.retain)
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_string(&self.topic);
        if self.qos != QoS::AtMostOnce {
            out.put_u16(self.packet_id);
        }
        self.properties.encode_for(version, out);
        out.put_slice(&self.payload);
    }
}

/// A packet identifier, which must be non-zero [MQTT-2.3.1-1].
pub(crate) fn read_packet_id(r: &mut Reader<'_>) -> Result<u16, DecodeError> {
    match r.u16()? {
        0 => Err(DecodeError::protocol("packet identifier is 0")),
        id => Ok(id),
    }
}
