//! Topic-name and topic-filter validation, O(length) with no allocation.
//!
//! Names: no '+' or '#' anywhere [MQTT-3.3.2-2], non-empty [MQTT-4.7.3-1].
//! Filters: '#' only as the whole last level [MQTT-4.7.1-1], '+' only as a whole level
//! [MQTT-4.7.1-2]; `$share/{group}/{filter}` needs a non-empty group without '+', '#'
//! or '/' and a non-empty filter after it [MQTT-4.8.2-1, 4.8.2-2].

use std::fmt;

/// Why a topic name or filter was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicError {
    Empty,
    TooLong,
    WildcardInName,
    MisplacedMultiLevelWildcard,
    MisplacedSingleLevelWildcard,
    InvalidShareGroup,
    EmptySharedFilter,
}

impl TopicError {
    /// A short human description, static so errors never allocate.
    pub fn as_str(self) -> &'static str {
        match self {
            TopicError::Empty => "topic is empty",
            TopicError::TooLong => "topic is longer than 65535 bytes",
            TopicError::WildcardInName => "topic name contains a wildcard",
            TopicError::MisplacedMultiLevelWildcard => "'#' must be the whole last level",
            TopicError::MisplacedSingleLevelWildcard => "'+' must be a whole level",
            TopicError::InvalidShareGroup => {
                "$share group must be non-empty without '+', '#' or '/'"
            }
            TopicError::EmptySharedFilter => "$share/{group}/ needs a filter after it",
        }
    }
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for TopicError {}

const MAX_TOPIC_LEN: usize = 65_535;

fn check_length(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        Err(TopicError::Empty)
    } else if topic.len() > MAX_TOPIC_LEN {
        Err(TopicError::TooLong)
    } else {
        Ok(())
    }
}

/// Validate a topic name as carried by PUBLISH or a will.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    check_length(name)?;
    if name.bytes().any(|b| b == b'+' || b == b'#') {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Validate a topic filter, including the `$share/{group}/{filter}` form.
pub fn validate_topic_filter(filter: &str) -> Result<(), TopicError> {
    check_length(filter)?;
    let plain = match parse_shared_filter(filter)? {
        Some(shared) => shared.filter,
        None => filter,
    };
    validate_plain_filter(plain)
}

fn validate_plain_filter(filter: &str) -> Result<(), TopicError> {
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let is_last = levels.peek().is_none();
        if level.contains('#') && (level != "#" || !is_last) {
            return Err(TopicError::MisplacedMultiLevelWildcard);
        }
        if level.contains('+') && level != "+" {
            return Err(TopicError::MisplacedSingleLevelWildcard);
        }
    }
    Ok(())
}

/// A parsed `$share/{group}/{filter}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedFilter<'a> {
    pub group: &'a str,
    pub filter: &'a str,
}

/// Split a shared-subscription filter; `Ok(None)` for an ordinary filter.
pub fn parse_shared_filter(filter: &str) -> Result<Option<SharedFilter<'_>>, TopicError> {
    let Some(rest) = filter.strip_prefix("$share/") else {
        return Ok(None);
    };
    let Some((group, inner)) = rest.split_once('/') else {
        return Err(if rest.is_empty() || rest.contains(['+', '#']) {
            TopicError::InvalidShareGroup
        } else {
            TopicError::EmptySharedFilter
        });
    };
    if group.is_empty() || group.contains(['+', '#']) {
        return Err(TopicError::InvalidShareGroup);
    }
    if inner.is_empty() {
        return Err(TopicError::EmptySharedFilter);
    }
    Ok(Some(SharedFilter {
        group,
        filter: inner,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "a",
            "a/b",
            "/",
            "//",
            "a//b",
            "$SYS/x",
            "sport/tennis/player1",
        ] {
            assert_eq!(validate_topic_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_topic_name(""), Err(TopicError::Empty));
        assert_eq!(validate_topic_name("a/+"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic_name("#"), Err(TopicError::WildcardInName));
        assert_eq!(
            validate_topic_name(&"a".repeat(65_536)),
            Err(TopicError::TooLong)
        );
    }

    #[test]
    fn filters() {
        for ok in [
            "#",
            "+",
            "a/#",
            "+/+",
            "/+",
            "a//#",
            "+/tennis/#",
            "$share/g/a/#",
            "$share/g/#",
        ] {
            assert_eq!(validate_topic_filter(ok), Ok(()), "{ok}");
        }
        use TopicError::*;
        for (bad, err) in [
            ("a/#/b", MisplacedMultiLevelWildcard),
            ("a#", MisplacedMultiLevelWildcard),
            ("sport/tennis#", MisplacedMultiLevelWildcard),
            ("a+", MisplacedSingleLevelWildcard),
            ("sport+", MisplacedSingleLevelWildcard),
            ("$share//a", InvalidShareGroup),
            ("$share/g+/a", InvalidShareGroup),
            ("$share/g", EmptySharedFilter),
            ("$share/g/", EmptySharedFilter),
            ("$share/", InvalidShareGroup),
        ] {
            assert_eq!(validate_topic_filter(bad), Err(err), "{bad}");
        }
    }

    #[test]
    fn shared_parse() {
        let s = parse_shared_filter("$share/grp/a/+/c").unwrap().unwrap();
        assert_eq!((s.group, s.filter), ("grp", "a/+/c"));
        assert_eq!(parse_shared_filter("a/b"), Ok(None));
    }
}

/// Whether the plain `filter` matches the topic name `topic`, for the few places that
/// hold a filter or two outside an index (rewrite and validation rules): `+` one
/// level, `#` the rest (and the parent), and neither at the first level matches a
/// `$` topic [MQTT-4.7.1-2, 4.7.1-3, 4.7.2-1].
pub fn filter_matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut levels = topic.split('/');
    for wanted in filter.split('/') {
        match wanted {
            "#" => return true,
            "+" => {
                if levels.next().is_none() {
                    return false;
                }
            }
            exact => {
                if levels.next() != Some(exact) {
                    return false;
                }
            }
        }
    }
    levels.next().is_none()
}

#[cfg(test)]
mod filter_matches_tests {
    use super::filter_matches;

    #[test]
    fn levels_and_wildcards() {
        assert!(filter_matches("a/+/c", "a/b/c"));
        assert!(!filter_matches("a/+/c", "a/b/c/d"));
        assert!(filter_matches("a/#", "a"));
        assert!(filter_matches("a/#", "a/b/c"));
        assert!(!filter_matches("a/b", "a"));
        assert!(filter_matches("+/x", "/x"));
        assert!(!filter_matches("#", "$SYS/x"));
        assert!(filter_matches("$SYS/#", "$SYS/x"));
    }
}
