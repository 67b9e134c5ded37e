//! MQTT 5.0 properties (§2.2.2): every property with its identifier, wire type and the
//! packets it may appear in, in one table ([`Property::spec`]).
//!
//! Properties are kept as a `Vec` in wire order, so user properties keep their order
//! [MQTT-3.3.2-18] and encode back byte-exact. Decoding enforces, per packet: the
//! identifier is allowed there (else Malformed Packet, §2.2.2.2), no repeats except User
//! Property and, in PUBLISH, Subscription Identifier (else Protocol Error), and the
//! value ranges the spec makes protocol errors (0 for Receive Maximum, 2 for a boolean).

use bytes::Bytes;

use super::error::DecodeError;
use super::packet::ProtocolVersion;
use super::wire::{Counter, Reader, Sink, Utf8Bytes};

/// Where a property block sits; selects which identifiers are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyContext {
    Connect,
    Will,
    ConnAck,
    Publish,
    PubAck,
    PubRec,
    PubRel,
    PubComp,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
}

impl PropertyContext {
    const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// The wire type of a property value (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    Byte,
    TwoByteInteger,
    FourByteInteger,
    VariableByteInteger,
    Utf8String,
    BinaryData,
    Utf8StringPair,
}

/// One property and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    PayloadFormatIndicator(u8),
    MessageExpiryInterval(u32),
    ContentType(Utf8Bytes),
    ResponseTopic(Utf8Bytes),
    CorrelationData(Bytes),
    SubscriptionIdentifier(u32),
    SessionExpiryInterval(u32),
    AssignedClientIdentifier(Utf8Bytes),
    ServerKeepAlive(u16),
    AuthenticationMethod(Utf8Bytes),
    AuthenticationData(Bytes),
    RequestProblemInformation(u8),
    WillDelayInterval(u32),
    RequestResponseInformation(u8),
    ResponseInformation(Utf8Bytes),
    ServerReference(Utf8Bytes),
    ReasonString(Utf8Bytes),
    ReceiveMaximum(u16),
    TopicAliasMaximum(u16),
    TopicAlias(u16),
    MaximumQos(u8),
    RetainAvailable(u8),
    UserProperty(Utf8Bytes, Utf8Bytes),
    MaximumPacketSize(u32),
    WildcardSubscriptionAvailable(u8),
    SubscriptionIdentifierAvailable(u8),
    SharedSubscriptionAvailable(u8),
}

/// A property's identifier by the specification's name (Table 2-4): what code outside
/// the codec names a property by, never a bare `u8`.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyId {
    PayloadFormatIndicator = 0x01,
    MessageExpiryInterval = 0x02,
    ContentType = 0x03,
    ResponseTopic = 0x08,
    CorrelationData = 0x09,
    SubscriptionIdentifier = 0x0B,
    SessionExpiryInterval = 0x11,
    AssignedClientIdentifier = 0x12,
    ServerKeepAlive = 0x13,
    AuthenticationMethod = 0x15,
    AuthenticationData = 0x16,
    RequestProblemInformation = 0x17,
    WillDelayInterval = 0x18,
    RequestResponseInformation = 0x19,
    ResponseInformation = 0x1A,
    ServerReference = 0x1C,
    ReasonString = 0x1F,
    ReceiveMaximum = 0x21,
    TopicAliasMaximum = 0x22,
    TopicAlias = 0x23,
    MaximumQos = 0x24,
    RetainAvailable = 0x25,
    UserProperty = 0x26,
    MaximumPacketSize = 0x27,
    WildcardSubscriptionAvailable = 0x28,
    SubscriptionIdentifierAvailable = 0x29,
    SharedSubscriptionAvailable = 0x2A,
}

/// The specification's facts about one property identifier.
#[derive(Debug, Clone, Copy)]
pub struct PropertySpec {
    pub id: u8,
    pub name: &'static str,
    pub wire_type: WireType,
    allowed_in: u16,
}

