//! Decode errors, each classified with the reason code the broker must answer with.
//!
//! The codec never panics on untrusted bytes: every failure is a [`DecodeError`] whose
//! `reason` is what a v5 peer is told in DISCONNECT/CONNACK (a 3.1.1 peer is just
//! disconnected, or gets the matching CONNACK return code).

use std::fmt;

use super::reason::ReasonCode;
use crate::topic::TopicError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The reason code to answer with: 0x81, 0x82, 0x84, 0x8F, 0x90, 0x95 ...
    pub reason: ReasonCode,
    /// What was wrong, for the log; static so that building an error never allocates.
    pub detail: &'static str,
}

impl DecodeError {
    pub(crate) const fn malformed(detail: &'static str) -> DecodeError {
        DecodeError {
            reason: ReasonCode::MalformedPacket,
            detail,
        }
    }

    pub(crate) const fn protocol(detail: &'static str) -> DecodeError {
        DecodeError {
            reason: ReasonCode::ProtocolError,
            detail,
        }
    }

    pub(crate) fn topic_name(err: TopicError) -> DecodeError {
        DecodeError {
            reason: ReasonCode::TopicNameInvalid,
            detail: err.as_str(),
        }
    }

    pub(crate) fn topic_filter(err: TopicError) -> DecodeError {
        DecodeError {
            reason: ReasonCode::TopicFilterInvalid,
            detail: err.as_str(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (0x{:02X}): {}",
            self.reason.name(),
            self.reason as u8,
            self.detail
        )
    }
}

impl std::error::Error for DecodeError {}
