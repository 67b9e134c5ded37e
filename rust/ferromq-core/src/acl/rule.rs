//! One ACL rule as Python compiled it: allow or deny, the actions it governs, whom
//! it is for, and a topic filter whose levels may hold placeholders.
//!
//! Placeholders are bound per connection (`Binding`): `%u` the user name, `%c` the
//! client identifier, `%C` the client certificate's identity (CN or SAN), `%{name}`
//! the JWT claim `name` (strings only). A placeholder may sit anywhere inside a
//! level (`users/%u-in`), never make a level of its own into a wildcard: a value
//! that is missing, empty or holds `/`, `+` or `#` makes the level match nothing,
//! so a user named `+` gains nothing. `%%` is a literal `%`.

use std::fmt;

use crate::topic::{parse_shared_filter, validate_topic_filter};

/// What a rule decides when it is the first to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Allow,
    Deny,
}

/// The three things a client is checked for, each a bit of a rule's action mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// An inbound PUBLISH (and the will, when it is published).
    Publish = 1,
    /// A SUBSCRIBE filter (a `$share/{group}/` filter is checked without its prefix).
    Subscribe = 2,
    /// A retained message sent on subscribe.
    Read = 4,
}

impl Action {
    pub fn bit(self) -> u8 {
        self as u8
    }

    /// `publish`, `subscribe`, `read`, or `all` (every action), as a mask.
    pub fn mask_of(name: &str) -> Result<u8, RuleError> {
        Ok(match name {
            "publish" => Action::Publish.bit(),
            "subscribe" => Action::Subscribe.bit(),
            "read" => Action::Read.bit(),
            "all" => Action::Publish.bit() | Action::Subscribe.bit() | Action::Read.bit(),
            _ => return Err(RuleError::UnknownAction(name.into())),
        })
    }
}

/// Whom a rule is for. Rules for a user, a client id or a certificate identity are
/// indexed by that name, so a connection only ever walks its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    All,
    /// Clients without a user name.
    Anonymous,
    User(Box<str>),
    Client(Box<str>),
    Certificate(Box<str>),
}

/// A value bound at CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    User,
    Client,
    Certificate,
    Claim(Box<str>),
}

/// A piece of a level holding placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(Box<str>),
    Var(Var),
}

/// One level of a rule's filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Level {
    Exact(Box<str>),
    Plus,
    Hash,
    Template(Box<[Part]>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub permission: Permission,
    pub actions: u8,
    pub subject: Subject,
    pub levels: Box<[Level]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    UnknownAction(Box<str>),
    NoAction,
    Filter(&'static str),
    Shared,
    Placeholder(Box<str>),
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleError::UnknownAction(name) => write!(
                f,
                "unknown action {name:?} (publish, subscribe, read or all)"
            ),
            RuleError::NoAction => f.write_str("no action"),
            RuleError::Filter(why) => write!(f, "invalid topic filter: {why}"),
            RuleError::Shared => f.write_str(
                "a rule names the filter, not $share/{group}/: shared subscriptions are checked against their filter",
            ),
            RuleError::Placeholder(text) => write!(
                f,
                "unknown placeholder {text:?} (%u, %c, %C, %{{claim}} or %%)"
            ),
        }
    }
}

impl std::error::Error for RuleError {}

impl Rule {
    pub fn new(
        permission: Permission,
        actions: u8,
        subject: Subject,
        filter: &str,
    ) -> Result<Rule, RuleError> {
        if actions == 0 {
            return Err(RuleError::NoAction);
        }
        if matches!(parse_shared_filter(filter), Ok(Some(_))) {
            return Err(RuleError::Shared);
        }
        let levels = template(filter)?;
        Ok(Rule {
            permission,
            actions,
            subject,
            levels,
        })
    }
}

/// A topic filter whose levels may hold placeholders (an ACL rule's, an
/// auto-subscription's), validated as a filter and parsed level by level.
pub fn template(filter: &str) -> Result<Box<[Level]>, RuleError> {
    validate_topic_filter(filter).map_err(|e| RuleError::Filter(e.as_str()))?;
    filter.split('/').map(parse_level).collect()
}

fn parse_level(level: &str) -> Result<Level, RuleError> {
    match level {
        "+" => return Ok(Level::Plus),
        "#" => return Ok(Level::Hash),
        _ if !level.contains('%') => return Ok(Level::Exact(level.into())),
        _ => {}
    }
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = level;
    while let Some(at) = rest.find('%') {
        text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (var, used) = match after.as_bytes().first() {
            Some(b'%') => {
                text.push('%');
                rest = &after[1..];
                continue;
            }
            Some(b'u') => (Var::User, 1),
            Some(b'c') => (Var::Client, 1),
            Some(b'C') => (Var::Certificate, 1),
            Some(b'{') => match after.find('}') {
                Some(end) if end > 1 => (Var::Claim(after[1..end].into()), end + 1),
                _ => return Err(RuleError::Placeholder(rest[at..].into())),
            },
            _ => {
                let shown: String = rest[at..].chars().take(2).collect();
                return Err(RuleError::Placeholder(shown.into()));
            }
        };
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text).into()));
        }
        parts.push(Part::Var(var));
        rest = &after[used..];
    }
    text.push_str(rest);
    if parts.is_empty() {
        return Ok(Level::Exact(text.into())); // only `%%` escapes
    }
    if !text.is_empty() {
        parts.push(Part::Text(text.into()));
    }
    Ok(Level::Template(parts.into()))
}

