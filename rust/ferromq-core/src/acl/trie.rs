//! Rules indexed by level, so a check walks the levels of one topic or filter
//! instead of scanning every rule (the linear filter scan of amqtt and rumqttd).
//!
//! Each node has its literal children in a hash map, a `+` child, and children
//! whose level holds placeholders (few; compared against the connection's
//! binding without allocating). A rule is an `Entry` (its position in the rule
//! list, its action mask, allow or deny) at the node of its last level, or in the
//! node's `multi` list when the filter ends in `#` (`a/#` also matches `a`). Entry
//! lists are in rule order, so the first entry that applies is the list's winner.
//!
//! A check walks what it asks about — a topic name (PUBLISH, retained read) or a
//! SUBSCRIBE filter — into a [`Verdict`]: the lowest-ordered entry that decides
//! (**first match wins** across every list it meets), the first allow it meets and
//! the first deny covering the whole request. For a filter, an entry applies in
//! one of two ways, tracked as the walk's `Mode`:
//!
//! - `Cover`: the rule's filter matches every topic the requested filter can match
//!   (Mosquitto's `sub_matches_acl`): an allow or a deny decides;
//! - `Overlap`: the two filters share some topics without the rule covering the
//!   request: only a deny decides, so `deny a/secret` before `allow #` keeps a
//!   subscription to `a/+` or `#` from being allowed in full; an allow still counts
//!   as one that lets some of its topics through ([`Reach`]).
//!
//! A requested `+` level follows the rule's `+` child in the current mode and its
//! literal and placeholder children in `Overlap`; a requested `#` takes the deny
//! entries of the whole subtree. For a topic name the walk is the ordinary match.
//! Wildcards at the first level neither match nor overlap `$` topics
//! [MQTT-4.7.2-1].
//!
//! Cost: O(levels) hash probes on the path of the request plus the nodes of rules
//! that match a prefix of it (each `+`/placeholder branch) — independent of the
//! number of rules on other topics. A requested `#` visits the subtree under it,
//! which only SUBSCRIBE asks, once per filter.

use hashbrown::HashMap;

use super::rule::{Binding, Level, Part, Permission};

/// One rule at a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub order: u32,
    pub actions: u8,
    pub permission: Permission,
}

#[derive(Debug, Default)]
struct Node {
    exact: HashMap<Box<str>, u32>,
    plus: Option<u32>,
    templates: Vec<(Box<[Part]>, u32)>,
    end: Vec<Entry>,
    multi: Vec<Entry>,
}

#[derive(Debug)]
pub struct RuleTrie {
    nodes: Vec<Node>,
}

impl Default for RuleTrie {
    fn default() -> Self {
        RuleTrie {
            nodes: vec![Node::default()],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cover,
    Overlap,
}

/// One check in progress: what is asked and what the rules it met answer.
pub struct Walk<'a> {
    action: u8,
    binding: &'a Binding,
    /// The request starts with `$`: first-level wildcards do not reach it.
    dollar: bool,
    /// Added to every entry's order: the rules of an authentication answer come
    /// before the table's, so the table's are walked with an offset.
    pub offset: u32,
    pub verdict: Verdict,
}

/// What the entries that apply to one request answer, each as the lowest rule
/// order found (first match wins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The first entry that decides: an allow that covers the request, or a deny
    /// that covers or overlaps it.
    pub first: Option<(u32, Permission)>,
    /// The first allow that covers or overlaps the request: some of its topics
    /// may be allowed from there on.
    pub first_allow: Option<u32>,
    /// The first deny that covers the whole request.
    pub first_covering_deny: Option<u32>,
}

impl Verdict {
    /// The first rule's answer; None when no rule applies.
    pub fn permission(&self) -> Option<Permission> {
        self.first.map(|(_, permission)| permission)
    }

    /// What a subscription to the requested filter may receive.
    pub fn reach(&self, default_allow: bool) -> Reach {
        if self
            .permission()
            .map_or(default_allow, |p| p == Permission::Allow)
        {
            return Reach::Every;
        }
        let allowed_before_denied = match (self.first_allow, self.first_covering_deny) {
            (Some(allow), Some(deny)) => allow < deny,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if allowed_before_denied || (self.first_covering_deny.is_none() && default_allow) {
            Reach::Some
        } else {
            Reach::None
        }
    }
}

/// What a subscription filter may receive under the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Every topic it matches.
    Every,
    /// Some of its topics may be allowed and some are denied: each message is
    /// checked as it is delivered (an over-estimate: a filter whose every topic is
    /// denied by several rules together may land here and receive nothing).
    Some,
    /// No topic it matches.
    None,
}

