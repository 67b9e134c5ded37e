//! Topics: the validation rules every part of the broker shares.
//!
//! A topic *name* is what a PUBLISH carries; a topic *filter* is what a SUBSCRIBE
//! carries and may hold wildcards. Both are UTF-8 (checked by the codec before these
//! functions see them), at least one byte long and at most 65,535 bytes [MQTT-4.7.3-1,3].
//! Levels are separated by '/', and empty levels are allowed (`a//b`, `/a`).

mod validate;

pub use validate::{
    parse_shared_filter, validate_topic_filter, validate_topic_name, SharedFilter, TopicError,
};
