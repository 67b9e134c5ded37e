//! The packet model: one struct per MQTT control packet, shared by MQTT 3.1, 3.1.1 and
//! 5.0. Fields a version lacks (properties, reason codes before 5.0) are empty/Success
//! there and are neither read nor written for it.

use bytes::Bytes;

use super::properties::Properties;
use super::reason::ReasonCode;
use super::wire::Utf8Bytes;

/// The protocol level from CONNECT (§3.1.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ProtocolVersion {
    /// MQTT 3.1, protocol name "MQIsdp".
    V3_1 = 3,
    /// MQTT 3.1.1, protocol name "MQTT".
    V3_1_1 = 4,
    /// MQTT 5.0, protocol name "MQTT".
    V5 = 5,
}

impl ProtocolVersion {
    pub fn from_level(level: u8) -> Option<ProtocolVersion> {
        match level {
            3 => Some(ProtocolVersion::V3_1),
            4 => Some(ProtocolVersion::V3_1_1),
            5 => Some(ProtocolVersion::V5),
            _ => None,
        }
    }

    pub fn level(self) -> u8 {
        self as u8
    }

    pub fn protocol_name(self) -> &'static str {
        match self {
            ProtocolVersion::V3_1 => "MQIsdp",
            _ => "MQTT",
        }
    }

    pub fn is_v5(self) -> bool {
        self == ProtocolVersion::V5
    }
}

/// Quality of service (§4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum QoS {
    #[default]
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    pub fn from_u8(value: u8) -> Option<QoS> {
        match value {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

/// The control packet type from the fixed header (§2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    Connect = 1,
    ConnAck = 2,
    Publish = 3,
    PubAck = 4,
    PubRec = 5,
    PubRel = 6,
    PubComp = 7,
    Subscribe = 8,
    SubAck = 9,
    Unsubscribe = 10,
    UnsubAck = 11,
    PingReq = 12,
    PingResp = 13,
    Disconnect = 14,
    Auth = 15,
}

impl PacketType {
    /// Every control packet type, in wire order (1..=15): `from_u8` reads this list,
    /// and the binding's `PACKET_TYPES` (per-type metrics) are their names.
    pub const ALL: [PacketType; 15] = {
        use PacketType::*;
        [
            Connect,
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
            PingReq,
            PingResp,
            Disconnect,
            Auth,
        ]
    };

    pub fn from_u8(value: u8) -> Option<PacketType> {
        Self::ALL.get((value as usize).wrapping_sub(1)).copied()
    }

    /// Lower-case name used by the Python face (`"publish"`, `"pubrel"` ...).
    pub fn name(self) -> &'static str {
        use PacketType::*;
        match self {
            Connect => "connect",
            ConnAck => "connack",
            Publish => "publish",
            PubAck => "puback",
            PubRec => "pubrec",
            PubRel => "pubrel",
            PubComp => "pubcomp",
            Subscribe => "subscribe",
            SubAck => "suback",
            Unsubscribe => "unsubscribe",
            UnsubAck => "unsuback",
            PingReq => "pingreq",
            PingResp => "pingresp",
            Disconnect => "disconnect",
            Auth => "auth",
        }
    }
}

// `ALL[i]` is the type with wire value i + 1, so `from_u8` is the fixed header's map.
const _: () = {
    let mut i = 0;
    while i < PacketType::ALL.len() {
        assert!(PacketType::ALL[i] as usize == i + 1);
        i += 1;
    }
};

/// A will message carried in CONNECT (§3.1.3.2-3.1.3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    pub topic: Utf8Bytes,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol: ProtocolVersion,
    /// "Clean Session" in 3.1/3.1.1, "Clean Start" in 5.0.
    pub clean_start: bool,
    pub keep_alive: u16,
    pub properties: Properties,
    pub client_id: Utf8Bytes,
    pub will: Option<Will>,
    pub username: Option<Utf8Bytes>,
    pub password: Option<Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    pub session_present: bool,
    /// A 5.0 [`ReasonCode`] value, or a 3.1.1 [`super::ConnectReturnCode`] value.
    pub code: u8,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    /// May be empty in 5.0 when a Topic Alias property stands for it.
    pub topic: Utf8Bytes,
    /// Zero for QoS 0, which carries none.
    pub packet_id: u16,
    pub properties: Properties,
    pub payload: Bytes,
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP share this shape (§3.4-3.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub packet_id: u16,
    pub reason: ReasonCode,
    pub properties: Properties,
}

impl Ack {
    pub fn new(packet_id: u16) -> Ack {
        Ack {
            packet_id,
            reason: ReasonCode::Success,
            properties: Properties::new(),
        }
    }
}

/// Retain Handling subscription option (§3.8.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum RetainHandling {
    #[default]
    SendAtSubscribe = 0,
    SendAtSubscribeIfNew = 1,
    DoNotSend = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SubscriptionOptions {
    pub qos: QoS,
    pub no_local: bool,
    pub retain_as_published: bool,
    pub retain_handling: RetainHandling,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub packet_id: u16,
    pub properties: Properties,
    pub filters: Vec<(Utf8Bytes, SubscriptionOptions)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    pub packet_id: u16,
    pub properties: Properties,
    /// One per filter of the SUBSCRIBE; 3.1.1 allows only 0x00-0x02 and 0x80.
    pub reasons: Vec<ReasonCode>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub packet_id: u16,
    pub properties: Properties,
    pub filters: Vec<Utf8Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    pub packet_id: u16,
    pub properties: Properties,
    /// One per filter in 5.0; always empty in 3.1.1, whose UNSUBACK has none.
    pub reasons: Vec<ReasonCode>,
}

/// DISCONNECT and AUTH share this shape: an optional reason and properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonOnly {
    pub reason: ReasonCode,
    pub properties: Properties,
}

impl ReasonOnly {
    pub fn new(reason: ReasonCode) -> ReasonOnly {
        ReasonOnly {
            reason,
            properties: Properties::new(),
        }
    }
}

/// Any MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Connect(Box<Connect>),
    ConnAck(ConnAck),
    Publish(Publish),
    PubAck(Ack),
    PubRec(Ack),
    PubRel(Ack),
    PubComp(Ack),
    Subscribe(Subscribe),
    SubAck(SubAck),
    Unsubscribe(Unsubscribe),
    UnsubAck(UnsubAck),
    PingReq,
    PingResp,
    Disconnect(ReasonOnly),
    Auth(ReasonOnly),
}

impl Packet {
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::ConnAck(_) => PacketType::ConnAck,
            Packet::Publish(_) => PacketType::Publish,
            Packet::PubAck(_) => PacketType::PubAck,
            Packet::PubRec(_) => PacketType::PubRec,
            Packet::PubRel(_) => PacketType::PubRel,
            Packet::PubComp(_) => PacketType::PubComp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::SubAck(_) => PacketType::SubAck,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::UnsubAck(_) => PacketType::UnsubAck,
            Packet::PingReq => PacketType::PingReq,
            Packet::PingResp => PacketType::PingResp,
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
        }
    }
}
