//! The subscription index: which clients receive a PUBLISH on a topic.
//!
//! Design (EMQX and the seed-001 study: exact filters in a table, wildcards in a trie):
//!
//! - Filters without wildcards live in a string table keyed by the whole filter, so
//!   the exact part of a match is one hash of the topic.
//! - Filters with '+' or '#' live in a level [`Trie`]. A '+' level is an ordinary edge
//!   labelled "+"; a trailing '#' is no node at all: `a/#` is stored at the node of
//!   `a` with the [`MULTI`] bit, `#` at the root.
//! - Each filter holds one sorted [`SubList`] (12 bytes per entry, inline when it
//!   has one). A shared subscription `$share/g/f` stores one group entry at `f`; the
//!   group holds the members (see [`shared`](super::shared)).
//! - Each client keeps the list of its entries as packed 4-byte refs (2-bit tag +
//!   30-bit id), so `unsubscribe` and `remove_client` never search the index.
//!
//! Matching a topic of T levels: one exact probe, then a depth-first walk from the
//! root with an explicit stack. At a node of depth d < T it collects the node's MULTI
//! entries and steps to the literal child `topic[d]` and to the '+' child; at depth T
//! it collects every entry (`a/#` matches `a` too). Wildcards at the first level are
//! not followed for topics starting with '$' [MQTT-4.7.2-1]. Cost: O(T + visited
//! nodes + matching entries); the walk visits at most 2^T nodes in theory, only the
//! nodes of filters that match a prefix in practice. No allocation once the scratch
//! buffers and the caller's [`MatchResult`] have grown.
//!
//! Merging: hits are sorted by client only when they are not already in order; each
//! client then gets one delivery with the highest QoS [MQTT-3.3.4-2], every distinct
//! subscription identifier [MQTT-3.3.4-3], and Retain As Published if any matching
//! subscription set it. No Local subscriptions skip their own client's publications
//! [MQTT-3.8.3-3]. Shared groups add one delivery each, flagged [`DELIVERY_SHARED`].
//!
//! Worked example: subscriptions A: `abc/+/123` QoS 0, A: `abc/#` QoS 0, B: `abc/#`
//! QoS 1, C: `abc/def/123` QoS 1 (exact).
//!
//! ```text
//!   exact: "abc/def/123" → [C q1]
//!   trie:  root ─abc─▶ n1 [A q0 #, B q1 #] ─+─▶ n2 ─123─▶ n3 [A q0]
//! ```
//!
//! Publishing `abc/def/123`: the exact probe finds C; the walk visits n1 at depth 1
//! (collects the MULTI entries A, B), has no `def` child, steps to n2 via '+', then to
//! n3 via `123` at depth 3 = T (collects A). Hits C, A, B, A merge into A q0, B q1,
//! C q1: three deliveries, A once [seed 001 §2.2].

use std::fmt;

use hashbrown::HashMap;

use crate::codec::{ProtocolVersion, QoS, SubscriptionOptions};

use super::shared::{topic_hash, Group, GroupRef, Member, Picker, ShareStrategy};
use super::slab::{CapacityError, Slab};
use super::strtable::StrTable;
use super::sublist::{Sub, SubList, MULTI, SHARED};
use super::trie::{NodeValue, Trie, NONE, ROOT};
use super::{parse_shared_filter, validate_topic_filter, validate_topic_name, TopicError};

/// The delivery's subscriptions asked for Retain As Published.
pub const DELIVERY_RETAIN_AS_PUBLISHED: u8 = 0x01;
/// The delivery comes from a shared subscription.
pub const DELIVERY_SHARED: u8 = 0x02;

/// Why the index refused a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexError {
    Topic(TopicError),
    /// Over 2^30 filters, trie nodes, levels or groups.
    Full,
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Topic(e) => e.fmt(f),
            IndexError::Full => f.write_str("index capacity exceeded"),
        }
    }
}

impl std::error::Error for IndexError {}

