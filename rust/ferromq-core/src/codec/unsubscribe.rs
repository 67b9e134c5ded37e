//! UNSUBSCRIBE (§3.10): packet id, 5.0 properties, at least one topic filter.

use super::error::DecodeError;
use super::packet::{ProtocolVersion, Unsubscribe};
use super::properties::{Properties, PropertyContext};
use super::publish::read_packet_id;
use super::wire::{Reader, Sink};
use crate::topic::validate_topic_filter;

impl Unsubscribe {
    pub(crate) fn read(
        r: &mut Reader<'_>,
        version: ProtocolVersion,
    ) -> Result<Unsubscribe, DecodeError> {
        let packet_id = read_packet_id(r)?;
        let properties = Properties::decode_for(r, version, PropertyContext::Unsubscribe)?;
        let mut filters = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string()?;
            validate_topic_filter(&filter).map_err(DecodeError::topic_filter)?;
            filters.push(filter);
        }
        if filters.is_empty() {
            // [MQTT-3.10.3-2]
            return Err(DecodeError::protocol("UNSUBSCRIBE without a topic filter"));
        }
        Ok(Unsubscribe {
            packet_id,
            properties,
            filters,
        })
    }

    pub(crate) fn write<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        out.put_u16(self.packet_id);
        self.properties.encode_for(version, out);
        for filter in &self.filters {
            out.put_string(filter);
        }
    }
}
