//! Publish rate limits: token buckets in messages and bytes per second, one pair per
//! connection and one pair per user name shared by all of that user's connections
//! (`users`). Each bucket holds one second of its rate and refills continuously from
//! engine time; a PUBLISH costs one message token and its topic + payload length in
//! byte tokens. Integer arithmetic in thousandths of a token, no allocation, O(1).
//!
//! A PUBLISH is admitted only when every configured bucket it touches has its cost
//! (a byte cost above a bucket's one-second capacity needs a full bucket), and then
//! takes from all of them, so a refused PUBLISH costs nothing. What a refusal means
//! is the caller's (`hold`): MQTT 5.0 clients get DISCONNECT 0x96 (Message rate too
//! high), 3.x clients are read less, resumed at the time `wait` reports.

/// One token bucket; `rate == 0` is never built (no limit).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens per second, also the capacity.
    rate: u64,
    /// Thousandths of a token in the bucket.
    milli_tokens: u64,
    last_refill: u64,
}

impl TokenBucket {
    /// A full bucket for `rate` tokens per second, or None for no limit.
    pub fn new(rate: u64, now: u64) -> Option<TokenBucket> {
        (rate > 0).then(|| TokenBucket {
            rate,
            milli_tokens: rate * 1000,
            last_refill: now,
        })
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.last_refill);
        self.last_refill = self.last_refill.max(now);
        // A token a second is a thousandth of a token a millisecond.
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(elapsed.saturating_mul(self.rate))
            .min(self.rate * 1000);
    }

    /// Thousandths of a token `cost` needs, capped at the capacity.
    fn need(&self, cost: u64) -> u64 {
        cost.saturating_mul(1000).min(self.rate * 1000)
    }

    /// Milliseconds until `cost` is in the bucket (0: now), after a refill at `now`.
    fn wait(&mut self, cost: u64, now: u64) -> u64 {
        self.refill(now);
        let missing = self.need(cost).saturating_sub(self.milli_tokens);
        missing.div_ceil(self.rate)
    }

    /// Take `cost` (a bucket short of it only by the capacity cap goes to zero).
    fn take(&mut self, cost: u64) {
        self.milli_tokens = self.milli_tokens.saturating_sub(cost.saturating_mul(1000));
    }
}

/// A message bucket and a byte bucket, either optional.
#[derive(Debug, Clone, Default)]
pub struct PublishRate {
    messages: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
}

impl PublishRate {
    /// None when neither rate is set: the PUBLISH path then touches no bucket.
    pub fn new(messages: u32, bytes: u64, now: u64) -> Option<PublishRate> {
        let rate = PublishRate {
            messages: TokenBucket::new(u64::from(messages), now),
            bytes: TokenBucket::new(bytes, now),
        };
        (rate.messages.is_some() || rate.bytes.is_some()).then_some(rate)
    }

    /// Milliseconds until a PUBLISH of `bytes` fits both buckets (0: now).
    pub fn wait(&mut self, bytes: u64, now: u64) -> u64 {
        let messages = self.messages.as_mut().map_or(0, |b| b.wait(1, now));
        let bytes = self.bytes.as_mut().map_or(0, |b| b.wait(bytes, now));
        messages.max(bytes)
    }

    /// Take a PUBLISH of `bytes` that `wait` found fitting.
    pub fn take(&mut self, bytes: u64) {
        if let Some(bucket) = self.messages.as_mut() {
            bucket.take(1);
        }
        if let Some(bucket) = self.bytes.as_mut() {
            bucket.take(bytes);
        }
    }
}

/// Admit one PUBLISH of `bytes` against the connection's and the user's rates:
/// `Ok` took from both, `Err(ms)` took nothing and fits in `ms` milliseconds.
pub fn admit(
    client: Option<&mut PublishRate>,
    user: Option<&mut PublishRate>,
    bytes: u64,
    now: u64,
) -> Result<(), u64> {
    let (mut client, mut user) = (client, user);
    let wait = client
        .as_deref_mut()
        .map_or(0, |r| r.wait(bytes, now))
        .max(user.as_deref_mut().map_or(0, |r| r.wait(bytes, now)));
    if wait > 0 {
        return Err(wait);
    }
    for rate in [client, user].into_iter().flatten() {
        rate.take(bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_of_burst_then_the_rate() {
        let mut rate = PublishRate::new(10, 0, 0).unwrap();
        assert!((0..10).all(|_| admit(Some(&mut rate), None, 1, 0).is_ok()));
        assert_eq!(admit(Some(&mut rate), None, 1, 0), Err(100));
        assert_eq!(admit(Some(&mut rate), None, 1, 99), Err(1));
        assert!(admit(Some(&mut rate), None, 1, 100).is_ok());
        assert!(PublishRate::new(0, 0, 0).is_none());
    }

    #[test]
    fn bytes_limit_and_a_message_larger_than_a_second() {
        let mut rate = PublishRate::new(0, 1000, 0).unwrap();
        assert!(admit(Some(&mut rate), None, 600, 0).is_ok());
        // 400 left: 600 more need 200 ms at 1000 B/s.
        assert_eq!(admit(Some(&mut rate), None, 600, 0), Err(200));
        assert!(admit(Some(&mut rate), None, 600, 200).is_ok());
        // Above the capacity: waits for a full bucket (empty now), then empties it.
        assert_eq!(admit(Some(&mut rate), None, 5000, 200), Err(1000));
        assert!(admit(Some(&mut rate), None, 5000, 1200).is_ok());
        assert_eq!(admit(Some(&mut rate), None, 1, 1200), Err(1));
    }

    #[test]
    fn a_refusal_by_one_bucket_takes_from_neither() {
        let mut client = PublishRate::new(100, 0, 0).unwrap();
        let mut user = PublishRate::new(1, 0, 0).unwrap();
        assert!(admit(Some(&mut client), Some(&mut user), 1, 0).is_ok());
        assert_eq!(admit(Some(&mut client), Some(&mut user), 1, 0), Err(1000));
        // The client's bucket still holds 99.
        assert!((0..99).all(|_| admit(Some(&mut client), None, 1, 0).is_ok()));
        assert!(admit(Some(&mut client), None, 1, 0).is_err());
    }
}