/// The values a connection's placeholders take, fixed at CONNECT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    pub username: Option<Box<str>>,
    pub client_id: Box<str>,
    pub certificate: Option<Box<str>>,
    pub claims: Vec<(Box<str>, Box<str>)>,
}

impl Binding {
    /// The value of `var`, or None when it may not stand in a level (see the header).
    pub fn value(&self, var: &Var) -> Option<&str> {
        let value = match var {
            Var::User => self.username.as_deref(),
            Var::Client => Some(&*self.client_id),
            Var::Certificate => self.certificate.as_deref(),
            Var::Claim(name) => self
                .claims
                .iter()
                .find(|(claim, _)| claim == name)
                .map(|(_, value)| &**value),
        }?;
        (!value.is_empty() && !value.contains(['/', '+', '#'])).then_some(value)
    }

    /// Whether `level` is what `parts` become under this binding (no allocation).
    pub fn renders(&self, parts: &[Part], level: &str) -> bool {
        let mut rest = level;
        for part in parts {
            let piece = match part {
                Part::Text(text) => &**text,
                Part::Var(var) => match self.value(var) {
                    Some(value) => value,
                    None => return false,
                },
            };
            match rest.strip_prefix(piece) {
                Some(after) => rest = after,
                None => return false,
            }
        }
        rest.is_empty()
    }

    /// The filter `levels` become under this binding; None when a placeholder has
    /// no usable value.
    pub fn render(&self, levels: &[Level]) -> Option<String> {
        let mut filter = String::new();
        for (n, level) in levels.iter().enumerate() {
            if n > 0 {
                filter.push('/');
            }
            match level {
                Level::Exact(text) => filter.push_str(text),
                Level::Plus => filter.push('+'),
                Level::Hash => filter.push('#'),
                Level::Template(parts) => {
                    for part in parts.iter() {
                        match part {
                            Part::Text(text) => filter.push_str(text),
                            Part::Var(var) => filter.push_str(self.value(var)?),
                        }
                    }
                }
            }
        }
        Some(filter)
    }

    /// Whether every placeholder of `parts` has a usable value.
    pub fn binds(&self, parts: &[Part]) -> bool {
        parts.iter().all(|part| match part {
            Part::Text(_) => true,
            Part::Var(var) => self.value(var).is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(filter: &str) -> Vec<Level> {
        Rule::new(Permission::Allow, 1, Subject::All, filter)
            .unwrap()
            .levels
            .into_vec()
    }

    #[test]
    fn placeholders_parse_inside_levels() {
        assert_eq!(
            levels("a/%u-in/+/#"),
            vec![
                Level::Exact("a".into()),
                Level::Template(vec![Part::Var(Var::User), Part::Text("-in".into())].into()),
                Level::Plus,
                Level::Hash,
            ]
        );
        assert_eq!(
            levels("%{tenant}/%c/100%%"),
            vec![
                Level::Template(vec![Part::Var(Var::Claim("tenant".into()))].into()),
                Level::Template(vec![Part::Var(Var::Client)].into()),
                Level::Exact("100%".into()),
            ]
        );
    }

    #[test]
    fn bad_rules_name_their_problem() {
        let new = |filter| Rule::new(Permission::Allow, 1, Subject::All, filter);
        assert_eq!(
            new("a/%x").unwrap_err().to_string(),
            "unknown placeholder \"%x\" (%u, %c, %C, %{claim} or %%)"
        );
        assert!(matches!(new("a/%{}"), Err(RuleError::Placeholder(_))));
        assert!(matches!(new("a/#/b"), Err(RuleError::Filter(_))));
        assert_eq!(new("$share/g/a"), Err(RuleError::Shared));
        assert_eq!(
            Rule::new(Permission::Allow, 0, Subject::All, "a"),
            Err(RuleError::NoAction)
        );
        assert!(matches!(
            Action::mask_of("write"),
            Err(RuleError::UnknownAction(_))
        ));
    }

    #[test]
    fn a_template_renders_under_a_binding_or_not_at_all() {
        let binding = Binding {
            username: Some("alice".into()),
            client_id: "dev-1".into(),
            ..Binding::default()
        };
        let filter = template("devices/%c/cmd-%u/+/#").unwrap();
        assert_eq!(
            binding.render(&filter).as_deref(),
            Some("devices/dev-1/cmd-alice/+/#")
        );
        assert_eq!(
            binding.render(&template("a/%C").unwrap()),
            None,
            "no certificate"
        );
        assert_eq!(
            binding.render(&template("100%%").unwrap()).as_deref(),
            Some("100%")
        );
    }

    #[test]
    fn values_that_would_widen_a_level_bind_nothing() {
        let binding = Binding {
            username: Some("a/b".into()),
            client_id: "+".into(),
            certificate: Some(String::new().into()),
            claims: vec![("tenant".into(), "t1".into())],
        };
        assert_eq!(binding.value(&Var::User), None);
        assert_eq!(binding.value(&Var::Client), None);
        assert_eq!(binding.value(&Var::Certificate), None);
        assert_eq!(binding.value(&Var::Claim("tenant".into())), Some("t1"));
        let parts = [
            Part::Text("x-".into()),
            Part::Var(Var::Claim("tenant".into())),
        ];
        assert!(binding.renders(&parts, "x-t1"));
        assert!(!binding.renders(&parts, "x-t10"));
        assert!(!binding.renders(&parts, "t1"));
    }
}
