//! The stream record in Avro: the binary encoding of one `Record` datum of
//! `python/ferromq/stream/record-v1.avsc` (what a Kafka value holds and Spark's
//! `from_avro` reads), and the object container file framing (header, data
//! blocks) the file sink writes and Spark's `format("avro")` reads.
//!
//! Avro's binary encoding (specification 1.11, "Binary Encoding"): `int` and `long`
//! are zig-zag varints, `bytes` and `string` a long length then the bytes, `fixed`
//! its bytes alone, an `enum` the symbol's index as an int, a union the branch
//! index then the value (`["null", T]`: 0 for null, 1 then T), an array blocks of
//! `count, items` ended by a count of 0, a record its fields in schema order. So a
//! record is written field by field straight into the batch's value buffer with no
//! schema object at run time; `tests` below and `tests/unit/test_stream_avro.py`
//! (fastavro against the .avsc) hold the encoder to the schema.
//!
//! Cost: one pass over the fields and one over the message's properties; nothing
//! allocated per record (the buffer grows amortised).

use bytes::{BufMut, BytesMut};

use crate::codec::{Properties, Property};

use super::RecordList;

/// The schema this encoder writes, as shipped in the wheel.
pub const SCHEMA_TEXT: &str = include_str!("../../../../python/ferromq/stream/record-v1.avsc");
/// `schema_version` of every record.
pub const SCHEMA_VERSION: i32 = 1;
/// Bytes of an object container file's sync marker.
pub const SYNC_LEN: usize = 16;

/// The `kind` enum, in the schema's symbol order (the index is the encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Message = 0,
    Connected = 1,
    Disconnected = 2,
    Subscribed = 3,
    Unsubscribed = 4,
    SessionExpired = 5,
    WillPublished = 6,
    Dropped = 7,
    AuthRefused = 8,
}

/// One record's fields; `None` is Avro null. Built on the stack by the engine and
/// encoded at once.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub id: [u8; 16],
    pub kind: Kind,
    /// Microseconds since the epoch.
    pub time_us: i64,
    pub node: &'a str,
    pub listener: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub username: Option<&'a str>,
    pub topic: Option<&'a str>,
    pub payload: Option<&'a [u8]>,
    pub qos: Option<u8>,
    pub retain: Option<bool>,
    /// The message's MQTT 5.0 properties: content type, payload format, response
    /// topic, correlation data and user properties are taken from them.
    pub properties: Option<&'a Properties>,
    pub reason: Option<&'a str>,
    pub reason_code: Option<u8>,
    pub peer: Option<&'a str>,
    pub protocol_version: Option<u8>,
    pub keep_alive: Option<u16>,
    pub clean_start: Option<bool>,
    pub session_expiry: Option<u32>,
}

impl<'a> Record<'a> {
    /// A record of `kind` with every optional field null.
    pub fn new(id: [u8; 16], kind: Kind, time_us: i64, node: &'a str) -> Record<'a> {
        Record {
            id,
            kind,
            time_us,
            node,
            listener: None,
            client_id: None,
            username: None,
            topic: None,
            payload: None,
            qos: None,
            retain: None,
            properties: None,
            reason: None,
            reason_code: None,
            peer: None,
            protocol_version: None,
            keep_alive: None,
            clean_start: None,
            session_expiry: None,
        }
    }

    /// Append the record's Avro binary encoding to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        put_long(out, i64::from(SCHEMA_VERSION));
        out.put_slice(&self.id);
        put_long(out, self.kind as i64);
        put_long(out, self.time_us);
        put_bytes(out, self.node.as_bytes());
        put_optional(out, self.listener, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.client_id, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.username, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.topic, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.payload, put_bytes);
        put_optional(out, self.qos, |out, v| put_long(out, i64::from(v)));
        put_optional(out, self.retain, put_bool);
        let v5 = V5Fields::of(self.properties);
        put_optional(out, v5.content_type, put_bytes);
        put_optional(out, v5.payload_format, |out, v| put_long(out, i64::from(v)));
        put_optional(out, v5.response_topic, put_bytes);
        put_optional(out, v5.correlation_data, put_bytes);
        put_user_properties(out, self.properties, v5.user_properties);
        put_optional(out, self.reason, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.reason_code, |out, v| put_long(out, i64::from(v)));
        put_optional(out, self.peer, |out, v| put_bytes(out, v.as_bytes()));
        put_optional(out, self.protocol_version, |out, v| {
            put_long(out, i64::from(v))
        });
        put_optional(out, self.keep_alive, |out, v| put_long(out, i64::from(v)));
        put_optional(out, self.clean_start, put_bool);
        put_optional(out, self.session_expiry, |out, v| {
            put_long(out, i64::from(v))
        });
    }
}

