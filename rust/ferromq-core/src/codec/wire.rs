//! Wire primitives (§1.5): two- and four-byte integers, variable byte integers,
//! UTF-8 strings, binary data and string pairs; a bounds-checked [`Reader`] over a
//! frame's `Bytes` (so strings and payloads come out as zero-copy slices) and a
//! [`Sink`] that either writes or only counts, so every encoder computes its lengths
//! by running itself once in counting mode instead of keeping a twin `len()` function.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;

/// Largest value a variable byte integer can carry (§1.5.5).
pub const VARINT_MAX: u32 = 268_435_455;

/// A UTF-8 string from the wire, kept as a zero-copy slice of the frame.
///
/// Invariant: the bytes are well-formed UTF-8 without U+0000 [MQTT-1.5.4-1, 1.5.4-2];
/// surrogates cannot occur because Rust's UTF-8 check rejects them [MQTT-1.5.4-1].
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Utf8Bytes(Bytes);

impl Utf8Bytes {
    /// Validate `bytes` as an MQTT UTF-8 string.
    pub fn try_from_bytes(bytes: Bytes) -> Result<Utf8Bytes, DecodeError> {
        if std::str::from_utf8(&bytes).is_err() {
            return Err(DecodeError::malformed("string is not well-formed UTF-8"));
        }
        if bytes.contains(&0) {
            return Err(DecodeError::malformed("string contains U+0000"));
        }
        Ok(Utf8Bytes(bytes))
    }

    /// A string that is known to be valid (it came from Rust `&str` and has no NUL).
    pub fn from_static(s: &'static str) -> Utf8Bytes {
        debug_assert!(!s.contains('\0'));
        Utf8Bytes(Bytes::from_static(s.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor checks that the bytes are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// True if `s` holds a control character, U+0001..U+001F or U+007F..U+009F: the
/// data SHOULD NOT include them and a receiver MAY refuse them (5.0 §1.5.4, 3.1.1
/// §1.5.3). One pass over the bytes, no decoding: C0 and DEL are the single bytes
/// below 0x20 and 0x7F (U+0000 never gets this far [MQTT-1.5.4-2]); C1 is the two-byte
/// sequence C2 80..C2 9F, and in valid UTF-8 a C2 is always followed by one more byte.
pub fn has_control_character(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.iter().enumerate().any(|(at, &byte)| {
        byte < 0x20
            || byte == 0x7F
            || (byte == 0xC2 && bytes.get(at + 1).is_some_and(|&next| next < 0xA0))
    })
}

impl TryFrom<&str> for Utf8Bytes {
    type Error = DecodeError;

    fn try_from(s: &str) -> Result<Utf8Bytes, DecodeError> {
        if s.contains('\0') {
            return Err(DecodeError::malformed("string contains U+0000"));
        }
        Ok(Utf8Bytes(Bytes::copy_from_slice(s.as_bytes())))
    }
}

impl TryFrom<String> for Utf8Bytes {
    type Error = DecodeError;

    fn try_from(s: String) -> Result<Utf8Bytes, DecodeError> {
        if s.contains('\0') {
            return Err(DecodeError::malformed("string contains U+0000"));
        }
        Ok(Utf8Bytes(Bytes::from(s)))
    }
}

impl std::fmt::Debug for Utf8Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::ops::Deref for Utf8Bytes {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// Decode a variable byte integer from the front of `buf`.
///
/// `Ok(None)` means more bytes are needed. Non-minimal encodings and a fifth byte are
/// malformed [MQTT-1.5.5-1].
pub fn read_varint(buf: &[u8]) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value: u32 = 0;
    for (index, &byte) in buf.iter().enumerate().take(4) {
        value |= u32::from(byte & 0x7F) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && byte == 0 {
                return Err(DecodeError::malformed(
                    "variable byte integer is not minimally encoded",
                ));
            }
            return Ok(Some((value, index + 1)));
        }
    }
    if buf.len() >= 4 {
        Err(DecodeError::malformed(
            "variable byte integer longer than 4 bytes",
        ))
    } else {
        Ok(None)
    }
}

/// Number of bytes `value` takes as a variable byte integer.
pub const fn varint_len(value: u32) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// A bounds-checked cursor over a window of a shared buffer (one frame, or one
/// property block inside it). Reading a field slices the shared buffer, so strings
/// and payloads are zero-copy; the window itself costs no reference count.
pub(crate) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    end: usize,
}

const TRUNCATED: DecodeError = DecodeError::malformed("packet ends before its fields do");

impl<'a> Reader<'a> {
    /// A reader over `buf[start..end]`.
    pub fn new(buf: &'a Bytes, start: usize, end: usize) -> Reader<'a> {
        debug_assert!(start <= end && end <= buf.len());
        Reader {
            buf,
            pos: start,
            end,
        }
    }

    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let bytes = self.take_slice(1)?;
        Ok(bytes[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let bytes = self.take_slice(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let bytes = self.take_slice(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    pub fn varint(&mut self) -> Result<u32, DecodeError> {
        match read_varint(&self.buf[self.pos..self.end])? {
            Some((value, used)) => {
                self.pos += used;
                Ok(value)
            }
            None => Err(TRUNCATED),
        }
    }

    fn take_slice(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < len {
            return Err(TRUNCATED);
        }
        let start = self.pos;
        self.pos += len;
        let buf: &'a Bytes = self.buf;
        Ok(&buf[start..self.pos])
    }

    /// The next `len` bytes as a zero-copy slice.
    pub fn take(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        if self.remaining() < len {
            return Err(TRUNCATED);
        }
        let slice = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(slice)
    }

    /// Everything left, as a zero-copy slice (a PUBLISH payload).
    pub fn rest(&mut self) -> Bytes {
        let slice = self.buf.slice(self.pos..self.end);
        self.pos = self.end;
        slice
    }

    /// Binary data: two-byte length then the bytes (§1.5.6).
    pub fn binary(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u16()? as usize;
        self.take(len)
    }

    /// UTF-8 encoded string (§1.5.4).
    pub fn string(&mut self) -> Result<Utf8Bytes, DecodeError> {
        Utf8Bytes::try_from_bytes(self.binary()?)
    }

    /// A sub-reader over the next `len` bytes (a property block).
    pub fn sub(&mut self, len: usize) -> Result<Reader<'a>, DecodeError> {
        if self.remaining() < len {
            return Err(TRUNCATED);
        }
        let start = self.pos;
        self.pos += len;
        Ok(Reader::new(self.buf, start, self.pos))
    }

    /// Fails unless every byte was consumed: trailing bytes are malformed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::malformed(
                "bytes left over after the last field",
            ))
        }
    }
}

/// Where encoders write: a real buffer, or a [`Counter`] that only measures.
pub trait Sink {
    fn put_slice(&mut self, bytes: &[u8]);

    fn put_u8(&mut self, byte: u8) {
        self.put_slice(&[byte]);
    }

    fn put_u16(&mut self, value: u16) {
        self.put_slice(&value.to_be_bytes());
    }

    fn put_u32(&mut self, value: u32) {
        self.put_slice(&value.to_be_bytes());
    }

    fn put_varint(&mut self, mut value: u32) {
        debug_assert!(value <= VARINT_MAX);
        loop {
            let mut byte = (value & 0x7F) as u8;
            value >>= 7;
            if value > 0 {
                byte |= 0x80;
            }
            self.put_u8(byte);
            if value == 0 {
                break;
            }
        }
    }

    fn put_binary(&mut self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= u16::MAX as usize);
        self.put_u16(bytes.len() as u16);
        self.put_slice(bytes);
    }

    fn put_string(&mut self, s: &str) {
        self.put_binary(s.as_bytes());
    }
}

/// Counts the bytes an encoder would write.
#[derive(Default)]
pub struct Counter(pub usize);

impl Sink for Counter {
    fn put_slice(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }

