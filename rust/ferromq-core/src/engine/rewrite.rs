//! Topic rewrite (`[[rewrite.rules]]`, as EMQX and RMQTT ship it): rules that turn
//! the topic of a client's PUBLISH (and will), or the filter of its SUBSCRIBE and
//! UNSUBSCRIBE, into another, for devices whose topics cannot be changed.
//!
//! A rule has a topic filter (`source`), a regular expression over the whole topic
//! (`re`) and a target (`to`) with `$N` for the expression's groups (`$$` for a
//! `$`) and the ACL's placeholders (`%c` client id, `%u` user name, `%C` certificate
//! identity, `%{claim}`; `acl::template`). As in EMQX, the first rule (in order) whose
//! `source` matches decides: if its expression matches, the topic becomes its
//! target; if not, the topic stays. A target that is not a valid topic name (a
//! publish) or filter (a subscription), or whose placeholder has no value for this
//! client, leaves the topic as it was.
//!
//! Rewriting happens as the packet arrives, before anything else looks at the topic:
//! the ACL judges the rewritten topic (unlike EMQX, which judges the one the client
//! sent: rights here are about what is actually written and read), retained
//! messages, the stream, other shards and nodes see only the rewritten one. A
//! shared subscription's filter is rewritten without its `$share/{group}/`. No rule:
//! one branch per packet. The rules are replaced on reload (`set_rewrite`).

use regex::Regex;

use crate::acl::{template, Binding, Level, Part};
use crate::codec::Utf8Bytes;
use crate::topic::{
    filter_matches, parse_shared_filter, validate_topic_filter, validate_topic_name,
};

use super::Engine;

/// What a rule rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteAction {
    /// The topic of a PUBLISH or a will.
    Publish,
    /// The filter of a SUBSCRIBE or UNSUBSCRIBE.
    Subscribe,
    All,
}

impl RewriteAction {
    fn covers(self, publish: bool) -> bool {
        match self {
            RewriteAction::All => true,
            RewriteAction::Publish => publish,
            RewriteAction::Subscribe => !publish,
        }
    }
}

/// A piece of a target level: text, an expression's group or a placeholder.
#[derive(Debug, Clone)]
enum Piece {
    Text(Box<str>),
    Group(usize),
    Var(crate::acl::Var),
}

/// One rewrite rule, compiled.
#[derive(Debug, Clone)]
pub struct RewriteRule {
    action: RewriteAction,
    source: Box<str>,
    expression: Regex,
    target: Box<[Box<[Piece]>]>,
}

impl RewriteRule {
    /// Compile a rule; the error names the part that is wrong.
    pub fn new(action: RewriteAction, source: &str, re: &str, to: &str) -> Result<Self, String> {
        validate_topic_filter(source).map_err(|e| format!("source: {}", e.as_str()))?;
        if matches!(parse_shared_filter(source), Ok(Some(_))) {
            return Err("source: a shared filter; name the filter without $share/".into());
        }
        let expression = Regex::new(re).map_err(|e| {
            // The crate's syntax error spans lines (the pattern, a caret, the problem).
            let text = e.to_string();
            let problem = text
                .lines()
                .last()
                .unwrap_or("")
                .trim_start_matches("error: ");
            format!("re: {re:?}: {problem}")
        })?;
        let groups = expression.captures_len() - 1;
        let levels = template(to).map_err(|e| format!("to: {e}"))?;
        let target = levels
            .iter()
            .map(|level| target_level(level, groups))
            .collect::<Result<_, _>>()?;
        Ok(RewriteRule {
            action,
            source: source.into(),
            expression,
            target,
        })
    }

    /// The rewritten `topic`, or None when this rule leaves it as it is.
    fn apply(&self, topic: &str, binding: &Binding) -> Option<String> {
        let groups = self.expression.captures(topic)?;
        let mut out = String::with_capacity(topic.len());
        for (n, level) in self.target.iter().enumerate() {
            if n > 0 {
                out.push('/');
            }
            for piece in level.iter() {
                match piece {
                    Piece::Text(text) => out.push_str(text),
                    Piece::Group(g) => out.push_str(groups.get(*g).map_or("", |m| m.as_str())),
                    Piece::Var(var) => out.push_str(binding.value(var)?),
                }
            }
        }
        Some(out)
    }
}

