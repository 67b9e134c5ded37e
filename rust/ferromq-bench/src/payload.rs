//! The stamp every benchmark payload starts with.
//!
//! Layout (little-endian, 24 bytes): run id u32 · publisher id u32 · sequence u64 ·
//! send time u64 (nanoseconds on the run's monotonic clock). The rest of the payload
//! is padding. The run id lets a subscriber with a persistent session tell messages
//! queued by an earlier run (stale) from this run's; publisher id and sequence drive
//! the loss / duplicate / reorder accounting; the send time the end-to-end latency.
//! Publishers encode a template PUBLISH through the codec and patch the stamp in
//! place, so sending allocates nothing per message.

pub const STAMP_LEN: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub run_id: u32,
    pub publisher: u32,
    pub seq: u64,
    pub sent_ns: u64,
}

impl Stamp {
    /// Write the stamp over the first [`STAMP_LEN`] bytes of `payload`.
    pub fn write(&self, payload: &mut [u8]) {
        payload[0..4].copy_from_slice(&self.run_id.to_le_bytes());
        payload[4..8].copy_from_slice(&self.publisher.to_le_bytes());
        payload[8..16].copy_from_slice(&self.seq.to_le_bytes());
        payload[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    /// The stamp at the front of `payload`, or `None` if it is too short to hold one.
    pub fn read(payload: &[u8]) -> Option<Stamp> {
        let stamp = payload.get(..STAMP_LEN)?;
        let u32_at = |at: usize| u32::from_le_bytes(stamp[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(stamp[at..at + 8].try_into().unwrap());
        Some(Stamp {
            run_id: u32_at(0),
            publisher: u32_at(4),
            seq: u64_at(8),
            sent_ns: u64_at(16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_short_payloads() {
        let stamp = Stamp {
            run_id: 7,
            publisher: 42,
            seq: u64::MAX - 1,
            sent_ns: 123_456_789,
        };
        let mut payload = vec![0xAA; 64];
        stamp.write(&mut payload);
        assert_eq!(Stamp::read(&payload), Some(stamp));
        assert_eq!(payload[STAMP_LEN], 0xAA);
        assert_eq!(Stamp::read(&payload[..STAMP_LEN - 1]), None);
    }
}
