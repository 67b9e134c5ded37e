//! Access control: which topics a client may publish to, subscribe to and read
//! retained messages from, evaluated per message in Rust on rules Python compiled
//! (docs/architecture.md, "The one rule").
//!
//! - [`rule`]: a rule (allow/deny, actions, subject, filter with placeholders) and
//!   the per-connection [`Binding`] of its placeholders.
//! - [`trie`]: rules indexed by level; a check walks the request's levels.
//! - [`table`]: the compiled list, one trie per subject, first match wins.
//!
//! The engine holds the configured table and each session's binding plus the
//! rules its authentication answer carried (`engine/acl.rs`).

mod rule;
mod table;
mod trie;

pub use rule::{template, Action, Binding, Level, Part, Permission, Rule, RuleError, Subject, Var};
pub use table::{verdict, AclTable};
pub use trie::{Reach, Verdict};
