//! CONNECT to CONNACK, session takeover and restore, and the end of a connection
//! (DISCONNECT both ways, the will, the session's fate).
//!
//! Client identifiers [MQTT-3.1.3-5..9]: an empty one is assigned by the broker in
//! 5.0 (returned as Assigned Client Identifier) and in 3.1.1 with clean session 1;
//! 3.1.1 with clean session 0 is refused with return code 0x02; MQTT 3.1 (MQIsdp)
//! accepts 1 to 23 characters.
//!
//! Takeover [MQTT-3.1.4-3]: a CONNECT for a client id that is connected closes the
//! old connection (DISCONNECT 0x8E in 5.0), which publishes its will, and hands the
//! session to the new one unless it asked for a clean start.
//!
//! Wills [MQTT-3.1.2-8..10]: kept per connection; published when a connection ends
//! any way but a normal DISCONNECT, after the v5 Will Delay Interval if the session
//! outlives the connection; a return to the session before then cancels it.

use std::sync::Arc;

use crate::acl::Binding;

use crate::codec::{
    ConnAck, Connect, Packet, PacketType, Properties, Property, PropertyId, ProtocolVersion,
    ReasonCode, ReasonOnly, Will,
};

use super::acl::SessionAcl;
use super::alias_out::OutboundAliases;
use super::connection::ConnState;
use super::lifecycle::DisconnectReason;
use super::message::Message;
use super::rate::PublishRate;
use super::session::{Awaiting, PendingWill, Session};
use super::stats::DropReason;
use super::trace::PacketSummary;
use super::{ConnId, Engine, Event};
use crate::transport::websocket::CloseCode;

impl Engine {
    pub(super) fn handle_connect(&mut self, conn_id: ConnId, connect: Connect, now: u64) {
        let version = connect.protocol;
        if let Some(conn) = self.conn_mut(conn_id) {
            conn.version = version;
            conn.request_problem_info = !matches!(
                connect
                    .properties
                    .get(PropertyId::RequestProblemInformation),
                Some(Property::RequestProblemInformation(0))
            );
        }
        if let Some(refusal) = self.check_connect(&connect) {
            if refusal == ReasonCode::BadAuthenticationMethod {
                self.stats.auth_failed.count(refusal);
                self.export_auth_refused(conn_id, Some(&connect), refusal, now);
            }
            self.refuse(conn_id, refusal, now);
            return;
        }
        let refusal = self
            .connect_refusal(&connect)
            .or_else(|| self.connect_name_refusal(&connect));
        if let Some((refusal, detail)) = refusal {
            self.refuse_with(conn_id, refusal, detail, now);
            return;
        }
        if self.config.authenticate {
            self.begin_authentication(conn_id, connect, now);
        } else {
            self.accept_connect(conn_id, connect, now);
        }
    }

    /// The reason to refuse a CONNECT before authentication, if any.
    fn check_connect(&self, connect: &Connect) -> Option<ReasonCode> {
        let id = connect.client_id.as_str();
        let id_ok = match connect.protocol {
            ProtocolVersion::V3_1 => (1..=23).contains(&id.len()),
            ProtocolVersion::V3_1_1 => !id.is_empty() || connect.clean_start,
            ProtocolVersion::V5 => true,
        } && id.len() <= self.config.max_client_id_length;
        if !id_ok {
            return Some(ReasonCode::ClientIdentifierNotValid);
        }
        let has_method = connect
            .properties
            .get(PropertyId::AuthenticationMethod)
            .is_some();
        if !has_method
            && connect
                .properties
                .get(PropertyId::AuthenticationData)
                .is_some()
        {
            // Authentication Data without a method is a Protocol Error (§3.1.2.11.10).
            return Some(ReasonCode::ProtocolError);
        }
        if has_method && !self.config.authenticate {
            // No authentication provider, so no method is offered [MQTT-4.12.0-1].
            return Some(ReasonCode::BadAuthenticationMethod);
        }
        None
    }

