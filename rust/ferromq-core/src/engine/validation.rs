//! Validation at ingress (`[[validation.rules]]`, as HiveMQ's Data Hub and EMQX's
//! schema validation do it): a client's PUBLISH whose topic matches a rule's filter
//! must carry a payload its schema accepts (`crate::schema`: a JSON Schema for JSON
//! payloads, an Avro schema for Avro binary ones). Every matching rule is checked,
//! in order; the first that fails decides what happens (`OnInvalid`):
//!
//! - `Drop`: not routed; QoS 1/2 acknowledged as usual (the device does not retry);
//! - `Reject`: not routed; a v5 QoS 1/2 PUBLISH hears 0x99 Payload format invalid in
//!   its PUBACK/PUBREC; 3.1.1 has no refusal there and QoS 0 no answer, so for them
//!   it is a drop;
//! - `Disconnect`: the connection is closed (v5: DISCONNECT 0x99), the will
//!   published as for any connection the broker ends.
//!
//! Checked after the ACL (a denied message costs no parse) and before anything is
//! stored or routed, on the shard where the PUBLISH arrives; a QoS 2 retransmission
//! of a kept packet id is not checked again. Wills and the broker's own messages
//! are not checked. Each failure is counted (`payloads_invalid`); Python logs at
//! most one line per rule per second (`Event::PayloadInvalid`, with how many were not
//! logged since), so a device sending garbage cannot flood the log. No rule: one
//! emptiness test per PUBLISH.

use std::sync::Arc;

use crate::codec::Publish;
use crate::schema::PayloadSchema;
use crate::topic::{filter_matches, parse_shared_filter, validate_topic_filter};

use super::{Engine, Event};

/// What happens to a PUBLISH whose payload a rule's schema refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInvalid {
    Drop,
    Reject,
    Disconnect,
}

impl OnInvalid {
    pub fn name(self) -> &'static str {
        match self {
            OnInvalid::Drop => "drop",
            OnInvalid::Reject => "reject",
            OnInvalid::Disconnect => "disconnect",
        }
    }
}

/// One rule: a topic filter, a compiled schema and what a failure does.
#[derive(Debug, Clone)]
pub struct ValidationRule {
    filter: Box<str>,
    schema: Arc<PayloadSchema>,
    on_invalid: OnInvalid,
    /// Engine time of the last failure logged, and failures since not logged.
    logged_at: Option<u64>,
    unlogged: u64,
}

impl ValidationRule {
    pub fn new(filter: &str, schema: PayloadSchema, on_invalid: OnInvalid) -> Result<Self, String> {
        validate_topic_filter(filter).map_err(|e| format!("filter: {}", e.as_str()))?;
        if matches!(parse_shared_filter(filter), Ok(Some(_))) {
            return Err("filter: a shared filter; name the topics without $share/".into());
        }
        Ok(ValidationRule {
            filter: filter.into(),
            schema: Arc::new(schema),
            on_invalid,
            logged_at: None,
            unlogged: 0,
        })
    }
}

/// A failure is logged at most this often per rule (engine ms).
const LOG_INTERVAL_MS: u64 = 1000;

impl Engine {
    /// Check every later client PUBLISH against these rules.
    pub fn set_validation(&mut self, rules: Vec<ValidationRule>) {
        self.validation_rules = rules;
    }

    /// What to do with `publish` from `session` when a rule refuses its payload
    /// (counted and, at most once a second per rule, logged); None when it passes.
    /// With no rule, one test inlined into the PUBLISH path; the rest is kept out.
    #[inline]
    pub(super) fn invalid_payload(
        &mut self,
        session: u32,
        publish: &Publish,
        now: u64,
    ) -> Option<OnInvalid> {
        if self.validation_rules.is_empty() {
            return None;
        }
        self.validate(session, publish, now)
    }

    #[cold]
    #[inline(never)]
    fn validate(&mut self, session: u32, publish: &Publish, now: u64) -> Option<OnInvalid> {
        let (index, problem) = self
            .validation_rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| filter_matches(&rule.filter, &publish.topic))
            .find_map(|(n, rule)| rule.schema.check(&publish.payload).err().map(|e| (n, e)))?;
        self.stats.payloads_invalid += 1;
        let client_id = self.client_id_of(session);
        let rule = &mut self.validation_rules[index];
        let due = rule
            .logged_at
            .is_none_or(|at| now.saturating_sub(at) >= LOG_INTERVAL_MS);
        if due {
            self.events.push(Event::PayloadInvalid {
                client_id,
                topic: publish.topic.to_string(),
                rule: index,
                filter: rule.filter.to_string(),
                problem,
                action: rule.on_invalid.name(),
                unlogged: rule.unlogged,
            });
            rule.logged_at = Some(now);
            rule.unlogged = 0;
        } else {
            rule.unlogged += 1;
        }
        Some(rule.on_invalid)
    }
}
