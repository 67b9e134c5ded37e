//! The cost of ACL rules on the engine's P2P QoS 1 path (issue 13: 1,000 rules
//! within 10 %): 100 publisher/subscriber pairs through the sans-IO engine, each
//! message a PUBLISH fed to its publisher's connection, the PUBACK and delivery
//! taken as output, and the subscriber's PUBACK fed back. Each case runs without
//! rules and with 1,000 (`thousand_rules`: 500 tenant subtrees, 400 per-user
//! rules, 99 first-level `+` publish denials on the traffic's path, and the allow
//! it meets last; default deny):
//!
//! - `same_topic`: each publisher repeats its topic (the per-session decision
//!   cache answers);
//! - `topic_per_message`: each message on another of 64 topics per pair (every
//!   check walks the rule trie).
//!
//! Also the uncached check alone (`AclTable::decide`, ns per call).
//!
//! Run: `cargo bench -p ferromq-core --bench acl` (`-- --rounds=N`, default 101;
//! `-- --same` runs both sides without rules: the harness's own spread).
//! A plain harness, not criterion: the two engines alternate run by run, so the
//! noise of a shared machine falls on both and the ratio holds.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ferromq_core::acl::{AclTable, Action, Binding, Permission, Rule, Subject};
use ferromq_core::codec::{
    Connect, Packet, Properties, ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions,
    Utf8Bytes,
};
use ferromq_core::engine::{ConnId, Engine, EngineConfig};
use ferromq_core::topic::ShareStrategy;

const PAIRS: usize = 100;
const TOPICS_PER_PAIR: usize = 64;
const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

fn text(s: &str) -> Utf8Bytes {
    Utf8Bytes::try_from(s).expect("UTF-8")
}

fn wire(packet: Packet) -> Bytes {
    packet.to_bytes(V311).expect("encodable")
}

fn thousand_rules() -> Arc<AclTable> {
    let all = Action::Publish.bit() | Action::Subscribe.bit() | Action::Read.bit();
    let mut rules = Vec::new();
    let mut push = |permission, actions, subject, filter: String| {
        rules.push(Rule::new(permission, actions, subject, &filter).expect("valid"));
    };
    for k in 0..500 {
        push(
            Permission::Allow,
            all,
            Subject::All,
            format!("tenants/{k}/+/data/#"),
        );
    }
    for k in 0..400 {
        let user = Subject::User(format!("u{k}").into());
        push(Permission::Allow, all, user, format!("users/u{k}/#"));
    }
    for k in 0..99 {
        let publish = Action::Publish.bit();
        push(
            Permission::Deny,
            publish,
            Subject::All,
            format!("+/{k}/secret"),
        );
    }
    push(Permission::Allow, all, Subject::All, "p2p/#".into());
    assert_eq!(rules.len(), 1000);
    Arc::new(AclTable::new(rules))
}

struct P2p {
    engine: Engine,
    publishers: Vec<ConnId>,
    subscribers: Vec<ConnId>,
    /// Deliveries per subscriber, for its next PUBACK's packet id.
    delivered: Vec<u64>,
    now: u64,
    at: usize,
}

impl P2p {
    fn new(rules: Option<Arc<AclTable>>) -> P2p {
        let mut engine = Engine::new(EngineConfig::default(), ShareStrategy::RoundRobin);
        if rules.is_some() {
            engine.set_acl(rules, false, true); // default deny: only the rules let traffic through
        }
        let mut p2p = P2p {
            engine,
            publishers: Vec::new(),
            subscribers: Vec::new(),
            delivered: vec![0; PAIRS],
            now: 1,
            at: 0,
        };
        for pair in 0..PAIRS {
            let publisher = p2p.connect(&format!("pub-{pair}"));
            let subscriber = p2p.connect(&format!("sub-{pair}"));
            let subscribe = wire(Packet::Subscribe(Subscribe {
                packet_id: 1,
                properties: Properties::new(),
                filters: vec![(
                    text(&format!("p2p/{pair}/+")),
                    SubscriptionOptions {
                        qos: QoS::AtLeastOnce,
                        ..Default::default()
                    },
                )],
            }));
            p2p.engine.feed(subscriber, &subscribe, p2p.now);
            p2p.publishers.push(publisher);
            p2p.subscribers.push(subscriber);
        }
        p2p.engine.take_output(|_, _| {});
        p2p
    }

    fn connect(&mut self, client_id: &str) -> ConnId {
        let conn = self.engine.open(self.now);
        let connect = wire(Packet::Connect(Box::new(Connect {
            protocol: V311,
            clean_start: true,
            keep_alive: 0,
            properties: Properties::new(),
            client_id: text(client_id),
            will: None,
            username: None,
            password: None,
        })));
        self.engine.feed(conn, &connect, self.now);
        conn
    }

