//! The bytes between one client and the broker: plain TCP, TLS (rustls), or a
//! WebSocket over either (`Transport`), behind one non-blocking read/write interface
//! the worker drives from its `mio` loop.
//!
//! - **TLS** keeps a `rustls::ClientConnection` beside the socket. Plaintext written
//!   before the handshake is done is buffered by rustls and sent once it is; each read
//!   pulls TLS records off the socket and answers the handshake at once. A write is
//!   refused (`WouldBlock`) while records of the previous one are still unsent, so a
//!   publisher is held back by the socket exactly as on plain TCP.
//! - **WebSocket** ([RFC 6455]) sends the upgrade request first and holds every frame
//!   until the `101` answer (§4.1: a client waits for the handshake before sending
//!   data). Each write becomes one masked binary frame (§5.3, a fresh key per frame);
//!   server frames are deframed as they arrive, continuation frames joining their
//!   message, pings answered with pongs, a close frame ending the link.
//!
//! Everything is built per connection from one [`Connector`], made once per run from
//! the config (the CA file is read once).
//!
//! [RFC 6455]: https://www.rfc-editor.org/rfc/rfc6455

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::BytesMut;
use ferromq_core::transport::websocket::{
    put_client_frame, BINARY, CLOSE, CONTINUATION, FIN, PING, PONG, TEXT,
};
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore};

use crate::config::{Config, Transport};
use crate::BenchError;

/// Largest upgrade answer accepted before the link is given up.
const MAX_UPGRADE_RESPONSE: usize = 16 * 1024;

static TLS12_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// What every link of a run is made from.
pub struct Connector {
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// The upgrade request of a WebSocket transport.
    upgrade: Option<Vec<u8>>,
}

impl Connector {
    pub fn from_config(config: &Config) -> Result<Connector, BenchError> {
        let tls = match config.transport {
            Transport::Tls | Transport::Wss => Some(tls_client(config)?),
            Transport::Tcp | Transport::Ws => None,
        };
        let upgrade = matches!(config.transport, Transport::Ws | Transport::Wss).then(|| {
            format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n",
                path = config.ws_path,
                host = config.host,
                port = config.port,
            )
            .into_bytes()
        });
        Ok(Connector { tls, upgrade })
    }

    /// A link over `socket`, whose TCP connect may still be in progress.
    pub fn link(&self, socket: TcpStream, seed: u32) -> io::Result<Link> {
        let wire = match &self.tls {
            None => Wire::Tcp(socket),
            Some((config, name)) => {
                let conn = ClientConnection::new(config.clone(), name.clone())
                    .map_err(io::Error::other)?;
                Wire::Tls(Box::new(Tls { conn, socket }))
            }
        };
        let websocket = self.upgrade.as_ref().map(|request| WebSocket {
            upgraded: false,
            input: Vec::new(),
            held: BytesMut::new(),
            out: BytesMut::from(&request[..]),
            sent: 0,
            mask: seed | 1,
        });
        Ok(Link { wire, websocket })
    }
}

fn tls_client(config: &Config) -> Result<(Arc<ClientConfig>, ServerName<'static>), BenchError> {
    // `Config::validate` has checked that a CA file is named.
    let fail = |message: String| BenchError::Config(message);
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(&config.tls_ca_file)
        .map_err(|err| fail(format!("tls_ca_file {}: {err}", config.tls_ca_file)))?;
    for certificate in certificates {
        let certificate = certificate
            .map_err(|err| fail(format!("tls_ca_file {}: {err}", config.tls_ca_file)))?;
        roots
            .add(certificate)
            .map_err(|err| fail(format!("tls_ca_file {}: {err}", config.tls_ca_file)))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(match config.tls_version.as_str() {
            "1.2" => TLS12_ONLY,
            _ => TLS13_ONLY,
        })
        .map_err(|err| fail(format!("tls_version: {err}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(config.tls_server_name.clone()).map_err(|_| {
        fail(format!(
            "tls_server_name {:?} is not a name",
            config.tls_server_name
        ))
    })?;
    Ok((Arc::new(client), name))
}

/// What a read brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Bytes of MQTT appended to the sink (0 when only TLS or WebSocket control
    /// traffic arrived).
    Bytes(usize),
    /// The broker closed the link.
    Closed,
}

pub struct Link {
    wire: Wire,
    websocket: Option<WebSocket>,
}

impl Link {
    pub fn tcp(&self) -> &TcpStream {
        match &self.wire {
            Wire::Tcp(socket) => socket,
            Wire::Tls(tls) => &tls.socket,
        }
    }

    pub fn tcp_mut(&mut self) -> &mut TcpStream {
        match &mut self.wire {
            Wire::Tcp(socket) => socket,
            Wire::Tls(tls) => &mut tls.socket,
        }
    }

    /// Whether this link's TLS handshake resumed an earlier session; false without
    /// TLS and while the handshake is under way.
    pub fn tls_resumed(&self) -> bool {
        matches!(&self.wire, Wire::Tls(tls) if tls.conn.handshake_kind() == Some(HandshakeKind::Resumed))
    }

    /// Read once from the socket through `scratch`, appending MQTT bytes to `sink`.
    /// `WouldBlock` when nothing is left to read.
    pub fn read_into(&mut self, scratch: &mut [u8], sink: &mut BytesMut) -> io::Result<Received> {
        let n = self.wire.read(scratch)?;
        if n == 0 {
            return Ok(Received::Closed);
        }
        let Some(websocket) = &mut self.websocket else {
            sink.extend_from_slice(&scratch[..n]);
            return Ok(Received::Bytes(n));
        };
        websocket.input.extend_from_slice(&scratch[..n]);
        if !websocket.upgraded && !websocket.read_upgrade()? {
            return Ok(Received::Bytes(0));
        }
        let before = sink.len();
        let open = websocket.deframe(sink)?;
        self.send_pending_frames()?;
        Ok(if open {
            Received::Bytes(sink.len() - before)
        } else {
            Received::Closed
        })
    }

    /// Take as much of `data` as the link accepts now; `WouldBlock` while what an
    /// earlier write queued has not reached the socket yet.
    pub fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.websocket.is_none() {
            return self.wire.write(data);
        }
        self.flush()?;
        if let Some(websocket) = &mut self.websocket {
            websocket.queue_frame(BINARY, data);
        }
        self.send_pending_frames()?;
        Ok(data.len())
    }

    /// Send what the link holds; `WouldBlock` while some of it cannot be sent yet.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(websocket) = &mut self.websocket {
            while websocket.sent < websocket.out.len() {
                websocket.sent += self.wire.write(&websocket.out[websocket.sent..])?;
            }
            websocket.out.clear();
            websocket.sent = 0;
        }
        self.wire.flush()
    }

    /// [`Link::flush`] where the socket being full is not an error: the rest goes at
    /// the next flush, which the worker makes when the socket is writable again.
    fn send_pending_frames(&mut self) -> io::Result<()> {
        match self.flush() {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(()),
            other => other,
        }
    }
}

