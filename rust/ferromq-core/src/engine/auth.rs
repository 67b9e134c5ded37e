//! Authentication: Python's decision on a CONNECT, the MQTT 5 enhanced
//! authentication exchange (AUTH packets, §4.12) and re-authentication (§4.12.1).
//!
//! With `EngineConfig::authenticate` off nothing here runs: `connect.rs` accepts every
//! CONNECT and refuses one carrying an Authentication Method with 0x8C. With it on,
//! a CONNECT becomes an `Authenticate` event and the connection waits
//! (`ConnState::Authenticating`) for one of Python's answers:
//!
//! - `continue_auth(conn, token, data)`: AUTH 0x18 goes out with the method and
//!   `data` [MQTT-4.12.0-2]; the client's AUTH 0x18 comes back as an `Auth` event
//!   [MQTT-4.12.0-3], answered the same way. Only with a method in CONNECT.
//! - `complete_auth(conn, token, reason, data)`: Success sends CONNACK, carrying the
//!   method and `data` when a method is in use [MQTT-4.12.0-5]; any other reason is
//!   the refusal (CONNACK, mapped to a return code for 3.1.1) [MQTT-4.12.0-4].
//!
//! Re-authentication: a connected client that gave a method sends AUTH 0x19 with the
//! same method [MQTT-4.12.1-1]; the same answers apply, ending in AUTH 0x00 with the
//! final data or DISCONNECT with the refusal's reason and a close [MQTT-4.12.1-2].
//! The connection keeps publishing and receiving meanwhile.
//!
//! Turns: at any time either Python (`Turn::Broker`) or the client (`Turn::Client`)
//! owes the next step. A client AUTH out of turn, with another method, or with a
//! reason code that does not fit, is a Protocol Error (0x82), as is any AUTH from a
//! client that gave no method [MQTT-4.12.0-7] and, before CONNACK, any packet but AUTH
//! and DISCONNECT from one that did [MQTT-3.1.2-30]. Without a method, packets sent
//! right behind CONNECT are parked until the decision.
//!
//! Tokens: connection ids are reused after `connection_lost`, so every event carries
//! the connection's token (unique per socket) and an answer with another token is for
//! a socket that is gone: it is ignored, never applied to the id's new owner.
//!
//! Timeout: an exchange is bounded by the connect timeout from its start, whichever
//! side is silent; `tick` refuses an overdue one with 0x87 (CONNACK, or DISCONNECT
//! during re-authentication).

use bytes::Bytes;

use crate::codec::{Connect, Packet, Property, PropertyId, ReasonCode, ReasonOnly, Utf8Bytes};

use super::connection::ConnState;
use super::lifecycle::DisconnectReason;
use super::{ConnId, Engine, Event};

/// Who owes the next step of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Python is deciding (an event is out).
    Broker,
    /// AUTH 0x18 went out; the client's AUTH 0x18 is due.
    Client,
}

/// An authentication exchange in progress on one connection.
#[derive(Debug)]
pub struct AuthExchange {
    pub deadline: u64,
    pub turn: Turn,
    /// Python's final Authentication Data, for the CONNACK.
    pub final_data: Option<Bytes>,
}

impl Engine {
    /// A CONNECT to decide: hand it to Python and wait.
    pub(super) fn begin_authentication(&mut self, conn_id: ConnId, connect: Connect, now: u64) {
        let method = match connect.properties.get(PropertyId::AuthenticationMethod) {
            Some(Property::AuthenticationMethod(method)) => Some(method.clone()),
            _ => None,
        };
        let deadline = now + self.config.connect_timeout_ms;
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let token = conn.token;
        conn.auth_method = method.clone();
        conn.auth = Some(Box::new(AuthExchange {
            deadline,
            turn: Turn::Broker,
            final_data: None,
        }));
        self.events.push(Event::Authenticate {
            conn: conn_id,
            token,
            client_id: connect.client_id.as_str().to_owned(),
            username: connect.username.as_ref().map(|u| u.as_str().to_owned()),
            password: connect.password.as_ref().map(|p| p.to_vec()),
            protocol: connect.protocol.level(),
            clean_start: connect.clean_start,
            has_will: connect.will.is_some(),
            method: method.map(|m| m.as_str().to_owned()),
            data: auth_data(&connect.properties),
        });
        if let Some(conn) = self.conn_mut(conn_id) {
            conn.state = ConnState::Authenticating(Box::new(connect));
        }
    }

