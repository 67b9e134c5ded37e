//! Frames: the fixed header (§2.1), whole-packet decode and encode, and the streaming
//! [`FrameDecoder`].
//!
//! The decoder reads the remaining length first and refuses a packet larger than the
//! configured maximum as soon as that length is known, before any of its body is
//! buffered (seed 004: never buffer 256 MB to find out). A complete frame is split off
//! the input as `Bytes`, so topics, properties and payloads are zero-copy slices of it.

use bytes::{Bytes, BytesMut};

use super::error::DecodeError;
use super::packet::{
    Ack, ConnAck, Connect, Packet, PacketType, ProtocolVersion, Publish, ReasonOnly, SubAck,
    Subscribe, UnsubAck, Unsubscribe,
};
use super::reason::ReasonCode;
use super::wire::{read_varint, varint_len, Counter, Reader, Sink, VARINT_MAX};

/// Largest packet the protocol can express: 1 + 4 length bytes + 268,435,455.
pub const PROTOCOL_MAX_PACKET_SIZE: u32 = 1 + 4 + VARINT_MAX;

/// What the fixed header says once it is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedHeader {
    pub packet_type: PacketType,
    pub flags: u8,
    /// Bytes of the fixed header: the type byte and the remaining length.
    pub header_len: usize,
    /// Fixed header length plus remaining length: the whole frame.
    pub frame_len: usize,
}

/// Read the fixed header at the front of `buf`.
///
/// `Ok(None)` means more bytes are needed. The packet type and the size limit are
/// checked as soon as the bytes that carry them have arrived.
pub fn read_fixed_header(
    buf: &[u8],
    max_packet_size: u32,
) -> Result<Option<FixedHeader>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let packet_type = PacketType::from_u8(first >> 4)
        .ok_or(DecodeError::malformed("packet type 0 is reserved"))?;
    let Some((remaining, len_bytes)) = read_varint(&buf[1..])? else {
        return Ok(None);
    };
    let frame_len = 1 + len_bytes + remaining as usize;
    if frame_len as u64 > u64::from(max_packet_size) {
        return Err(DecodeError {
            reason: ReasonCode::PacketTooLarge,
            detail: "packet exceeds the maximum packet size",
        });
    }
    Ok(Some(FixedHeader {
        packet_type,
        flags: first & 0x0F,
        header_len: 1 + len_bytes,
        frame_len,
    }))
}

/// Fixed-header flags every type but PUBLISH must carry in 3.1.1 and 5.0
/// [MQTT-2.2.2-1, 2.2.2-2].
///
/// MQTT 3.1 (§2.1) has no reserved bits there: DUP, QoS and RETAIN are "not used"
/// outside PUBLISH, except that PUBREL, SUBSCRIBE and UNSUBSCRIBE carry QoS 1 and set
/// DUP when retried (§3.6, §3.8, §3.10), so a 3.1 peer's flags are not checked; CONNECT's
/// are checked in `Connect::read` once its protocol level is known.
fn required_flags(packet_type: PacketType) -> u8 {
    match packet_type {
        PacketType::PubRel | PacketType::Subscribe | PacketType::Unsubscribe => 0x02,
        _ => 0x00,
    }
}

pub(crate) const INVALID_FLAGS: DecodeError =
    DecodeError::malformed("fixed header flags are invalid for this packet");

/// Decode one complete frame (fixed header included) for a connection of `version`.
pub fn decode_packet(frame: Bytes, version: ProtocolVersion) -> Result<Packet, DecodeError> {
    let header = read_fixed_header(&frame, PROTOCOL_MAX_PACKET_SIZE)?
        .ok_or(DecodeError::malformed("frame ends inside its fixed header"))?;
    if header.frame_len != frame.len() {
        return Err(DecodeError::malformed(
            "remaining length does not match the frame",
        ));
    }
    decode_body(&frame, 0, header, version)
}