impl From<TopicError> for IndexError {
    fn from(e: TopicError) -> Self {
        IndexError::Topic(e)
    }
}

impl From<CapacityError> for IndexError {
    fn from(_: CapacityError) -> Self {
        IndexError::Full
    }
}

const TAG_SHIFT: u32 = 30;
const EXACT: u32 = 0;
const NODE_END: u32 = 1;
const NODE_MULTI: u32 = 2;
const GROUP: u32 = 3;

/// A packed reference: where a filter's list lives (EXACT slot, NODE_END or
/// NODE_MULTI trie node) or, in a client's list only, a GROUP membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ref(u32);

impl Ref {
    fn new(tag: u32, id: u32) -> Ref {
        Ref((tag << TAG_SHIFT) | id)
    }

    fn tag(self) -> u32 {
        self.0 >> TAG_SHIFT
    }

    fn id(self) -> u32 {
        self.0 & ((1 << TAG_SHIFT) - 1)
    }

    /// The kind bits of the entries stored at this location.
    fn kind(self) -> u8 {
        if self.tag() == NODE_MULTI {
            MULTI
        } else {
            0
        }
    }
}

/// One match's deliveries as parallel flat arrays, reused across matches.
///
/// Row `i` is a delivery to `clients()[i]` at `qos()[i]` with `flags()[i]`
/// (`DELIVERY_*` bits) and subscription identifiers
/// `sub_ids()[sub_id_offsets()[i]..sub_id_offsets()[i + 1]]`.
/// Shared rows come last, one per served group; `shared_groups()` holds their group
/// ids in row order. `unserved_groups()` lists shared groups that matched but had no
/// eligible member.
#[derive(Debug, Clone)]
pub struct MatchResult {
    clients: Vec<u32>,
    qos: Vec<u8>,
    flags: Vec<u8>,
    sub_id_offsets: Vec<u32>,
    sub_ids: Vec<u32>,
    shared_groups: Vec<u32>,
    unserved_groups: Vec<u32>,
}

/// One row of a [`MatchResult`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub client: u32,
    pub qos: QoS,
    pub retain_as_published: bool,
    pub shared: bool,
    /// The group id of a shared delivery.
    pub group: Option<u32>,
    pub subscription_ids: &'a [u32],
}

impl Default for MatchResult {
    fn default() -> Self {
        MatchResult {
            clients: Vec::new(),
            qos: Vec::new(),
            flags: Vec::new(),
            sub_id_offsets: vec![0],
            sub_ids: Vec::new(),
            shared_groups: Vec::new(),
            unserved_groups: Vec::new(),
        }
    }
}

impl MatchResult {
    pub fn new() -> MatchResult {
        MatchResult::default()
    }

    fn clear(&mut self) {
        self.clients.clear();
        self.qos.clear();
        self.flags.clear();
        self.sub_id_offsets.clear();
        self.sub_id_offsets.push(0);
        self.sub_ids.clear();
        self.shared_groups.clear();
        self.unserved_groups.clear();
    }

