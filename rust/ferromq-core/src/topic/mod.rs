//! Topics: the validation rules every part of the broker shares.
//!
//! A topic *name* is what a PUBLISH carries; a topic *filter* is what a SUBSCRIBE
//! carries and may hold wildcards. Both are UTF-8 (checked by the codec before these
//! functions see them), at least one byte long and at most 65,535 bytes [MQTT-4.7.3-1,3].
//! Levels are separated by '/', and empty levels are allowed (`a//b`, `/a`).
//!
//! - `validate`: the name and filter rules.
//! - [`SubscriptionIndex`] (`index`): topic → subscribers, exact filters in a table,
//!   wildcard filters in a level trie (`trie`), per-filter subscriber lists
//!   (`sublist`), shared groups (`shared`).
//! - `slab`, `strtable`: the compact id-addressed storage both indexes build on;
//!   the retained index (`crate::retain`) reuses the trie.

mod index;
mod shared;
pub(crate) mod slab;
mod strtable;
mod sublist;
pub(crate) mod trie;
mod validate;

pub use index::{
    Delivery, IndexError, IndexStats, MatchResult, SubscriptionIndex, DELIVERY_RETAIN_AS_PUBLISHED,
    DELIVERY_SHARED,
};
pub(crate) use shared::topic_hash;
pub use shared::{GroupRef, Member, ShareStrategy};

pub use validate::{
    filter_matches, parse_shared_filter, validate_topic_filter, validate_topic_name, SharedFilter,
    TopicError,
};
