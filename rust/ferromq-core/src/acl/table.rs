//! A compiled rule list: one [`RuleTrie`] for rules that apply to every client,
//! one for anonymous clients, and one per named user, client id and certificate
//! identity, so a check walks at most four tries whatever the number of users.
//! Every rule keeps its position in the list (`Entry::order`) and the lowest
//! position that applies wins across the tries (first match wins).

use hashbrown::HashMap;

use super::rule::{Action, Binding, Permission, Rule, Subject};
use super::trie::{Entry, RuleTrie, Verdict, Walk};

#[derive(Debug, Default)]
pub struct AclTable {
    all: RuleTrie,
    anonymous: RuleTrie,
    users: HashMap<Box<str>, RuleTrie>,
    clients: HashMap<Box<str>, RuleTrie>,
    certificates: HashMap<Box<str>, RuleTrie>,
    rules: usize,
}

impl AclTable {
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> AclTable {
        let mut table = AclTable::default();
        for (order, rule) in rules.into_iter().enumerate() {
            let entry = Entry {
                order: order as u32,
                actions: rule.actions,
                permission: rule.permission,
            };
            let trie = match rule.subject {
                Subject::All => &mut table.all,
                Subject::Anonymous => &mut table.anonymous,
                Subject::User(name) => table.users.entry(name).or_default(),
                Subject::Client(id) => table.clients.entry(id).or_default(),
                Subject::Certificate(id) => table.certificates.entry(id).or_default(),
            };
            trie.insert(&rule.levels, entry);
            table.rules += 1;
        }
        table
    }

    pub fn len(&self) -> usize {
        self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }

    /// The first rule's answer for `action` on `request` (a topic name, or for
    /// `Subscribe` a filter without its `$share/{group}/` prefix); None when no
    /// rule applies.
    pub fn decide(&self, binding: &Binding, action: Action, request: &str) -> Option<Permission> {
        verdict(&[self], binding, action, request).permission()
    }

    fn walk(&self, binding: &Binding, request: &str, walk: &mut Walk<'_>) {
        self.all.check(request, walk);
        match &binding.username {
            None => self.anonymous.check(request, walk),
            Some(user) => {
                if let Some(trie) = self.users.get(user) {
                    trie.check(request, walk);
                }
            }
        }
        if let Some(trie) = self.clients.get(&binding.client_id) {
            trie.check(request, walk);
        }
        if let Some(trie) = binding
            .certificate
            .as_ref()
            .and_then(|c| self.certificates.get(c))
        {
            trie.check(request, walk);
        }
    }
}

