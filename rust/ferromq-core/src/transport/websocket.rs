//! WebSocket framing (RFC 6455 §5) for MQTT over WebSocket, sans IO.
//!
//! MQTT over WebSocket carries the MQTT byte stream in binary frames [MQTT-6.0.0-1];
//! a packet may span frames and a frame may hold several packets [MQTT-6.0.0-2,
//! 6.0.0-3], so frame boundaries mean nothing to MQTT. [`Deframer::deframe`] therefore
//! unmasks every data frame's payload into one byte stream the MQTT decoder reads,
//! streaming: a frame's payload is taken as it arrives (its remaining length and mask
//! position are kept), so no frame is held whole. Only a frame *header* (2-14 bytes)
//! or a control frame (at most 125 bytes of payload) is left unconsumed until it is
//! complete. Cost: one copy of the payload and one 64-bit XOR per 8 bytes of it.
//!
//! Refused, with the close status the peer is sent ([`FrameError`]): a frame from the
//! client without a mask [RFC 6455 §5.1], reserved bits set (no extension is ever
//! negotiated, §5.2), a reserved opcode, a control frame fragmented or above 125
//! bytes (§5.5), a continuation frame outside a message or a new message inside one
//! (§5.4), a length not in its minimal form or with the 64-bit form's top bit set
//! (§5.2), a malformed close frame (§5.5.1, §7.4): 1002. A text frame: 1003 (MQTT is
//! binary [MQTT-6.0.0-1]). A frame whose announced length is above the broker's
//! maximum packet size: 1009, from the header, before any payload is buffered.
//!
//! Ping gets a pong with its payload (§5.5.2, written into `replies`); pong is
//! ignored; a close frame is answered with a close frame echoing its status (§5.5.1)
//! and ends the stream. The server's own frames are never masked (§5.1): [`put_header`]
//! writes them.
//!
//! A bridge is the client of its remote broker ([`Role::Client`]): its deframer
//! refuses a *masked* frame instead (§5.1: the server's frames are never masked),
//! and everything it writes is masked ([`Deframer::put_frame`]) with a key from a
//! generator seeded from the operating system's randomness by the caller (§5.3: an
//! unpredictable key per frame; it guards proxies, not secrets).

use bytes::{BufMut, BytesMut};

/// Frame opcodes [RFC 6455 §5.2].
pub const CONTINUATION: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// The first byte's final-fragment bit.
pub const FIN: u8 = 0x80;
const RESERVED_BITS: u8 = 0x70;
const MASKED: u8 = 0x80;
/// The largest payload of a control frame (§5.5).
const MAX_CONTROL_PAYLOAD: usize = 125;

/// A close status (RFC 6455 §7.4.1) the broker sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCode {
    /// 1000: the broker ends the connection (MQTT told the client why, if anything).
    Normal,
    /// 1002: a frame broke RFC 6455.
    ProtocolError,
    /// 1003: a text frame; MQTT over WebSocket is binary [MQTT-6.0.0-1].
    UnsupportedData,
    /// 1009: a frame announced a payload above the broker's maximum packet size.
    MessageTooBig,
}

impl CloseCode {
    pub fn status(self) -> u16 {
        match self {
            CloseCode::Normal => 1000,
            CloseCode::ProtocolError => 1002,
            CloseCode::UnsupportedData => 1003,
            CloseCode::MessageTooBig => 1009,
        }
    }
}

/// Why a client's frames were refused: the close status it is sent and what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    pub code: CloseCode,
    pub detail: &'static str,
}

const fn refuse(code: CloseCode, detail: &'static str) -> FrameError {
    FrameError { code, detail }
}

/// What one [`Deframer::deframe`] call did with its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The stream goes on; this many bytes were used (the rest is an unfinished frame
    /// header or control frame, to be passed again with more bytes after it).
    Open(usize),
    /// The client sent a close frame, answered in `replies`: the stream has ended, and
    /// all of the input counts as used.
    Closed,
}

