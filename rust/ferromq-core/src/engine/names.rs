//! Names the broker refuses although they decode: a Response Topic that is not a
//! topic name, and — unless `allow_control_characters` — client ids, user names,
//! topic names and topic filters holding control characters.
//!
//! A Response Topic is the Topic Name of the response and MUST NOT hold wildcards
//! [MQTT-3.3.2-14]; the broker forwards it unaltered [MQTT-3.3.2-15], so accepting
//! one would make the broker send a non-conforming PUBLISH. The packet parses, so
//! this is a Protocol Error (§1.2, §4.13), not a Malformed Packet: 0x82.
//!
//! Control characters (U+0001..U+001F, U+007F..U+009F) SHOULD NOT be sent and a
//! receiver MAY refuse them (5.0 §1.5.4, 3.1.1 §1.5.3). They end up in logs, metrics
//! labels and ACL rules, so they are refused by default, each place with the code
//! that says "well-formed but not accepted":
//!
//! | where                     | 5.0                                      | 3.1 / 3.1.1      |
//! |---------------------------|------------------------------------------|------------------|
//! | client id                 | CONNACK 0x85                             | return code 2    |
//! | user name                 | CONNACK 0x86 (the only user name code)   | return code 4    |
//! | will topic                | CONNACK 0x90                             | close            |
//! | PUBLISH topic             | PUBACK/PUBREC 0x90; QoS 0: DISCONNECT 0x90 | close [MQTT-3.3.5-2] |
//! | SUBSCRIBE filter          | SUBACK 0x8F for that filter              | SUBACK 0x80      |
//! | UNSUBSCRIBE filter        | UNSUBACK 0x8F for that filter            | left alone       |
//!
//! The check is one byte scan (`has_control_character`) of those fields only, run
//! only when the setting refuses them, over bytes the UTF-8 check has just brought
//! into cache; strings in properties and payloads are not looked at. It is not
//! folded into the codec's UTF-8 check because the codec would then have to carry a
//! flag with every string it reads, to serve the four fields that are ever asked.

use crate::codec::{
    has_control_character, Connect, Properties, Property, PropertyId, Publish, ReasonCode,
};
use crate::topic::validate_topic_name;

use super::announce::PublishRefusal;
use super::Engine;

/// The Response Topic is present and not a valid topic name [MQTT-3.3.2-14].
fn bad_response_topic(properties: &Properties) -> bool {
    matches!(
        properties.get(PropertyId::ResponseTopic),
        Some(Property::ResponseTopic(topic)) if validate_topic_name(topic).is_err()
    )
}

impl Engine {
    fn refuses_control_characters(&self, name: &str) -> bool {
        !self.config.allow_control_characters && has_control_character(name)
    }

    /// The reason to refuse a CONNECT for its names, if any.
    pub(super) fn connect_name_refusal(
        &self,
        connect: &Connect,
    ) -> Option<(ReasonCode, &'static str)> {
        if self.refuses_control_characters(&connect.client_id) {
            return Some((
                ReasonCode::ClientIdentifierNotValid,
                "client id contains a control character",
            ));
        }
        if connect
            .username
            .as_ref()
            .is_some_and(|name| self.refuses_control_characters(name))
        {
            return Some((
                ReasonCode::BadUserNameOrPassword,
                "user name contains a control character",
            ));
        }
        let will = connect.will.as_ref()?;
        if bad_response_topic(&will.properties) {
            return Some((
                ReasonCode::ProtocolError,
                "will Response Topic is not a topic name",
            ));
        }
        if self.refuses_control_characters(&will.topic) {
            return Some((
                ReasonCode::TopicNameInvalid,
                "will topic contains a control character",
            ));
        }
        None
    }

    /// The reason to refuse a PUBLISH (its topic alias resolved) for its names.
    pub(super) fn publish_name_refusal(
        &self,
        publish: &Publish,
        v5: bool,
    ) -> Option<PublishRefusal> {
        if bad_response_topic(&publish.properties) {
            return Some(PublishRefusal::Disconnect(
                ReasonCode::ProtocolError,
                "Response Topic is not a topic name",
            ));
        }
        if !self.refuses_control_characters(&publish.topic) {
            return None;
        }
        let (reason, detail) = (
            ReasonCode::TopicNameInvalid,
            "topic name contains a control character",
        );
        // 3.1.1 has no negative PUBACK: close [MQTT-3.3.5-2].
        Some(if v5 {
            PublishRefusal::Reject(reason, detail)
        } else {
            PublishRefusal::Disconnect(reason, detail)
        })
    }

    /// The SUBACK / UNSUBACK code for a filter refused for its characters.
    pub(super) fn filter_name_refusal(&self, filter: &str, v5: bool) -> Option<ReasonCode> {
        self.refuses_control_characters(filter).then_some(if v5 {
            ReasonCode::TopicFilterInvalid
        } else {
            ReasonCode::UnspecifiedError
        })
    }
}