impl PropertySpec {
    pub fn allowed_in(&self, context: PropertyContext) -> bool {
        self.allowed_in & context.bit() != 0
    }
}

macro_rules! contexts {
    ($($ctx:ident),*) => { 0 $(| PropertyContext::$ctx.bit())* };
}

const ACKS_WITH_REASON: u16 =
    contexts!(ConnAck, PubAck, PubRec, PubRel, PubComp, SubAck, UnsubAck, Disconnect, Auth);
const EVERY_PACKET: u16 =
    ACKS_WITH_REASON | contexts!(Connect, Will, Publish, Subscribe, Unsubscribe);

/// Table 2-4 of the specification, indexed by identifier.
pub const PROPERTY_SPECS: &[PropertySpec] = &[
    spec(
        0x01,
        "payload_format_indicator",
        WireType::Byte,
        contexts!(Publish, Will),
    ),
    spec(
        0x02,
        "message_expiry_interval",
        WireType::FourByteInteger,
        contexts!(Publish, Will),
    ),
    spec(
        0x03,
        "content_type",
        WireType::Utf8String,
        contexts!(Publish, Will),
    ),
    spec(
        0x08,
        "response_topic",
        WireType::Utf8String,
        contexts!(Publish, Will),
    ),
    spec(
        0x09,
        "correlation_data",
        WireType::BinaryData,
        contexts!(Publish, Will),
    ),
    spec(
        0x0B,
        "subscription_identifier",
        WireType::VariableByteInteger,
        contexts!(Publish, Subscribe),
    ),
    spec(
        0x11,
        "session_expiry_interval",
        WireType::FourByteInteger,
        contexts!(Connect, ConnAck, Disconnect),
    ),
    spec(
        0x12,
        "assigned_client_identifier",
        WireType::Utf8String,
        contexts!(ConnAck),
    ),
    spec(
        0x13,
        "server_keep_alive",
        WireType::TwoByteInteger,
        contexts!(ConnAck),
    ),
    spec(
        0x15,
        "authentication_method",
        WireType::Utf8String,
        contexts!(Connect, ConnAck, Auth),
    ),
    spec(
        0x16,
        "authentication_data",
        WireType::BinaryData,
        contexts!(Connect, ConnAck, Auth),
    ),
    spec(
        0x17,
        "request_problem_information",
        WireType::Byte,
        contexts!(Connect),
    ),
    spec(
        0x18,
        "will_delay_interval",
        WireType::FourByteInteger,
        contexts!(Will),
    ),
    spec(
        0x19,
        "request_response_information",
        WireType::Byte,
        contexts!(Connect),
    ),
    spec(
        0x1A,
        "response_information",
        WireType::Utf8String,
        contexts!(ConnAck),
    ),
    spec(
        0x1C,
        "server_reference",
        WireType::Utf8String,
        contexts!(ConnAck, Disconnect),
    ),
    spec(
        0x1F,
        "reason_string",
        WireType::Utf8String,
        ACKS_WITH_REASON,
    ),
    spec(
        0x21,
        "receive_maximum",
        WireType::TwoByteInteger,
        contexts!(Connect, ConnAck),
    ),
    spec(
        0x22,
        "topic_alias_maximum",
        WireType::TwoByteInteger,
        contexts!(Connect, ConnAck),
    ),
    spec(
        0x23,
        "topic_alias",
        WireType::TwoByteInteger,
        contexts!(Publish),
    ),
    spec(0x24, "maximum_qos", WireType::Byte, contexts!(ConnAck)),
    spec(0x25, "retain_available", WireType::Byte, contexts!(ConnAck)),
    spec(
        0x26,
        "user_property",
        WireType::Utf8StringPair,
        EVERY_PACKET,
    ),
    spec(
        0x27,
        "maximum_packet_size",
        WireType::FourByteInteger,
        contexts!(Connect, ConnAck),
    ),
    spec(
        0x28,
        "wildcard_subscription_available",
        WireType::Byte,
        contexts!(ConnAck),
    ),
    spec(
        0x29,
        "subscription_identifier_available",
        WireType::Byte,
        contexts!(ConnAck),
    ),
    spec(
        0x2A,
        "shared_subscription_available",
        WireType::Byte,
        contexts!(ConnAck),
    ),
];

