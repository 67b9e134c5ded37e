//! What the broker offers a client and holds it to: the CONNACK properties of
//! MQTT 5.0 (§3.2.2.3) and the reason code a client gets for breaking one.
//!
//! [`Features`] is the configurable part. `announce` adds to a successful CONNACK
//! only what differs from the specification's default, the usual convention
//! (Receive Maximum below 65,535, Maximum QoS below 2, an unavailable feature as 0,
//! Topic Alias Maximum above 0); Maximum Packet Size is always sent because the
//! default is "no limit". The checks answer, per packet, the reason to refuse it:
//!
//! | broken limit                    | 5.0                     | 3.1.1            |
//! |---------------------------------|-------------------------|------------------|
//! | Will QoS / Will Retain          | CONNACK 0x9B / 0x9A     | return code 0x03 |
//! | redirect configured             | CONNACK 0x9C / 0x9D     | return code 0x03 |
//! | PUBLISH QoS above Maximum QoS   | DISCONNECT 0x9B         | close            |
//! | PUBLISH RETAIN, not available   | DISCONNECT 0x9A         | close            |
//! | payload not UTF-8 (indicator 1) | PUBACK/PUBREC 0x99; QoS 0: DISCONNECT 0x99 | — |
//! | wildcard / shared filter        | SUBACK 0xA2 / 0x9E      | SUBACK 0x80      |
//! | Subscription Identifier         | DISCONNECT 0xA1         | —                |
//!
//! A SUBSCRIBE above Maximum QoS is granted Maximum QoS [MQTT-3.2.2-10].

use crate::codec::{
    Connect, Properties, Property, PropertyId, ProtocolVersion, Publish, QoS, ReasonCode,
    SubscriptionOptions, Utf8Bytes,
};
use crate::topic::parse_shared_filter;

use super::Engine;

/// The spec's Receive Maximum when none is sent (§3.2.2.3.3).
const DEFAULT_RECEIVE_MAXIMUM: u16 = 65_535;

/// Send every v5 CONNECT elsewhere: CONNACK 0x9C (temporary) or 0x9D (permanent)
/// with a Server Reference (§4.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub server_reference: String,
    pub permanent: bool,
}

/// The optional parts of MQTT the broker offers.
#[derive(Debug, Clone)]
pub struct Features {
    pub maximum_qos: QoS,
    pub retain_available: bool,
    pub wildcard_subscription_available: bool,
    pub subscription_identifiers_available: bool,
    pub shared_subscription_available: bool,
    /// Give a client with an empty client id a broker-made one [MQTT-3.1.3-6].
    pub assign_client_id: bool,
    /// Response Information is this prefix + the client id; empty: never sent.
    pub response_information_prefix: String,
    /// Most topic aliases the broker uses towards one client (also capped by the
    /// client's Topic Alias Maximum); 0: never.
    pub outbound_topic_aliases: u16,
    /// Refuse a PUBLISH whose Payload Format Indicator is 1 and payload not UTF-8.
    pub validate_utf8_payload: bool,
    pub redirect: Option<Redirect>,
}

/// The Rust tests' fixture (see `EngineConfig`'s `Default`): offers everything.
#[cfg(any(test, feature = "test-fixtures"))]
impl Default for Features {
    fn default() -> Features {
        Features {
            maximum_qos: QoS::ExactlyOnce,
            retain_available: true,
            wildcard_subscription_available: true,
            subscription_identifiers_available: true,
            shared_subscription_available: true,
            assign_client_id: true,
            response_information_prefix: String::new(),
            outbound_topic_aliases: 16,
            validate_utf8_payload: false,
            redirect: None,
        }
    }
}

