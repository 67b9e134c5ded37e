//! The cross-shard bus of a node (issue 16): how shards, each a process with its own
//! engine, hand each other publishes, subscription changes and session moves.
//!
//! - [`ring`]: one direction between two shards, a single-producer single-consumer
//!   byte ring in shared memory, written in batches once per loop tick.
pub mod ring;

/// FNV-1a (64-bit) of `data`: the same in every process, build and restart, unlike
/// SipHash keys. Shard owners, shared-group topic hashes and the node's admission
/// counters all hash with it.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shard of `count` that owns `client_id`: [`fnv1a`] of its UTF-8 bytes, modulo
/// `count`. Stable across processes, builds and restarts, since every shard, the
/// accept path and a restart with another number of shards must agree on it.
pub fn shard_of(client_id: &str, count: u16) -> u16 {
    (fnv1a(client_id.as_bytes()) % u64::from(count.max(1))) as u16
}

#[cfg(test)]
mod tests {
    use super::shard_of;

    #[test]
    fn owners_are_stable_and_spread() {
        // Pinned: a change of the hash would move every stored session.
        assert_eq!(shard_of("sensor-1", 2), shard_of("sensor-1", 2));
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as u16);
        let counts = (0..1000).fold([0u32; 4], |mut counts, i| {
            counts[usize::from(shard_of(&format!("client-{i}"), 4))] += 1;
            counts
        });
        assert!(
            counts.iter().all(|&n| (200..300).contains(&n)),
            "{counts:?}"
        );
        assert_eq!(shard_of("anything", 1), 0);
    }
}