    /// A packet that arrived while the CONNECT is being decided.
    pub(super) fn handle_while_authenticating(
        &mut self,
        conn_id: ConnId,
        packet: Packet,
        now: u64,
    ) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        match (conn.auth_method.is_some(), packet) {
            (true, Packet::Auth(auth)) => {
                self.handle_auth_packet(conn_id, auth, ReasonCode::ContinueAuthentication, now)
            }
            // Giving up before CONNACK: a normal end, and the will is discarded.
            (true, Packet::Disconnect(packet)) => {
                self.close_connection(conn_id, DisconnectReason::Client(packet.reason), now)
            }
            (true, _) | (false, Packet::Auth(_)) => {
                self.refuse(conn_id, ReasonCode::ProtocolError, now)
            }
            // Packets sent right behind CONNECT wait for the decision.
            (false, packet) => conn.parked.push_back(packet),
        }
    }

    /// AUTH from a connected client: the start of a re-authentication (0x19
    /// [MQTT-4.12.1-1]) or, during one, its next step (0x18).
    pub(super) fn handle_reauth(&mut self, conn_id: ConnId, auth: ReasonOnly, now: u64) {
        let deadline = now + self.config.connect_timeout_ms;
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let expected = if conn.auth.is_some() {
            ReasonCode::ContinueAuthentication
        } else {
            conn.auth = Some(Box::new(AuthExchange {
                deadline,
                turn: Turn::Client,
                final_data: None,
            }));
            ReasonCode::ReAuthenticate
        };
        self.handle_auth_packet(conn_id, auth, expected, now);
    }

    /// A client AUTH: the connection must have a method [MQTT-4.12.0-7], it must be
    /// the client's turn, the AUTH must name the same method [MQTT-4.12.0-5] and carry
    /// the `expected` reason. Then Python gets it as an `Auth` event.
    fn handle_auth_packet(
        &mut self,
        conn_id: ConnId,
        auth: ReasonOnly,
        expected: ReasonCode,
        now: u64,
    ) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let same_method = match (
            auth.properties.get(PropertyId::AuthenticationMethod),
            &conn.auth_method,
        ) {
            (Some(Property::AuthenticationMethod(sent)), Some(method)) => sent == method,
            _ => false,
        };
        let token = conn.token;
        let exchange = conn.auth.as_mut().filter(|a| a.turn == Turn::Client);
        let Some(exchange) = exchange.filter(|_| same_method && auth.reason == expected) else {
            self.refuse(conn_id, ReasonCode::ProtocolError, now);
            return;
        };
        exchange.turn = Turn::Broker;
        self.events.push(Event::Auth {
            conn: conn_id,
            token,
            reauthenticate: expected == ReasonCode::ReAuthenticate,
            data: auth_data(&auth.properties),
        });
    }

    /// The exchange of `conn_id` waiting for Python, if `token` is still its socket's.
    fn exchange_for_answer(&mut self, conn_id: ConnId, token: u64) -> Option<&mut AuthExchange> {
        self.conn_mut(conn_id)
            .filter(|c| c.token == token && !c.is_closed())?
            .auth
            .as_deref_mut()
            .filter(|a| a.turn == Turn::Broker)
    }

    /// Close a connected client from outside the protocol, e.g. when its credentials
    /// expire: a v5 client gets DISCONNECT `reason` first, and the will is published as
    /// for any close the client did not ask for [MQTT-3.1.2-8]. Ignored for another
    /// token (the socket is gone) or a connection not connected yet.
    pub fn disconnect(&mut self, conn_id: ConnId, token: u64, reason: ReasonCode, now: u64) {
        let connected = self
            .conn_mut(conn_id)
            .is_some_and(|c| c.token == token && !c.is_closed() && c.session().is_some());
        if connected {
            self.disconnect_with(conn_id, reason);
            self.close_connection(conn_id, DisconnectReason::Kicked(reason), now);
        }
    }

    /// Python's answer "continue": send AUTH 0x18 with `data` and wait for the
    /// client. Without a method in CONNECT there is nothing to continue
    /// [MQTT-4.12.0-6]: the connection is refused as not authorized. An answer for
    /// another token, or when no answer is due, is ignored.
    pub fn continue_auth(&mut self, conn_id: ConnId, token: u64, data: &[u8], now: u64) {
        let Some(exchange) = self.exchange_for_answer(conn_id, token) else {
            return;
        };
        exchange.turn = Turn::Client;
        let Some(method) = self.conn_mut(conn_id).and_then(|c| c.auth_method.clone()) else {
            self.refuse(conn_id, ReasonCode::NotAuthorized, now);
            return;
        };
        let packet = Packet::Auth(auth_packet(
            ReasonCode::ContinueAuthentication,
            method,
            Some(Bytes::copy_from_slice(data)),
        ));
        self.write(conn_id, &packet);
    }

    /// Python's final answer: Success accepts (CONNACK, or AUTH 0x00 after a
    /// re-authentication), with `data` as the final Authentication Data when a method
    /// is in use; any other reason refuses. An answer for another token, or when no
    /// answer is due, is ignored.
    pub fn complete_auth(
        &mut self,
        conn_id: ConnId,
        token: u64,
        decision: ReasonCode,
        data: Option<&[u8]>,
        now: u64,
    ) {
        let Some(exchange) = self.exchange_for_answer(conn_id, token) else {
            return;
        };
        exchange.final_data = data.map(Bytes::copy_from_slice);
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        if decision != ReasonCode::Success {
            // DISCONNECT has no 0x86: a failed re-authentication is 0x87 [MQTT-4.12.1-2].
            let reauthenticating = conn.session().is_some();
            let reason = match decision {
                ReasonCode::BadUserNameOrPassword if reauthenticating => ReasonCode::NotAuthorized,
                other => other,
            };
            self.stats.auth_failed.count(reason);
            if !reauthenticating {
                self.export_auth_refused(conn_id, None, reason, now);
            }
            self.refuse(conn_id, reason, now);
            return;
        }
        match std::mem::replace(
            &mut conn.state,
            ConnState::AwaitingConnect { deadline: now },
        ) {
            ConnState::Authenticating(connect) => self.accept_connect(conn_id, *connect, now),
            connected => {
                conn.state = connected;
                let final_data = conn.auth.take().and_then(|a| a.final_data);
                if let Some(method) = conn.auth_method.clone() {
                    let packet = Packet::Auth(auth_packet(ReasonCode::Success, method, final_data));
                    self.write(conn_id, &packet);
                }
            }
        }
    }

    /// The Authentication Method and final Data for a successful CONNACK; ends the
    /// exchange. Empty when the client gave no method [MQTT-4.12.0-6].
    pub(super) fn connack_auth_properties(&mut self, conn_id: ConnId) -> Vec<Property> {
        let Some(conn) = self.conn_mut(conn_id) else {
            return Vec::new();
        };
        let final_data = conn.auth.take().and_then(|a| a.final_data);
        let Some(method) = conn.auth_method.clone() else {
            return Vec::new();
        };
        auth_packet(ReasonCode::Success, method, final_data)
            .properties
            .0
    }

    /// `tick` found the exchange past its deadline: refuse with 0x87.
    pub(super) fn auth_timed_out(&mut self, conn_id: ConnId, now: u64) {
        self.stats.auth_failed.count(ReasonCode::NotAuthorized);
        if self
            .conn_mut(conn_id)
            .is_some_and(|c| c.session().is_none())
        {
            self.export_auth_refused(conn_id, None, ReasonCode::NotAuthorized, now);
        }
        self.refuse_with(
            conn_id,
            ReasonCode::NotAuthorized,
            "authentication not completed within the connect timeout",
            now,
        );
    }
}

fn auth_data(properties: &crate::codec::Properties) -> Option<Vec<u8>> {
    match properties.get(PropertyId::AuthenticationData) {
        Some(Property::AuthenticationData(data)) => Some(data.to_vec()),
        _ => None,
    }
}

fn auth_packet(reason: ReasonCode, method: Utf8Bytes, data: Option<Bytes>) -> ReasonOnly {
    let mut packet = ReasonOnly::new(reason);
    packet
        .properties
        .0
        .push(Property::AuthenticationMethod(method));
    if let Some(data) = data {
        packet.properties.0.push(Property::AuthenticationData(data));
    }
    packet
}