/// Decode the frame at `buf[start..start + header.frame_len]`, whose fixed header was
/// read already, without slicing the frame out of `buf`.
fn decode_body(
    buf: &Bytes,
    start: usize,
    header: FixedHeader,
    version: ProtocolVersion,
) -> Result<Packet, DecodeError> {
    let mut r = Reader::new(buf, start + header.header_len, start + header.frame_len);
    let kind = header.packet_type;
    let checked = !matches!(kind, PacketType::Publish | PacketType::Connect)
        && version != ProtocolVersion::V3_1;
    if checked && header.flags != required_flags(kind) {
        return Err(INVALID_FLAGS);
    }
    let packet = match kind {
        PacketType::Connect => Packet::Connect(Box::new(Connect::read(header.flags, &mut r)?)),
        PacketType::ConnAck => Packet::ConnAck(ConnAck::read(&mut r, version)?),
        PacketType::Publish => Packet::Publish(Publish::read(header.flags, &mut r, version)?),
        PacketType::PubAck => Packet::PubAck(Ack::read(kind, &mut r, version)?),
        PacketType::PubRec => Packet::PubRec(Ack::read(kind, &mut r, version)?),
        PacketType::PubRel => Packet::PubRel(Ack::read(kind, &mut r, version)?),
        PacketType::PubComp => Packet::PubComp(Ack::read(kind, &mut r, version)?),
        PacketType::Subscribe => Packet::Subscribe(Subscribe::read(&mut r, version)?),
        PacketType::SubAck => Packet::SubAck(SubAck::read(&mut r, version)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(Unsubscribe::read(&mut r, version)?),
        PacketType::UnsubAck => Packet::UnsubAck(UnsubAck::read(&mut r, version)?),
        PacketType::PingReq | PacketType::PingResp => {
            r.finish()?;
            if kind == PacketType::PingReq {
                Packet::PingReq
            } else {
                Packet::PingResp
            }
        }
        PacketType::Disconnect => Packet::Disconnect(ReasonOnly::read(kind, &mut r, version)?),
        PacketType::Auth if version.is_v5() => {
            Packet::Auth(ReasonOnly::read(kind, &mut r, version)?)
        }
        PacketType::Auth => {
            return Err(DecodeError::malformed(
                "packet type 15 is reserved before MQTT 5.0",
            ))
        }
    };
    Ok(packet)
}

/// Why a packet could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A string or binary field is longer than 65,535 bytes.
    FieldTooLong,
    /// The packet is longer than the 268,435,455-byte remaining length allows.
    PacketTooLarge,
    /// The packet does not exist in the protocol version (AUTH before 5.0).
    NotInVersion,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EncodeError::FieldTooLong => "a string or binary field exceeds 65535 bytes",
            EncodeError::PacketTooLarge => "packet exceeds 268435455 bytes of remaining length",
            EncodeError::NotInVersion => "packet does not exist in this protocol version",
        })
    }
}

impl std::error::Error for EncodeError {}

/// Counts bytes and notices over-long length-prefixed fields.
#[derive(Default)]
struct CheckingCounter {
    counter: Counter,
    field_too_long: bool,
}

impl Sink for CheckingCounter {
    fn put_slice(&mut self, bytes: &[u8]) {
        self.counter.put_slice(bytes);
    }

    fn put_u8(&mut self, _byte: u8) {
        self.counter.0 += 1;
    }

    fn put_varint(&mut self, value: u32) {
        self.counter.0 += varint_len(value);
    }

    fn put_binary(&mut self, bytes: &[u8]) {
        self.field_too_long |= bytes.len() > u16::MAX as usize;
        self.counter.0 += 2 + bytes.len();
    }
}

impl Packet {
    fn write_body<S: Sink>(&self, version: ProtocolVersion, out: &mut S) {
        match self {
            Packet::Connect(p) => p.write(out),
            Packet::ConnAck(p) => p.write(version, out),
            Packet::Publish(p) => p.write(version, out),
            Packet::PubAck(p) | Packet::PubRec(p) | Packet::PubRel(p) | Packet::PubComp(p) => {
                p.write(version, out)
            }
            Packet::Subscribe(p) => p.write(version, out),
            Packet::SubAck(p) => p.write(version, out),
            Packet::Unsubscribe(p) => p.write(version, out),
            Packet::UnsubAck(p) => p.write(version, out),
            Packet::PingReq | Packet::PingResp => {}
            Packet::Disconnect(p) | Packet::Auth(p) => p.write(version, out),
        }
    }

    fn header_byte(&self) -> u8 {
        let kind = self.packet_type();
        let flags = match self {
            Packet::Publish(p) => p.flags(),
            _ => required_flags(kind),
        };
        ((kind as u8) << 4) | flags
    }

