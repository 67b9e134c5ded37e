//! Reason codes: one enum with the MQTT 5.0 specification's names (§2.4, table 2-6).
//!
//! Several spec names share a value (0x00 is Success, Normal disconnection and Granted
//! QoS 0); the enum has one variant per value, named after the first, and associated
//! constants give the other names. MQTT 3.1.1 SUBACK return codes (0x00-0x02, 0x80) are
//! the same values; its CONNACK return codes are [`ConnectReturnCode`].

macro_rules! reason_codes {
    ($($variant:ident = $value:literal, $name:literal;)*) => {
        /// An MQTT 5.0 reason code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum ReasonCode { $($variant = $value,)* }

        impl ReasonCode {
            /// The reason code with this wire value, if the specification defines one.
            pub fn from_u8(value: u8) -> Option<ReasonCode> {
                match value { $($value => Some(ReasonCode::$variant),)* _ => None }
            }

            /// The specification's name for this value.
            pub fn name(self) -> &'static str {
                match self { $(ReasonCode::$variant => $name,)* }
            }

            /// Every defined reason code, in ascending order.
            pub const ALL: &'static [ReasonCode] = &[$(ReasonCode::$variant,)*];
        }
    };
}

reason_codes! {
    Success = 0x00, "Success";
    GrantedQos1 = 0x01, "Granted QoS 1";
    GrantedQos2 = 0x02, "Granted QoS 2";
    DisconnectWithWillMessage = 0x04, "Disconnect with Will Message";
    NoMatchingSubscribers = 0x10, "No matching subscribers";
    NoSubscriptionExisted = 0x11, "No subscription existed";
    ContinueAuthentication = 0x18, "Continue authentication";
    ReAuthenticate = 0x19, "Re-authenticate";
    UnspecifiedError = 0x80, "Unspecified error";
    MalformedPacket = 0x81, "Malformed Packet";
    ProtocolError = 0x82, "Protocol Error";
    ImplementationSpecificError = 0x83, "Implementation specific error";
    UnsupportedProtocolVersion = 0x84, "Unsupported Protocol Version";
    ClientIdentifierNotValid = 0x85, "Client Identifier not valid";
    BadUserNameOrPassword = 0x86, "Bad User Name or Password";
    NotAuthorized = 0x87, "Not authorized";
    ServerUnavailable = 0x88, "Server unavailable";
    ServerBusy = 0x89, "Server busy";
    Banned = 0x8A, "Banned";
    ServerShuttingDown = 0x8B, "Server shutting down";
    BadAuthenticationMethod = 0x8C, "Bad authentication method";
    KeepAliveTimeout = 0x8D, "Keep Alive timeout";
    SessionTakenOver = 0x8E, "Session taken over";
    TopicFilterInvalid = 0x8F, "Topic Filter invalid";
    TopicNameInvalid = 0x90, "Topic Name invalid";
    PacketIdentifierInUse = 0x91, "Packet Identifier in use";
    PacketIdentifierNotFound = 0x92, "Packet Identifier not found";
    ReceiveMaximumExceeded = 0x93, "Receive Maximum exceeded";
    TopicAliasInvalid = 0x94, "Topic Alias invalid";
    PacketTooLarge = 0x95, "Packet too large";
    MessageRateTooHigh = 0x96, "Message rate too high";
    QuotaExceeded = 0x97, "Quota exceeded";
    AdministrativeAction = 0x98, "Administrative action";
    PayloadFormatInvalid = 0x99, "Payload format invalid";
    RetainNotSupported = 0x9A, "Retain not supported";
    QosNotSupported = 0x9B, "QoS not supported";
    UseAnotherServer = 0x9C, "Use another server";
    ServerMoved = 0x9D, "Server moved";
    SharedSubscriptionsNotSupported = 0x9E, "Shared Subscriptions not supported";
    ConnectionRateExceeded = 0x9F, "Connection rate exceeded";
    MaximumConnectTime = 0xA0, "Maximum connect time";
    SubscriptionIdentifiersNotSupported = 0xA1, "Subscription Identifiers not supported";
    WildcardSubscriptionsNotSupported = 0xA2, "Wildcard Subscriptions not supported";
}

impl ReasonCode {
    pub const NORMAL_DISCONNECTION: ReasonCode = ReasonCode::Success;
    pub const GRANTED_QOS_0: ReasonCode = ReasonCode::Success;

    /// True for codes 0x80 and above, which report a failure [MQTT-2.4].
    pub fn is_error(self) -> bool {
        (self as u8) >= 0x80
    }

    /// The MQTT 3.1.1 CONNACK return code that best carries this refusal.
    pub fn to_connect_return_code(self) -> ConnectReturnCode {
        use ReasonCode::*;
        match self {
            Success => ConnectReturnCode::Accepted,
            UnsupportedProtocolVersion => ConnectReturnCode::UnacceptableProtocolVersion,
            ClientIdentifierNotValid => ConnectReturnCode::IdentifierRejected,
            BadUserNameOrPassword | BadAuthenticationMethod => {
                ConnectReturnCode::BadUserNameOrPassword
            }
            NotAuthorized | Banned => ConnectReturnCode::NotAuthorized,
            _ => ConnectReturnCode::ServerUnavailable,
        }
    }
}