enum Wire {
    Tcp(TcpStream),
    Tls(Box<Tls>),
}

struct Tls {
    conn: ClientConnection,
    socket: TcpStream,
}

impl Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let tls = match self {
            Wire::Tcp(socket) => return socket.read(buf),
            Wire::Tls(tls) => tls,
        };
        loop {
            match tls.conn.reader().read(buf) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                done => return done,
            }
            if tls.conn.read_tls(&mut tls.socket)? == 0 {
                return Ok(0);
            }
            tls.conn
                .process_new_packets()
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
            match tls.flush() {
                Err(err) if err.kind() != io::ErrorKind::WouldBlock => return Err(err),
                _ => {}
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let tls = match self {
            Wire::Tcp(socket) => return socket.write(data),
            Wire::Tls(tls) => tls,
        };
        tls.flush()?;
        let taken = tls.conn.writer().write(data)?;
        if taken == 0 && !data.is_empty() {
            // rustls holds its limit of plaintext until the handshake is done.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match tls.flush() {
            Err(err) if err.kind() != io::ErrorKind::WouldBlock => Err(err),
            _ => Ok(taken),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Wire::Tcp(_) => Ok(()),
            Wire::Tls(tls) => tls.flush(),
        }
    }
}

impl Tls {
    fn flush(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.socket)?;
        }
        Ok(())
    }
}

struct WebSocket {
    upgraded: bool,
    /// Received bytes not yet deframed (or, before the upgrade, the answer so far).
    input: Vec<u8>,
    /// Frames written before the upgrade was answered.
    held: BytesMut,
    /// Bytes for the wire, `sent` of them already written.
    out: BytesMut,
    sent: usize,
    /// xorshift32 state for the masking keys (never 0).
    mask: u32,
}

impl WebSocket {
    /// Consume the upgrade answer once it is complete: `Ok(true)` when upgraded.
    fn read_upgrade(&mut self) -> io::Result<bool> {
        let Some(end) = self.input.windows(4).position(|w| w == b"\r\n\r\n") else {
            if self.input.len() > MAX_UPGRADE_RESPONSE {
                return Err(invalid("the WebSocket upgrade answer has no end"));
            }
            return Ok(false);
        };
        let head = String::from_utf8_lossy(&self.input[..end]).into_owned();
        let status = head.lines().next().unwrap_or_default();
        if !status.starts_with("HTTP/1.1 101") {
            return Err(invalid(&format!("WebSocket upgrade refused: {status}")));
        }
        self.input.drain(..end + 4);
        self.upgraded = true;
        let held = std::mem::take(&mut self.held);
        self.out.extend_from_slice(&held);
        Ok(true)
    }

