//! The per-connection inbound PUBLISH quota (`Features::max_publish_rate`): a token
//! bucket holding up to one second of the rate, refilled continuously from engine
//! time. A PUBLISH that finds it empty ends the connection with DISCONNECT 0x97
//! (Quota exceeded). Integer arithmetic in thousandths of a token; no allocation.

#[derive(Debug, Clone)]
pub struct PublishQuota {
    /// Tokens per second; each PUBLISH costs one.
    rate: u64,
    /// Thousandths of a token now in the bucket.
    milli_tokens: u64,
    last_refill: u64,
}

impl PublishQuota {
    /// A full bucket for `rate` PUBLISH packets per second, or None for no quota.
    pub fn new(rate: u32, now: u64) -> Option<PublishQuota> {
        (rate > 0).then(|| PublishQuota {
            rate: u64::from(rate),
            milli_tokens: u64::from(rate) * 1000,
            last_refill: now,
        })
    }

    /// Take one PUBLISH's token at `now` (milliseconds); false when none is left.
    pub fn take(&mut self, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.last_refill);
        self.last_refill = self.last_refill.max(now);
        // A token a second is a thousandth of a token a millisecond.
        self.milli_tokens = (self.milli_tokens + elapsed * self.rate).min(self.rate * 1000);
        if self.milli_tokens < 1000 {
            return false;
        }
        self.milli_tokens -= 1000;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_a_second_of_burst_then_the_rate() {
        let mut quota = PublishQuota::new(10, 0).unwrap();
        assert!((0..10).all(|_| quota.take(0)));
        assert!(!quota.take(0));
        assert!(!quota.take(99));
        assert!(quota.take(100));
        assert!(!quota.take(100));
        assert!(PublishQuota::new(0, 0).is_none());
    }
}