/// A target level as pieces: `$N` (N at most the expression's groups) in its text.
fn target_level(level: &Level, groups: usize) -> Result<Box<[Piece]>, String> {
    let parts: &[Part] = match level {
        Level::Exact(text) => &[Part::Text(text.clone())],
        Level::Plus => return Ok(Box::new([Piece::Text("+".into())])),
        Level::Hash => return Ok(Box::new([Piece::Text("#".into())])),
        Level::Template(parts) => parts,
    };
    let mut pieces = Vec::new();
    for part in parts {
        let text = match part {
            Part::Var(var) => {
                pieces.push(Piece::Var(var.clone()));
                continue;
            }
            Part::Text(text) => text,
        };
        let mut rest = &**text;
        while let Some(at) = rest.find('$') {
            if rest[at + 1..].starts_with('$') {
                pieces.push(Piece::Text(rest[..=at].into())); // `$$`: one `$`
                rest = &rest[at + 2..];
                continue;
            }
            let digits = rest[at + 1..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            if digits == 0 {
                return Err(format!(
                    "to: \"$\" must be followed by a group number, in {text:?}"
                ));
            }
            let group: usize = rest[at + 1..at + 1 + digits].parse().unwrap_or(usize::MAX);
            if group == 0 || group > groups {
                return Err(format!(
                    "to: ${group}: the expression has {groups} group(s)"
                ));
            }
            if at > 0 {
                pieces.push(Piece::Text(rest[..at].into()));
            }
            pieces.push(Piece::Group(group));
            rest = &rest[at + 1 + digits..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.into()));
        }
    }
    Ok(pieces.into())
}

/// `topic` rewritten by the first of `rules` whose source matches it, or None.
pub(super) fn rewrite(
    rules: &[RewriteRule],
    publish: bool,
    topic: &str,
    binding: &Binding,
) -> Option<String> {
    let rule = rules
        .iter()
        .find(|rule| rule.action.covers(publish) && filter_matches(&rule.source, topic))?;
    let rewritten = rule.apply(topic, binding)?;
    let valid = if publish {
        validate_topic_name(&rewritten).is_ok()
    } else {
        validate_topic_filter(&rewritten).is_ok()
    };
    (valid && rewritten != topic).then_some(rewritten)
}

impl Engine {
    /// Rewrite every later PUBLISH, will, SUBSCRIBE and UNSUBSCRIBE by these rules.
    pub fn set_rewrite(&mut self, rules: Vec<RewriteRule>) {
        self.rewrite_rules = rules;
    }

    /// `topic` of `session`'s PUBLISH or will rewritten (counted), or None. With no
    /// rule, one test inlined into the PUBLISH path; the rest is kept out of it.
    #[inline]
    pub(super) fn rewritten_topic(&mut self, session: u32, topic: &str) -> Option<Utf8Bytes> {
        if self.rewrite_rules.is_empty() {
            return None;
        }
        self.rewrite_topic(session, topic)
    }

    #[cold]
    #[inline(never)]
    fn rewrite_topic(&mut self, session: u32, topic: &str) -> Option<Utf8Bytes> {
        let state = self.sessions.get(session as usize)?.as_ref()?;
        let rewritten = rewrite(&self.rewrite_rules, true, topic, &state.acl.binding)?;
        let rewritten = Utf8Bytes::try_from(rewritten).ok()?;
        self.stats.topics_rewritten += 1;
        Some(rewritten)
    }

