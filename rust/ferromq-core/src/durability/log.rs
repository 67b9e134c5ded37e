//! The stored log: how the embedded store keeps records on disk (its segment files
//! and snapshots), and the reader of every record stream (batch framing or the
//! stored log format), with its recovery.
//!
//! **Stored log format, version 3** (`LOG_VERSION`; the embedded store's segment
//! files and snapshots). A file starts with the header `"FMQJ" | version u16 |
//! reserved u16 (0)`, then records framed `kind u8 | body length u32 | crc32c u32 |
//! body`, where the CRC32C (Castagnoli) covers the kind, the length and the body
//! (`log_records` turns a batch into this framing, in Rust, once per batch).
//! Version 2 (issue 24) adds record kinds 11 to 14 (`Outbox`, `BusCursor`,
//! `Applied`, `Will`): its framing is version 1's, and the bump makes a build of
//! version 1 refuse such a store with one line rather than skip the records it does
//! not know (a pending will, a route still crossing). Version 3 (issue 24) adds the
//! publisher at the end of an `Outbox` record (a version 2 build would take the
//! longer record for damage and skip it: a route still crossing). Version 0 is the format before
//! headers: no header, batch framing, no CRC. Files of every release are read as
//! they are (`tests/golden/journal-v<N>`, `CHANGELOG.md`). A reader meets a header at any
//! record boundary (the segments of a log are read as one stream; `'F'` is no record
//! kind), takes the version from it, and refuses a version above its own.
//!
//! Recovery (`RecordReader::recovering`): a version 1 to 3 record whose kind, length or
//! CRC does not check out is damage; the reader scans forward byte by byte to the
//! next position where a header or a whole record with a matching CRC starts,
//! reports the skipped range (`Damage`) and goes on, so one flipped byte costs one
//! record and a zeroed block costs the records it covers. A record whose CRC matches
//! but whose body does not decode is skipped alone. Damage with nothing intact after
//! it is the torn tail a crash leaves: reading ends there (`valid_len`). Version 0
//! has no checksum, so damage there skips to the next header. Scanning computes a
//! CRC only where a known kind and a length that fits the data start, so skipping
//! garbage costs little more than reading it.

use bytes::{BufMut, Bytes, BytesMut};

use super::record::{decode_record, JournalError, Record, SESSION, WILL};

/// The stored log's magic: the first bytes of every file written in version 1 or later.
pub const LOG_MAGIC: [u8; 4] = *b"FMQJ";
/// The stored log format this build writes (and the newest it reads).
pub const LOG_VERSION: u16 = 3;
pub const LOG_HEADER_LEN: usize = 8;
const BATCH_FRAME: usize = 5;
const LOG_FRAME: usize = 9;

/// The header that starts every stored log file (`LOG_VERSION`). A header naming
/// version 0 switches a reader back to batch framing: a store whose bytes follow
/// another's stored log (the split store's Kafka records) starts with one.
pub fn log_header(version: u16) -> [u8; LOG_HEADER_LEN] {
    let mut header = [0; LOG_HEADER_LEN];
    header[..4].copy_from_slice(&LOG_MAGIC);
    header[4..6].copy_from_slice(&version.to_le_bytes());
    header
}

/// The format version of stored bytes from their header; 0 (the format before
/// headers) when they do not start with one.
pub fn log_version(head: &[u8]) -> u16 {
    match head {
        [m0, m1, m2, m3, v0, v1, _, _, ..] if [*m0, *m1, *m2, *m3] == LOG_MAGIC => {
            u16::from_le_bytes([*v0, *v1])
        }
        _ => 0,
    }
}

/// A batch (batch framing) in the stored log framing: each record with its CRC32C.
pub fn log_records(batch: &[u8]) -> Result<BytesMut, JournalError> {
    let mut out = BytesMut::with_capacity(batch.len() + batch.len() / 8);
    let mut at = 0;
    while at < batch.len() {
        let rest = &batch[at..];
        let len = batch_body_len(rest)?;
        let (head, body) = rest[..BATCH_FRAME + len].split_at(BATCH_FRAME);
        out.put_slice(head);
        out.put_u32_le(crc32c::crc32c_append(crc32c::crc32c(head), body));
        out.put_slice(body);
        at += BATCH_FRAME + len;
    }
    Ok(out)
}