/// Which side of the connection the engine is: the broker serving a client, or a
/// bridge that is the client of a remote broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    /// Its frames masked with keys drawn from this xorshift state (never 0).
    Client {
        keys: u64,
    },
}

/// One connection's inbound frame state (and, as a client, its mask keys).
#[derive(Debug, Clone)]
pub struct Deframer {
    role: Role,
    max_payload: u64,
    /// Payload bytes of the current data frame still to come.
    remaining: u64,
    mask: [u8; 4],
    /// Position in `mask` of the next payload byte.
    mask_at: usize,
    /// A binary message began without FIN: only continuation frames may follow.
    in_message: bool,
    closed: bool,
}

/// A frame header read whole: its length, and what it announces.
struct Header {
    len: usize,
    fin: bool,
    opcode: u8,
    payload: u64,
    mask: [u8; 4],
}

impl Deframer {
    /// A deframer refusing data frames whose payload is above `max_payload` bytes
    /// (the broker's maximum packet size).
    pub fn new(max_payload: u32) -> Deframer {
        Deframer::with_role(max_payload, Role::Server)
    }

    /// A bridge's deframer: the remote broker's frames come unmasked, ours go masked
    /// with keys from `seed` (random bytes from the caller).
    pub fn client(max_payload: u32, seed: u64) -> Deframer {
        Deframer::with_role(max_payload, Role::Client { keys: seed | 1 })
    }

    fn with_role(max_payload: u32, role: Role) -> Deframer {
        Deframer {
            role,
            max_payload: u64::from(max_payload),
            remaining: 0,
            mask: [0; 4],
            mask_at: 0,
            in_message: false,
            closed: false,
        }
    }

    /// Unmask the payload of every data frame in `input` onto the end of `data`, and
    /// answer control frames into `replies`. An error ends the stream: send
    /// [`close_frame`] with its code and close the connection.
    pub fn deframe(
        &mut self,
        input: &[u8],
        data: &mut BytesMut,
        replies: &mut BytesMut,
    ) -> Result<Progress, FrameError> {
        if self.closed {
            return Ok(Progress::Closed);
        }
        let mut pos = 0;
        loop {
            if self.remaining > 0 {
                let available = input.len() - pos;
                // Bounded by `available`, a usize.
                let take = self.remaining.min(available as u64) as usize;
                self.unmask_into(&input[pos..pos + take], data);
                self.remaining -= take as u64;
                pos += take;
                if self.remaining > 0 {
                    return Ok(Progress::Open(pos));
                }
            }
            let masked = self.role == Role::Server;
            let Some(header) = read_header(&input[pos..], self.max_payload, masked)? else {
                return Ok(Progress::Open(pos));
            };
            self.check_sequence(&header)?;
            match header.opcode {
                BINARY | CONTINUATION => {
                    self.in_message = !header.fin;
                    self.remaining = header.payload;
                    self.mask = header.mask;
                    self.mask_at = 0;
                    pos += header.len;
                }
                _ => {
                    // A control frame: at most 125 bytes (read_header checked), taken whole.
                    let end = header.len + header.payload as usize;
                    let Some(frame) = input[pos..].get(..end) else {
                        return Ok(Progress::Open(pos));
                    };
                    let mut payload = [0u8; MAX_CONTROL_PAYLOAD];
                    let payload = &mut payload[..end - header.len];
                    payload.copy_from_slice(&frame[header.len..]);
                    for (i, byte) in payload.iter_mut().enumerate() {
                        *byte ^= header.mask[i % 4];
                    }
                    pos += end;
                    match header.opcode {
                        PING => self.put_frame(replies, PONG, payload),
                        PONG => {}
                        _ => {
                            let status = close_status(payload)?;
                            self.put_close(replies, status);
                            self.closed = true;
                            return Ok(Progress::Closed);
                        }
                    }
                }
            }
        }
    }