const fn spec(id: u8, name: &'static str, wire_type: WireType, allowed_in: u16) -> PropertySpec {
    PropertySpec {
        id,
        name,
        wire_type,
        allowed_in,
    }
}

/// The spec entry for an identifier.
pub fn property_spec(id: u8) -> Option<&'static PropertySpec> {
    PROPERTY_SPECS.iter().find(|spec| spec.id == id)
}

/// The spec entry for a property name such as `"user_property"`.
pub fn property_spec_by_name(name: &str) -> Option<&'static PropertySpec> {
    PROPERTY_SPECS.iter().find(|spec| spec.name == name)
}

/// A decoded value before it is tied to its identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyValue {
    Integer(u32),
    String(Utf8Bytes),
    Binary(Bytes),
    StringPair(Utf8Bytes, Utf8Bytes),
}

impl Property {
    /// The identifier on the wire.
    pub fn id(&self) -> u8 {
        self.kind() as u8
    }

    /// Which property this is.
    pub fn kind(&self) -> PropertyId {
        use Property::*;
        match self {
            PayloadFormatIndicator(..) => PropertyId::PayloadFormatIndicator,
            MessageExpiryInterval(..) => PropertyId::MessageExpiryInterval,
            ContentType(..) => PropertyId::ContentType,
            ResponseTopic(..) => PropertyId::ResponseTopic,
            CorrelationData(..) => PropertyId::CorrelationData,
            SubscriptionIdentifier(..) => PropertyId::SubscriptionIdentifier,
            SessionExpiryInterval(..) => PropertyId::SessionExpiryInterval,
            AssignedClientIdentifier(..) => PropertyId::AssignedClientIdentifier,
            ServerKeepAlive(..) => PropertyId::ServerKeepAlive,
            AuthenticationMethod(..) => PropertyId::AuthenticationMethod,
            AuthenticationData(..) => PropertyId::AuthenticationData,
            RequestProblemInformation(..) => PropertyId::RequestProblemInformation,
            WillDelayInterval(..) => PropertyId::WillDelayInterval,
            RequestResponseInformation(..) => PropertyId::RequestResponseInformation,
            ResponseInformation(..) => PropertyId::ResponseInformation,
            ServerReference(..) => PropertyId::ServerReference,
            ReasonString(..) => PropertyId::ReasonString,
            ReceiveMaximum(..) => PropertyId::ReceiveMaximum,
            TopicAliasMaximum(..) => PropertyId::TopicAliasMaximum,
            TopicAlias(..) => PropertyId::TopicAlias,
            MaximumQos(..) => PropertyId::MaximumQos,
            RetainAvailable(..) => PropertyId::RetainAvailable,
            UserProperty(..) => PropertyId::UserProperty,
            MaximumPacketSize(..) => PropertyId::MaximumPacketSize,
            WildcardSubscriptionAvailable(..) => PropertyId::WildcardSubscriptionAvailable,
            SubscriptionIdentifierAvailable(..) => PropertyId::SubscriptionIdentifierAvailable,
            SharedSubscriptionAvailable(..) => PropertyId::SharedSubscriptionAvailable,
        }
    }

