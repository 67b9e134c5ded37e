//! RESP2, the Redis wire protocol, as far as a store needs it: commands written
//! straight into one buffer (a whole pipelined batch), and replies read back in bulk
//! from bytes fed as they arrive.
//!
//! A command is an array of bulk strings: `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per
//! argument. The writer takes the argument count up front, so an argument can be
//! written in pieces (`bulk_parts`) without first joining them.
//!
//! Replies: `+simple`, `-error`, `:integer`, `$bulk` (`$-1` nil), `*array` (`*-1`
//! nil), arrays nested to any depth. [`Replies`] is fed chunks and yields each whole
//! top-level reply once its last byte is in; a reply cut at the end of a chunk waits
//! for the next one. Malformed input is an error, never a panic.

use bytes::{Buf, Bytes, BytesMut};

/// Appends commands to one buffer.
#[derive(Debug, Default)]
pub struct CommandWriter {
    buf: BytesMut,
    commands: usize,
}

impl CommandWriter {
    pub fn new() -> CommandWriter {
        CommandWriter::default()
    }

    /// Start a command of `args` arguments; write exactly that many next.
    pub fn begin(&mut self, args: usize) {
        self.buf.extend_from_slice(b"*");
        self.number(args as u64);
        self.commands += 1;
    }

    pub fn bulk(&mut self, arg: &[u8]) {
        self.bulk_parts(&[arg]);
    }

    /// One argument made of `parts` back to back.
    pub fn bulk_parts(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buf.extend_from_slice(b"$");
        self.number(len as u64);
        for part in parts {
            self.buf.extend_from_slice(part);
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer argument, as its decimal text.
    pub fn bulk_int(&mut self, value: u64) {
        self.bulk(itoa(value).text());
    }

    /// A whole command.
    pub fn command(&mut self, args: &[&[u8]]) {
        self.begin(args.len());
        for arg in args {
            self.bulk(arg);
        }
    }

    pub fn commands(&self) -> usize {
        self.commands
    }

    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }

    pub fn finish(self) -> (Bytes, usize) {
        (self.buf.freeze(), self.commands)
    }

    fn number(&mut self, value: u64) {
        self.buf.extend_from_slice(itoa(value).text());
        self.buf.extend_from_slice(b"\r\n");
    }
}

/// A u64 as decimal digits on the stack.
pub struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    pub fn text(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

pub fn itoa(mut value: u64) -> Digits {
    let mut buf = [0u8; 20];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    Digits { buf, start }
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(Bytes),
    Error(String),
    Integer(i64),
    Bulk(Option<Bytes>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The bytes of a bulk or simple string.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Reply::Bulk(Some(b)) | Reply::Simple(b) => Some(b),
            _ => None,
        }
    }

    /// The items of an array; a nil array is empty.
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

/// Bytes that are not RESP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespError(pub &'static str);

impl std::fmt::Display for RespError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed Redis reply: {}", self.0)
    }
}

impl std::error::Error for RespError {}

/// Redis's own limit on a string (proto-max-bulk-len).
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// Replies read from bytes fed in chunks.
#[derive(Debug, Default)]
pub struct Replies {
    buf: BytesMut,
}

impl Replies {
    pub fn new() -> Replies {
        Replies::default()
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole reply, None until its last byte is fed.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, RespError> {
        let mut pos = 0;
        match parse(&self.buf, &mut pos)? {
            None => Ok(None),
            Some(reply) => {
                self.buf.advance(pos);
                Ok(Some(reply))
            }
        }
    }

    /// Bytes fed and not yet part of a reply.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// Parse one reply at `pos`, moving `pos` past it; None when the input ends first.
fn parse(buf: &[u8], pos: &mut usize) -> Result<Option<Reply>, RespError> {
    let Some(line) = line(buf, *pos) else {
        return Ok(None);
    };
    if line == *pos {
        return Err(RespError("empty line"));
    }
    let (kind, text) = (buf[*pos], &buf[*pos + 1..line]);
    let after = line + 2;
    let reply = match kind {
        b'+' => Reply::Simple(Bytes::copy_from_slice(text)),
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Reply::Integer(integer(text)?),
        b'$' => {
            let len = integer(text)?;
            if len < 0 {
                *pos = after;
                return Ok(Some(Reply::Bulk(None)));
            }
            if len > MAX_BULK {
                return Err(RespError("bulk string longer than Redis allows"));
            }
            let end = after + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(RespError("bulk string not ended by CRLF"));
            }
            *pos = end + 2;
            return Ok(Some(Reply::Bulk(Some(Bytes::copy_from_slice(
                &buf[after..end],
            )))));
        }
        b'*' => {
            let len = integer(text)?;
            if len < 0 {
                *pos = after;
                return Ok(Some(Reply::Array(None)));
            }
            let mut at = after;
            let mut items = Vec::with_capacity((len as usize).min(1024));
            for _ in 0..len {
                match parse(buf, &mut at)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *pos = at;
            return Ok(Some(Reply::Array(Some(items))));
        }
        _ => return Err(RespError("unknown reply type")),
    };
    *pos = after;
    Ok(Some(reply))
}

/// The index of the CR ending the line that starts at `from`.
fn line(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some(from + cr)
}

fn integer(text: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(RespError("bad integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut w = CommandWriter::new();
        w.command(&[b"SET", b"k", b""]);
        w.begin(2);
        w.bulk(b"ZREM");
        w.bulk_parts(&[b"ab", b"c\r\n"]);
        w.begin(1);
        w.bulk_int(65_536);
        let (bytes, n) = w.finish();
        assert_eq!(n, 3);
        assert_eq!(
            &bytes[..],
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$4\r\nZREM\r\n$5\r\nabc\r\n\r\n*1\r\n$5\r\n65536\r\n"
        );
    }

    #[test]
    fn digits() {
        assert_eq!(itoa(0).text(), b"0");
        assert_eq!(itoa(u64::MAX).text(), b"18446744073709551615");
    }

    #[test]
    fn replies_of_every_type_nested_and_split_anywhere() {
        let wire: &[u8] = b"+OK\r\n-NOSCRIPT No matching script.\r\n:-42\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n*2\r\n*1\r\n$1\r\na\r\n:7\r\n*0\r\n";
        let expected = vec![
            Reply::Simple(Bytes::from_static(b"OK")),
            Reply::Error("NOSCRIPT No matching script.".into()),
            Reply::Integer(-42),
            Reply::Bulk(Some(Bytes::from_static(b"he\r\no"))),
            Reply::Bulk(None),
            Reply::Array(None),
            Reply::Array(Some(vec![
                Reply::Array(Some(vec![Reply::Bulk(Some(Bytes::from_static(b"a")))])),
                Reply::Integer(7),
            ])),
            Reply::Array(Some(vec![])),
        ];
        // Every split point: a reply cut short waits for its rest.
        for split in 0..=wire.len() {
            let mut replies = Replies::new();
            let mut got = Vec::new();
            for chunk in [&wire[..split], &wire[split..]] {
                replies.feed(chunk);
                while let Some(reply) = replies.next_reply().unwrap() {
                    got.push(reply);
                }
            }
            assert_eq!(got, expected, "split at {split}");
            assert_eq!(replies.buffered(), 0);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$3\r\nabcde\r\n",
            b"*x\r\n",
            b"$99999999999\r\n",
        ] {
            let mut replies = Replies::new();
            replies.feed(bad);
            assert!(replies.next_reply().is_err(), "{bad:?}");
        }
        let mut replies = Replies::new();
        replies.feed(b"\r\n");
        assert!(replies.next_reply().is_err(), "an empty line");
    }
}