    /// Append this packet's bytes for a connection of `version` (CONNECT uses its own).
    pub fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), EncodeError> {
        if matches!(self, Packet::Auth(_)) && !version.is_v5() {
            return Err(EncodeError::NotInVersion);
        }
        let mut counter = CheckingCounter::default();
        self.write_body(version, &mut counter);
        if counter.field_too_long {
            return Err(EncodeError::FieldTooLong);
        }
        let remaining = u32::try_from(counter.counter.0)
            .ok()
            .filter(|len| *len <= VARINT_MAX)
            .ok_or(EncodeError::PacketTooLarge)?;
        out.reserve(1 + varint_len(remaining) + remaining as usize);
        out.put_u8(self.header_byte());
        out.put_varint(remaining);
        self.write_body(version, out);
        Ok(())
    }

    /// This packet's bytes as a new buffer.
    pub fn to_bytes(&self, version: ProtocolVersion) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(version, &mut out)?;
        Ok(out.freeze())
    }
}

/// Decodes a byte stream fed in arbitrary chunks into whole packets.
///
/// Before CONNECT the protocol version is unknown and only CONNECT is accepted
/// [MQTT-3.1.0-1]; a decoded CONNECT fixes the version for what follows. A client-side
/// decoder is created with the version it connected with.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_packet_size: u32,
    version: Option<ProtocolVersion>,
}

impl FrameDecoder {
    pub fn new(max_packet_size: u32, version: Option<ProtocolVersion>) -> FrameDecoder {
        FrameDecoder {
            max_packet_size: max_packet_size.min(PROTOCOL_MAX_PACKET_SIZE),
            version,
        }
    }

    pub fn version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    pub fn max_packet_size(&self) -> u32 {
        self.max_packet_size
    }

    /// Decode the next whole packet from the front of `buf`, removing its bytes.
    /// `Ok(None)` leaves `buf` as it was: wait for more input.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Packet>, DecodeError> {
        let Some(header) = read_fixed_header(buf, self.max_packet_size)? else {
            return Ok(None);
        };
        if buf.len() < header.frame_len {
            return Ok(None);
        }
        let frame = buf.split_to(header.frame_len).freeze();
        self.decode_frame(&frame, 0, header).map(Some)
    }

    /// Decode every whole packet at the front of `data` (a borrowed read buffer).
    ///
    /// The bytes of the complete frames are copied once into one shared buffer that
    /// the packets slice, so the caller may reuse `data` afterwards. Returns the
    /// packets, how many bytes they used, and the error that stopped decoding, if any:
    /// the packets before an error are still returned, so nothing valid is lost.
    pub fn decode_slice(&mut self, data: &[u8]) -> (Vec<Packet>, usize, Option<DecodeError>) {
        self.decode_slice_with(data, |_, _| {})
    }

    /// `decode_slice`, telling `on_frame` the type and length of each frame decoded
    /// (the engine's per-type counters).
    pub fn decode_slice_with(
        &mut self,
        data: &[u8],
        mut on_frame: impl FnMut(PacketType, usize),
    ) -> (Vec<Packet>, usize, Option<DecodeError>) {
        let mut headers = Vec::new();
        let mut end = 0;
        let mut error = None;
        loop {
            match read_fixed_header(&data[end..], self.max_packet_size) {
                Ok(Some(header)) if data.len() - end >= header.frame_len => {
                    headers.push(header);
                    end += header.frame_len;
                }
                Ok(_) => break,
                Err(err) => {
                    error = Some(err);
                    break;
                }
            }
        }
        let shared = Bytes::copy_from_slice(&data[..end]);
        let mut packets = Vec::with_capacity(headers.len());
        let mut start = 0;
        for header in headers {
            match self.decode_frame(&shared, start, header) {
                Ok(packet) => {
                    on_frame(header.packet_type, header.frame_len);
                    packets.push(packet);
                }
                Err(err) => return (packets, start, Some(err)),
            }
            start += header.frame_len;
        }
        (packets, end, error)
    }

    fn decode_frame(
        &mut self,
        buf: &Bytes,
        start: usize,
        header: FixedHeader,
    ) -> Result<Packet, DecodeError> {
        let version = match (self.version, header.packet_type) {
            (Some(version), _) => version,
            // Decoded as its own protocol level; the placeholder is never read.
            (None, PacketType::Connect) => ProtocolVersion::V5,
            (None, _) => return Err(DecodeError::protocol("the first packet must be CONNECT")),
        };
        let packet = decode_body(buf, start, header, version)?;
        if let Packet::Connect(connect) = &packet {
            self.version.get_or_insert(connect.protocol);
        }
        Ok(packet)
    }
}