    /// `filter` of `session`'s SUBSCRIBE or UNSUBSCRIBE rewritten (counted), or None;
    /// a shared filter keeps its `$share/{group}/`.
    pub(super) fn rewritten_filter(&mut self, session: u32, filter: &str) -> Option<Utf8Bytes> {
        if self.rewrite_rules.is_empty() {
            return None;
        }
        let state = self.sessions.get(session as usize)?.as_ref()?;
        let binding = &state.acl.binding;
        let rewritten = match parse_shared_filter(filter) {
            Ok(Some(shared)) => {
                let inner = rewrite(&self.rewrite_rules, false, shared.filter, binding)?;
                format!("{}{inner}", &filter[..filter.len() - shared.filter.len()])
            }
            Ok(None) => rewrite(&self.rewrite_rules, false, filter, binding)?,
            Err(_) => return None, // refused as it is, further on
        };
        let rewritten = Utf8Bytes::try_from(rewritten).ok()?;
        self.stats.topics_rewritten += 1;
        Some(rewritten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: RewriteAction, source: &str, re: &str, to: &str) -> RewriteRule {
        RewriteRule::new(action, source, re, to).unwrap()
    }

    fn binding() -> Binding {
        Binding {
            username: Some("ann".into()),
            client_id: "dev-7".into(),
            ..Binding::default()
        }
    }

    #[test]
    fn the_first_rule_whose_source_matches_decides() {
        let rules = [
            rule(RewriteAction::All, "x/y/+", r"^x/y/(\d+)$", "z/y/$1"),
            rule(RewriteAction::All, "x/#", r"^x/y/(.+)$", "z/y/x/$1"),
        ];
        let b = binding();
        assert_eq!(rewrite(&rules, true, "x/y/2", &b).as_deref(), Some("z/y/2"));
        // The first rule's source matches, its expression does not: no rewrite.
        assert_eq!(rewrite(&rules, true, "x/y/z", &b), None);
        assert_eq!(
            rewrite(&rules, true, "x/y/z/w", &b).as_deref(),
            Some("z/y/x/z/w")
        );
        assert_eq!(rewrite(&rules, true, "q/1", &b), None);
    }

    #[test]
    fn placeholders_and_actions() {
        let rules = [
            rule(
                RewriteAction::Publish,
                "up/#",
                "^up/(.*)$",
                "tenants/%u/%c/$1",
            ),
            rule(RewriteAction::Subscribe, "cmd/#", "^cmd/(.*)$", "cmd/%c/$1"),
        ];
        let b = binding();
        assert_eq!(
            rewrite(&rules, true, "up/t", &b).as_deref(),
            Some("tenants/ann/dev-7/t")
        );
        assert_eq!(rewrite(&rules, false, "up/t", &b), None);
        assert_eq!(
            rewrite(&rules, false, "cmd/#", &b).as_deref(),
            Some("cmd/dev-7/#")
        );
        let anonymous = Binding {
            client_id: "c".into(),
            ..Binding::default()
        };
        assert_eq!(rewrite(&rules, true, "up/t", &anonymous), None);
    }

    #[test]
    fn a_target_that_is_no_topic_name_leaves_the_topic() {
        let rules = [rule(RewriteAction::All, "a/#", "^a/(.*)$", "b/$1")];
        assert_eq!(rewrite(&rules, true, "a/+", &binding()), None); // not a name
        assert_eq!(
            rewrite(&rules, false, "a/+", &binding()).as_deref(),
            Some("b/+")
        );
    }

    #[test]
    fn wildcards_at_the_first_level_do_not_match_dollar_topics() {
        let rules = [rule(RewriteAction::All, "#", "^(.*)$", "all/$1")];
        assert_eq!(rewrite(&rules, true, "$SYS/x", &binding()), None);
        assert_eq!(
            rewrite(&rules, true, "a", &binding()).as_deref(),
            Some("all/a")
        );
    }

    #[test]
    fn bad_rules_name_their_part() {
        let bad =
            |source, re, to| RewriteRule::new(RewriteAction::All, source, re, to).unwrap_err();
        assert!(bad("a/#/b", "x", "y").starts_with("source:"));
        assert!(bad("a/#", "(", "y").starts_with("re:"));
        assert!(bad("a/#", "^a/(.*)$", "b/$2").contains("1 group(s)"));
        assert!(bad("a/#", "^a/(.*)$", "b/$x").starts_with("to:"));
        assert!(bad("a/#", "a", "%q").starts_with("to:"));
    }
}