/// Which reason codes a packet may carry (§3.x.2.1 of each packet).
pub(crate) mod allowed {
    use super::ReasonCode::{self, *};

    pub const CONNACK: &[ReasonCode] = &[
        Success,
        UnspecifiedError,
        MalformedPacket,
        ProtocolError,
        ImplementationSpecificError,
        UnsupportedProtocolVersion,
        ClientIdentifierNotValid,
        BadUserNameOrPassword,
        NotAuthorized,
        ServerUnavailable,
        ServerBusy,
        Banned,
        BadAuthenticationMethod,
        TopicNameInvalid,
        PacketTooLarge,
        QuotaExceeded,
        PayloadFormatInvalid,
        RetainNotSupported,
        QosNotSupported,
        UseAnotherServer,
        ServerMoved,
        ConnectionRateExceeded,
    ];
    pub const PUBACK: &[ReasonCode] = &[
        Success,
        NoMatchingSubscribers,
        UnspecifiedError,
        ImplementationSpecificError,
        NotAuthorized,
        TopicNameInvalid,
        PacketIdentifierInUse,
        QuotaExceeded,
        PayloadFormatInvalid,
    ];
    /// PUBREC carries the same set as PUBACK.
    pub const PUBREC: &[ReasonCode] = PUBACK;
    pub const PUBREL: &[ReasonCode] = &[Success, PacketIdentifierNotFound];
    pub const PUBCOMP: &[ReasonCode] = PUBREL;
    pub const SUBACK: &[ReasonCode] = &[
        Success,
        GrantedQos1,
        GrantedQos2,
        UnspecifiedError,
        ImplementationSpecificError,
        NotAuthorized,
        TopicFilterInvalid,
        PacketIdentifierInUse,
        QuotaExceeded,
        SharedSubscriptionsNotSupported,
        SubscriptionIdentifiersNotSupported,
        WildcardSubscriptionsNotSupported,
    ];
    /// MQTT 3.1.1 SUBACK return codes [MQTT-3.9.3-2].
    pub const SUBACK_V3: &[ReasonCode] = &[Success, GrantedQos1, GrantedQos2, UnspecifiedError];
    pub const UNSUBACK: &[ReasonCode] = &[
        Success,
        NoSubscriptionExisted,
        UnspecifiedError,
        ImplementationSpecificError,
        NotAuthorized,
        TopicFilterInvalid,
        PacketIdentifierInUse,
    ];
    pub const DISCONNECT: &[ReasonCode] = &[
        Success,
        DisconnectWithWillMessage,
        UnspecifiedError,
        MalformedPacket,
        ProtocolError,
        ImplementationSpecificError,
        NotAuthorized,
        ServerBusy,
        ServerShuttingDown,
        KeepAliveTimeout,
        SessionTakenOver,
        TopicFilterInvalid,
        TopicNameInvalid,
        ReceiveMaximumExceeded,
        TopicAliasInvalid,
        PacketTooLarge,
        MessageRateTooHigh,
        QuotaExceeded,
        AdministrativeAction,
        PayloadFormatInvalid,
        RetainNotSupported,
        QosNotSupported,
        UseAnotherServer,
        ServerMoved,
        SharedSubscriptionsNotSupported,
        ConnectionRateExceeded,
        MaximumConnectTime,
        SubscriptionIdentifiersNotSupported,
        WildcardSubscriptionsNotSupported,
    ];
    pub const AUTH: &[ReasonCode] = &[Success, ContinueAuthentication, ReAuthenticate];
}

/// MQTT 3.1 / 3.1.1 CONNACK return codes (§3.2.2.3 of 3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ConnectReturnCode {
    Accepted = 0,
    UnacceptableProtocolVersion = 1,
    IdentifierRejected = 2,
    ServerUnavailable = 3,
    BadUserNameOrPassword = 4,
    NotAuthorized = 5,
}

impl ConnectReturnCode {
    pub fn from_u8(value: u8) -> Option<ConnectReturnCode> {
        use ConnectReturnCode::*;
        [
            Accepted,
            UnacceptableProtocolVersion,
            IdentifierRejected,
            ServerUnavailable,
            BadUserNameOrPassword,
            NotAuthorized,
        ]
        .get(value as usize)
        .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_code() {
        for &code in ReasonCode::ALL {
            assert_eq!(ReasonCode::from_u8(code as u8), Some(code));
        }
        assert_eq!(ReasonCode::ALL.len(), 43);
        assert_eq!(ReasonCode::from_u8(0x03), None);
        assert_eq!(ReasonCode::PacketTooLarge.name(), "Packet too large");
    }

    #[test]
    fn v3_return_codes() {
        assert_eq!(
            ConnectReturnCode::from_u8(5),
            Some(ConnectReturnCode::NotAuthorized)
        );
        assert_eq!(ConnectReturnCode::from_u8(6), None);
        assert_eq!(
            ReasonCode::Banned.to_connect_return_code(),
            ConnectReturnCode::NotAuthorized
        );
    }
}