impl<'a> Walk<'a> {
    pub fn new(action: u8, binding: &'a Binding, request: &str) -> Walk<'a> {
        Walk {
            action,
            binding,
            dollar: request.starts_with('$'),
            offset: 0,
            verdict: Verdict::default(),
        }
    }

    fn consider(&mut self, entries: &[Entry], mode: Mode) {
        let verdict = &mut self.verdict;
        for entry in entries.iter().filter(|e| e.actions & self.action != 0) {
            let order = entry.order + self.offset;
            let allow = entry.permission == Permission::Allow;
            if (mode == Mode::Cover || !allow) && verdict.first.is_none_or(|(o, _)| order < o) {
                verdict.first = Some((order, entry.permission));
            }
            let lowest = match (allow, mode) {
                (true, _) => &mut verdict.first_allow,
                (false, Mode::Cover) => &mut verdict.first_covering_deny,
                (false, Mode::Overlap) => continue,
            };
            if lowest.is_none_or(|o| order < o) {
                *lowest = Some(order);
            }
        }
    }
}

fn split(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once('/') {
        Some((level, next)) => (level, Some(next)),
        None => (rest, None),
    }
}

impl RuleTrie {
    pub fn insert(&mut self, levels: &[Level], entry: Entry) {
        let mut node = 0;
        for level in levels {
            node = match level {
                Level::Hash => {
                    self.nodes[node as usize].multi.push(entry);
                    return;
                }
                Level::Exact(text) => match self.nodes[node as usize].exact.get(text) {
                    Some(&child) => child,
                    None => {
                        let child = self.new_node();
                        self.nodes[node as usize].exact.insert(text.clone(), child);
                        child
                    }
                },
                Level::Plus => match self.nodes[node as usize].plus {
                    Some(child) => child,
                    None => {
                        let child = self.new_node();
                        self.nodes[node as usize].plus = Some(child);
                        child
                    }
                },
                Level::Template(parts) => {
                    let found = self.nodes[node as usize]
                        .templates
                        .iter()
                        .find(|(p, _)| p == parts)
                        .map(|&(_, child)| child);
                    match found {
                        Some(child) => child,
                        None => {
                            let child = self.new_node();
                            self.nodes[node as usize]
                                .templates
                                .push((parts.clone(), child));
                            child
                        }
                    }
                }
            };
        }
        self.nodes[node as usize].end.push(entry);
    }

    fn new_node(&mut self) -> u32 {
        self.nodes.push(Node::default());
        (self.nodes.len() - 1) as u32
    }

    /// Walk `request` (a topic name or filter) from the root into `walk.verdict`.
    pub fn check(&self, request: &str, walk: &mut Walk<'_>) {
        if self.nodes.len() > 1 || !self.nodes[0].multi.is_empty() {
            self.walk(0, Some(request), Mode::Cover, true, walk);
        }
    }

    fn walk(&self, node: u32, rest: Option<&str>, mode: Mode, first: bool, walk: &mut Walk<'_>) {
        let n = &self.nodes[node as usize];
        let wildcards = !(first && walk.dollar);
        if wildcards {
            walk.consider(&n.multi, mode);
        }
        let Some(rest) = rest else {
            walk.consider(&n.end, mode);
            return;
        };
        let (level, next) = split(rest);
        match level {
            "#" => {
                if let (true, Some(plus)) = (first, n.plus) {
                    // `+/#` covers `#`: both are every topic not starting with `$`
                    // (below the root `a/#` also holds `a`, which `a/+/#` lacks).
                    walk.consider(&self.nodes[plus as usize].multi, mode);
                }
                walk.consider(&n.end, Mode::Overlap);
                let binding = walk.binding;
                self.each_child(n, first, binding, |child| self.subtree(child, walk));
            }
            "+" => {
                if let Some(child) = n.plus {
                    self.walk(child, next, mode, false, walk);
                }
                for (key, &child) in &n.exact {
                    if !(first && key.starts_with('$')) {
                        self.walk(child, next, Mode::Overlap, false, walk);
                    }
                }
                for (parts, child) in &n.templates {
                    if walk.binding.binds(parts) {
                        self.walk(*child, next, Mode::Overlap, false, walk);
                    }
                }
            }
            literal => {
                if let Some(&child) = n.exact.get(literal) {
                    self.walk(child, next, mode, false, walk);
                }
                if let (true, Some(child)) = (wildcards, n.plus) {
                    self.walk(child, next, mode, false, walk);
                }
                for (parts, child) in &n.templates {
                    if walk.binding.renders(parts, literal) {
                        self.walk(*child, next, mode, false, walk);
                    }
                }
            }
        }
    }

    /// Every child a requested wildcard level can reach.
    fn each_child(&self, n: &Node, first: bool, binding: &Binding, mut visit: impl FnMut(u32)) {
        n.plus.into_iter().for_each(&mut visit);
        for (key, &child) in &n.exact {
            if !(first && key.starts_with('$')) {
                visit(child);
            }
        }
        for (parts, child) in &n.templates {
            if binding.binds(parts) {
                visit(*child);
            }
        }
    }

    /// The deny entries of a whole subtree (under a requested `#`).
    fn subtree(&self, node: u32, walk: &mut Walk<'_>) {
        let n = &self.nodes[node as usize];
        walk.consider(&n.multi, Mode::Overlap);
        walk.consider(&n.end, Mode::Overlap);
        let binding = walk.binding;
        self.each_child(n, false, binding, |child| self.subtree(child, walk));
    }
}
