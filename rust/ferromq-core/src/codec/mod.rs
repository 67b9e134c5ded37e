//! The MQTT codec: every control packet of MQTT 3.1 (level 3), 3.1.1 (level 4) and
//! 5.0 (level 5), decoded and encoded byte-exact to the specification.
//!
//! - `wire`: primitives; `properties`: the 5.0 property table; `reason`: reason codes.
//! - One file per packet (`connect`, `publish`, `suback` ...) with `read` and `write`.
//! - `frame`: fixed header, whole-packet decode/encode, and the streaming decoder.
//!
//! Decoding never panics on untrusted input; every error carries the reason code the
//! broker answers with. Strings and payloads are zero-copy slices of the frame.

mod ack;
mod connack;
mod connect;
mod disconnect;
mod error;
mod frame;
mod packet;
mod properties;
mod publish;
mod reason;
mod suback;
mod subscribe;
mod unsuback;
mod unsubscribe;
mod wire;

pub use connect::NEWER_PROTOCOL_LEVEL;
pub use error::DecodeError;
pub use frame::{
    decode_packet, read_fixed_header, EncodeError, FixedHeader, FrameDecoder,
    PROTOCOL_MAX_PACKET_SIZE,
};
pub use packet::{
    Ack, ConnAck, Connect, Packet, PacketType, ProtocolVersion, Publish, QoS, ReasonOnly,
    RetainHandling, SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};
pub use properties::{
    property_spec, property_spec_by_name, Properties, Property, PropertyContext, PropertyId,
    PropertySpec, PropertyValue, WireType, PROPERTY_SPECS,
};
pub use reason::{ConnectReturnCode, ReasonCode};
/// Option-byte bits, shared with the topic index that stores the byte as is.
pub(crate) use subscribe::{NO_LOCAL, RETAIN_AS_PUBLISHED};
pub(crate) use wire::Reader;
pub use wire::{has_control_character, read_varint, varint_len, Utf8Bytes, VARINT_MAX};