    /// Write a final frame of `opcode` with `payload`: unmasked as the server, masked
    /// with the next key as a client.
    pub fn put_frame(&mut self, out: &mut BytesMut, opcode: u8, payload: &[u8]) {
        match &mut self.role {
            Role::Server => {
                put_header(out, opcode, payload.len());
                out.put_slice(payload);
            }
            Role::Client { keys } => {
                // xorshift64: the low 32 bits of each state are a key.
                *keys ^= *keys << 13;
                *keys ^= *keys >> 7;
                *keys ^= *keys << 17;
                let key = (*keys as u32).to_be_bytes();
                put_client_frame(out, FIN | opcode, payload, key);
            }
        }
    }

    /// A close frame with `status` (none: an empty close), in this side's form.
    pub fn put_close(&mut self, out: &mut BytesMut, status: Option<u16>) {
        match status {
            Some(status) => self.put_frame(out, CLOSE, &status.to_be_bytes()),
            None => self.put_frame(out, CLOSE, &[]),
        }
    }

    /// Whether this side masks what it writes (a bridge).
    pub fn is_client(&self) -> bool {
        matches!(self.role, Role::Client { .. })
    }

    fn check_sequence(&self, header: &Header) -> Result<(), FrameError> {
        match header.opcode {
            CONTINUATION if !self.in_message => Err(refuse(
                CloseCode::ProtocolError,
                "websocket continuation frame outside a message",
            )),
            TEXT | BINARY if self.in_message => Err(refuse(
                CloseCode::ProtocolError,
                "websocket data frame inside a fragmented message",
            )),
            TEXT => Err(refuse(
                CloseCode::UnsupportedData,
                "websocket text frame (MQTT needs binary frames)",
            )),
            _ => Ok(()),
        }
    }

    fn unmask_into(&mut self, payload: &[u8], data: &mut BytesMut) {
        let start = data.len();
        data.extend_from_slice(payload);
        // The mask as it applies from this payload's first byte, then 8 bytes per XOR.
        let key: [u8; 4] = std::array::from_fn(|i| self.mask[(self.mask_at + i) % 4]);
        let wide = u64::from_ne_bytes([
            key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
        ]);
        let mut chunks = data[start..].chunks_exact_mut(8);
        for chunk in &mut chunks {
            let word = u64::from_ne_bytes(chunk.try_into().expect("8 bytes")) ^ wide;
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
            *byte ^= key[i % 4];
        }
        self.mask_at = (self.mask_at + payload.len()) % 4;
    }
}

/// The header at the front of `input`, or None until all of it is there. A data
/// frame above `max_payload` is refused as soon as its length is read; a frame must
/// be `masked` (from a client) or not (from a server).
fn read_header(input: &[u8], max_payload: u64, masked: bool) -> Result<Option<Header>, FrameError> {
    let [first, second, ..] = *input else {
        return Ok(None);
    };
    if first & RESERVED_BITS != 0 {
        return Err(refuse(
            CloseCode::ProtocolError,
            "websocket frame with reserved bits set",
        ));
    }
    let opcode = first & 0x0F;
    let fin = first & FIN != 0;
    let control = match opcode {
        CONTINUATION | TEXT | BINARY => false,
        CLOSE | PING | PONG => true,
        _ => {
            return Err(refuse(
                CloseCode::ProtocolError,
                "websocket frame with a reserved opcode",
            ))
        }
    };
    if masked && second & MASKED == 0 {
        return Err(refuse(
            CloseCode::ProtocolError,
            "unmasked websocket frame from a client",
        ));
    }
    if !masked && second & MASKED != 0 {
        return Err(refuse(
            CloseCode::ProtocolError,
            "masked websocket frame from a server",
        ));
    }
    let short = u64::from(second & 0x7F);
    if control && (!fin || short > MAX_CONTROL_PAYLOAD as u64) {
        return Err(refuse(
            CloseCode::ProtocolError,
            "websocket control frame fragmented or above 125 bytes",
        ));
    }
    let (payload, extended) = match short {
        126 => {
            let Some(bytes) = input.get(2..4) else {
                return Ok(None);
            };
            let len = u64::from(u16::from_be_bytes([bytes[0], bytes[1]]));
            if len < 126 {
                return Err(non_minimal());
            }
            (len, 2)
        }
        127 => {
            let Some(bytes) = input.get(2..10) else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
            if len >> 63 != 0 || len <= u64::from(u16::MAX) {
                return Err(non_minimal());
            }
            (len, 8)
        }
        len => (len, 0),
    };
    if !control && payload > max_payload {
        return Err(refuse(
            CloseCode::MessageTooBig,
            "websocket frame larger than the maximum packet size",
        ));
    }
    let key_len = if masked { 4 } else { 0 };
    let len = 2 + extended + key_len;
    let Some(mask) = input.get(len - key_len..len) else {
        return Ok(None);
    };
    Ok(Some(Header {
        len,
        fin,
        opcode,
        payload,
        // An unmasked frame's payload is XORed with zeros: unchanged.
        mask: mask.try_into().unwrap_or([0; 4]),
    }))
}