    pub fn spec(&self) -> &'static PropertySpec {
        property_spec(self.id()).expect("every Property variant is in PROPERTY_SPECS")
    }

    /// The value without its identifier.
    pub fn value(&self) -> PropertyValue {
        use Property::*;
        match self {
            PayloadFormatIndicator(v)
            | RequestProblemInformation(v)
            | RequestResponseInformation(v)
            | MaximumQos(v)
            | RetainAvailable(v)
            | WildcardSubscriptionAvailable(v)
            | SubscriptionIdentifierAvailable(v)
            | SharedSubscriptionAvailable(v) => PropertyValue::Integer(u32::from(*v)),
            ServerKeepAlive(v) | ReceiveMaximum(v) | TopicAliasMaximum(v) | TopicAlias(v) => {
                PropertyValue::Integer(u32::from(*v))
            }
            MessageExpiryInterval(v)
            | SubscriptionIdentifier(v)
            | SessionExpiryInterval(v)
            | WillDelayInterval(v)
            | MaximumPacketSize(v) => PropertyValue::Integer(*v),
            ContentType(s)
            | ResponseTopic(s)
            | AssignedClientIdentifier(s)
            | AuthenticationMethod(s)
            | ResponseInformation(s)
            | ServerReference(s)
            | ReasonString(s) => PropertyValue::String(s.clone()),
            CorrelationData(b) | AuthenticationData(b) => PropertyValue::Binary(b.clone()),
            UserProperty(k, v) => PropertyValue::StringPair(k.clone(), v.clone()),
        }
    }

    /// Build a property from its identifier and a value of its wire type, checking the
    /// value ranges the specification makes protocol errors.
    pub fn from_value(id: u8, value: PropertyValue) -> Result<Property, DecodeError> {
        use Property::*;
        use PropertyValue::{Binary, Integer, String as Str, StringPair};
        let spec =
            property_spec(id).ok_or(DecodeError::malformed("unknown property identifier"))?;
        let out_of_range = DecodeError::protocol("property value out of range");
        let property = match (id, value) {
            (0x01, Integer(v)) => PayloadFormatIndicator(boolean(v)?),
            (0x02, Integer(v)) => MessageExpiryInterval(v),
            (0x03, Str(s)) => ContentType(s),
            (0x08, Str(s)) => ResponseTopic(s),
            (0x09, Binary(b)) => CorrelationData(b),
            (0x0B, Integer(v)) if (1..=super::wire::VARINT_MAX).contains(&v) => {
                SubscriptionIdentifier(v)
            }
            (0x11, Integer(v)) => SessionExpiryInterval(v),
            (0x12, Str(s)) => AssignedClientIdentifier(s),
            (0x13, Integer(v)) => ServerKeepAlive(two_byte(v)?),
            (0x15, Str(s)) => AuthenticationMethod(s),
            (0x16, Binary(b)) => AuthenticationData(b),
            (0x17, Integer(v)) => RequestProblemInformation(boolean(v)?),
            (0x18, Integer(v)) => WillDelayInterval(v),
            (0x19, Integer(v)) => RequestResponseInformation(boolean(v)?),
            (0x1A, Str(s)) => ResponseInformation(s),
            (0x1C, Str(s)) => ServerReference(s),
            (0x1F, Str(s)) => ReasonString(s),
            (0x21, Integer(v)) if v != 0 => ReceiveMaximum(two_byte(v)?),
            (0x22, Integer(v)) => TopicAliasMaximum(two_byte(v)?),
            (0x23, Integer(v)) if v != 0 => TopicAlias(two_byte(v)?),
            (0x24, Integer(v)) => MaximumQos(boolean(v)?),
            (0x25, Integer(v)) => RetainAvailable(boolean(v)?),
            (0x26, StringPair(k, v)) => UserProperty(k, v),
            (0x27, Integer(v)) if v != 0 => MaximumPacketSize(v),
            (0x28, Integer(v)) => WildcardSubscriptionAvailable(boolean(v)?),
            (0x29, Integer(v)) => SubscriptionIdentifierAvailable(boolean(v)?),
            (0x2A, Integer(v)) => SharedSubscriptionAvailable(boolean(v)?),
            (_, value) if value_matches(spec.wire_type, &value) => return Err(out_of_range),
            _ => return Err(DecodeError::malformed("property value has the wrong type")),
        };
        Ok(property)
    }
}

