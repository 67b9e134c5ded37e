//! Property test: the ACL rule trie (`acl::AclTable::decide`) against a brute-force
//! oracle over a finite universe of topics.
//!
//! The oracle renders each rule's placeholders with a fixed binding (`%u` = a,
//! `%c` = b, `%C` unbound: such a rule matches nothing) and takes the first rule, in
//! order, whose action is asked and that applies: for a topic name, its filter
//! matches the topic; for a SUBSCRIBE filter, an allow applies when every topic of
//! the universe the filter matches the rule matches too (cover), a deny when one
//! topic matches both (overlap). A filter's reach (`Verdict::reach`) is checked
//! against each topic it matches, asked alone: `Every` only when each is allowed,
//! `None` only when none is. The universe holds every topic of up to four levels
//! over the rules' literals, a level no rule names (`z`) and a `$` level, which is
//! enough to tell any two filters of up to three levels apart.

use ferromq_core::acl::{verdict, AclTable, Action, Binding, Permission, Reach, Rule, Subject};
use proptest::prelude::*;

const UNIVERSE_LEVELS: [&str; 4] = ["a", "b", "z", "$s"];

fn matches(filter: &str, topic: &str) -> bool {
    let filter: Vec<&str> = filter.split('/').collect();
    let levels: Vec<&str> = topic.split('/').collect();
    if topic.starts_with('$') && (filter[0] == "+" || filter[0] == "#") {
        return false; // [MQTT-4.7.2-1]
    }
    for (i, level) in filter.iter().enumerate() {
        if *level == "#" {
            return true;
        }
        match levels.get(i) {
            Some(t) if *level == "+" || level == t => {}
            _ => return false,
        }
    }
    filter.len() == levels.len()
}

fn universe() -> Vec<String> {
    let mut topics: Vec<String> = UNIVERSE_LEVELS.iter().map(|l| l.to_string()).collect();
    let mut last = topics.clone();
    for _ in 1..4 {
        last = last
            .iter()
            .flat_map(|t| UNIVERSE_LEVELS.iter().map(move |l| format!("{t}/{l}")))
            .collect();
        topics.extend(last.iter().cloned());
    }
    topics
}

/// The rule's filter with the binding's values, or None when a placeholder is unbound.
fn rendered(filter: &str) -> Option<String> {
    if filter.contains("%C") {
        return None;
    }
    Some(filter.replace("%u", "a").replace("%c", "b"))
}

#[derive(Debug, Clone)]
struct TestRule {
    permission: Permission,
    actions: u8,
    filter: String,
}

fn oracle(
    rules: &[TestRule],
    action: Action,
    request: &str,
    universe: &[String],
) -> Option<Permission> {
    if action != Action::Subscribe {
        return first_match(rules, action, request);
    }
    rules.iter().find_map(|rule| {
        if rule.actions & action.bit() == 0 {
            return None;
        }
        let filter = rendered(&rule.filter)?;
        let mut asked = universe.iter().filter(|t| matches(request, t));
        let applies = match rule.permission {
            Permission::Allow => asked.all(|t| matches(&filter, t)),
            Permission::Deny => asked.any(|t| matches(&filter, t)),
        };
        applies.then_some(rule.permission)
    })
}

/// The first rule for `action` whose filter matches the topic name `topic` (what a
/// subscription to `topic` alone is answered, too: it covers and overlaps only it).
fn first_match(rules: &[TestRule], action: Action, topic: &str) -> Option<Permission> {
    rules.iter().find_map(|rule| {
        let filter = rendered(&rule.filter).filter(|_| rule.actions & action.bit() != 0)?;
        matches(&filter, topic).then_some(rule.permission)
    })
}

fn filter_strategy(levels: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(levels), 1..4),
        any::<bool>(),
    )
        .prop_map(|(levels, hash)| {
            let mut filter = levels.join("/");
            if hash {
                filter.push_str("/#");
            }
            filter
        })
}

fn rule_strategy() -> impl Strategy<Value = TestRule> {
    const RULE_LEVELS: &[&str] = &["a", "b", "+", "%u", "%c", "%C", "$s"];
    (
        any::<bool>(),
        1u8..8,
        prop_oneof![Just("#".to_string()), filter_strategy(RULE_LEVELS)],
    )
        .prop_map(|(allow, actions, filter)| TestRule {
            permission: if allow {
                Permission::Allow
            } else {
                Permission::Deny
            },
            actions,
            filter,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("ACL_ORACLE_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000)
    ))]

    #[test]
    fn decisions_match_the_brute_force_oracle(
        rules in prop::collection::vec(rule_strategy(), 0..7),
        names in prop::collection::vec(filter_strategy(&["a", "b", "z", "$s"]), 1..6),
        filters in prop::collection::vec(
            prop_oneof![Just("#".to_string()), filter_strategy(&["a", "b", "z", "+", "$s"])],
            1..6,
        ),
    ) {
        let table = AclTable::new(rules.iter().map(|r| {
            Rule::new(r.permission, r.actions, Subject::All, &r.filter).expect("valid rule")
        }));
        let binding = Binding {
            username: Some("a".into()),
            client_id: "b".into(),
            certificate: None,
            claims: Vec::new(),
        };
        let universe = universe();
        for name in names.iter().filter(|n| !n.ends_with('#')) {
            for action in [Action::Publish, Action::Read] {
                prop_assert_eq!(
                    table.decide(&binding, action, name),
                    oracle(&rules, action, name, &universe),
                    "{:?} on {}", action, name
                );
            }
        }
        for filter in &filters {
            prop_assert_eq!(
                table.decide(&binding, Action::Subscribe, filter),
                oracle(&rules, Action::Subscribe, filter, &universe),
                "subscribe {}", filter
            );
            // What a subscription reaches, against each topic it matches taken alone
            // (how a withheld message is checked): `Every` only when every one is
            // allowed, `None` only when none is.
            for default_allow in [true, false] {
                let reach = verdict(&[&table], &binding, Action::Subscribe, filter)
                    .reach(default_allow);
                let allowed: Vec<bool> = universe
                    .iter()
                    .filter(|t| matches(filter, t))
                    .map(|t| {
                        first_match(&rules, Action::Subscribe, t)
                            .map_or(default_allow, |p| p == Permission::Allow)
                    })
                    .collect();
                match reach {
                    Reach::Every => prop_assert!(allowed.iter().all(|a| *a), "{} {:?}", filter, reach),
                    Reach::None => prop_assert!(!allowed.iter().any(|a| *a), "{} {:?}", filter, reach),
                    Reach::Some => {}
                }
            }
        }
    }
}