    /// One message of one pair: PUBLISH in, outputs out, the subscriber's PUBACK in.
    fn step(&mut self, publishes: &[Vec<Bytes>]) {
        let pair = self.at % PAIRS;
        let topics = &publishes[pair];
        let message = &topics[(self.at / PAIRS) % topics.len()];
        self.at += 1;
        self.engine.feed(self.publishers[pair], message, self.now);
        let mut bytes = 0;
        self.engine.take_output(|_, out| bytes += out.len());
        black_box(bytes);
        let sequence = self.delivered[pair];
        self.delivered[pair] += 1;
        let id = (sequence % 65_535) as u16 + 1;
        let [hi, lo] = id.to_be_bytes();
        self.engine
            .feed(self.subscribers[pair], &[0x40, 2, hi, lo], self.now);
    }
}

/// Each pair's PUBLISH packets: one topic, or `TOPICS_PER_PAIR`.
fn publishes(topics: usize) -> Vec<Vec<Bytes>> {
    (0..PAIRS)
        .map(|pair| {
            (0..topics)
                .map(|t| {
                    wire(Packet::Publish(Publish {
                        dup: false,
                        qos: QoS::AtLeastOnce,
                        retain: false,
                        topic: text(&format!("p2p/{pair}/{t}")),
                        packet_id: 7,
                        properties: Properties::new(),
                        payload: Bytes::from_static(&[0u8; 64]),
                    }))
                })
                .collect()
        })
        .collect()
}

/// The fastest of `rounds` runs, in nanoseconds per message, the engines
/// alternating run by run: interference from the rest of a shared machine only
/// ever adds time, so the minimum of many short runs is the stable figure.
fn interleaved(engines: &mut [P2p; 2], packets: &[Vec<Bytes>], rounds: usize) -> [f64; 2] {
    const MESSAGES: usize = 20_000;
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (p2p, samples) in engines.iter_mut().zip(samples.iter_mut()) {
            let started = Instant::now();
            for _ in 0..MESSAGES {
                p2p.step(packets);
            }
            samples.push(started.elapsed().as_nanos() as f64 / MESSAGES as f64);
        }
    }
    samples.map(|s| s.into_iter().fold(f64::INFINITY, f64::min))
}

/// One uncached check alone: `AclTable::decide` over every pair's topics, the
/// fastest of `rounds` passes, in nanoseconds per check.
fn decide_alone(rounds: usize) -> f64 {
    let table = thousand_rules();
    let binding = Binding {
        client_id: "pub-0".into(),
        ..Binding::default()
    };
    let topics: Vec<String> = (0..PAIRS * TOPICS_PER_PAIR)
        .map(|i| format!("p2p/{}/{}", i % PAIRS, i / PAIRS))
        .collect();
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for topic in &topics {
                black_box(table.decide(&binding, Action::Publish, black_box(topic)));
            }
            started.elapsed().as_nanos() as f64 / topics.len() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let rounds = std::env::args()
        .filter_map(|a| a.strip_prefix("--rounds=").and_then(|n| n.parse().ok()))
        .next()
        .unwrap_or(101);
    let same = std::env::args().any(|a| a == "--same");
    println!("P2P QoS 1 through the engine, {PAIRS} pairs, fastest of {rounds} interleaved runs of 20,000");
    for (case, topics) in [("same_topic", 1), ("topic_per_message", TOPICS_PER_PAIR)] {
        let packets = publishes(topics);
        // `--same`: both engines without rules, to see the harness's own spread.
        let rules = (!same).then(thousand_rules);
        let mut engines = [P2p::new(None), P2p::new(rules)];
        let [none, rules] = interleaved(&mut engines, &packets, rounds);
        for p2p in &engines {
            let stats = p2p.engine.stats();
            assert_eq!(stats.acl_denied_publish, 0);
            assert!(stats.messages_inflight <= PAIRS as u64 && stats.messages_queued == 0);
            assert_eq!(stats.publish_sent, stats.publish_received);
        }
        let cost = (rules / none - 1.0) * 100.0;
        let other = if same {
            "no rules again"
        } else {
            "1,000 rules"
        };
        println!(
            "{case:>18}: no rules {none:7.1} ns/msg, {other} {rules:7.1} ns/msg ({cost:+.1} %)"
        );
    }
    println!(
        "one uncached check of 1,000 rules alone: {:.1} ns",
        decide_alone(rounds)
    );
}