    pub(super) fn accept_connect(&mut self, conn_id: ConnId, mut connect: Connect, now: u64) {
        let v5 = connect.protocol.is_v5();
        let mut assigned = None;
        let client_id = if connect.client_id.is_empty() {
            // One this shard owns, so a reconnect with it lands here (about `count`
            // tries on a node of `count` shards).
            let id = loop {
                let id = format!("{}{:016x}", self.assigned_id_prefix, self.next_assigned_id);
                self.next_assigned_id += 1;
                if self.owns(&id) {
                    break id;
                }
            };
            assigned = Some(id.clone());
            id
        } else {
            connect.client_id.as_str().to_owned()
        };
        let requested_expiry = match connect.properties.get(PropertyId::SessionExpiryInterval) {
            Some(Property::SessionExpiryInterval(seconds)) => *seconds,
            _ => 0,
        };
        let expiry = if v5 {
            requested_expiry.min(self.config.max_session_expiry)
        } else if connect.clean_start {
            0
        } else {
            self.config.persistent_session_expiry
        };

        let existing = self.by_client_id.get(client_id.as_str()).copied();
        if let Some(session) = existing {
            if let Some(old) = self.sessions[session as usize]
                .as_ref()
                .and_then(|s| s.conn)
            {
                self.disconnect_with(old, ReasonCode::SessionTakenOver);
                self.close_connection(old, DisconnectReason::TakenOver, now);
            }
        }
        if let Some(session) = existing {
            self.cancel_stub(session);
        }
        let (session, session_present) = match existing {
            Some(session) if !connect.clean_start => (session, true),
            Some(session) => {
                self.end_session(session, now);
                (self.create_session(&client_id, expiry), false)
            }
            None => (self.create_session(&client_id, expiry), false),
        };
        let acl = self.connection_acl(conn_id, &connect, &client_id);
        // The user name authentication settled on (a certificate's identity, say).
        let username = acl
            .binding
            .username
            .as_deref()
            .filter(|_| self.config.client_events)
            .map(str::to_owned);
        if let Some(state) = self.session_mut(session) {
            state.conn = Some(conn_id);
            state.expiry_interval = expiry;
            state.expires_at = None;
            // A return before the will delay ends cancels the will [MQTT-3.1.3-9].
            state.pending_will = None;
            state.acl = acl;
            state.username = connect.username.as_ref().map(|name| name.as_str().into());
        }
        if let Some(will) = connect.will.as_mut() {
            if let Some(topic) = self.rewritten_topic(session, &will.topic) {
                will.topic = topic;
            }
        }
        if session_present {
            // Its subscriptions were granted to an earlier CONNECT, maybe under
            // other rules or as another user (engine/acl.rs).
            self.revoke_denied(session);
        }
        self.journal_session(session, expiry);
        // Stored so that the node adopting this one after a crash publishes it.
        self.journal_will(session, connect.will.as_ref().map(|will| (will, 0)));
        self.index.set_client_online(session, true);
        self.application_member_presence(session, true);

        let max_inflight = self.config.max_inflight;
        let aliases_out = match connect.properties.get(PropertyId::TopicAliasMaximum) {
            Some(Property::TopicAliasMaximum(n)) => {
                (*n).min(self.config.features.outbound_topic_aliases)
            }
            _ => 0,
        };
        let limits = self.config.publish_rate;
        let rate = PublishRate::new(limits.messages_per_client, limits.bytes_per_client, now);
        let user = connect
            .username
            .as_ref()
            .filter(|_| limits.per_user() || self.config.retained_limits.per_user())
            .map(|name| {
                self.users.acquire(name.as_str(), || {
                    PublishRate::new(limits.messages_per_user, limits.bytes_per_user, now)
                })
            });
        let keepalive = match self.config.max_keepalive {
            0 => connect.keep_alive,
            cap if connect.keep_alive == 0 || connect.keep_alive > cap => cap,
            _ => connect.keep_alive,
        };
        let conn = self.conn_mut(conn_id).expect("connection exists");
        conn.state = ConnState::Connected { session };
        conn.will = connect.will.map(Box::new);
        conn.session_expiry_from_connect = requested_expiry;
        conn.keepalive_grace_ms = u64::from(keepalive) * 1500;
        conn.keep_alive = keepalive;
        conn.connected_at = now;
        conn.aliases_out = OutboundAliases::new(aliases_out);
        conn.rate = rate.map(Box::new);
        conn.user = user;
        conn.send_window = match connect.properties.get(PropertyId::ReceiveMaximum) {
            Some(Property::ReceiveMaximum(n)) => (*n).min(max_inflight),
            _ => max_inflight,
        };
        if let Some(Property::MaximumPacketSize(n)) =
            connect.properties.get(PropertyId::MaximumPacketSize)
        {
            conn.client_max_packet = *n;
        }
        self.stats.clients_connected += 1;
        self.stats.clients_maximum = self.stats.clients_maximum.max(self.stats.clients_connected);
        if self.exports_events() {
            let username = connect.username.as_ref().map(|u| u.as_str());
            self.export_connected(
                conn_id,
                &client_id,
                username,
                connect.protocol.level(),
                keepalive,
                connect.clean_start,
                expiry,
                now,
            );
        }
        if self.config.client_events {
            self.events.push(Event::ClientConnected {
                conn: conn_id,
                client_id: client_id.clone(),
                username,
                protocol: connect.protocol.level(),
                keep_alive: keepalive,
                clean_start: connect.clean_start,
                session_expiry: expiry,
                session_present,
            });
        }
        if self.is_traced(&client_id) {
            if let Some(conn) = self.conn_mut(conn_id) {
                conn.traced = true;
            }
            let summary = PacketSummary::of_type(PacketType::Connect);
            self.trace_packet(conn_id, true, summary);
        }

        // Ends the authentication exchange, whatever the version: its deadline must
        // not outlive the CONNECT.
        let auth_properties = self.connack_auth_properties(conn_id);
        let mut properties = Vec::new();
        if v5 {
            if let Some(id) = assigned {
                properties.push(Property::AssignedClientIdentifier(
                    id.try_into().expect("assigned ids are plain ASCII"),
                ));
            }
            if expiry != requested_expiry {
                properties.push(Property::SessionExpiryInterval(expiry));
            }
            if keepalive != connect.keep_alive {
                properties.push(Property::ServerKeepAlive(keepalive));
            }
            self.announce(&connect.properties, &client_id, &mut properties);
            properties.extend(auth_properties);
        }
        let connack = Packet::ConnAck(ConnAck {
            session_present,
            code: 0,
            properties: Properties(properties),
        });
        // A bridge's CONNECT was Python's, to the remote broker: nobody waits here.
        let bridge = self.conn_mut(conn_id).is_some_and(|c| c.bridge);
        if !bridge && !self.write(conn_id, &connack) {
            // The client's Maximum Packet Size leaves no room for the CONNACK
            // [MQTT-3.1.2-25], and no DISCONNECT may precede it [MQTT-3.14.0-1]: close.
            self.events.push(Event::Rejected {
                conn: conn_id,
                reason: ReasonCode::PacketTooLarge,
                detail: "CONNACK exceeds the client's Maximum Packet Size",
            });
            // No CONNACK, so the will is not the client's yet.
            if let Some(conn) = self.conn_mut(conn_id) {
                conn.will = None;
            }
            let reason = DisconnectReason::ProtocolError(ReasonCode::PacketTooLarge);
            self.close_connection(conn_id, reason, now);
            return;
        }
        self.resend_inflight(conn_id, session, now);
        if !bridge {
            self.auto_subscribe(session, now);
        }
        self.drain_queue(session, now);
        self.handle_parked(conn_id, now);
    }