    /// Close a row whose subscription ids were pushed onto `sub_ids` just before.
    fn push_row(&mut self, client: u32, qos: u8, flags: u8) {
        self.clients.push(client);
        self.qos.push(qos);
        self.flags.push(flags);
        // At most one id per matching subscription, far below 2^32.
        self.sub_id_offsets.push(self.sub_ids.len() as u32);
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    pub fn clients(&self) -> &[u32] {
        &self.clients
    }

    pub fn qos(&self) -> &[u8] {
        &self.qos
    }

    pub fn flags(&self) -> &[u8] {
        &self.flags
    }

    /// `len() + 1` offsets into [`MatchResult::sub_ids`].
    pub fn sub_id_offsets(&self) -> &[u32] {
        &self.sub_id_offsets
    }

    pub fn sub_ids(&self) -> &[u32] {
        &self.sub_ids
    }

    /// The group ids of the shared rows, which are the last `shared_groups().len()`.
    pub fn shared_groups(&self) -> &[u32] {
        &self.shared_groups
    }

    pub fn unserved_groups(&self) -> &[u32] {
        &self.unserved_groups
    }

    pub fn iter(&self) -> impl Iterator<Item = Delivery<'_>> {
        let first_shared = self.len() - self.shared_groups.len();
        (0..self.len()).map(move |i| {
            let (from, to) = (self.sub_id_offsets[i], self.sub_id_offsets[i + 1]);
            Delivery {
                client: self.clients[i],
                qos: QoS::from_u8(self.qos[i]).unwrap_or_default(),
                retain_as_published: self.flags[i] & DELIVERY_RETAIN_AS_PUBLISHED != 0,
                shared: self.flags[i] & DELIVERY_SHARED != 0,
                group: i.checked_sub(first_shared).map(|at| self.shared_groups[at]),
                subscription_ids: &self.sub_ids[from as usize..to as usize],
            }
        })
    }
}

/// Sizes of the index, for memory accounting and churn checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    pub subscriptions: usize,
    pub clients: usize,
    pub exact_filters: usize,
    /// Live trie nodes, the root included.
    pub trie_nodes: usize,
    /// Interned level strings ("+" is always one).
    pub levels: usize,
    pub groups: usize,
    /// Heap bytes owned by the index, computed from capacities (allocator overhead
    /// not included).
    pub heap_bytes: usize,
}

#[derive(Default)]
struct ClientRecord {
    refs: Vec<Ref>,
    offline: bool,
}

/// A level id not looked up yet during one walk.
const UNRESOLVED: u32 = NONE - 1;

/// Buffers reused by every match.
#[derive(Default)]
struct Scratch {
    levels: Vec<(usize, usize)>,
    level_ids: Vec<u32>,
    stack: Vec<(u32, u32)>,
    hits: Vec<Sub>,
    groups: Vec<u32>,
}