    /// Append the payload of every complete data frame in `input` to `sink`; answer
    /// pings. `Ok(false)` once the broker sent a close frame.
    fn deframe(&mut self, sink: &mut BytesMut) -> io::Result<bool> {
        let mut at = 0;
        let mut open = true;
        while let Some((opcode, start, end)) = frame_at(&self.input[at..])? {
            let (start, end) = (at + start, at + end);
            match opcode {
                CONTINUATION | BINARY => {
                    sink.extend_from_slice(&self.input[start..end]);
                }
                PING => {
                    let payload = self.input[start..end].to_vec();
                    self.queue_frame(PONG, &payload);
                }
                PONG => {}
                CLOSE => open = false,
                TEXT => return Err(invalid("the broker sent a text frame")),
                other => return Err(invalid(&format!("unknown WebSocket opcode {other:#x}"))),
            }
            at = end;
            if !open {
                break;
            }
        }
        self.input.drain(..at);
        Ok(open)
    }

    /// Queue one final, masked frame: after the upgrade for the wire, before it in
    /// `held`.
    fn queue_frame(&mut self, opcode: u8, payload: &[u8]) {
        let key = self.next_key();
        let target = if self.upgraded {
            &mut self.out
        } else {
            &mut self.held
        };
        put_client_frame(target, FIN | opcode, payload, key);
    }

    fn next_key(&mut self) -> [u8; 4] {
        let mut x = self.mask;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.mask = x;
        x.to_be_bytes()
    }
}

/// The opcode and payload range of the complete frame at the start of `data`, or
/// `None` while it is incomplete. Fragmented messages arrive as a first frame and
/// continuations, each delivered as it completes.
fn frame_at(data: &[u8]) -> io::Result<Option<(u8, usize, usize)>> {
    if data.len() < 2 {
        return Ok(None);
    }
    let (opcode, masked, len7) = (data[0] & 0x0F, data[1] & 0x80 != 0, data[1] & 0x7F);
    let (len, mut header) = match len7 {
        126 if data.len() >= 4 => (u64::from(u16::from_be_bytes([data[2], data[3]])), 4),
        127 if data.len() >= 10 => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&data[2..10]);
            (u64::from_be_bytes(bytes), 10)
        }
        126 | 127 => return Ok(None),
        len => (u64::from(len), 2),
    };
    if masked {
        return Err(invalid("the broker sent a masked frame (RFC 6455 §5.1)"));
    }
    let len = usize::try_from(len).map_err(|_| invalid("WebSocket frame too large"))?;
    if data.len() - header < len {
        return Ok(None);
    }
    let start = header;
    header += len;
    Ok(Some((opcode, start, header)))
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

#[cfg(test)]
mod tests {
    use ferromq_core::transport::websocket::Deframer;

    use super::*;

    fn websocket(upgraded: bool) -> WebSocket {
        WebSocket {
            upgraded,
            input: Vec::new(),
            held: BytesMut::new(),
            out: BytesMut::new(),
            sent: 0,
            mask: 7,
        }
    }

    #[test]
    fn frames_are_masked_and_unmask_to_the_payload() {
        let mut ws = websocket(true);
        let payload: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
        ws.queue_frame(BINARY, &payload);
        let frame = &ws.out;
        assert_eq!(frame[0], 0x82);
        assert_eq!(frame[1], 0x80 | 126);
        assert_eq!(u16::from_be_bytes([frame[2], frame[3]]), 300);
        assert_ne!(&frame[8..], &payload[..]);
        // The broker's own deframer reads it back.
        let mut deframer = Deframer::new(1024);
        let (mut data, mut replies) = (BytesMut::new(), BytesMut::new());
        deframer.deframe(frame, &mut data, &mut replies).unwrap();
        assert_eq!(&data[..], &payload[..]);
    }

    #[test]
    fn frames_wait_for_the_upgrade_answer() {
        let mut ws = websocket(false);
        ws.queue_frame(BINARY, b"connect");
        assert!(ws.out.is_empty());
        ws.input.extend_from_slice(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x82\x02hi",
        );
        assert!(ws.read_upgrade().unwrap());
        assert_eq!(ws.out.len(), 2 + 4 + 7);
        let mut sink = BytesMut::new();
        assert!(ws.deframe(&mut sink).unwrap());
        assert_eq!(&sink[..], b"hi");
    }

    #[test]
    fn a_refused_upgrade_names_the_status() {
        let mut ws = websocket(false);
        ws.input
            .extend_from_slice(b"HTTP/1.1 404 Not Found\r\n\r\n");
        let err = ws.read_upgrade().unwrap_err();
        assert!(err.to_string().contains("404"), "{err}");
    }

    #[test]
    fn split_and_fragmented_frames_join_and_pings_get_pongs() {
        let mut ws = websocket(true);
        let mut sink = BytesMut::new();
        ws.input.extend_from_slice(b"\x02\x03abc\x89\x01p\x80");
        assert!(ws.deframe(&mut sink).unwrap());
        assert_eq!(&sink[..], b"abc");
        assert_eq!(ws.out[0], 0x80 | PONG);
        ws.input.extend_from_slice(b"\x02de");
        assert!(ws.deframe(&mut sink).unwrap());
        assert_eq!(&sink[..], b"abcde");
        ws.input.extend_from_slice(b"\x88\x02\x03\xe8");
        assert!(!ws.deframe(&mut sink).unwrap());
    }
}