fn value_matches(wire_type: WireType, value: &PropertyValue) -> bool {
    matches!(
        (wire_type, value),
        (
            WireType::Byte
                | WireType::TwoByteInteger
                | WireType::FourByteInteger
                | WireType::VariableByteInteger,
            PropertyValue::Integer(_)
        ) | (WireType::Utf8String, PropertyValue::String(_))
            | (WireType::BinaryData, PropertyValue::Binary(_))
            | (WireType::Utf8StringPair, PropertyValue::StringPair(..))
    )
}

fn boolean(v: u32) -> Result<u8, DecodeError> {
    match v {
        0 | 1 => Ok(v as u8),
        _ => Err(DecodeError::protocol("property value must be 0 or 1")),
    }
}

fn two_byte(v: u32) -> Result<u16, DecodeError> {
    u16::try_from(v).map_err(|_| DecodeError::protocol("property value exceeds 65535"))
}

/// The properties of one packet, in wire order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties(pub Vec<Property>);

impl Properties {
    pub fn new() -> Properties {
        Properties(Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Property> {
        self.0.iter()
    }

    /// The first property of this kind.
    pub fn get(&self, id: PropertyId) -> Option<&Property> {
        self.0.iter().find(|p| p.kind() == id)
    }

    /// Read a property block: its length, then properties up to that length.
    pub(crate) fn decode(
        reader: &mut Reader<'_>,
        context: PropertyContext,
    ) -> Result<Properties, DecodeError> {
        let len = reader.varint()? as usize;
        if len == 0 {
            return Ok(Properties::new());
        }
        let mut block = reader.sub(len)?;
        let mut items = Vec::new();
        let mut seen: u64 = 0;
        while block.remaining() > 0 {
            let id = block.varint()?;
            let spec = u8::try_from(id)
                .ok()
                .and_then(property_spec)
                .ok_or(DecodeError::malformed("unknown property identifier"))?;
            if !spec.allowed_in(context) {
                return Err(DecodeError::malformed(
                    "property not allowed in this packet",
                ));
            }
            let repeatable =
                spec.id == 0x26 || (spec.id == 0x0B && context == PropertyContext::Publish);
            let bit = 1u64 << spec.id;
            if seen & bit != 0 && !repeatable {
                return Err(DecodeError::protocol("property included more than once"));
            }
            seen |= bit;
            let value = match spec.wire_type {
                WireType::Byte => PropertyValue::Integer(u32::from(block.u8()?)),
                WireType::TwoByteInteger => PropertyValue::Integer(u32::from(block.u16()?)),
                WireType::FourByteInteger => PropertyValue::Integer(block.u32()?),
                WireType::VariableByteInteger => PropertyValue::Integer(block.varint()?),
                WireType::Utf8String => PropertyValue::String(block.string()?),
                WireType::BinaryData => PropertyValue::Binary(block.binary()?),
                WireType::Utf8StringPair => {
                    PropertyValue::StringPair(block.string()?, block.string()?)
                }
            };
            items.push(Property::from_value(spec.id, value)?);
        }
        Ok(Properties(items))
    }

    /// The property block of a packet: read in 5.0, absent (empty) before it.
    pub(crate) fn decode_for(
        reader: &mut Reader<'_>,
        version: ProtocolVersion,
        context: PropertyContext,
    ) -> Result<Properties, DecodeError> {
        if version.is_v5() {
            Properties::decode(reader, context)
        } else {
            Ok(Properties::new())
        }
    }

    /// Write the property block in 5.0; nothing before it.
    pub(crate) fn encode_for<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        if version.is_v5() {
            self.encode(out);
        }
    }

    /// Write the property length and the properties.
    pub(crate) fn encode<S: Sink>(&self, out: &mut S) {
        let mut counter = Counter::default();
        self.encode_items(&mut counter);
        out.put_varint(counter.0 as u32);
        self.encode_items(out);
    }

    fn encode_items<S: Sink>(&self, out: &mut S) {
        for property in &self.0 {
            out.put_varint(u32::from(property.id()));
            let spec = property.spec();
            match (spec.wire_type, property.value()) {
                (WireType::Byte, PropertyValue::Integer(v)) => out.put_u8(v as u8),
                (WireType::TwoByteInteger, PropertyValue::Integer(v)) => out.put_u16(v as u16),
                (WireType::FourByteInteger, PropertyValue::Integer(v)) => out.put_u32(v),
                (WireType::VariableByteInteger, PropertyValue::Integer(v)) => out.put_varint(v),
                (WireType::Utf8String, PropertyValue::String(s)) => out.put_string(&s),
                (WireType::BinaryData, PropertyValue::Binary(b)) => out.put_binary(&b),
                (WireType::Utf8StringPair, PropertyValue::StringPair(k, v)) => {
                    out.put_string(&k);
                    out.put_string(&v);
                }
                _ => unreachable!("Property::value returns the spec's wire type"),
            }
        }
    }
}

impl From<Vec<Property>> for Properties {
    fn from(items: Vec<Property>) -> Properties {
        Properties(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &'static [u8], context: PropertyContext) -> Result<Properties, DecodeError> {
        let buf = Bytes::from_static(bytes);
        Properties::decode(&mut Reader::new(&buf, 0, buf.len()), context)
    }

    #[test]
    fn every_variant_is_in_the_table() {
        assert_eq!(PROPERTY_SPECS.len(), 27);
        for spec in PROPERTY_SPECS {
            assert_eq!(property_spec_by_name(spec.name).unwrap().id, spec.id);
        }
    }

    #[test]
    fn user_properties_keep_order_and_may_repeat() {
        let props = decode(
            b"\x0E\x26\x00\x01b\x00\x012\x26\x00\x01a\x00\x011",
            PropertyContext::Publish,
        )
        .unwrap();
        let keys: Vec<_> = props
            .iter()
            .map(|p| match p {
                Property::UserProperty(k, _) => k.as_str().to_owned(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(keys, ["b", "a"]);
        let mut out = Vec::new();
        props.encode(&mut out);
        assert_eq!(out, b"\x0E\x26\x00\x01b\x00\x012\x26\x00\x01a\x00\x011");
    }

    #[test]
    fn repeats_and_placement() {
        let twice = b"\x0A\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02";
        assert_eq!(
            decode(twice, PropertyContext::Publish).unwrap_err().reason,
            super::super::ReasonCode::ProtocolError
        );
        let sub_ids = b"\x04\x0B\x01\x0B\x02";
        assert_eq!(
            decode(sub_ids, PropertyContext::Publish).unwrap().0.len(),
            2
        );
        assert!(decode(sub_ids, PropertyContext::Subscribe).is_err());
        let session_expiry_in_publish = b"\x05\x11\x00\x00\x00\x01";
        assert_eq!(
            decode(session_expiry_in_publish, PropertyContext::Publish)
                .unwrap_err()
                .reason,
            super::super::ReasonCode::MalformedPacket
        );
    }

    #[test]
    fn value_ranges() {
        let zero_receive_max = b"\x03\x21\x00\x00";
        assert_eq!(
            decode(zero_receive_max, PropertyContext::Connect)
                .unwrap_err()
                .reason,
            super::super::ReasonCode::ProtocolError
        );
        let bad_bool = b"\x02\x01\x02";
        assert!(decode(bad_bool, PropertyContext::Publish).is_err());
        let truncated = b"\x05\x02\x00\x00";
        assert!(decode(truncated, PropertyContext::Publish).is_err());
    }
}