/// What to do with a PUBLISH that breaks a limit.
pub(super) enum PublishRefusal {
    /// End the connection (DISCONNECT in 5.0).
    Disconnect(ReasonCode, &'static str),
    /// QoS 1/2: acknowledge with this reason and do not route; QoS 0 has no
    /// acknowledgement, so it ends the connection.
    Reject(ReasonCode, &'static str),
}

/// The Payload Format Indicator says UTF-8 but the payload is not [MQTT-3.3.2-4].
fn payload_not_utf8(properties: &Properties, payload: &[u8]) -> bool {
    matches!(
        properties.get(PropertyId::PayloadFormatIndicator),
        Some(Property::PayloadFormatIndicator(1))
    ) && std::str::from_utf8(payload).is_err()
}

impl Engine {
    /// The reason to refuse a CONNECT for what the broker offers, if any.
    pub(super) fn connect_refusal(&self, connect: &Connect) -> Option<(ReasonCode, &'static str)> {
        let features = &self.config.features;
        if let Some(redirect) = &features.redirect {
            return Some(if redirect.permanent {
                (ReasonCode::ServerMoved, "this broker has moved")
            } else {
                (ReasonCode::UseAnotherServer, "use another broker")
            });
        }
        let wants_id = connect.protocol != ProtocolVersion::V3_1;
        if wants_id && connect.client_id.is_empty() && !features.assign_client_id {
            return Some((
                ReasonCode::ClientIdentifierNotValid,
                "an empty client id is not accepted (mqtt5.assign_client_id is off)",
            ));
        }
        let will = connect.will.as_ref()?;
        if will.qos > features.maximum_qos {
            // [MQTT-3.2.2-12]
            return Some((ReasonCode::QosNotSupported, "will QoS above Maximum QoS"));
        }
        if will.retain && !features.retain_available {
            // [MQTT-3.2.2-13]
            return Some((
                ReasonCode::RetainNotSupported,
                "retained will not available",
            ));
        }
        if features.validate_utf8_payload && payload_not_utf8(&will.properties, &will.payload) {
            return Some((
                ReasonCode::PayloadFormatInvalid,
                "will payload is not UTF-8 as its format indicator says",
            ));
        }
        None
    }

    /// The CONNACK properties of a successful v5 CONNECT that describe the broker.
    pub(super) fn announce(
        &self,
        connect_properties: &Properties,
        client_id: &str,
        out: &mut Vec<Property>,
    ) {
        let config = &self.config;
        let features = &config.features;
        if config.receive_maximum != DEFAULT_RECEIVE_MAXIMUM {
            out.push(Property::ReceiveMaximum(config.receive_maximum));
        }
        if features.maximum_qos != QoS::ExactlyOnce {
            // [MQTT-3.2.2-9]
            out.push(Property::MaximumQos(features.maximum_qos as u8));
        }
        if !features.retain_available {
            out.push(Property::RetainAvailable(0));
        }
        out.push(Property::MaximumPacketSize(config.max_packet_size));
        if config.max_topic_alias > 0 {
            out.push(Property::TopicAliasMaximum(config.max_topic_alias));
        }
        if !features.wildcard_subscription_available {
            out.push(Property::WildcardSubscriptionAvailable(0));
        }
        if !features.subscription_identifiers_available {
            out.push(Property::SubscriptionIdentifierAvailable(0));
        }
        if !features.shared_subscription_available {
            out.push(Property::SharedSubscriptionAvailable(0));
        }
        let wants_response_information = matches!(
            connect_properties.get(PropertyId::RequestResponseInformation),
            Some(Property::RequestResponseInformation(1))
        );
        if wants_response_information && !features.response_information_prefix.is_empty() {
            // §4.10.2: the client builds response topics from this.
            let info = format!("{}{client_id}", features.response_information_prefix);
            if let Ok(info) = Utf8Bytes::try_from(info) {
                out.push(Property::ResponseInformation(info));
            }
        }
    }

    /// The CONNACK properties of a refusal: why, and where to go instead.
    pub(super) fn refusal_properties(
        &self,
        reason: ReasonCode,
        detail: &'static str,
    ) -> Properties {
        let mut properties = Vec::new();
        if detail != reason.name() {
            properties.push(Property::ReasonString(Utf8Bytes::from_static(detail)));
        }
        if let (ReasonCode::UseAnotherServer | ReasonCode::ServerMoved, Some(redirect)) =
            (reason, &self.config.features.redirect)
        {
            if let Ok(reference) = Utf8Bytes::try_from(redirect.server_reference.as_str()) {
                properties.push(Property::ServerReference(reference));
            }
        }
        Properties(properties)
    }

    /// The reason to refuse a PUBLISH for what the broker offers, if any.
    pub(super) fn publish_refusal(&self, publish: &Publish) -> Option<PublishRefusal> {
        let features = &self.config.features;
        if publish.qos > features.maximum_qos {
            // [MQTT-3.2.2-11]
            return Some(PublishRefusal::Disconnect(
                ReasonCode::QosNotSupported,
                "PUBLISH QoS above the Maximum QoS announced",
            ));
        }
        if publish.retain && !features.retain_available {
            // [MQTT-3.2.2-14]
            return Some(PublishRefusal::Disconnect(
                ReasonCode::RetainNotSupported,
                "RETAIN set but Retain Available is 0",
            ));
        }
        if features.validate_utf8_payload && payload_not_utf8(&publish.properties, &publish.payload)
        {
            return Some(PublishRefusal::Reject(
                ReasonCode::PayloadFormatInvalid,
                "payload is not UTF-8 as its format indicator says",
            ));
        }
        None
    }

    /// A SUBSCRIBE carrying a Subscription Identifier the broker does not offer.
    pub(super) fn subscription_id_refused(&self, subscription_id: Option<u32>) -> bool {
        subscription_id.is_some() && !self.config.features.subscription_identifiers_available
    }

    /// The reason a filter is refused for a feature the broker does not offer.
    /// Invalid filters are left to the index (0x8F).
    pub(super) fn filter_refusal(&self, filter: &str, v5: bool) -> Option<ReasonCode> {
        let features = &self.config.features;
        let (shared, plain) = match parse_shared_filter(filter) {
            Ok(Some(shared)) => (true, shared.filter),
            Ok(None) => (false, filter),
            Err(_) => return None,
        };
        let refusal = if shared && !features.shared_subscription_available {
            ReasonCode::SharedSubscriptionsNotSupported
        } else if !features.wildcard_subscription_available && plain.contains(['+', '#']) {
            ReasonCode::WildcardSubscriptionsNotSupported
        } else {
            return None;
        };
        Some(if v5 {
            refusal
        } else {
            ReasonCode::UnspecifiedError
        })
    }

    /// The options granted for requested ones: QoS at most Maximum QoS.
    pub(super) fn granted(&self, mut options: SubscriptionOptions) -> SubscriptionOptions {
        options.qos = options.qos.min(self.config.features.maximum_qos);
        options
    }
}