fn batch_body_len(rest: &[u8]) -> Result<usize, JournalError> {
    if rest.len() < BATCH_FRAME {
        return Err(JournalError("record header cut short"));
    }
    let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    if rest.len() < BATCH_FRAME + len {
        return Err(JournalError("record body cut short"));
    }
    Ok(len)
}

/// A range of stored bytes recovery skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub offset: usize,
    pub len: usize,
    pub error: JournalError,
}

/// What starts at a record boundary.
enum Frame {
    Header(u16),
    /// Kind, body range, where the next frame starts.
    Record(u8, std::ops::Range<usize>, usize),
}

/// Read records one by one, in batch framing or in the stored log format (headers
/// switch it; see the module header). A plain reader ends at the first record it
/// cannot read (a torn write at a crash) with `Err`; a `recovering` one skips damage
/// it can resynchronise past and reports it (`damaged`). `valid_len` tells how many
/// bytes were read up to the end of the last whole record, so a log can be truncated
/// there.
pub struct RecordReader {
    data: Bytes,
    pos: usize,
    valid_len: usize,
    version: u16,
    recovering: bool,
    stopped: bool,
    damaged: Vec<Damage>,
}

impl RecordReader {
    pub fn new(data: Bytes) -> RecordReader {
        RecordReader {
            data,
            pos: 0,
            valid_len: 0,
            version: 0,
            recovering: false,
            stopped: false,
            damaged: Vec::new(),
        }
    }

    /// A reader that skips damaged records it can resynchronise past.
    pub fn recovering(data: Bytes) -> RecordReader {
        RecordReader {
            recovering: true,
            ..RecordReader::new(data)
        }
    }

    /// Bytes up to the end of the last whole record (or header) read.
    pub fn valid_len(&self) -> usize {
        self.valid_len
    }

    /// The ranges skipped so far.
    pub fn damaged(&self) -> &[Damage] {
        &self.damaged
    }

    /// The next record undecoded, as its kind and body: for a store that keeps
    /// bodies verbatim (the Redis store stores a Message body as it is).
    pub fn next_raw(&mut self) -> Option<Result<(u8, Bytes), JournalError>> {
        let frame = self.step()?;
        if frame.is_ok() {
            self.valid_len = self.pos;
        }
        Some(frame.map(|(_, kind, body)| (kind, body)))
    }

    /// The next frame's record (where it starts, kind, body), past headers and
    /// (recovering) damage.
    fn step(&mut self) -> Option<Result<(usize, u8, Bytes), JournalError>> {
        loop {
            if self.stopped || self.pos >= self.data.len() {
                return None;
            }
            let start = self.pos;
            match self.frame(start, self.version) {
                Ok(Frame::Header(version)) if version > LOG_VERSION => {
                    self.stopped = true;
                    return Some(Err(JournalError("unknown journal format version")));
                }
                Ok(Frame::Header(version)) => {
                    self.version = version;
                    self.pos += LOG_HEADER_LEN;
                    self.valid_len = self.pos;
                }
                Ok(Frame::Record(kind, body, next)) => {
                    self.pos = next;
                    return Some(Ok((start, kind, self.data.slice(body))));
                }
                Err(error) => {
                    if let Some(error) = self.skip_damage(start, error) {
                        return Some(Err(error));
                    }
                }
            }
        }
    }

    /// Damage at `start`: resynchronise past it (None), or end the reading with the
    /// error when not recovering or nothing intact follows.
    fn skip_damage(&mut self, start: usize, error: JournalError) -> Option<JournalError> {
        let resumed = if self.recovering {
            (start + 1..self.data.len()).find(|at| self.intact_at(*at))
        } else {
            None
        };
        match resumed {
            Some(at) => {
                self.damaged.push(Damage {
                    offset: start,
                    len: at - start,
                    error,
                });
                self.pos = at;
                None
            }
            None => {
                self.stopped = true;
                Some(error)
            }
        }
    }

    /// A header, or (in a checksummed version) a whole record, starts at `at`.
    fn intact_at(&self, at: usize) -> bool {
        match self.frame(at, self.version) {
            Ok(Frame::Header(version)) => version <= LOG_VERSION,
            Ok(Frame::Record(..)) => self.version >= 1,
            Err(_) => false,
        }
    }