fn non_minimal() -> FrameError {
    refuse(
        CloseCode::ProtocolError,
        "websocket frame length not in its minimal form",
    )
}

/// The status of a close frame's payload (None: it carried none), if well formed:
/// empty, or a status a peer may send (§7.4.1, §7.4.2) followed by UTF-8 (§5.5.1).
fn close_status(payload: &[u8]) -> Result<Option<u16>, FrameError> {
    let bad = refuse(CloseCode::ProtocolError, "malformed websocket close frame");
    let Some((code, reason)) = payload.split_first_chunk::<2>() else {
        return if payload.is_empty() {
            Ok(None)
        } else {
            Err(bad)
        };
    };
    let code = u16::from_be_bytes(*code);
    let sendable = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
    if !sendable || std::str::from_utf8(reason).is_err() {
        return Err(bad);
    }
    Ok(Some(code))
}

/// Write a server frame header (final, unmasked) for a `len`-byte payload.
pub fn put_header(out: &mut BytesMut, opcode: u8, len: usize) {
    out.put_u8(FIN | opcode);
    put_length(out, len, 0);
}

/// Write a client's frame [RFC 6455 §5.3]: `first` holds FIN, RSV and the opcode, the
/// payload goes masked with `key`. The broker never sends one; the load generator
/// and the tests do.
pub fn put_client_frame(out: &mut BytesMut, first: u8, payload: &[u8], key: [u8; 4]) {
    out.put_u8(first);
    put_length(out, payload.len(), MASKED);
    out.put_slice(&key);
    let start = out.len();
    out.put_slice(payload);
    for chunk in out[start..].chunks_mut(4) {
        for (byte, k) in chunk.iter_mut().zip(key) {
            *byte ^= k;
        }
    }
}