    /// The connection's ACL side: what authentication gave, else its CONNECT's
    /// user name; the client id is the one the session has (maybe assigned).
    fn connection_acl(
        &mut self,
        conn_id: ConnId,
        connect: &Connect,
        client_id: &str,
    ) -> SessionAcl {
        let given = self
            .conn_mut(conn_id)
            .and_then(|c| c.acl.take())
            .map(|acl| *acl);
        let mut acl = given.unwrap_or_else(|| {
            let binding = Binding {
                username: connect.username.as_ref().map(|u| u.as_str().into()),
                ..Binding::default()
            };
            SessionAcl::new(binding, None)
        });
        acl.binding.client_id = client_id.into();
        acl
    }

    pub(super) fn create_session(&mut self, client_id: &str, expiry: u32) -> u32 {
        let id = self
            .free_sessions
            .pop()
            .unwrap_or(self.sessions.len() as u32);
        let session = Session::new(client_id, expiry, self.ledger.clone());
        if id as usize == self.sessions.len() {
            self.sessions.push(Some(session));
        } else {
            self.sessions[id as usize] = Some(session);
        }
        self.by_client_id.insert(client_id.into(), id);
        id
    }

    /// Remove a session and everything it holds; publish a will still waiting.
    pub(super) fn end_session(&mut self, session: u32, now: u64) {
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::take)
        else {
            return;
        };
        self.free_sessions.push(session);
        self.journal_session_end(&state);
        self.by_client_id.remove(&state.client_id);
        self.shards_session_ended(session, &state.client_id);
        self.index.remove_client(session);
        self.forget_removed_groups();
        let mut state = state;
        if let Some(pending) = state.pending_will.take() {
            if self
                .acl
                .will_allowed(&mut state.acl, &pending.will, &mut self.stats)
            {
                self.publish_will(&state.client_id, pending.will, now);
            }
        }
    }

    /// Resend what was in flight when the session last lost its connection: PUBLISH
    /// with DUP and the same packet id, PUBREL for QoS 2 past PUBREC [MQTT-4.4.0-1].
    fn resend_inflight(&mut self, conn_id: ConnId, session: u32, now: u64) {
        let Some(state) = self.sessions[session as usize].as_ref() else {
            return;
        };
        let mut packets = Vec::new();
        for packet_id in state.inflight_in_order() {
            let packet = match &state.inflight[&packet_id].awaiting {
                Awaiting::PubAck(out) | Awaiting::PubRec(out) => {
                    Ok(self.publish_packet(conn_id, out, packet_id, true, now))
                }
                Awaiting::PubComp { release_batch } => Err(*release_batch),
            };
            packets.push((packet_id, packet));
        }
        for (packet_id, packet) in packets {
            let packet = match packet {
                Ok(packet) => packet,
                Err(release_batch) => {
                    self.send_pubrel(conn_id, packet_id, release_batch);
                    continue;
                }
            };
            if !self.write(conn_id, &packet) {
                // Too large for the client's new Maximum Packet Size: completed as
                // far as the broker is concerned [MQTT-3.1.2-26].
                self.stats.count_drop(DropReason::TooLarge, 1);
                if let Some(state) = self.session_mut(session) {
                    state.inflight.remove(&packet_id);
                }
            }
        }
    }

    /// The client said DISCONNECT: a normal end, unless v5 reason 0x04 asks for the
    /// will [MQTT-3.14.4-3]. A v5 client may change a non-zero session expiry here,
    /// but not from 0 [MQTT-3.14.2-2].
    pub(super) fn handle_disconnect(
        &mut self,
        conn_id: ConnId,
        session: u32,
        disconnect: ReasonOnly,
        now: u64,
    ) {
        if let Some(Property::SessionExpiryInterval(seconds)) =
            disconnect.properties.get(PropertyId::SessionExpiryInterval)
        {
            let from_connect = self
                .conn_mut(conn_id)
                .map_or(0, |c| c.session_expiry_from_connect);
            if from_connect == 0 && *seconds != 0 {
                self.refuse(conn_id, ReasonCode::ProtocolError, now);
                return;
            }
            let capped = (*seconds).min(self.config.max_session_expiry);
            if let Some(state) = self.session_mut(session) {
                state.expiry_interval = capped;
            }
            self.journal_session(session, capped);
        }
        self.close_connection(conn_id, DisconnectReason::Client(disconnect.reason), now);
    }

    /// Refuse or abort a connection with `reason`: CONNACK before the session is set
    /// up, DISCONNECT after (v5 only: 3.1.1 has no DISCONNECT from the server, and
    /// its CONNACK carries only return codes 1-5).
    pub(super) fn refuse(&mut self, conn_id: ConnId, reason: ReasonCode, now: u64) {
        self.refuse_with(conn_id, reason, reason.name(), now);
    }

    /// `refuse`, with what was wrong for the log (a decode error's detail).
    pub(super) fn refuse_with(
        &mut self,
        conn_id: ConnId,
        reason: ReasonCode,
        detail: &'static str,
        now: u64,
    ) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        if conn.is_closed() {
            return;
        }
        self.events.push(Event::Rejected {
            conn: conn_id,
            reason,
            detail,
        });
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        let v5 = conn.version.is_v5();
        let before_connack = matches!(
            conn.state,
            ConnState::AwaitingConnect { .. } | ConnState::Authenticating(_)
        );
        if before_connack {
            let code = if v5 {
                Some(reason as u8)
            } else {
                let code = reason.to_connect_return_code() as u8;
                let has_v3_code = matches!(
                    reason,
                    ReasonCode::UnsupportedProtocolVersion
                        | ReasonCode::ClientIdentifierNotValid
                        | ReasonCode::BadUserNameOrPassword
                        | ReasonCode::NotAuthorized
                        | ReasonCode::Banned
                        | ReasonCode::ServerUnavailable
                        | ReasonCode::ServerBusy
                        // A user's connection limit: 3 Server unavailable, try later.
                        | ReasonCode::QuotaExceeded
                        | ReasonCode::BadAuthenticationMethod
                        | ReasonCode::QosNotSupported
                        | ReasonCode::RetainNotSupported
                        | ReasonCode::UseAnotherServer
                        | ReasonCode::ServerMoved
                );
                has_v3_code.then_some(code)
            };
            if let Some(code) = code {
                let properties = if v5 {
                    self.refusal_properties(reason, detail)
                } else {
                    Properties::new()
                };
                self.write(
                    conn_id,
                    &Packet::ConnAck(ConnAck {
                        session_present: false,
                        code,
                        properties,
                    }),
                );
            }
            // A refused connection's will is discarded [MQTT-3.2.2-5 / 3.1.4-?].
            if let Some(conn) = self.conn_mut(conn_id) {
                conn.will = None;
            }
            self.close_connection(conn_id, DisconnectReason::ProtocolError(reason), now);
        } else {
            self.disconnect_because(conn_id, reason, detail);
            self.close_connection(conn_id, DisconnectReason::ProtocolError(reason), now);
        }
    }

    /// Send a server DISCONNECT with `reason` to a v5 client; nothing for 3.1.1.
    pub(super) fn disconnect_with(&mut self, conn_id: ConnId, reason: ReasonCode) {
        self.disconnect_because(conn_id, reason, reason.name());
    }

    /// `disconnect_with`, explained by a Reason String unless `detail` only
    /// repeats the reason's name.
    fn disconnect_because(&mut self, conn_id: ConnId, reason: ReasonCode, detail: &'static str) {
        let is_v5_connected = self
            .conn_mut(conn_id)
            .is_some_and(|c| c.version.is_v5() && c.session().is_some());
        if is_v5_connected {
            let mut disconnect = ReasonOnly::new(reason);
            disconnect.properties = self.refusal_properties(reason, detail);
            self.write(conn_id, &Packet::Disconnect(disconnect));
        }
    }

    /// End the connection's life in the engine for `reason`, which decides whether
    /// the will is published (possibly delayed) and whether the session is handed on
    /// (takeover) instead of applying its expiry (`lifecycle`). Python is asked to
    /// close the transport.
    pub(super) fn close_connection(&mut self, conn_id: ConnId, reason: DisconnectReason, now: u64) {
        let Some(conn) = self.conn_mut(conn_id) else {
            return;
        };
        if conn.is_closed() {
            return;
        }
        let state = std::mem::replace(&mut conn.state, ConnState::Closed);
        let will = conn.will.take().filter(|_| reason.publishes_will());
        let keep_session = reason.keeps_session();
        if let Some(user) = conn.user.take() {
            self.users.release_connection(user);
        }
        self.forget_hold(conn_id);
        self.close_websocket(conn_id, CloseCode::Normal);
        self.events.push(Event::Close { conn: conn_id });
        let ConnState::Connected { session } = state else {
            return;
        };
        self.report_disconnected(conn_id, session, reason);
        self.export_disconnected(session, reason, now);
        self.stats.clients_connected -= 1;
        self.index.set_client_online(session, false);
        self.application_member_presence(session, false);
        let Some(state) = self
            .sessions
            .get_mut(session as usize)
            .and_then(Option::as_mut)
        else {
            return;
        };
        state.conn = None;
        let expiry = state.expiry_interval;
        let (acl, stats) = (&self.acl, &mut self.stats);
        let will = will.filter(|will| acl.will_allowed(&mut state.acl, will, stats));
        if let Some(will) = will {
            let delay = match will.properties.get(PropertyId::WillDelayInterval) {
                Some(Property::WillDelayInterval(seconds)) => u64::from(*seconds) * 1000,
                _ => 0,
            };
            if delay == 0 || (expiry == 0 && !keep_session) {
                let client_id = state.client_id.clone();
                self.publish_will(&client_id, *will, now);
                self.journal_will(session, None);
            } else {
                self.journal_will(session, Some((&will, now + delay)));
                if let Some(state) = self.session_mut(session) {
                    state.pending_will = Some(Box::new(PendingWill {
                        due_at: now + delay,
                        will: *will,
                    }));
                }
            }
        } else {
            self.journal_will(session, None);
        }
        // Before the session may end: its shared deliveries go back to their groups.
        self.release_shared(session, now);
        if keep_session {
            return;
        }
        if expiry == 0 {
            self.end_session(session, now);
        } else if let Some(state) = self.session_mut(session) {
            state.expires_at = (expiry != u32::MAX).then(|| now + u64::from(expiry) * 1000);
        }
    }

    /// Publish `client_id`'s will as an ordinary message of its topic
    /// [MQTT-3.1.2-8].
    pub(super) fn publish_will(&mut self, client_id: &str, will: Will, now: u64) {
        let properties = Properties(
            will.properties
                .iter()
                .filter(|p| p.kind() != PropertyId::WillDelayInterval)
                .cloned()
                .collect(),
        );
        let message = Message::from_publish(
            &will.topic,
            &will.payload,
            will.qos,
            will.retain,
            &properties,
            None,
            now,
        );
        self.export_will(client_id, &message, now);
        self.route(Arc::new(message), now);
    }
}