/// The v5 properties the schema has fields for, found in one pass.
#[derive(Default)]
struct V5Fields<'a> {
    content_type: Option<&'a [u8]>,
    payload_format: Option<u8>,
    response_topic: Option<&'a [u8]>,
    correlation_data: Option<&'a [u8]>,
    user_properties: usize,
}

impl<'a> V5Fields<'a> {
    fn of(properties: Option<&'a Properties>) -> V5Fields<'a> {
        let mut fields = V5Fields::default();
        for property in properties.map_or(&[][..], |p| p.0.as_slice()) {
            match property {
                Property::ContentType(s) => fields.content_type = Some(s.as_str().as_bytes()),
                Property::PayloadFormatIndicator(v) => fields.payload_format = Some(*v),
                Property::ResponseTopic(s) => fields.response_topic = Some(s.as_str().as_bytes()),
                Property::CorrelationData(b) => fields.correlation_data = Some(&b[..]),
                Property::UserProperty(..) => fields.user_properties += 1,
                _ => {}
            }
        }
        fields
    }
}

/// One array block holding every user property in order, then the end block.
fn put_user_properties(out: &mut BytesMut, properties: Option<&Properties>, count: usize) {
    if count > 0 {
        put_long(out, count as i64);
        for property in properties.map_or(&[][..], |p| p.0.as_slice()) {
            if let Property::UserProperty(key, value) = property {
                put_bytes(out, key.as_str().as_bytes());
                put_bytes(out, value.as_str().as_bytes());
            }
        }
    }
    put_long(out, 0);
}

/// A zig-zag varint (`int` and `long` alike).
pub fn put_long(out: &mut BytesMut, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n >= 0x80 {
        out.put_u8((n as u8) | 0x80);
        n >>= 7;
    }
    out.put_u8(n as u8);
}

/// `bytes` or `string`: the length, then the bytes.
pub fn put_bytes(out: &mut BytesMut, value: &[u8]) {
    put_long(out, value.len() as i64);
    out.put_slice(value);
}

fn put_bool(out: &mut BytesMut, value: bool) {
    out.put_u8(u8::from(value));
}

/// A `["null", T]` union.
fn put_optional<T>(out: &mut BytesMut, value: Option<T>, put: impl FnOnce(&mut BytesMut, T)) {
    match value {
        None => out.put_u8(0),
        Some(value) => {
            out.put_u8(2); // branch 1, zig-zag encoded
            put(out, value);
        }
    }
}

/// The header of an object container file: magic, the metadata map (`avro.schema`
/// = the schema text, `avro.codec` = `null`) and the file's sync marker.
pub fn container_header(sync: &[u8; SYNC_LEN]) -> BytesMut {
    let mut out = BytesMut::with_capacity(SCHEMA_TEXT.len() + 64);
    out.put_slice(b"Obj\x01");
    put_long(&mut out, 2);
    put_bytes(&mut out, b"avro.schema");
    put_bytes(&mut out, SCHEMA_TEXT.as_bytes());
    put_bytes(&mut out, b"avro.codec");
    put_bytes(&mut out, b"null");
    put_long(&mut out, 0);
    out.put_slice(sync);
    out
}

/// One data block of an object container file holding every record of `list`:
/// the record count, the values' byte size, the values, the sync marker. Empty
/// for an empty list (a block of 0 records is legal but useless).
pub fn container_block(list: &RecordList, sync: &[u8; SYNC_LEN]) -> BytesMut {
    if list.is_empty() {
        return BytesMut::new();
    }
    let mut out = BytesMut::with_capacity(list.value_bytes() + 2 * 10 + SYNC_LEN);
    put_long(&mut out, list.len() as i64);
    put_long(&mut out, list.value_bytes() as i64);
    for record in list.iter() {
        out.put_slice(record.value);
    }
    out.put_slice(sync);
    out
}

#[cfg(any(test, feature = "test-fixtures"))]
pub mod reader {
    //! A small Avro reader for the tests (feature `test-fixtures`): the record
    //! decoded field by field.

    pub struct Reader<'a> {
        pub data: &'a [u8],
    }