/// What `tables`, in order (the rules of an authentication answer before the
/// file's), answer for `action` on `request`: first match wins across them.
pub fn verdict(tables: &[&AclTable], binding: &Binding, action: Action, request: &str) -> Verdict {
    let mut walk = Walk::new(action.bit(), binding, request);
    for table in tables {
        table.walk(binding, request, &mut walk);
        walk.offset += table.rules as u32;
    }
    walk.verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::rule::Permission::{Allow, Deny};
    use crate::acl::trie::Reach;

    const PUB: u8 = 1;
    const SUB: u8 = 2;
    const READ: u8 = 4;

    fn rule(permission: Permission, actions: u8, subject: Subject, filter: &str) -> Rule {
        Rule::new(permission, actions, subject, filter).unwrap()
    }

    fn alice() -> Binding {
        Binding {
            username: Some("alice".into()),
            client_id: "dev-1".into(),
            certificate: Some("cn-1".into()),
            claims: vec![("tenant".into(), "t1".into())],
        }
    }

    #[test]
    fn first_match_wins_in_rule_order_across_subjects() {
        let table = AclTable::new([
            rule(Deny, PUB, Subject::User("alice".into()), "a/secret"),
            rule(Allow, PUB, Subject::All, "a/#"),
            rule(Deny, PUB, Subject::All, "a/b"),
        ]);
        let b = alice();
        assert_eq!(table.decide(&b, Action::Publish, "a/secret"), Some(Deny));
        assert_eq!(
            table.decide(&b, Action::Publish, "a/b"),
            Some(Allow),
            "allow a/# came first"
        );
        assert_eq!(
            table.decide(&b, Action::Publish, "a"),
            Some(Allow),
            "a/# matches a"
        );
        assert_eq!(table.decide(&b, Action::Publish, "b"), None);
        assert_eq!(
            table.decide(&b, Action::Subscribe, "a/b"),
            None,
            "publish rules only"
        );
        let bob = Binding {
            username: Some("bob".into()),
            ..alice()
        };
        assert_eq!(table.decide(&bob, Action::Publish, "a/secret"), Some(Allow));
    }

    #[test]
    fn placeholders_bind_per_connection() {
        let table = AclTable::new([
            rule(Allow, PUB | SUB, Subject::All, "users/%u/#"),
            rule(Allow, PUB, Subject::All, "dev/%c/out"),
            rule(Allow, SUB, Subject::All, "tenants/%{tenant}/+"),
            rule(Allow, READ, Subject::All, "certs/%C"),
        ]);
        let b = alice();
        assert_eq!(
            table.decide(&b, Action::Publish, "users/alice/x"),
            Some(Allow)
        );
        assert_eq!(table.decide(&b, Action::Publish, "users/bob/x"), None);
        assert_eq!(
            table.decide(&b, Action::Publish, "dev/dev-1/out"),
            Some(Allow)
        );
        assert_eq!(
            table.decide(&b, Action::Subscribe, "tenants/t1/+"),
            Some(Allow)
        );
        assert_eq!(table.decide(&b, Action::Subscribe, "tenants/t2/x"), None);
        assert_eq!(table.decide(&b, Action::Read, "certs/cn-1"), Some(Allow));
        let anonymous = Binding {
            username: None,
            ..alice()
        };
        assert_eq!(
            table.decide(&anonymous, Action::Publish, "users/alice/x"),
            None
        );
    }

    #[test]
    fn subscribe_allow_must_cover_and_deny_needs_only_overlap() {
        let table = AclTable::new([
            rule(Deny, SUB, Subject::All, "a/secret"),
            rule(Allow, SUB, Subject::All, "a/+"),
            rule(Allow, SUB, Subject::All, "b/#"),
        ]);
        let b = alice();
        assert_eq!(table.decide(&b, Action::Subscribe, "a/x"), Some(Allow));
        assert_eq!(
            table.decide(&b, Action::Subscribe, "a/+"),
            Some(Deny),
            "would receive a/secret"
        );
        assert_eq!(table.decide(&b, Action::Subscribe, "a/#"), Some(Deny));
        assert_eq!(table.decide(&b, Action::Subscribe, "#"), Some(Deny));
        assert_eq!(table.decide(&b, Action::Subscribe, "b/#"), Some(Allow));
        assert_eq!(table.decide(&b, Action::Subscribe, "b/+/c"), Some(Allow));
        assert_eq!(
            table.decide(&b, Action::Subscribe, "+/x"),
            None,
            "a/+ does not cover +/x"
        );
        assert_eq!(table.decide(&b, Action::Subscribe, "a/x/y"), None);
    }

    #[test]
    fn a_filter_reaches_every_some_or_no_topic() {
        let reach = |table: &AclTable, filter: &str, default_allow: bool| {
            verdict(&[table], &alice(), Action::Subscribe, filter).reach(default_allow)
        };
        let beside = AclTable::new([rule(Deny, SUB, Subject::All, "a/secret")]);
        assert_eq!(reach(&beside, "#", true), Reach::Some, "all but a/secret");
        assert_eq!(reach(&beside, "a/+", true), Reach::Some);
        assert_eq!(reach(&beside, "a/secret", true), Reach::None);
        assert_eq!(reach(&beside, "b/#", true), Reach::Every);
        assert_eq!(reach(&beside, "#", false), Reach::None, "nothing allows");
        let under = AclTable::new([
            rule(Allow, SUB, Subject::All, "a/x"),
            rule(Deny, SUB, Subject::All, "#"),
            rule(Allow, SUB, Subject::All, "b/#"),
        ]);
        assert_eq!(reach(&under, "a/+", true), Reach::Some, "a/x comes first");
        assert_eq!(reach(&under, "a/x", true), Reach::Every);
        assert_eq!(
            reach(&under, "b/+", true),
            Reach::None,
            "deny # covers it first"
        );
        let partial_allow = AclTable::new([rule(Allow, SUB, Subject::All, "a/x")]);
        assert_eq!(reach(&partial_allow, "+/+", false), Reach::Some);
        assert_eq!(reach(&partial_allow, "b/+", false), Reach::None);
        let read_only = AclTable::new([rule(Deny, READ, Subject::All, "a/secret")]);
        assert_eq!(
            reach(&read_only, "#", false),
            Reach::None,
            "read rules are not asked"
        );
        // The rules of an authentication answer come first, then the file's.
        let own = AclTable::new([rule(Allow, SUB, Subject::All, "a/secret")]);
        let both = verdict(&[&own, &beside], &alice(), Action::Subscribe, "a/+");
        assert_eq!(both.reach(true), Reach::Some);
        let exact = verdict(&[&own, &beside], &alice(), Action::Subscribe, "a/secret");
        assert_eq!(exact.reach(true), Reach::Every);
    }

    #[test]
    fn first_level_wildcards_never_reach_dollar_topics() {
        let table = AclTable::new([
            rule(Allow, PUB | SUB, Subject::All, "#"),
            rule(Deny, SUB, Subject::All, "$SYS/#"),
        ]);
        let b = alice();
        assert_eq!(table.decide(&b, Action::Publish, "$SYS/x"), None);
        assert_eq!(table.decide(&b, Action::Subscribe, "$SYS/#"), Some(Deny));
        assert_eq!(
            table.decide(&b, Action::Subscribe, "#"),
            Some(Allow),
            "# excludes $SYS"
        );
        let plus_hash = AclTable::new([rule(Allow, SUB, Subject::All, "+/#")]);
        assert_eq!(
            plus_hash.decide(&b, Action::Subscribe, "#"),
            Some(Allow),
            "the same topics"
        );
        let below = AclTable::new([rule(Allow, SUB, Subject::All, "a/+/#")]);
        assert_eq!(
            below.decide(&b, Action::Subscribe, "a/#"),
            None,
            "a/# also holds a"
        );
    }

    #[test]
    fn rules_are_indexed_by_subject() {
        let mut rules = Vec::new();
        for i in 0..1000 {
            rules.push(rule(
                Allow,
                PUB,
                Subject::User(format!("u{i}").into()),
                "t/%u",
            ));
        }
        rules.push(rule(Allow, PUB, Subject::Client("dev-1".into()), "c/x"));
        rules.push(rule(
            Allow,
            PUB,
            Subject::Certificate("cn-1".into()),
            "cert/x",
        ));
        rules.push(rule(Allow, PUB, Subject::Anonymous, "anon/x"));
        let table = AclTable::new(rules);
        assert_eq!(table.len(), 1003);
        let u7 = Binding {
            username: Some("u7".into()),
            ..alice()
        };
        assert_eq!(table.decide(&u7, Action::Publish, "t/u7"), Some(Allow));
        assert_eq!(table.decide(&u7, Action::Publish, "t/u8"), None);
        assert_eq!(table.decide(&u7, Action::Publish, "c/x"), Some(Allow));
        assert_eq!(table.decide(&u7, Action::Publish, "cert/x"), Some(Allow));
        assert_eq!(table.decide(&u7, Action::Publish, "anon/x"), None);
        let anonymous = Binding {
            username: None,
            ..alice()
        };
        assert_eq!(
            table.decide(&anonymous, Action::Publish, "anon/x"),
            Some(Allow)
        );
    }
}