impl Scratch {
    fn collect(&mut self, subs: &[Sub]) {
        for sub in subs {
            if sub.is_shared() {
                self.groups.push(sub.id);
            } else {
                self.hits.push(*sub);
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        self.levels.capacity() * std::mem::size_of::<(usize, usize)>()
            + self.level_ids.capacity() * 4
            + self.stack.capacity() * 8
            + self.hits.capacity() * std::mem::size_of::<Sub>()
            + self.groups.capacity() * 4
    }
}

/// Where a plain (non-shared, validated) filter is stored: its trie path (None for
/// the root) and location tag, or None for an exact filter.
fn trie_path(filter: &str) -> Option<(Option<&str>, u32)> {
    if !filter.contains(['+', '#']) {
        None
    } else if filter == "#" {
        Some((None, NODE_MULTI))
    } else if let Some(prefix) = filter.strip_suffix("/#") {
        Some((Some(prefix), NODE_MULTI))
    } else {
        Some((Some(filter), NODE_END))
    }
}

fn path_levels(path: Option<&str>) -> impl Iterator<Item = &str> {
    path.into_iter().flat_map(|p| p.split('/'))
}

/// Exact filters up to 46 bytes are stored inline in their 72-byte entry (with the
/// subscriber list): typical device topics fit, and a heap block would cost more
/// bytes and one more cache miss per probe.
const EXACT_INLINE: usize = 46;

/// The subscription index. See the module documentation for the design.
pub struct SubscriptionIndex {
    exact: StrTable<SubList, EXACT_INLINE>,
    trie: Trie<SubList>,
    /// Level id of "+", pinned for the index's lifetime.
    plus: u32,
    groups: Slab<Group>,
    /// Serial of the next group created (see [`GroupRef`]).
    next_group_serial: u32,
    clients: HashMap<u32, ClientRecord>,
    picker: Picker,
    subscriptions: usize,
    scratch: Scratch,
}

impl Default for SubscriptionIndex {
    fn default() -> Self {
        SubscriptionIndex::new(ShareStrategy::default())
    }
}

impl SubscriptionIndex {
    pub fn new(strategy: ShareStrategy) -> SubscriptionIndex {
        let mut trie = Trie::new();
        // Interning into an empty table cannot run out of ids.
        let plus = trie.retain_level("+").unwrap_or(NONE);
        SubscriptionIndex {
            exact: StrTable::new(),
            trie,
            plus,
            groups: Slab::new(),
            next_group_serial: 0,
            clients: HashMap::new(),
            picker: Picker::new(strategy),
            subscriptions: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn strategy(&self) -> ShareStrategy {
        self.picker.strategy()
    }

    /// Add or replace `client`'s subscription to `filter` (a `$share/{group}/...`
    /// filter joins that group). Returns true when the subscription is new, false
    /// when it replaced one [MQTT-3.8.4-3]. A subscription identifier of 0 is none.
    pub fn subscribe(
        &mut self,
        client: u32,
        filter: &str,
        options: SubscriptionOptions,
        subscription_identifier: Option<u32>,
    ) -> Result<bool, IndexError> {
        validate_topic_filter(filter)?;
        let shared = parse_shared_filter(filter)?;
        let location = self.locate_or_insert(shared.map_or(filter, |s| s.filter))?;
        let entry = Sub {
            id: client,
            sub_id: subscription_identifier.unwrap_or(0),
            opts: options.to_byte(ProtocolVersion::V5),
        };
        let (entry_ref, new) = match shared {
            None => {
                let sub = Sub {
                    opts: entry.opts | location.kind(),
                    ..entry
                };
                (location, self.list_mut(location).upsert(sub))
            }
            Some(shared) => match self.group_or_insert(location, shared.group) {
                Ok(group) => (
                    Ref::new(GROUP, group),
                    self.groups.get_mut(group).members.upsert(entry),
                ),
                Err(e) => {
                    self.prune(location);
                    return Err(e.into());
                }
            },
        };
        if new {
            self.clients.entry(client).or_default().refs.push(entry_ref);
            self.subscriptions += 1;
        }
        Ok(new)
    }

    /// How many subscriptions `client` holds. O(1).
    pub fn subscription_count(&self, client: u32) -> usize {
        self.clients.get(&client).map_or(0, |r| r.refs.len())
    }

    /// `client` holds a subscription to exactly `filter`. O(its subscriptions).
    pub fn has_subscription(&self, client: u32, filter: &str) -> bool {
        let Some(entry_ref) = self.entry_ref(filter) else {
            return false;
        };
        self.clients
            .get(&client)
            .is_some_and(|r| r.refs.contains(&entry_ref))
    }

    /// Where subscriptions to `filter` are kept (a group's for a shared filter), if
    /// anyone holds one.
    fn entry_ref(&self, filter: &str) -> Option<Ref> {
        let shared = validate_topic_filter(filter)
            .and_then(|()| parse_shared_filter(filter))
            .ok()?;
        let location = self.locate(shared.map_or(filter, |s| s.filter))?;
        match shared {
            None => Some(location),
            Some(shared) => self
                .find_group(location, shared.group)
                .map(|group| Ref::new(GROUP, group)),
        }
    }

    /// Remove `client`'s subscription to `filter`; false when it had none.
    pub fn unsubscribe(&mut self, client: u32, filter: &str) -> bool {
        let Some(entry_ref) = self.entry_ref(filter) else {
            return false;
        };
        if !self.remove_entry(client, entry_ref) {
            return false;
        }
        if let Some(record) = self.clients.get_mut(&client) {
            if let Some(at) = record.refs.iter().position(|&r| r == entry_ref) {
                record.refs.swap_remove(at);
            }
            if record.refs.is_empty() && !record.offline {
                self.clients.remove(&client);
            }
        }
        self.subscriptions -= 1;
        true
    }

    /// Remove every subscription of `client` and forget its online state, in
    /// O(its own subscriptions). Returns how many subscriptions were removed.
    pub fn remove_client(&mut self, client: u32) -> usize {
        let Some(record) = self.clients.remove(&client) else {
            return 0;
        };
        for &entry_ref in &record.refs {
            self.remove_entry(client, entry_ref);
        }
        self.subscriptions -= record.refs.len();
        record.refs.len()
    }

    /// Mark a client online or offline. Offline members of shared groups are not
    /// chosen; clients are online unless marked otherwise.
    pub fn set_client_online(&mut self, client: u32, online: bool) {
        if online {
            if let Some(record) = self.clients.get_mut(&client) {
                record.offline = false;
                if record.refs.is_empty() {
                    self.clients.remove(&client);
                }
            }
        } else {
            self.clients.entry(client).or_default().offline = true;
        }
    }

    pub fn is_client_online(&self, client: u32) -> bool {
        self.clients.get(&client).is_none_or(|r| !r.offline)
    }

    /// The deliveries of a PUBLISH on `topic` by `publisher` (None for messages
    /// that no client published, such as `$SYS`), written into `out`. A topic that
    /// is not a valid topic name matches nothing.
    ///
    /// Shared groups whose members are all offline (or all the No Local publisher)
    /// get no delivery and are listed in `out.unserved_groups()`, so the caller can
    /// queue the message for the group ([`SubscriptionIndex::shared_group_filter`]
    /// names it).
    pub fn match_topic(&mut self, topic: &str, publisher: Option<u32>, out: &mut MatchResult) {
        out.clear();
        if validate_topic_name(topic).is_err() {
            return;
        }
        let scratch = &mut self.scratch;
        scratch.hits.clear();
        scratch.groups.clear();
        if let Some(id) = self.exact.find(topic) {
            scratch.collect(self.exact.value(id).as_slice());
        }
        walk(&self.trie, self.plus, topic, scratch);
        merge_hits(&mut scratch.hits, publisher, out);
        if scratch.groups.is_empty() {
            return;
        }
        let hash = match self.picker.strategy() {
            ShareStrategy::HashTopic => topic_hash(topic),
            _ => 0,
        };
        let clients = &self.clients;
        let eligible = |member: &Sub| {
            clients.get(&member.id).is_none_or(|r| !r.offline)
                && !(member.no_local() && Some(member.id) == publisher)
        };
        for &group in &scratch.groups {
            let group_state = self.groups.get_mut(group);
            match self.picker.pick(group_state, publisher, hash, eligible) {
                Some(member) => {
                    if member.sub_id != 0 {
                        out.sub_ids.push(member.sub_id);
                    }
                    let rap = if member.retain_as_published() {
                        DELIVERY_RETAIN_AS_PUBLISHED
                    } else {
                        0
                    };
                    out.push_row(member.id, member.qos(), DELIVERY_SHARED | rap);
                    out.shared_groups.push(group);
                }
                None => out.unserved_groups.push(group),
            }
        }
    }

    /// The [`GroupRef`] of a live group id (as in `MatchResult::shared_groups`).
    pub fn group_ref(&self, group: u32) -> Option<GroupRef> {
        let state = self.groups.try_get(group)?;
        (!state.name.is_empty()).then_some(GroupRef {
            id: group,
            serial: state.serial,
        })
    }

    /// The live group `group` names, None once it was removed.
    fn live_group(&self, group: GroupRef) -> Option<&Group> {
        self.groups
            .try_get(group.id)
            .filter(|g| !g.name.is_empty() && g.serial == group.serial)
    }

    pub fn is_group_live(&self, group: GroupRef) -> bool {
        self.live_group(group).is_some()
    }

    pub fn is_member(&self, group: GroupRef, client: u32) -> bool {
        self.live_group(group)
            .is_some_and(|g| g.members.find(Sub::key(0, client)).is_some())
    }

    /// `client`'s membership of `group`, with its subscription's options.
    pub fn member(&self, group: GroupRef, client: u32) -> Option<Member> {
        self.live_group(group)?
            .members
            .find(Sub::key(0, client))
            .map(|sub| Member::from(*sub))
    }

    /// The client ids of `group`'s members (none once the group is gone).
    pub fn members(&self, group: GroupRef) -> impl Iterator<Item = u32> + '_ {
        self.live_group(group)
            .into_iter()
            .flat_map(|g| g.members.as_slice().iter().map(|sub| sub.id))
    }

    /// Choose the member of `group` that receives a message of `publisher` on
    /// `topic`, by the group's strategy, among members that are online, not excluded
    /// by No Local, and for which `can_take(client)` holds. None when the group is
    /// gone or no member qualifies.
    pub fn pick_member(
        &mut self,
        group: GroupRef,
        publisher: Option<u32>,
        topic: &str,
        can_take: impl Fn(u32) -> bool,
    ) -> Option<Member> {
        self.live_group(group)?;
        let hash = match self.picker.strategy() {
            ShareStrategy::HashTopic => topic_hash(topic),
            _ => 0,
        };
        let clients = &self.clients;
        let eligible = |member: &Sub| {
            clients.get(&member.id).is_none_or(|r| !r.offline)
                && !(member.no_local() && Some(member.id) == publisher)
                && can_take(member.id)
        };
        let state = self.groups.get_mut(group.id);
        self.picker
            .pick(state, publisher, hash, eligible)
            .map(Member::from)
    }

    /// `$share/{group}/{filter}` of a live group id (as reported in
    /// `MatchResult::unserved_groups`), None for an unknown id.
    /// The live group a `$share/{group}/{filter}` string names: a scan over the
    /// groups, for rare lookups (a restore), not for routing.
    pub fn find_shared_group(&self, share_filter: &str) -> Option<GroupRef> {
        (0..self.groups.iter().count() as u32)
            .filter(|&id| self.shared_group_filter(id).as_deref() == Some(share_filter))
            .find_map(|id| self.group_ref(id))
    }

    pub fn shared_group_filter(&self, group: u32) -> Option<String> {
        let state = self.groups.try_get(group)?;
        if state.name.is_empty() {
            return None;
        }
        let mut out = format!("$share/{}/", state.name);
        self.write_filter(Ref(state.location), &mut out);
        Some(out)
    }

    /// Every filter `client` subscribes to, shared ones with their `$share/{group}/`
    /// prefix: O(its own subscriptions), for the rare re-checks (an ACL reload),
    /// never for routing.
    pub fn client_filters(&self, client: u32) -> Vec<String> {
        self.client_subscriptions(client)
            .into_iter()
            .map(|(filter, _, _)| filter)
            .collect()
    }

    /// `client`'s subscriptions with their options as the SUBSCRIBE granted them
    /// (the options byte of MQTT 5.0, subscription identifier 0 for none), in the
    /// order they were made (a removal moves the last one into its place):
    /// O(its own subscriptions), for the admin API.
    pub fn client_subscriptions(&self, client: u32) -> Vec<(String, SubscriptionOptions, u32)> {
        let Some(record) = self.clients.get(&client) else {
            return Vec::new();
        };
        record
            .refs
            .iter()
            .filter_map(|&entry_ref| {
                let (filter, sub) = if entry_ref.tag() == GROUP {
                    let group = self.groups.try_get(entry_ref.id())?;
                    let sub = group.members.find(Sub::key(0, client))?;
                    (self.shared_group_filter(entry_ref.id())?, *sub)
                } else {
                    let sub = self
                        .list(entry_ref)
                        .find(Sub::key(entry_ref.kind(), client))?;
                    let mut filter = String::new();
                    self.write_filter(entry_ref, &mut filter);
                    (filter, *sub)
                };
                let options = SubscriptionOptions::from_byte(sub.opts & 0x3F).ok()?;
                Some((filter, options, sub.sub_id))
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.subscriptions
    }

    pub fn is_empty(&self) -> bool {
        self.subscriptions == 0
    }

    /// Give memory left unused by unsubscribes back to the allocator: O(size of
    /// the index), for a quiet moment after mass disconnects.
    pub fn shrink_to_fit(&mut self) {
        self.exact.shrink_to_fit();
        self.trie.shrink_to_fit();
        self.groups.shrink_to_fit();
        self.clients.shrink_to_fit();
        self.scratch = Scratch::default();
    }

    pub fn stats(&self) -> IndexStats {
        let exact_values: usize = self.exact.values().map(NodeValue::heap_bytes).sum();
        let groups: usize = self
            .groups
            .iter()
            .map(|g| g.name.len() + g.members.heap_bytes())
            .sum();
        let client_refs: usize = self
            .clients
            .values()
            .map(|r| r.refs.capacity() * std::mem::size_of::<Ref>())
            .sum();
        let client_table =
            self.clients.capacity() * (std::mem::size_of::<(u32, ClientRecord)>() + 1);
        IndexStats {
            subscriptions: self.subscriptions,
            clients: self.clients.len(),
            exact_filters: self.exact.len(),
            trie_nodes: self.trie.node_count(),
            levels: self.trie.level_count(),
            groups: self.groups.len(),
            heap_bytes: self.exact.heap_bytes()
                + exact_values
                + self.trie.heap_bytes()
                + self.groups.heap_bytes()
                + groups
                + client_table
                + client_refs
                + self.scratch.heap_bytes(),
        }
    }

    fn locate(&self, filter: &str) -> Option<Ref> {
        match trie_path(filter) {
            None => self.exact.find(filter).map(|id| Ref::new(EXACT, id)),
            Some((path, tag)) => self
                .trie
                .find_path(path_levels(path))
                .map(|node| Ref::new(tag, node)),
        }
    }

    fn locate_or_insert(&mut self, filter: &str) -> Result<Ref, CapacityError> {
        match trie_path(filter) {
            None => Ok(Ref::new(EXACT, self.exact.find_or_insert(filter)?)),
            Some((path, tag)) => match self.trie.insert_path(path_levels(path)) {
                Ok(node) => Ok(Ref::new(tag, node)),
                Err((e, reached)) => {
                    self.trie.prune(reached);
                    Err(e)
                }
            },
        }
    }

    fn list(&self, location: Ref) -> &SubList {
        match location.tag() {
            EXACT => self.exact.value(location.id()),
            _ => self.trie.value(location.id()),
        }
    }

    fn list_mut(&mut self, location: Ref) -> &mut SubList {
        match location.tag() {
            EXACT => self.exact.value_mut(location.id()),
            _ => self.trie.value_mut(location.id()),
        }
    }

    /// Drop the location's storage if its list became empty.
    fn prune(&mut self, location: Ref) {
        match location.tag() {
            EXACT => {
                if self.exact.value(location.id()).is_empty() {
                    self.exact.remove(location.id());
                }
            }
            _ => self.trie.prune(location.id()),
        }
    }

    fn find_group(&self, location: Ref, name: &str) -> Option<u32> {
        self.list(location)
            .kind_run(SHARED | location.kind())
            .iter()
            .map(|entry| entry.id)
            .find(|&group| &*self.groups.get(group).name == name)
    }

    fn group_or_insert(&mut self, location: Ref, name: &str) -> Result<u32, CapacityError> {
        if let Some(group) = self.find_group(location, name) {
            return Ok(group);
        }
        let serial = self.next_group_serial;
        let group = self.groups.insert(Group::new(name, location.0, serial))?;
        self.next_group_serial = serial.wrapping_add(1);
        self.list_mut(location).upsert(Sub {
            id: group,
            sub_id: 0,
            opts: SHARED | location.kind(),
        });
        Ok(group)
    }

    /// Remove `client`'s entry behind `entry_ref` and prune what emptied.
    fn remove_entry(&mut self, client: u32, entry_ref: Ref) -> bool {
        if entry_ref.tag() != GROUP {
            let key = Sub::key(entry_ref.kind(), client);
            let removed = self.list_mut(entry_ref).remove(key).is_some();
            self.prune(entry_ref);
            return removed;
        }
        let group = entry_ref.id();
        let state = self.groups.get_mut(group);
        if state.members.remove(Sub::key(0, client)).is_none() {
            return false;
        }
        if state.members.is_empty() {
            let location = Ref(state.location);
            self.groups.remove(group);
            self.list_mut(location)
                .remove(Sub::key(SHARED | location.kind(), group));
            self.prune(location);
        }
        true
    }

    fn write_filter(&self, location: Ref, out: &mut String) {
        match location.tag() {
            EXACT => out.push_str(self.exact.key(location.id())),
            NODE_END => self.trie.write_path(location.id(), out),
            _ => {
                self.trie.write_path(location.id(), out);
                if location.id() != ROOT {
                    out.push('/');
                }
                out.push('#');
            }
        }
    }
}

/// Collect the trie's matches for `topic` into `s.hits` / `s.groups`.
fn walk(trie: &Trie<SubList>, plus: u32, topic: &str, s: &mut Scratch) {
    if !trie.has_children(ROOT) && trie.value(ROOT).is_empty() {
        return;
    }
    s.levels.clear();
    let mut start = 0;
    for level in topic.split('/') {
        s.levels.push((start, start + level.len()));
        start += level.len() + 1;
    }
    s.level_ids.clear();
    s.level_ids.resize(s.levels.len(), UNRESOLVED);
    let last = s.levels.len();
    let dollar = topic.starts_with('$');
    s.stack.clear();
    s.stack.push((ROOT, 0));
    while let Some((node, depth)) = s.stack.pop() {
        let depth = depth as usize;
        let list = trie.value(node);
        // [MQTT-4.7.2-1]: no first-level wildcard matches a '$' topic.
        let wildcards = depth > 0 || !dollar;
        if depth == last {
            s.collect(list.as_slice());
            continue;
        }
        if wildcards {
            s.collect(list.kind_run(MULTI));
            s.collect(list.kind_run(SHARED | MULTI));
        }
        if !trie.has_children(node) {
            continue;
        }
        let next = depth as u32 + 1;
        if s.level_ids[depth] == UNRESOLVED {
            let (from, to) = s.levels[depth];
            let level = topic.get(from..to).unwrap_or_default();
            s.level_ids[depth] = trie.level_id(level).unwrap_or(NONE);
        }
        let literal = s.level_ids[depth];
        if let Some(child) = (literal != NONE)
            .then(|| trie.child(node, literal))
            .flatten()
        {
            s.stack.push((child, next));
        }
        if let Some(child) = wildcards.then(|| trie.child(node, plus)).flatten() {
            s.stack.push((child, next));
        }
    }
}

/// Merge plain hits into one delivery per client (see the module documentation).
fn merge_hits(hits: &mut Vec<Sub>, publisher: Option<u32>, out: &mut MatchResult) {
    // [MQTT-3.8.3-3] No Local: never back to the publishing client.
    hits.retain(|s| !(s.no_local() && Some(s.id) == publisher));
    if !hits.windows(2).all(|w| w[0].id < w[1].id) {
        hits.sort_unstable_by_key(|s| (s.id, s.sub_id));
    }
    for run in hits.chunk_by(|a, b| a.id == b.id) {
        let first_id = out.sub_ids.len();
        let mut qos = 0;
        let mut flags = 0;
        for sub in run {
            qos = qos.max(sub.qos());
            if sub.retain_as_published() {
                flags = DELIVERY_RETAIN_AS_PUBLISHED;
            }
            if sub.sub_id != 0 && out.sub_ids[first_id..].last() != Some(&sub.sub_id) {
                out.sub_ids.push(sub.sub_id);
            }
        }
        out.push_row(run[0].id, qos, flags);
    }
}