    impl<'a> Reader<'a> {
        pub fn long(&mut self) -> i64 {
            let mut n: u64 = 0;
            let mut shift = 0;
            loop {
                let byte = self.data[0];
                self.data = &self.data[1..];
                n |= u64::from(byte & 0x7F) << shift;
                if byte < 0x80 {
                    break;
                }
                shift += 7;
            }
            ((n >> 1) as i64) ^ -((n & 1) as i64)
        }

        pub fn bytes(&mut self) -> &'a [u8] {
            let len = self.long() as usize;
            let (value, rest) = self.data.split_at(len);
            self.data = rest;
            value
        }

        pub fn string(&mut self) -> &'a str {
            std::str::from_utf8(self.bytes()).expect("utf-8")
        }

        pub fn fixed(&mut self, len: usize) -> &'a [u8] {
            let (value, rest) = self.data.split_at(len);
            self.data = rest;
            value
        }

        pub fn boolean(&mut self) -> bool {
            let value = self.data[0] != 0;
            self.data = &self.data[1..];
            value
        }

        /// A `["null", T]` union: true when T follows.
        pub fn present(&mut self) -> bool {
            match self.long() {
                0 => false,
                1 => true,
                other => panic!("union branch {other}"),
            }
        }

        pub fn opt_string(&mut self) -> Option<&'a str> {
            self.present().then(|| self.string())
        }

        pub fn opt_bytes(&mut self) -> Option<&'a [u8]> {
            self.present().then(|| self.bytes())
        }

        pub fn opt_long(&mut self) -> Option<i64> {
            self.present().then(|| self.long())
        }

        pub fn opt_bool(&mut self) -> Option<bool> {
            self.present().then(|| self.boolean())
        }
    }

    /// A record as the tests read it back.
    #[derive(Debug, Default, PartialEq, Eq)]
    pub struct Decoded {
        pub schema_version: i64,
        pub id: Vec<u8>,
        pub kind: i64,
        pub time_us: i64,
        pub node: String,
        pub listener: Option<String>,
        pub client_id: Option<String>,
        pub username: Option<String>,
        pub topic: Option<String>,
        pub payload: Option<Vec<u8>>,
        pub qos: Option<i64>,
        pub retain: Option<bool>,
        pub content_type: Option<String>,
        pub payload_format: Option<i64>,
        pub response_topic: Option<String>,
        pub correlation_data: Option<Vec<u8>>,
        pub user_properties: Vec<(String, String)>,
        pub reason: Option<String>,
        pub reason_code: Option<i64>,
        pub peer: Option<String>,
        pub protocol_version: Option<i64>,
        pub keep_alive: Option<i64>,
        pub clean_start: Option<bool>,
        pub session_expiry: Option<i64>,
    }

    /// Decode one record; panics on anything but exactly one whole record.
    pub fn decode(data: &[u8]) -> Decoded {
        let mut r = Reader { data };
        let s = |v: Option<&str>| v.map(str::to_owned);
        let b = |v: Option<&[u8]>| v.map(<[u8]>::to_vec);
        let mut d = Decoded {
            schema_version: r.long(),
            id: r.fixed(16).to_vec(),
            kind: r.long(),
            time_us: r.long(),
            node: r.string().to_owned(),
            ..Decoded::default()
        };
        d.listener = s(r.opt_string());
        d.client_id = s(r.opt_string());
        d.username = s(r.opt_string());
        d.topic = s(r.opt_string());
        d.payload = b(r.opt_bytes());
        d.qos = r.opt_long();
        d.retain = r.opt_bool();
        d.content_type = s(r.opt_string());
        d.payload_format = r.opt_long();
        d.response_topic = s(r.opt_string());
        d.correlation_data = b(r.opt_bytes());
        loop {
            let count = r.long();
            if count == 0 {
                break;
            }
            for _ in 0..count {
                let key = r.string().to_owned();
                let value = r.string().to_owned();
                d.user_properties.push((key, value));
            }
        }
        d.reason = s(r.opt_string());
        d.reason_code = r.opt_long();
        d.peer = s(r.opt_string());
        d.protocol_version = r.opt_long();
        d.keep_alive = r.opt_long();
        d.clean_start = r.opt_bool();
        d.session_expiry = r.opt_long();
        assert!(r.data.is_empty(), "bytes after the record");
        d
    }
}

#[cfg(test)]
mod tests {
    use super::reader::{decode, Reader};
    use super::*;
    use crate::codec::Utf8Bytes;
    use bytes::Bytes;