/// The second byte on: the payload length in its shortest form, with `mask_bit`.
fn put_length(out: &mut BytesMut, len: usize, mask_bit: u8) {
    if len < 126 {
        out.put_u8(mask_bit | len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        out.put_u8(mask_bit | 126);
        out.put_u16(len);
    } else {
        out.put_u8(mask_bit | 127);
        out.put_u64(len as u64);
    }
}

/// The longest header [`Deframer::put_frame`] writes (a client's, with its key).
pub const MAX_HEADER: usize = 14;

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    /// A masked client frame.
    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_client_frame(&mut out, first, payload, MASK);
        out.to_vec()
    }

    fn run(
        deframer: &mut Deframer,
        input: &[u8],
    ) -> (Result<Progress, FrameError>, Vec<u8>, Vec<u8>) {
        let (mut data, mut replies) = (BytesMut::new(), BytesMut::new());
        let progress = deframer.deframe(input, &mut data, &mut replies);
        (progress, data.to_vec(), replies.to_vec())
    }

    fn error(input: &[u8]) -> FrameError {
        run(&mut Deframer::new(1 << 20), input).0.unwrap_err()
    }

    #[test]
    fn binary_frames_become_one_stream_in_any_chunking() {
        let mut wire = frame(0x82, b"\x10\x0c\x00\x04MQTT");
        wire.extend(frame(0x82, &[0x04, 0x02]));
        wire.extend(frame(0x82, &[]));
        wire.extend(frame(0x82, &[0x00, 0x3c, 0x00, 0x00]));
        for chunk in 1..wire.len() {
            let mut deframer = Deframer::new(1 << 20);
            let (mut data, mut replies, mut held) = (BytesMut::new(), BytesMut::new(), Vec::new());
            for piece in wire.chunks(chunk) {
                held.extend_from_slice(piece);
                let Ok(Progress::Open(used)) = deframer.deframe(&held, &mut data, &mut replies)
                else {
                    panic!("chunk {chunk}: stream ended");
                };
                held.drain(..used);
            }
            assert!(held.is_empty(), "chunk {chunk}");
            assert_eq!(&data[..], b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00");
            assert!(replies.is_empty());
        }
    }

    #[test]
    fn fragmented_message_with_a_ping_between_fragments() {
        let mut wire = frame(0x02, b"ab"); // no FIN
        wire.extend(frame(0x89, b"hi"));
        wire.extend(frame(0x00, b"cd"));
        wire.extend(frame(0x80, b"ef"));
        let (progress, data, replies) = run(&mut Deframer::new(100), &wire);
        assert_eq!(progress, Ok(Progress::Open(wire.len())));
        assert_eq!(data, b"abcdef");
        assert_eq!(replies, b"\x8a\x02hi");
    }

    #[test]
    fn lengths_of_16_and_64_bits() {
        for size in [126usize, 65535, 65536, 70000] {
            let payload = vec![7u8; size];
            let wire = frame(0x82, &payload);
            let (progress, data, _) = run(&mut Deframer::new(1 << 20), &wire);
            assert_eq!(progress, Ok(Progress::Open(wire.len())));
            assert_eq!(data, payload);
        }
    }

    #[test]
    fn a_close_is_echoed_and_ends_the_stream() {
        let mut wire = frame(0x88, b"\x03\xe8bye");
        wire.extend(frame(0x82, b"ignored"));
        let mut deframer = Deframer::new(100);
        let (progress, data, replies) = run(&mut deframer, &wire);
        assert_eq!(progress, Ok(Progress::Closed));
        assert!(data.is_empty());
        assert_eq!(replies, b"\x88\x02\x03\xe8");
        assert_eq!(run(&mut deframer, b"more").0, Ok(Progress::Closed));
        let (_, _, replies) = run(&mut Deframer::new(100), &frame(0x88, b""));
        assert_eq!(replies, b"\x88\x00");
    }

    #[test]
    fn an_unfinished_control_frame_waits_for_the_rest() {
        let wire = frame(0x89, b"ping!");
        let (progress, _, replies) = run(&mut Deframer::new(100), &wire[..wire.len() - 1]);
        assert_eq!(progress, Ok(Progress::Open(0)));
        assert!(replies.is_empty());
    }

    #[test]
    fn refusals_name_their_close_status() {
        use CloseCode::*;
        let mut unmasked = frame(0x82, b"x");
        unmasked[1] &= 0x7F;
        let cases: Vec<(Vec<u8>, CloseCode, &str)> = vec![
            (unmasked, ProtocolError, "unmasked"),
            (frame(0xC2, b"x"), ProtocolError, "reserved bits"),
            (frame(0x83, b"x"), ProtocolError, "reserved opcode"),
            (frame(0x8B, b"x"), ProtocolError, "reserved opcode"),
            (frame(0x81, b"x"), UnsupportedData, "text"),
            (frame(0x80, b"x"), ProtocolError, "continuation"),
            (frame(0x09, b"x"), ProtocolError, "control frame"),
            (frame(0x89, &[0; 126]), ProtocolError, "control frame"),
            (frame(0x88, b"\x03"), ProtocolError, "close"),
            (frame(0x88, b"\x03\xed"), ProtocolError, "close"), // 1005 is never sent
            (frame(0x88, b"\x03\xe8\xff"), ProtocolError, "close"),
            (
                vec![0x82, 0x80 | 126, 0x00, 0x10, 0, 0, 0, 0],
                ProtocolError,
                "minimal",
            ),
            (
                vec![0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0],
                ProtocolError,
                "minimal",
            ),
        ];
        for (wire, code, detail) in cases {
            let err = error(&wire);
            assert_eq!(err.code, code, "{wire:02x?}");
            assert!(err.detail.contains(detail), "{}: {detail}", err.detail);
        }
        let mut two_starts = frame(0x02, b"a");
        two_starts.extend(frame(0x82, b"b"));
        assert_eq!(error(&two_starts).code, ProtocolError);
    }

    #[test]
    fn an_oversize_frame_is_refused_from_its_header() {
        let header = [0x82, 0x80 | 127, 0, 0, 0, 1, 0, 0, 0, 0];
        let err = run(&mut Deframer::new(1 << 20), &header).0.unwrap_err();
        assert_eq!(err.code, CloseCode::MessageTooBig);
        assert_eq!(err.code.status(), 1009);
    }

    #[test]
    fn server_headers_are_minimal_and_unmasked() {
        for (len, expect) in [
            (5usize, vec![0x82, 5]),
            (126, vec![0x82, 126, 0, 126]),
            (65536, vec![0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let mut out = BytesMut::new();
            put_header(&mut out, BINARY, len);
            assert_eq!(&out[..], &expect[..]);
            assert!(out.len() <= MAX_HEADER);
        }
    }

    /// A server's frame as a bridge reads it: unmasked.
    fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_header(&mut out, opcode, payload.len());
        out.put_slice(payload);
        out.to_vec()
    }

    #[test]
    fn a_client_reads_unmasked_frames_refuses_masked_ones_and_masks_its_own() {
        let mut bridge = Deframer::client(1 << 20, 42);
        let mut wire = server_frame(BINARY, b"\x20\x02\x00\x00");
        wire.extend(server_frame(PING, b"hi"));
        let (progress, data, replies) = run(&mut bridge, &wire);
        assert_eq!(progress, Ok(Progress::Open(wire.len())));
        assert_eq!(data, b"\x20\x02\x00\x00");
        // The pong goes masked: a server reads it back as the ping's payload.
        let mut server = Deframer::new(1 << 20);
        let (progress, _, _) = run(&mut server, &replies);
        assert_eq!(progress, Ok(Progress::Open(replies.len())));
        assert_eq!(replies[0], FIN | PONG);
        assert_ne!(replies[1] & MASKED, 0);
        let mut key = [0u8; 4];
        key.copy_from_slice(&replies[2..6]);
        let pong: Vec<u8> = replies[6..]
            .iter()
            .zip(key.iter().cycle())
            .map(|(b, k)| b ^ k)
            .collect();
        assert_eq!(pong, b"hi");
        // A masked frame from the server side is refused.
        let err = run(&mut Deframer::client(1 << 20, 7), &frame(0x82, b"x"))
            .0
            .unwrap_err();
        assert_eq!(err.detail, "masked websocket frame from a server");
    }

    #[test]
    fn a_client_frame_is_read_back_by_a_server() {
        let mut bridge = Deframer::client(1 << 20, 99);
        let mut out = BytesMut::new();
        bridge.put_frame(&mut out, BINARY, b"\x10\x00 whatever");
        bridge.put_frame(&mut out, BINARY, b"more");
        let (progress, data, _) = run(&mut Deframer::new(1 << 20), &out);
        assert_eq!(progress, Ok(Progress::Open(out.len())));
        assert_eq!(data, b"\x10\x00 whatevermore");
        let second = 2 + 4 + 11; // the first frame: header, key, payload
        assert_ne!(
            out[2..6],
            out[second + 2..second + 6],
            "a new key per frame"
        );
    }
}
