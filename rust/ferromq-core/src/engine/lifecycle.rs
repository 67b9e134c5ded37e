//! Why a connection ends, and the client events an operator's log is made of.
//!
//! `close_connection` takes one [`DisconnectReason`]; whether the will is published
//! and whether the session is handed on follow from it, so the reason logged is the
//! reason acted on. With `EngineConfig::client_events` on (Python turns it on when
//! it logs at info) the engine reports each accepted CONNECT (`ClientConnected`),
//! the end of each connected client (`ClientDisconnected`, exactly one per
//! `ClientConnected`), and each SUBSCRIBE and UNSUBSCRIBE (`Subscribed`,
//! `Unsubscribed`). Off, each of these sites costs one branch; none is per message.

use crate::codec::ReasonCode;

use super::{ConnId, Engine, Event};

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// The client sent DISCONNECT with this reason (0x04 asks for its will
    /// [MQTT-3.14.4-3]).
    Client(ReasonCode),
    /// No packet within 1.5 × the keep alive [MQTT-3.1.2-24].
    KeepAliveTimeout,
    /// The broker ended it over what the client sent or did: a malformed or
    /// forbidden packet, a limit, a failed re-authentication; the code says which.
    ProtocolError(ReasonCode),
    /// A CONNECT with the same client id took the session [MQTT-3.1.4-3].
    TakenOver,
    /// The broker stopped.
    ServerShutdown,
    /// The socket closed (or the WebSocket was closed) without DISCONNECT.
    SocketClosed,
    /// Closed from outside the protocol (`Engine::disconnect`): a ban, expired
    /// credentials, an administrator.
    Kicked(ReasonCode),
    /// No CONNECT within the connect timeout (never connected, so never reported).
    ConnectTimeout,
}

impl DisconnectReason {
    /// The name logs use (`client_disconnect`, `keep_alive_timeout`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DisconnectReason::Client(_) => "client_disconnect",
            DisconnectReason::KeepAliveTimeout => "keep_alive_timeout",
            DisconnectReason::ProtocolError(_) => "protocol_error",
            DisconnectReason::TakenOver => "taken_over",
            DisconnectReason::ServerShutdown => "server_shutdown",
            DisconnectReason::SocketClosed => "socket_closed",
            DisconnectReason::Kicked(_) => "kicked",
            DisconnectReason::ConnectTimeout => "connect_timeout",
        }
    }

    /// The reason code that goes with it (sent to a v5 client where one is sent).
    pub fn code(self) -> Option<ReasonCode> {
        match self {
            DisconnectReason::Client(code)
            | DisconnectReason::ProtocolError(code)
            | DisconnectReason::Kicked(code) => Some(code),
            DisconnectReason::KeepAliveTimeout => Some(ReasonCode::KeepAliveTimeout),
            DisconnectReason::TakenOver => Some(ReasonCode::SessionTakenOver),
            DisconnectReason::ServerShutdown => Some(ReasonCode::ServerShuttingDown),
            DisconnectReason::SocketClosed | DisconnectReason::ConnectTimeout => None,
        }
    }

    /// The specification's name of `code()` as a DISCONNECT carries it (0x00 is
    /// "Normal disconnection" there, not "Success").
    pub fn code_name(self) -> Option<&'static str> {
        match self.code()? {
            ReasonCode::Success => Some("Normal disconnection"),
            code => Some(code.name()),
        }
    }

    /// Every end but a normal DISCONNECT publishes the will [MQTT-3.1.2-8]. (Before
    /// CONNACK a connection holds no will.)
    pub(super) fn publishes_will(self) -> bool {
        match self {
            DisconnectReason::Client(code) => code == ReasonCode::DisconnectWithWillMessage,
            DisconnectReason::ConnectTimeout => false,
            _ => true,
        }
    }

    /// A takeover hands the session to the new connection instead of applying its
    /// expiry.
    pub(super) fn keeps_session(self) -> bool {
        self == DisconnectReason::TakenOver
    }
}

impl Engine {
    /// Report client events (`ClientConnected` ... `Unsubscribed`) from now on, or
    /// stop (Python follows its log level).
    pub fn set_client_events(&mut self, on: bool) {
        self.config.client_events = on;
    }

    /// The client id of a live session, for an event.
    pub(super) fn client_id_of(&self, session: u32) -> String {
        self.sessions
            .get(session as usize)
            .and_then(Option::as_ref)
            .map_or_else(String::new, |s| s.client_id.to_string())
    }

    pub(super) fn report_disconnected(
        &mut self,
        conn: ConnId,
        session: u32,
        reason: DisconnectReason,
    ) {
        if self.config.client_events {
            let client_id = self.client_id_of(session);
            self.events.push(Event::ClientDisconnected {
                conn,
                client_id,
                reason,
            });
        }
    }
}