    #[test]
    fn longs_are_zigzag_varints() {
        for (value, bytes) in [
            (0i64, &[0x00][..]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7F]),
            (64, &[0x80, 0x01]),
            (
                i64::MAX,
                &[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
            ),
        ] {
            let mut out = BytesMut::new();
            put_long(&mut out, value);
            assert_eq!(&out[..], bytes, "{value}");
            assert_eq!(Reader { data: &out }.long(), value);
        }
    }

    #[test]
    fn a_message_record_decodes_field_by_field() {
        let properties = Properties(vec![
            Property::PayloadFormatIndicator(1),
            Property::ContentType(Utf8Bytes::from_static("application/json")),
            Property::UserProperty(Utf8Bytes::from_static("a"), Utf8Bytes::from_static("1")),
            Property::ResponseTopic(Utf8Bytes::from_static("reply/here")),
            Property::CorrelationData(Bytes::from_static(b"\x00\x01")),
            Property::UserProperty(Utf8Bytes::from_static("a"), Utf8Bytes::from_static("2")),
        ]);
        let mut record = Record::new([7; 16], Kind::Message, 1_700_000_000_123_000, "node-1");
        record.client_id = Some("dev-1");
        record.username = Some("alice");
        record.topic = Some("t/1");
        record.payload = Some(b"{\"v\":1}");
        record.qos = Some(1);
        record.retain = Some(false);
        record.properties = Some(&properties);
        let mut out = BytesMut::new();
        record.encode(&mut out);
        let d = decode(&out);
        assert_eq!(d.schema_version, 1);
        assert_eq!(d.id, vec![7; 16]);
        assert_eq!(d.kind, 0);
        assert_eq!(d.time_us, 1_700_000_000_123_000);
        assert_eq!(d.node, "node-1");
        assert_eq!(d.listener, None);
        assert_eq!(d.client_id.as_deref(), Some("dev-1"));
        assert_eq!(d.username.as_deref(), Some("alice"));
        assert_eq!(d.topic.as_deref(), Some("t/1"));
        assert_eq!(d.payload.as_deref(), Some(&b"{\"v\":1}"[..]));
        assert_eq!((d.qos, d.retain), (Some(1), Some(false)));
        assert_eq!(d.content_type.as_deref(), Some("application/json"));
        assert_eq!(d.payload_format, Some(1));
        assert_eq!(d.response_topic.as_deref(), Some("reply/here"));
        assert_eq!(d.correlation_data.as_deref(), Some(&b"\x00\x01"[..]));
        assert_eq!(
            d.user_properties,
            vec![("a".into(), "1".into()), ("a".into(), "2".into())]
        );
        assert_eq!((d.reason, d.reason_code, d.peer), (None, None, None));
        assert_eq!((d.protocol_version, d.keep_alive), (None, None));
        assert_eq!((d.clean_start, d.session_expiry), (None, None));
    }

    #[test]
    fn a_record_without_properties_has_an_empty_user_property_array() {
        let record = Record::new([0; 16], Kind::Connected, 5, "n");
        let mut out = BytesMut::new();
        record.encode(&mut out);
        // version, id, kind, time, node, then 11 nulls, the empty array, 7 nulls.
        let mut expected = vec![0x02];
        expected.extend([0; 16]);
        expected.extend([0x02, 0x0A, 0x02, b'n']);
        expected.extend([0; 11]);
        expected.push(0);
        expected.extend([0; 7]);
        assert_eq!(&out[..], &expected[..]);
    }

    #[test]
    fn the_container_header_names_the_schema_and_the_null_codec() {
        let sync = [9u8; SYNC_LEN];
        let header = container_header(&sync);
        let mut r = Reader { data: &header };
        assert_eq!(r.fixed(4), b"Obj\x01");
        assert_eq!(r.long(), 2);
        assert_eq!(r.string(), "avro.schema");
        assert_eq!(r.string(), SCHEMA_TEXT);
        assert_eq!(r.string(), "avro.codec");
        assert_eq!(r.string(), "null");
        assert_eq!(r.long(), 0);
        assert_eq!(r.fixed(SYNC_LEN), &sync);
        assert!(r.data.is_empty());
    }

    #[test]
    fn a_container_block_holds_count_size_values_and_the_sync_marker() {
        let mut list = RecordList::default();
        list.push(b"k", b"abc", 1);
        list.push(b"k", b"de", 2);
        let sync = [3u8; SYNC_LEN];
        let block = container_block(&list, &sync);
        assert_eq!(
            &block[..],
            b"\x04\x0Aabcde\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03"
        );
        assert!(container_block(&RecordList::default(), &sync).is_empty());
    }
}