    fn put_u8(&mut self, _byte: u8) {
        self.0 += 1;
    }

    fn put_varint(&mut self, value: u32) {
        self.0 += varint_len(value);
    }
}

impl Sink for BytesMut {
    fn put_slice(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn put_u8(&mut self, byte: u8) {
        BufMut::put_u8(self, byte);
    }
}

impl Sink for Vec<u8> {
    fn put_slice(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn put_u8(&mut self, byte: u8) {
        self.push(byte);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_boundaries() {
        for (value, wire) in [
            (0u32, &[0x00][..]),
            (127, &[0x7F]),
            (128, &[0x80, 0x01]),
            (16_383, &[0xFF, 0x7F]),
            (16_384, &[0x80, 0x80, 0x01]),
            (2_097_151, &[0xFF, 0xFF, 0x7F]),
            (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
            (VARINT_MAX, &[0xFF, 0xFF, 0xFF, 0x7F]),
        ] {
            let mut out = Vec::new();
            out.put_varint(value);
            assert_eq!(out, wire, "{value}");
            assert_eq!(varint_len(value), wire.len());
            assert_eq!(read_varint(wire), Ok(Some((value, wire.len()))));
        }
    }

    #[test]
    fn varint_incomplete_and_bad() {
        assert_eq!(read_varint(&[0x80, 0x80]), Ok(None));
        assert!(read_varint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x01]).is_err());
        assert!(read_varint(&[0x80, 0x00]).is_err(), "non-minimal");
    }

    #[test]
    fn strings_reject_nul_and_bad_utf8() {
        assert!(Utf8Bytes::try_from_bytes(Bytes::from_static(b"a\0b")).is_err());
        assert!(Utf8Bytes::try_from_bytes(Bytes::from_static(b"\xED\xA0\x80")).is_err());
        assert!(Utf8Bytes::try_from_bytes(Bytes::from_static(b"\xC0\x80")).is_err());
        assert_eq!(
            Utf8Bytes::try_from_bytes(Bytes::from_static("A\u{2A6D4}".as_bytes()))
                .unwrap()
                .as_str(),
            "A\u{2A6D4}"
        );
    }

    #[test]
    fn control_characters_are_the_c0_c1_ranges() {
        let every = (1..=0x10FFFFu32).filter_map(char::from_u32);
        for c in every {
            let control = matches!(c, '\u{1}'..='\u{1F}' | '\u{7F}'..='\u{9F}');
            let s = format!("a{c}b");
            assert_eq!(has_control_character(&s), control, "U+{:04X}", c as u32);
        }
        assert!(has_control_character("\u{9F}"));
        assert!(!has_control_character("\u{A0}"));
        assert!(!has_control_character(""));
    }
}
