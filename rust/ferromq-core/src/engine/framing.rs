//! Per-connection framing: how a connection's bytes carry MQTT. `Framing::Mqtt` is the
//! stream itself (TCP, TLS); `Framing::WebSocket` wraps it in WebSocket frames
//! (`crate::transport::websocket`), undone here so the IO layer feeds a WebSocket
//! connection exactly as a TCP one: one `feed` per read, one buffer per connection
//! from `take_output`.
//!
//! - **In.** `feed` unmasks the read's frames onto the connection's `inbound` stream
//!   (an unfinished packet's bytes stay there, bounded by the decoder's maximum packet
//!   size, as a TCP connection's stay in the IO layer's buffer), then decodes it like
//!   a TCP read. A frame the deframer refuses is logged as `Rejected`, answered with a
//!   close frame carrying its status (1002, 1003, 1009), and the connection ends as if
//!   the socket dropped (the will is published). A client's close frame is echoed and
//!   ends the connection the same way, unless an MQTT DISCONNECT came first.
//! - **Bridges.** A `[[bridges]]` connection over WebSocket is the client side
//!   (`WebSocket::client`): the remote's frames come unmasked, ours go masked.
//! - **Out.** `take_output` sends the connection's MQTT output as one binary frame,
//!   followed by its control frames (pong, close): a header copy per flush, never a
//!   frame per packet. A connection the engine ends gets a close frame (1000) after its
//!   last MQTT bytes.
//!
//! A TCP connection pays one `Option` check per `feed` and per flushed buffer.

use bytes::{Buf, Bytes, BytesMut};

use super::lifecycle::DisconnectReason;
use super::{ConnId, Engine, Event};
use crate::choice::named;
use crate::codec::ReasonCode;
use crate::transport::websocket::{CloseCode, Deframer, FrameError, Progress, BINARY, MAX_HEADER};

/// Inbound capacity a WebSocket connection keeps once its stream is drained.
const IDLE_INBOUND_CAPACITY: usize = 4096;

/// How a connection's bytes carry MQTT; chosen when it opens ([`Engine::open_framed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The MQTT byte stream as it is (TCP, TLS).
    Mqtt,
    /// MQTT in WebSocket binary frames, after the HTTP upgrade (which the IO layer ran).
    WebSocket,
}

named!(Framing, "framing", ["mqtt" => Framing::Mqtt, "websocket" => Framing::WebSocket]);

/// A WebSocket connection's framing state.
#[derive(Debug)]
pub(super) struct WebSocket {
    deframer: Deframer,
    /// Unmasked MQTT bytes not decoded yet (an unfinished packet).
    inbound: BytesMut,
    /// Control frames to send after the connection's MQTT output.
    replies: BytesMut,
    close_sent: bool,
}

impl WebSocket {
    pub(super) fn new(max_packet_size: u32) -> WebSocket {
        WebSocket::with(Deframer::new(max_packet_size))
    }

    /// A bridge's connection to a remote broker over WebSocket: our frames masked
    /// with keys from `seed`, the remote's unmasked (`transport::websocket::Role`).
    pub(super) fn client(max_packet_size: u32, seed: u64) -> WebSocket {
        WebSocket::with(Deframer::client(max_packet_size, seed))
    }

    fn with(deframer: Deframer) -> WebSocket {
        WebSocket {
            deframer,
            inbound: BytesMut::new(),
            replies: BytesMut::new(),
            close_sent: false,
        }
    }

    pub(super) fn has_output(&self) -> bool {
        !self.replies.is_empty()
    }

    /// One buffer for the socket: `mqtt` in one binary frame, then the control frames.
    pub(super) fn wrap(&mut self, mqtt: &[u8]) -> Bytes {
        let mut out = BytesMut::with_capacity(MAX_HEADER + mqtt.len() + self.replies.len());
        if !mqtt.is_empty() {
            // The server's header then a copy; a bridge's masked while copied.
            self.deframer.put_frame(&mut out, BINARY, mqtt);
        }
        out.extend_from_slice(&self.replies);
        self.replies.clear();
        out.freeze()
    }

    /// Queue the close frame, once.
    fn close(&mut self, code: CloseCode) {
        if !self.close_sent {
            self.close_sent = true;
            self.deframer
                .put_close(&mut self.replies, Some(code.status()));
        }
    }
}

impl Engine {
    /// `feed` for a WebSocket connection: deframe, then decode as TCP does.
    pub(super) fn feed_websocket(&mut self, conn_id: ConnId, data: &[u8], now: u64) -> usize {
        let Some(conn) = self
            .conns
            .get_mut(conn_id as usize)
            .and_then(Option::as_mut)
        else {
            return data.len();
        };
        let Some(ws) = conn.websocket.as_deref_mut() else {
            return data.len();
        };
        let progress = ws.deframer.deframe(data, &mut ws.inbound, &mut ws.replies);
        if let Ok(Progress::Closed) = progress {
            // The peer's close was answered with a close frame of its own.
            ws.close_sent = true;
        }
        let replied = ws.has_output();
        let received = &mut self.stats.received;
        let (packets, used, error) = conn
            .decoder
            .decode_slice_with(&ws.inbound, |kind, len| received.count(kind, len));
        ws.inbound.advance(used);
        if ws.inbound.is_empty() && ws.inbound.capacity() > IDLE_INBOUND_CAPACITY {
            // A large packet has gone through: an idle connection keeps no large buffer.
            ws.inbound = BytesMut::new();
        }
        if replied {
            self.mark_dirty(conn_id);
        }
        if !self.handle_decoded(conn_id, packets, used, error, now) {
            return data.len();
        }
        match progress {
            Ok(Progress::Open(consumed)) => consumed,
            Ok(Progress::Closed) => {
                self.close_connection(conn_id, DisconnectReason::SocketClosed, now);
                data.len()
            }
            Err(FrameError { code, detail }) => {
                self.stats.protocol_errors += 1;
                let reason = match code {
                    CloseCode::MessageTooBig => ReasonCode::PacketTooLarge,
                    _ => ReasonCode::ProtocolError,
                };
                self.events.push(Event::Rejected {
                    conn: conn_id,
                    reason,
                    detail,
                });
                self.close_websocket(conn_id, code);
                self.close_connection(conn_id, DisconnectReason::ProtocolError(reason), now);
                data.len()
            }
        }
    }

    /// Queue a WebSocket connection's close frame with `code` (nothing for TCP).
    pub(super) fn close_websocket(&mut self, conn_id: ConnId, code: CloseCode) {
        let Some(ws) = self
            .conn_mut(conn_id)
            .and_then(|conn| conn.websocket.as_deref_mut())
        else {
            return;
        };
        if !ws.close_sent {
            ws.close(code);
            self.mark_dirty(conn_id);
        }
    }
}
