//! Shared subscriptions (`$share/{group}/{filter}`, MQTT 5.0 §4.8.2): each matching
//! message goes to exactly one member of each matching group.
//!
//! A group is identified by its name *and* its filter: `$share/g/a` and `$share/g/b`
//! are two groups. The filter's subscriber list holds one [`SHARED`](super::sublist)
//! entry whose id is the group; the group keeps its members as a sorted
//! [`SubList`] of client entries with their own options and subscription identifier.
//!
//! Choosing a member: the strategy gives a start position, then members are scanned
//! from there (wrapping) for the first *eligible* one: online, and not the publisher
//! when that member set No Local. So a choice is O(1) when the start member is
//! eligible and O(members) at worst. When no member is eligible the group is
//! reported as unserved and nobody is picked; the caller decides whether to queue the
//! message for the group (see `MatchResult::unserved_groups`).
//!
//! A group also has a `serial`, unique over the index's lifetime: a [`GroupRef`]
//! (slab id + serial) names one group even after its id is recycled, so the engine
//! can hold on to a group across deliveries (the group queue, redistribution) and
//! notice when the group it named is gone.
//!
//! Strategies, fixed per index:
//! - `RoundRobin` (default): start after the last member chosen.
//! - `Random`: start at a xorshift64* draw (deterministic seed, so tests replay).
//! - `HashClient`: start at a hash of the publisher's client id, so one publisher's
//!   messages keep their order at one member.
//! - `HashTopic`: start at a hash of the topic, so one topic's messages keep order.
//! - `Sticky`: keep the last chosen member while it stays eligible; otherwise choose
//!   round-robin and stick to the new one.

use super::sublist::{Sub, SubList};

/// How a shared group picks the member that receives a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareStrategy {
    #[default]
    RoundRobin,
    Random,
    HashClient,
    HashTopic,
    Sticky,
}

crate::choice::named!(ShareStrategy, "share strategy", [
    "round_robin" => ShareStrategy::RoundRobin,
    "random" => ShareStrategy::Random,
    "hash_client" => ShareStrategy::HashClient,
    "hash_topic" => ShareStrategy::HashTopic,
    "sticky" => ShareStrategy::Sticky,
]);

/// A shared group as the engine holds it: the index's group id and the serial
/// that tells this group from a later one reusing the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRef {
    pub id: u32,
    pub serial: u32,
}

/// The member chosen for one message, with its subscription's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub client: u32,
    pub qos: crate::codec::QoS,
    pub retain_as_published: bool,
    /// 0 when the subscription has no identifier.
    pub subscription_id: u32,
}

impl From<Sub> for Member {
    fn from(sub: Sub) -> Member {
        Member {
            client: sub.id,
            qos: crate::codec::QoS::from_u8(sub.qos()).unwrap_or_default(),
            retain_as_published: sub.retain_as_published(),
            subscription_id: sub.sub_id,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Group {
    /// Non-empty for a live group (group names are non-empty [MQTT-4.8.2-1]).
    pub(crate) name: Box<str>,
    /// Where the group's SHARED entry lives (a packed location of the index).
    pub(crate) location: u32,
    /// Tells this group from earlier and later ones with the same id.
    pub(crate) serial: u32,
    pub(crate) members: SubList,
    cursor: u32,
    sticky: Option<u32>,
}

impl Group {
    pub(crate) fn new(name: &str, location: u32, serial: u32) -> Group {
        Group {
            name: name.into(),
            location,
            serial,
            ..Group::default()
        }
    }
}

/// Per-index member choice state: the strategy and the PRNG for `Random`.
pub(crate) struct Picker {
    strategy: ShareStrategy,
    rng: u64,
}

/// A fixed 64-bit mixer (the murmur3 finaliser) for hash strategies.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// FNV-1a over the topic: deterministic across processes, unlike SipHash keys, so a
/// cluster of nodes hashes a topic to the same member position.
pub(crate) fn topic_hash(topic: &str) -> u64 {
    crate::bus::fnv1a(topic.as_bytes())
}

impl Picker {
    pub(crate) fn new(strategy: ShareStrategy) -> Picker {
        Picker {
            strategy,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub(crate) fn strategy(&self) -> ShareStrategy {
        self.strategy
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64* (Vigna): full period over non-zero states.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Choose the member of `group` that receives one message, or None when no
    /// member is eligible. `topic_hash` is only read by `HashTopic`.
    pub(crate) fn pick(
        &mut self,
        group: &mut Group,
        publisher: Option<u32>,
        topic_hash: u64,
        eligible: impl Fn(&Sub) -> bool,
    ) -> Option<Sub> {
        let members = group.members.as_slice();
        let n = members.len() as u64;
        if n == 0 {
            return None;
        }
        if self.strategy == ShareStrategy::Sticky {
            let kept = group
                .sticky
                .and_then(|client| group.members.find(Sub::key(0, client)))
                .filter(|sub| eligible(sub));
            if let Some(sub) = kept {
                return Some(*sub);
            }
        }
        let start = match self.strategy {
            ShareStrategy::RoundRobin | ShareStrategy::Sticky => u64::from(group.cursor),
            ShareStrategy::Random => self.next_random(),
            ShareStrategy::HashClient => mix(publisher.map_or(u64::MAX, u64::from)),
            ShareStrategy::HashTopic => topic_hash,
        } % n;
        let at = (0..n)
            .map(|k| ((start + k) % n) as usize)
            .find(|&at| eligible(&members[at]))?;
        let chosen = members[at];
        // Members have distinct u32 client ids, so a position fits in u32.
        group.cursor = ((at as u64 + 1) % n) as u32;
        if self.strategy == ShareStrategy::Sticky {
            group.sticky = Some(chosen.id);
        }
        Some(chosen)
    }
}