    fn frame(&self, at: usize, version: u16) -> Result<Frame, JournalError> {
        let rest = &self.data[at..];
        if rest.first() == Some(&LOG_MAGIC[0]) {
            if rest.len() < LOG_HEADER_LEN {
                return Err(JournalError("log header cut short"));
            }
            if rest[..4] == LOG_MAGIC {
                return Ok(Frame::Header(log_version(rest)));
            }
        }
        if version == 0 {
            let len = batch_body_len(rest)?;
            return Ok(Frame::Record(
                rest[0],
                at + BATCH_FRAME..at + BATCH_FRAME + len,
                at + BATCH_FRAME + len,
            ));
        }
        if rest.len() < LOG_FRAME {
            return Err(JournalError("record header cut short"));
        }
        let kind = rest[0];
        if !(SESSION..=WILL).contains(&kind) {
            return Err(JournalError("unknown record kind"));
        }
        let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let body = rest
            .get(LOG_FRAME..LOG_FRAME.saturating_add(len))
            .ok_or(JournalError("record body cut short"))?;
        let stored = u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]);
        if crc32c::crc32c_append(crc32c::crc32c(&rest[..BATCH_FRAME]), body) != stored {
            return Err(JournalError("record checksum mismatch"));
        }
        Ok(Frame::Record(
            kind,
            at + LOG_FRAME..at + LOG_FRAME + len,
            at + LOG_FRAME + len,
        ))
    }
}

