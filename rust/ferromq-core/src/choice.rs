//! Settings chosen by name (the config file's `share_strategy = "sticky"`, a user's
//! `client_type = "application"`): each enum keeps one table of its names, parsed with
//! `FromStr` and printed with `name()`, so the binding holds no name of its own.
//!
//! A name that is not in the table is an [`UnknownName`], which says what was being
//! named and lists the names that are.

use std::fmt;

/// A name that is not one of a setting's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What the name was for, e.g. "share strategy".
    pub what: &'static str,
    pub name: String,
    /// Every name that is accepted, in table order.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?}; expected one of: {}",
            self.what,
            self.name,
            self.expected.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

/// One enum's names: `NAMES[i]` spells `VALUES[i]`.
pub(crate) trait Named: Copy + PartialEq + 'static {
    const WHAT: &'static str;
    const NAMES: &'static [&'static str];
    const VALUES: &'static [Self];

    fn parse_name(name: &str) -> Result<Self, UnknownName> {
        Self::NAMES
            .iter()
            .position(|candidate| *candidate == name)
            .map(|i| Self::VALUES[i])
            .ok_or_else(|| UnknownName {
                what: Self::WHAT,
                name: name.to_owned(),
                expected: Self::NAMES,
            })
    }

    fn name_of(self) -> &'static str {
        let i = Self::VALUES.iter().position(|v| *v == self);
        // Every value is in its table (the tests below check each enum's tables).
        Self::NAMES[i.unwrap_or(0)]
    }
}

/// `FromStr` and `name()` for an enum from its [`Named`] table.
macro_rules! named {
    ($ty:ty, $what:literal, [$($name:literal => $value:expr),+ $(,)?]) => {
        impl $crate::choice::Named for $ty {
            const WHAT: &'static str = $what;
            const NAMES: &'static [&'static str] = &[$($name),+];
            const VALUES: &'static [Self] = &[$($value),+];
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::choice::UnknownName;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                <Self as $crate::choice::Named>::parse_name(name)
            }
        }

        impl $ty {
            /// The name the config file and the binding spell this value with.
            pub fn name(self) -> &'static str {
                <Self as $crate::choice::Named>::name_of(self)
            }
        }
    };
}
pub(crate) use named;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::ClientType;
    use crate::engine::{DropPolicy, Framing};
    use crate::topic::ShareStrategy;

    fn round_trips<T: Named + std::str::FromStr<Err = UnknownName> + fmt::Debug>() {
        assert_eq!(T::NAMES.len(), T::VALUES.len(), "{}", T::WHAT);
        for (name, value) in T::NAMES.iter().zip(T::VALUES) {
            assert_eq!(name.parse::<T>(), Ok(*value));
            assert_eq!(value.name_of(), *name);
        }
    }

    #[test]
    fn every_name_parses_to_its_value_and_back() {
        round_trips::<ShareStrategy>();
        round_trips::<DropPolicy>();
        round_trips::<ClientType>();
        round_trips::<Framing>();
    }

    #[test]
    fn an_unknown_name_is_one_line_naming_it_and_the_choices() {
        let err = "stiky".parse::<ShareStrategy>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown share strategy \"stiky\"; expected one of: \
             round_robin, random, hash_client, hash_topic, sticky"
        );
        assert_eq!(
            "devices".parse::<ClientType>().unwrap_err().to_string(),
            "unknown client type \"devices\"; expected one of: device, application"
        );
    }
}