impl Iterator for RecordReader {
    type Item = Result<Record, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (start, kind, body) = match self.step()? {
                Ok(frame) => frame,
                Err(error) => return Some(Err(error)),
            };
            match decode_record(kind, body) {
                Ok(record) => {
                    self.valid_len = self.pos;
                    return Some(Ok(record));
                }
                // Its CRC matched: the record is as written (whole, so never cut off
                // as a torn tail); only this one is lost.
                Err(error) if self.recovering && self.version >= 1 => {
                    self.valid_len = self.pos;
                    self.damaged.push(Damage {
                        offset: start,
                        len: self.pos - start,
                        error,
                    });
                }
                Err(error) => {
                    self.pos = start;
                    if let Some(error) = self.skip_damage(start, error) {
                        return Some(Err(error));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Properties, Property, QoS, Utf8Bytes};
    use crate::durability::record::{ClientType, Journal};
    use crate::engine::Message;

    fn message(id: u64) -> Message {
        let props = Properties(vec![Property::ContentType(Utf8Bytes::from_static("json"))]);
        let mut m = Message::from_publish("a/b", b"hi", QoS::AtLeastOnce, false, &props, None, 0);
        m.id = id;
        m
    }

    /// Three retained messages as a stored log file: header, then CRC framing.
    fn stored_log() -> (Vec<u8>, Vec<usize>) {
        let mut j = Journal::new(true);
        for (n, topic) in ["r/a", "r/b", "r/c"].iter().enumerate() {
            let mut m = message(n as u64 + 1);
            m.topic = (*topic).try_into().unwrap();
            j.retain(topic, Some(&m), 0);
        }
        let (_, batch) = j.take().unwrap();
        let mut log = log_header(LOG_VERSION).to_vec();
        log.extend_from_slice(&log_records(&batch).unwrap());
        // Where each record starts.
        let mut starts = Vec::new();
        let mut at = LOG_HEADER_LEN;
        while at < log.len() {
            starts.push(at);
            at += LOG_FRAME + u32::from_le_bytes(log[at + 1..at + 5].try_into().unwrap()) as usize;
        }
        (log, starts)
    }

    fn retained_topics(data: Vec<u8>) -> (Vec<String>, RecordReader) {
        let mut reader = RecordReader::recovering(Bytes::from(data));
        let topics = reader
            .by_ref()
            .filter_map(|r| match r {
                Ok(Record::Retain { topic, .. }) => Some(topic),
                _ => None,
            })
            .collect();
        (topics, reader)
    }

    #[test]
    fn a_stored_log_reads_back_with_its_header_and_checksums() {
        let (log, _) = stored_log();
        assert_eq!(&log[..4], b"FMQJ");
        assert_eq!(log_version(&log), LOG_VERSION);
        assert_eq!(
            log_version(b"\x01\x00"),
            0,
            "no header: the format before headers"
        );
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(topics, ["r/a", "r/b", "r/c"]);
        assert_eq!(reader.valid_len(), log.len());
        assert!(reader.damaged().is_empty());
    }

    #[test]
    fn a_flipped_byte_costs_one_record_and_is_reported_at_its_offset() {
        let (mut log, starts) = stored_log();
        // Records go Message, Retain per topic: flip a payload byte of r/b's message.
        let flipped = starts[3] - 3;
        log[flipped] ^= 0x40;
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(
            topics,
            ["r/a", "r/b", "r/c"],
            "the Retain records are intact"
        );
        assert_eq!(
            reader.damaged(),
            &[Damage {
                offset: starts[2],
                len: starts[3] - starts[2],
                error: JournalError("record checksum mismatch"),
            }]
        );
        assert_eq!(
            reader.valid_len(),
            log.len(),
            "nothing after the damage is cut"
        );
    }

    #[test]
    fn damage_with_nothing_intact_after_it_is_a_torn_tail() {
        let (mut log, starts) = stored_log();
        log[starts[5]] = 0;
        let (topics, reader) = retained_topics(log);
        assert_eq!(topics, ["r/a", "r/b"]);
        assert_eq!(
            reader.damaged().len(),
            0,
            "damage at the very end is a torn tail"
        );
        assert_eq!(reader.valid_len(), starts[5]);
    }

    #[test]
    fn a_zeroed_block_costs_the_records_it_covers_and_reading_resumes_after_it() {
        let (mut log, starts) = stored_log();
        log[starts[0] + 3..starts[3] + 2].fill(0);
        let (topics, reader) = retained_topics(log.clone());
        assert_eq!(topics, ["r/c"]);
        assert_eq!(reader.damaged().len(), 1);
        assert_eq!(reader.damaged()[0].offset, starts[0]);
        assert_eq!(reader.damaged()[0].len, starts[4] - starts[0]);
        assert_eq!(reader.valid_len(), log.len());
    }

    #[test]
    fn a_whole_record_that_does_not_decode_is_skipped_alone_and_never_cut() {
        let (log, _) = stored_log();
        let bad = log_records(&[SESSION, 1, 0, 0, 0, 0xff]).unwrap();
        let middle = [&log[..], &bad, &log[LOG_HEADER_LEN..]].concat();
        let (topics, reader) = retained_topics(middle);
        assert_eq!(topics.len(), 6);
        assert_eq!(
            reader.damaged(),
            &[Damage {
                offset: log.len(),
                len: bad.len(),
                error: JournalError("field cut short"),
            }]
        );
        let last = [&log[..], &bad].concat();
        let (_, reader) = retained_topics(last.clone());
        assert_eq!(reader.valid_len(), last.len());
    }

    #[test]
    fn a_torn_tail_of_a_stored_log_ends_reading_at_the_last_whole_record() {
        let (log, starts) = stored_log();
        let (topics, reader) = retained_topics(log[..log.len() - 3].to_vec());
        assert_eq!(topics, ["r/a", "r/b"]);
        assert!(reader.damaged().is_empty());
        assert_eq!(reader.valid_len(), starts[5]);
    }

    #[test]
    fn segments_of_both_versions_read_as_one_stream_and_a_newer_version_is_refused() {
        let mut j = Journal::new(true);
        j.session("old", 60, ClientType::Device);
        let (_, version0) = j.take().unwrap();
        let (log, _) = stored_log();
        // Old segment, new segment, then batch framing again after a version 0 header.
        let all = [&version0[..], &log, &log_header(0), &version0[..]].concat();
        let mut reader = RecordReader::recovering(Bytes::from(all));
        assert_eq!(reader.by_ref().filter(Result::is_ok).count(), 8);
        assert!(reader.damaged().is_empty());

        let mut newer = log.clone();
        newer[4] = 9;
        let mut reader = RecordReader::recovering(Bytes::from(newer));
        assert_eq!(
            reader.next(),
            Some(Err(JournalError("unknown journal format version")))
        );
        assert_eq!(reader.next(), None);
        assert_eq!(reader.valid_len(), 0);
    }

    #[test]
    fn damage_in_a_version_0_segment_skips_to_the_next_segment() {
        let mut j = Journal::new(true);
        j.session("old", 60, ClientType::Device);
        j.session_end("old");
        let (_, version0) = j.take().unwrap();
        let mut old = version0.to_vec();
        old[0] = 0x7f;
        let (log, _) = stored_log();
        let (topics, reader) = retained_topics([&old[..], &log].concat());
        assert_eq!(topics, ["r/a", "r/b", "r/c"]);
        assert_eq!(reader.damaged()[0].offset, 0);
        assert_eq!(reader.damaged()[0].len, old.len());
    }
}
