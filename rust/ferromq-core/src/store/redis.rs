//! The Redis store's compiled half: one journal batch in, one pipelined RESP buffer
//! per Redis node out (one in all on a single server); Redis replies in, journal
//! records out at load. Python only moves the bytes (redis-py owns connections,
//! authentication, the pool and the cluster slot map): no Python per message.
//!
//! ## Keys (seed 000's layout; `P` is the configured key prefix, `c` the client id)
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{c}_messages` | ZSET | member: packet id; score: the delivery sequence, which keeps growing past the packet id wrap, so ZRANGE is delivery order |
//! | `P{c}_messages_<packet id>` | STRING, TTL | the stored delivery: `flag u8` (0 PUBLISH, 1 PUBREL: PUBREC arrived) `qos u8, retain u8, count u8, subscription ids u32 LE…`, then the journal's Message record body verbatim; a PUBREL state whose delivery the store does not hold (an APPLICATION client's, whose deliveries Kafka keeps) is the flag byte alone, scored 0 |
//! | `P{c}_last_packet_id` | STRING | the packet id of the newest stored delivery (TBMQ's key; the engine derives ids from the sequence) |
//! | `P{c}_session` | HASH | `expiry` (seconds), `type` (0 device, 1 application), `applied:<source>` (how far the session holds deliveries of a cluster node's topic, its Kafka offset, or of shard `n` of its node, `shard:<n>` and a route number: `engine/arrival.rs`) |
//! | `P{c}_subscriptions` | HASH | filter → `options u8, subscription id u32 LE` |
//! | `P{c}_inbound_qos2` | SET | packet ids of inbound QoS 2 messages awaiting PUBREL |
//! | `P{c}_will` | STRING | the session's will: the journal's Will record body after the client id |
//! | `P{c}_outbox` | HASH | route number → a QoS 2 route of this publisher's kept until its shard (or cluster node) confirms it (`Outbox`, dropped at `OutboxDone`): `shard u16, shards u16, to u16, share filter (u16 length, UTF-8)`, then the journal's Message record body; `shards` 0 is a route to another node, its filter field `<node>\0<share filter>` |
//! | `Pclients` | SET | every client with a stored session: what `load` reads |
//! | `Pretained` | HASH | topic → the journal's Message record body |
//!
//! The client id is the hash tag, so a client's keys share one Redis Cluster slot and
//! each script touches one slot. A client id holding `}` still works: Redis hashes
//! from the first `{` to the first `}`, which lies inside the part every key of that
//! client shares. One that is empty or starts with `}` would make an empty tag (Redis
//! then hashes the whole key): its tag opens with `{\0}` instead (`P{\0}}c}_messages`).
//!
//! ## Scripts (loaded by SHA at connect; a batch that meets NOSCRIPT is sent again with EVAL)
//!
//! - `apply`, one call per client per batch: the client's deliveries (save: SET with
//!   PX + ZADD), completions (remove, PUBACK/PUBCOMP: ZREM + DEL) and PUBRECs (mark
//!   PUBREL: SETRANGE of the flag byte, which keeps the value's TTL, where TBMQ's SET
//!   loses it; the flag byte alone when the delivery is not there) in journal order, then one trim to the per-client limit that deletes
//!   the trimmed strings, and `last_packet_id`; a cluster's `applied:<node>` offset
//!   goes in the same call, so it is stored exactly with the deliveries it covers. Two Redis calls per message and per
//!   acknowledgement; none for a message delivered and acknowledged before its batch
//!   goes out (an online subscriber keeping up), whose save and removal cancel.
//! - `remove_all` (session ended): every message string, the ZSET and the client's
//!   other keys.
//! - `fetch` (load): references in score order with their strings, dropping
//!   references whose string expired (TBMQ's lazy cleanup).
//!
//! Session, subscription, inbound QoS 2 and retained changes are plain commands.
//! Order: Redis runs a connection's commands in the order sent, and every command
//! naming a client is sent in journal order (a client's pending deliveries are
//! flushed before any other record of that client), so the stored state is the
//! journal's. Different clients' commands may interleave: they share no key. One
//! exception keeps a QoS 2 PUBLISH whole: the inbound ids received in a batch
//! (`SADD`) go after every delivery of the batch (before a later record of their own
//! client), so on one server a store that has the id has the deliveries and kept
//! routes the message made, even when a crash cut the pipeline short, and the
//! publisher's retransmission, only PUBRECed, loses nothing.
//!
//! ## Redis Cluster ([`RedisCodec::set_slots`])
//!
//! Each command goes to the buffer of the node serving its first key's slot
//! ([`super::slots`]); the Python store sends the buffers to their nodes at once.
//! Per-key order still holds: a key maps to one node, and each node's buffer keeps
//! journal order. Across nodes there is no order, and none is needed: a client's
//! keys are on one node, and `Pclients` / `Pretained` are single keys. At load the
//! per-node replies are merged back into command order here, by routing each command
//! again.

use std::collections::HashMap;

use bytes::Bytes;

use crate::codec::QoS;
use crate::durability::log::RecordReader;
use crate::durability::record::{
    decode_record, message_header, BusPlace, ClientType, Journal, JournalError, KeptRoute, Record,
    ACK, APPLIED, BUS_CURSOR, ENQUEUE, MESSAGE, OUTBOX, RELEASE, RETAIN, WILL,
};
use crate::engine::Message;

use super::resp::{CommandWriter, Reply};
use super::slots::{Outbox, SlotMap};

pub const APPLY: &str = r#"-- ferromq apply: KEYS messages, last_packet_id, session; ARGV limit, then ops
local zset = KEYS[1]
local prefix = zset .. '_'
local i, n, last = 2, #ARGV, nil
while i <= n do
  local op = ARGV[i]
  if op == 'S' then
    local key = prefix .. ARGV[i + 2]
    if ARGV[i + 3] == '0' then
      redis.call('SET', key, ARGV[i + 4])
    else
      redis.call('SET', key, ARGV[i + 4], 'PX', ARGV[i + 3])
    end
    redis.call('ZADD', zset, ARGV[i + 1], ARGV[i + 2])
    last = ARGV[i + 2]
    i = i + 5
  elseif op == 'A' then
    redis.call('ZREM', zset, ARGV[i + 1])
    redis.call('DEL', prefix .. ARGV[i + 1])
    i = i + 2
  elseif op == 'C' then
    redis.call('HSET', KEYS[3], 'applied:' .. ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    local key = prefix .. ARGV[i + 1]
    if redis.call('EXISTS', key) == 1 then
      redis.call('SETRANGE', key, 0, '\1')
    else
      redis.call('SET', key, '\1')
      redis.call('ZADD', zset, 0, ARGV[i + 1])
    end
    i = i + 2
  end
end
if last then
  redis.call('SET', KEYS[2], last)
  local excess = redis.call('ZCARD', zset) - tonumber(ARGV[1])
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', zset, 0, excess - 1)) do
      redis.call('DEL', prefix .. id)
    end
    redis.call('ZREMRANGEBYRANK', zset, 0, excess - 1)
  end
end
return 0
"#;

pub const REMOVE_ALL: &str = r#"-- ferromq remove_all: KEYS messages, last_packet_id, session, subscriptions, inbound_qos2, will, outbox
local prefix = KEYS[1] .. '_'
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  redis.call('DEL', prefix .. id)
end
redis.call('DEL', unpack(KEYS))
return 0
"#;

pub const FETCH: &str = r#"-- ferromq fetch: KEYS messages; returns packet id, score, value per live reference
local prefix = KEYS[1] .. '_'
local out = {}
local refs = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #refs, 2 do
  local value = redis.call('GET', prefix .. refs[i])
  if value then
    out[#out + 1] = refs[i]
    out[#out + 1] = refs[i + 1]
    out[#out + 1] = value
  else
    redis.call('ZREM', KEYS[1], refs[i])
  end
end
return out
"#;

/// The scripts by name, in the order of [`Script`].
pub const SCRIPTS: [(&str, &str); 3] = [
    ("apply", APPLY),
    ("remove_all", REMOVE_ALL),
    ("fetch", FETCH),
];

#[derive(Debug, Clone, Copy)]
enum Script {
    Apply = 0,
    RemoveAll = 1,
    Fetch = 2,
}

const RELEASED: u8 = 1;

/// What one client's `apply` call carries.
enum Op {
    Save {
        sequence: u64,
        packet_id: u16,
        ttl_ms: u64,
        header: Vec<u8>,
        body: Bytes,
    },
    Remove(u16),
    Release(u16),
    /// The session holds what cluster node `node`'s topic carried up to `offset`.
    Applied {
        node: String,
        offset: u64,
    },
}

impl Op {
    fn args(&self) -> usize {
        match self {
            Op::Save { .. } => 5,
            Op::Remove(_) | Op::Release(_) => 2,
            Op::Applied { .. } => 3,
        }
    }
}

/// A load that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// Builds the commands for one Redis layout.
#[derive(Debug, Clone)]
pub struct RedisCodec {
    prefix: Vec<u8>,
    max_messages: u32,
    /// TTL of a stored message string; 0 keeps it until removed (a message's own
    /// expiry still applies).
    message_ttl_ms: u64,
    shas: [String; 3],
    /// Redis Cluster: the node serving each slot; None: one server (node 0).
    slots: Option<SlotMap>,
}

/// Replies to [`RedisCodec::load_commands`] per client.
pub const LOAD_REPLIES_PER_CLIENT: usize = 6;

impl RedisCodec {
    pub fn new(prefix: &str, max_messages: u32, message_ttl_ms: u64) -> RedisCodec {
        RedisCodec {
            prefix: prefix.as_bytes().to_vec(),
            max_messages,
            message_ttl_ms,
            shas: Default::default(),
            slots: None,
        }
    }

    /// Route commands over a Redis Cluster from now on: `(first slot, last slot,
    /// node index)` ranges covering every slot (see [`SlotMap::new`]).
    pub fn set_slots(&mut self, ranges: &[(u16, u16, u16)]) -> Result<(), String> {
        self.slots = Some(SlotMap::new(ranges)?);
        Ok(())
    }

    fn outbox(&self) -> Outbox {
        Outbox::new(self.slots.as_ref().map_or(1, SlotMap::nodes))
    }

    /// The node serving a key written as `parts` (0 on a single server).
    fn node(&self, parts: &[&[u8]]) -> u16 {
        self.slots.as_ref().map_or(0, |map| map.key_node(parts))
    }

    fn client_node(&self, client: &str, suffix: &[u8]) -> u16 {
        self.node(&self.key_parts(client, suffix))
    }

    fn global_node(&self, name: &[u8]) -> u16 {
        self.node(&[&self.prefix, name])
    }

    /// The SHA1 Redis gave a script at SCRIPT LOAD (`name` from [`SCRIPTS`]).
    pub fn set_sha(&mut self, name: &str, sha: &str) -> bool {
        match SCRIPTS.iter().position(|(n, _)| *n == name) {
            Some(index) => {
                self.shas[index] = sha.to_owned();
                true
            }
            None => false,
        }
    }

    /// One journal batch as one pipelined buffer per node: `(node, bytes,
    /// commands)` for each node that has commands. `eval` sends the scripts' source
    /// (after NOSCRIPT) instead of their SHA.
    pub fn batch(
        &self,
        data: Bytes,
        now_unix_ms: u64,
        eval: bool,
    ) -> Result<Vec<(u16, Bytes, usize)>, JournalError> {
        let mut w = self.outbox();
        let mut messages: HashMap<u64, Bytes> = HashMap::new();
        let mut groups: HashMap<String, Vec<Op>> = HashMap::new();
        let mut order: Vec<String> = Vec::new();
        // Inbound QoS 2 ids received in this batch go last (module header, "Order").
        let mut received: Vec<Record> = Vec::new();
        let mut reader = RecordReader::new(data);
        while let Some(frame) = reader.next_raw() {
            let (kind, body) = frame?;
            match kind {
                MESSAGE => {
                    messages.insert(message_header(&body)?.0, body);
                }
                ENQUEUE | ACK | RELEASE | APPLIED => {
                    let (client, op) =
                        self.op(decode_record(kind, body)?, &messages, now_unix_ms)?;
                    let ops = groups.entry(client).or_insert_with_key(|client| {
                        order.push(client.clone());
                        Vec::new()
                    });
                    ops.push(op);
                }
                RETAIN => self.retain(&mut w, decode_record(kind, body)?, &messages)?,
                OUTBOX => self.outbox_route(&mut w, decode_record(kind, body)?, &messages)?,
                // Written for a store whose batches are whole only: here each session
                // keeps its cursor of each shard (`applied:shard:<n>`).
                BUS_CURSOR => {}
                _ => {
                    let record = decode_record(kind, body)?;
                    if matches!(record, Record::InboundQos2 { held: true, .. }) {
                        received.push(record);
                        continue;
                    }
                    let client = record_client(&record);
                    if let Some(ops) = groups.remove(client) {
                        self.apply(&mut w, client, &ops, eval);
                    }
                    received.retain(|earlier| {
                        let own = record_client(earlier) == client;
                        if own {
                            self.session_command(&mut w, earlier, eval);
                        }
                        !own
                    });
                    self.session_command(&mut w, &record, eval);
                }
            }
        }
        for client in order {
            if let Some(ops) = groups.remove(&client) {
                self.apply(&mut w, &client, &ops, eval);
            }
        }
        for record in &received {
            self.session_command(&mut w, record, eval);
        }
        Ok(w.finish())
    }

    /// `ops` without the deliveries that complete in the same batch: a message saved
    /// and removed (PUBACK) before the batch goes out was never needed in Redis, so
    /// neither call is sent. Safe because the engine reuses a packet id only after its
    /// previous delivery's removal was journaled, which this keeps (it comes earlier).
    /// A delivery whose PUBREC arrived keeps its save: the PUBREL state is stored.
    /// Of a session's positions of one source (`Applied`), only the last is sent.
    fn net(ops: &[Op]) -> Vec<&Op> {
        let mut saved: HashMap<u16, usize> = HashMap::new();
        let mut dropped = vec![false; ops.len()];
        let mut positioned: Vec<&str> = Vec::new();
        for (index, op) in ops.iter().enumerate().rev() {
            if let Op::Applied { node, .. } = op {
                if positioned.contains(&node.as_str()) {
                    dropped[index] = true;
                } else {
                    positioned.push(node);
                }
            }
        }
        for (index, op) in ops.iter().enumerate() {
            match op {
                Op::Save { packet_id, .. } => {
                    saved.insert(*packet_id, index);
                }
                Op::Remove(packet_id) => {
                    if let Some(save) = saved.remove(packet_id) {
                        dropped[save] = true;
                        dropped[index] = true;
                    }
                }
                Op::Release(packet_id) => {
                    saved.remove(packet_id);
                }
                Op::Applied { .. } => {}
            }
        }
        ops.iter()
            .zip(dropped)
            .filter_map(|(op, dropped)| (!dropped).then_some(op))
            .collect()
    }

    fn op(
        &self,
        record: Record,
        messages: &HashMap<u64, Bytes>,
        now_unix_ms: u64,
    ) -> Result<(String, Op), JournalError> {
        Ok(match record {
            Record::Enqueue {
                client,
                sequence,
                packet_id,
                message_id,
                qos,
                retain,
                subscription_ids,
            } => {
                let body = messages
                    .get(&message_id)
                    .ok_or(JournalError("a delivery names a message not in its batch"))?
                    .clone();
                let expires_at = message_header(&body)?.1;
                let mut header = Vec::with_capacity(4 + 4 * subscription_ids.len());
                header.extend_from_slice(&[0, qos as u8, u8::from(retain)]);
                header.push(subscription_ids.len() as u8);
                for id in &subscription_ids {
                    header.extend_from_slice(&id.to_le_bytes());
                }
                let op = Op::Save {
                    sequence,
                    packet_id,
                    ttl_ms: self.ttl_ms(expires_at, now_unix_ms),
                    header,
                    body,
                };
                (client, op)
            }
            Record::Ack { client, packet_id } => (client, Op::Remove(packet_id)),
            Record::Release { client, packet_id } => (client, Op::Release(packet_id)),
            Record::Applied {
                client,
                node,
                offset,
            } => (client, Op::Applied { node, offset }),
            _ => unreachable!("called for deliveries only"),
        })
    }

    /// The message string's TTL: the configured one, shortened to the message's own
    /// expiry (at least 1 ms: an expired message is removed by Redis at once).
    fn ttl_ms(&self, expires_at: Option<u64>, now_unix_ms: u64) -> u64 {
        let own = expires_at.map(|at| at.saturating_sub(now_unix_ms).max(1));
        match (own, self.message_ttl_ms) {
            (Some(own), 0) => own,
            (Some(own), ttl) => own.min(ttl),
            (None, ttl) => ttl,
        }
    }

    fn apply(&self, out: &mut Outbox, client: &str, ops: &[Op], eval: bool) {
        let ops = Self::net(ops);
        if ops.is_empty() {
            return;
        }
        let w = out.to(self.client_node(client, b"_messages"));
        let args: usize = ops.iter().map(|op| op.args()).sum();
        self.script(w, Script::Apply, 3, 1 + args, eval);
        self.key(w, client, b"_messages");
        self.key(w, client, b"_last_packet_id");
        self.key(w, client, b"_session");
        w.bulk_int(u64::from(self.max_messages));
        for op in ops {
            match op {
                Op::Save {
                    sequence,
                    packet_id,
                    ttl_ms,
                    header,
                    body,
                } => {
                    w.bulk(b"S");
                    w.bulk_int(*sequence);
                    w.bulk_int(u64::from(*packet_id));
                    w.bulk_int(*ttl_ms);
                    w.bulk_parts(&[header, body]);
                }
                Op::Remove(packet_id) => {
                    w.bulk(b"A");
                    w.bulk_int(u64::from(*packet_id));
                }
                Op::Release(packet_id) => {
                    w.bulk(b"R");
                    w.bulk_int(u64::from(*packet_id));
                }
                Op::Applied { node, offset } => {
                    w.bulk(b"C");
                    w.bulk(node.as_bytes());
                    w.bulk_int(*offset);
                }
            }
        }
    }

    /// `EVALSHA sha numkeys` (or `EVAL source numkeys`); the caller writes the keys
    /// and `args` more arguments.
    fn script(&self, w: &mut CommandWriter, script: Script, keys: usize, args: usize, eval: bool) {
        w.begin(3 + keys + args);
        if eval {
            w.bulk(b"EVAL");
            w.bulk(SCRIPTS[script as usize].1.as_bytes());
        } else {
            w.bulk(b"EVALSHA");
            w.bulk(self.shas[script as usize].as_bytes());
        }
        w.bulk_int(keys as u64);
    }

    fn key(&self, w: &mut CommandWriter, client: &str, suffix: &[u8]) {
        w.bulk_parts(&self.key_parts(client, suffix));
    }

    /// `P{c}<suffix>`; the tag opens with `{\0}` instead of `{` for a client id that
    /// is empty or starts with `}`, whose tag would otherwise be empty (Redis then
    /// hashes the whole key and the client's keys would not share a slot). MQTT client
    /// ids hold no U+0000 [MQTT-1.5.4-2], so that key names no other client.
    fn key_parts<'a>(&'a self, client: &'a str, suffix: &'a [u8]) -> [&'a [u8]; 5] {
        let open: &[u8] = if client.is_empty() || client.starts_with('}') {
            b"{\0}"
        } else {
            b"{"
        };
        [&self.prefix, open, client.as_bytes(), b"}", suffix]
    }

    fn global(&self, w: &mut CommandWriter, name: &[u8]) {
        w.bulk_parts(&[&self.prefix, name]);
    }

    fn session_command(&self, out: &mut Outbox, record: &Record, eval: bool) {
        let client = record_client(record);
        let w = out.to(self.client_node(client, session_key(record)));
        match record {
            Record::Session {
                client,
                expiry_interval,
                client_type,
            } => {
                w.begin(6);
                w.bulk(b"HSET");
                self.key(w, client, b"_session");
                w.bulk(b"expiry");
                w.bulk_int(u64::from(*expiry_interval));
                w.bulk(b"type");
                w.bulk_int(u64::from(client_type.code()));
                let w = out.to(self.global_node(b"clients"));
                w.begin(3);
                w.bulk(b"SADD");
                self.global(w, b"clients");
                w.bulk(client.as_bytes());
            }
            Record::SessionEnd { client } => {
                self.script(w, Script::RemoveAll, CLIENT_KEYS.len(), 0, eval);
                for suffix in CLIENT_KEYS {
                    self.key(w, client, suffix);
                }
                let w = out.to(self.global_node(b"clients"));
                w.begin(3);
                w.bulk(b"SREM");
                self.global(w, b"clients");
                w.bulk(client.as_bytes());
            }
            Record::Subscribe {
                client,
                filter,
                options,
                subscription_id,
            } => {
                w.begin(4);
                w.bulk(b"HSET");
                self.key(w, client, b"_subscriptions");
                w.bulk(filter.as_bytes());
                w.bulk_parts(&[&[*options], &subscription_id.to_le_bytes()]);
            }
            Record::Unsubscribe { client, filter } => {
                w.begin(3);
                w.bulk(b"HDEL");
                self.key(w, client, b"_subscriptions");
                w.bulk(filter.as_bytes());
            }
            Record::InboundQos2 {
                client,
                packet_id,
                held,
            } => {
                w.begin(3);
                w.bulk(if *held { b"SADD" } else { b"SREM" });
                self.key(w, client, b"_inbound_qos2");
                w.bulk_int(u64::from(*packet_id));
            }
            Record::Will { client, will } => {
                if will.is_some() {
                    let mut record = Journal::new(true);
                    record.will(client, will.as_ref());
                    let (_, bytes) = record.take().expect("one record");
                    // The body after the frame and the client id.
                    let value = &bytes[5 + 2 + client.len()..];
                    w.begin(3);
                    w.bulk(b"SET");
                    self.key(w, client, b"_will");
                    w.bulk(value);
                } else {
                    w.begin(2);
                    w.bulk(b"DEL");
                    self.key(w, client, b"_will");
                }
            }
            Record::OutboxDone { publisher, route } => {
                w.begin(3);
                w.bulk(b"HDEL");
                self.key(w, publisher, b"_outbox");
                w.bulk_int(*route);
            }
            _ => unreachable!("deliveries, messages and retained are handled apart"),
        }
    }

    /// A kept route (`Record::Outbox`) into its publisher's `_outbox` hash, before
    /// the `SADD` of the packet id it carries (the next record of that client): a
    /// store that has the id has the route, on the same node in the same order.
    fn outbox_route(
        &self,
        out: &mut Outbox,
        record: Record,
        messages: &HashMap<u64, Bytes>,
    ) -> Result<(), JournalError> {
        let Record::Outbox {
            shard,
            to,
            route,
            message_id,
            share_filter,
            publisher,
            to_node,
        } = record
        else {
            unreachable!("called for Outbox only");
        };
        let body = messages.get(&message_id).ok_or(JournalError(
            "an outbox record names a message not in its batch",
        ))?;
        // No layout has 0 shards: 0 says the route goes to another node, and its
        // filter field is `<node>\0<share filter>` (a build that does not know this
        // takes it for another layout's route and leaves it).
        let (shards, filter) = match to_node.as_str() {
            "" => (shard.shards, share_filter),
            node => (0, format!("{node}\0{share_filter}")),
        };
        let mut head = Vec::with_capacity(8 + filter.len());
        head.extend_from_slice(&shard.me.to_le_bytes());
        head.extend_from_slice(&shards.to_le_bytes());
        head.extend_from_slice(&to.to_le_bytes());
        head.extend_from_slice(&(filter.len() as u16).to_le_bytes());
        head.extend_from_slice(filter.as_bytes());
        let w = out.to(self.client_node(&publisher, b"_outbox"));
        w.begin(4);
        w.bulk(b"HSET");
        self.key(w, &publisher, b"_outbox");
        w.bulk_int(route);
        w.bulk_parts(&[&head, body]);
        Ok(())
    }

    fn retain(
        &self,
        out: &mut Outbox,
        record: Record,
        messages: &HashMap<u64, Bytes>,
    ) -> Result<(), JournalError> {
        let Record::Retain { topic, message_id } = record else {
            unreachable!("called for Retain only");
        };
        let w = out.to(self.global_node(b"retained"));
        if message_id == 0 {
            w.begin(3);
            w.bulk(b"HDEL");
            self.global(w, b"retained");
            w.bulk(topic.as_bytes());
        } else {
            let body = messages.get(&message_id).ok_or(JournalError(
                "a retained record names a message not in its batch",
            ))?;
            w.begin(4);
            w.bulk(b"HSET");
            self.global(w, b"retained");
            w.bulk(topic.as_bytes());
            w.bulk(body);
        }
        Ok(())
    }

    /// `(node, SMEMBERS Pclients, 1)`: the clients [`Self::load_commands`] takes.
    pub fn clients_command(&self) -> (u16, Bytes, usize) {
        let mut w = CommandWriter::new();
        w.begin(2);
        w.bulk(b"SMEMBERS");
        self.global(&mut w, b"clients");
        let (bytes, count) = w.finish();
        (self.global_node(b"clients"), bytes, count)
    }

    /// Per client: its session, subscriptions, inbound QoS 2 ids and stored
    /// deliveries ([`LOAD_REPLIES_PER_CLIENT`] replies, keys in [`LOAD_KEYS`]);
    /// then, with `retained`, the retained messages (one reply). One buffer per
    /// node, as [`Self::batch`].
    pub fn load_commands(
        &self,
        clients: &[String],
        retained: bool,
        eval: bool,
    ) -> Vec<(u16, Bytes, usize)> {
        let mut out = self.outbox();
        for client in clients {
            for suffix in LOAD_KEYS {
                let w = out.to(self.client_node(client, suffix));
                if suffix == b"_messages" {
                    self.script(w, Script::Fetch, 1, 0, eval);
                } else if suffix == b"_will" {
                    w.begin(2);
                    w.bulk(b"GET");
                } else {
                    w.begin(2);
                    w.bulk(if suffix == b"_inbound_qos2" {
                        b"SMEMBERS"
                    } else {
                        b"HGETALL"
                    });
                }
                self.key(w, client, suffix);
            }
        }
        if retained {
            let w = out.to(self.global_node(b"retained"));
            w.begin(2);
            w.bulk(b"HGETALL");
            self.global(w, b"retained");
        }
        out.finish()
    }

    /// The replies to [`Self::load_commands`], `(node, that node's replies in
    /// order)`, merged back into command order: command `i` went to the node its
    /// key routes to, so it is that node's next reply.
    fn merge<'r>(
        &self,
        clients: &[String],
        replies: &'r [(u16, &'r [Reply])],
    ) -> Result<Vec<&'r Reply>, LoadError> {
        let total: usize = replies.iter().map(|(_, r)| r.len()).sum();
        let retained = total == clients.len() * LOAD_REPLIES_PER_CLIENT + 1;
        if !retained && total != clients.len() * LOAD_REPLIES_PER_CLIENT {
            return Err(LoadError(format!(
                "{total} replies for {} clients",
                clients.len()
            )));
        }
        let mut queues: HashMap<u16, std::slice::Iter<'r, Reply>> =
            replies.iter().map(|(node, r)| (*node, r.iter())).collect();
        let mut take = |node: u16| {
            queues
                .get_mut(&node)
                .and_then(Iterator::next)
                .ok_or_else(|| LoadError(format!("too few replies from node {node}")))
        };
        let mut ordered = Vec::with_capacity(total);
        for client in clients {
            for suffix in LOAD_KEYS {
                ordered.push(take(self.client_node(client, suffix))?);
            }
        }
        if retained {
            ordered.push(take(self.global_node(b"retained"))?);
        }
        Ok(ordered)
    }

    /// The replies to [`Self::load_commands`] (`(node, replies)` per node) as
    /// journal records that `Engine::restore` reads: Session, Subscribe,
    /// InboundQos2, Message + Enqueue per stored delivery in score order (+ Release
    /// when PUBREC arrived), Retain.
    pub fn load_records(
        &self,
        clients: &[String],
        replies: &[(u16, &[Reply])],
    ) -> Result<Bytes, LoadError> {
        let replies = self.merge(clients, replies)?;
        let retained = replies.len() > clients.len() * LOAD_REPLIES_PER_CLIENT;
        if let Some(Reply::Error(error)) = replies.iter().find(|r| matches!(r, Reply::Error(_))) {
            return Err(LoadError(error.clone()));
        }
        let mut out = Journal::new(true);
        for (client, replies) in clients
            .iter()
            .zip(replies.chunks_exact(LOAD_REPLIES_PER_CLIENT))
        {
            load_client(&mut out, client, replies)
                .map_err(|e| LoadError(format!("client {client:?}: {e}")))?;
        }
        if retained {
            for pair in replies[replies.len() - 1].items().chunks_exact(2) {
                let (Some(topic), Some(body)) = (pair[0].bytes(), pair[1].bytes()) else {
                    continue;
                };
                let message = stored_message(body.clone())
                    .map_err(|e| LoadError(format!("retained message: {e}")))?;
                let topic = String::from_utf8_lossy(topic);
                out.retain(&topic, Some(&message), 0);
            }
        }
        Ok(out.take().map(|(_, bytes)| bytes).unwrap_or_default())
    }
}

/// The keys [`RedisCodec::load_commands`] reads per client, in reply order.
const LOAD_KEYS: [&[u8]; LOAD_REPLIES_PER_CLIENT] = [
    b"_session",
    b"_subscriptions",
    b"_inbound_qos2",
    b"_messages",
    b"_will",
    b"_outbox",
];

/// The key a session record's command names first.
fn session_key(record: &Record) -> &'static [u8] {
    match record {
        Record::SessionEnd { .. } => b"_messages",
        Record::Subscribe { .. } | Record::Unsubscribe { .. } => b"_subscriptions",
        Record::InboundQos2 { .. } => b"_inbound_qos2",
        Record::Will { .. } => b"_will",
        Record::OutboxDone { .. } => b"_outbox",
        _ => b"_session",
    }
}

const CLIENT_KEYS: [&[u8]; 7] = [
    b"_messages",
    b"_last_packet_id",
    b"_session",
    b"_subscriptions",
    b"_inbound_qos2",
    b"_will",
    b"_outbox",
];

fn record_client(record: &Record) -> &str {
    match record {
        Record::Session { client, .. }
        | Record::SessionEnd { client }
        | Record::Subscribe { client, .. }
        | Record::Unsubscribe { client, .. }
        | Record::Enqueue { client, .. }
        | Record::Ack { client, .. }
        | Record::Release { client, .. }
        | Record::InboundQos2 { client, .. }
        | Record::Applied { client, .. }
        | Record::Will { client, .. } => client,
        Record::Outbox { publisher, .. } | Record::OutboxDone { publisher, .. } => publisher,
        Record::Message(_) | Record::Retain { .. } | Record::BusCursor { .. } => "",
    }
}

fn load_client(out: &mut Journal, client: &str, replies: &[&Reply]) -> Result<(), JournalError> {
    let [session, subscriptions, inbound, deliveries, will, outbox] = replies else {
        unreachable!("chunks of LOAD_REPLIES_PER_CLIENT");
    };
    let mut expiry = None;
    let mut client_type = ClientType::Device;
    let mut applied = Vec::new();
    for pair in session.items().chunks_exact(2) {
        let value = pair[1].bytes().map(|b| decimal(b)).transpose()?;
        match pair[0].bytes().map(|b| &b[..]) {
            Some(b"expiry") => expiry = value,
            Some(b"type") => client_type = ClientType::from_code(value.unwrap_or(0) as u8)?,
            Some(field) => {
                if let (Some(node), Some(offset)) = (field.strip_prefix(b"applied:"), value) {
                    applied.push((String::from_utf8_lossy(node).into_owned(), offset));
                }
            }
            None => {}
        }
    }
    let stored_will = match will.bytes() {
        Some(value) => {
            let mut body = bytes::BytesMut::new();
            body.extend_from_slice(&(client.len() as u16).to_le_bytes());
            body.extend_from_slice(client.as_bytes());
            body.extend_from_slice(value);
            let Record::Will { will, .. } = decode_record(WILL, body.freeze())? else {
                unreachable!("a WILL body decodes to a Will");
            };
            will
        }
        None => None,
    };
    // No session but a will: a cluster node's clean session (only its will is
    // stored), restored ending at once, so its will is published.
    let Some(expiry) = expiry.or(stored_will.is_some().then_some(0)) else {
        return Ok(()); // listed, but its session was removed
    };
    out.session(client, expiry as u32, client_type);
    for (node, offset) in applied {
        out.applied(client, &node, offset);
    }
    if stored_will.is_some() {
        out.will(client, stored_will.as_ref());
    }
    for pair in subscriptions.items().chunks_exact(2) {
        let (Some(filter), Some(value)) = (pair[0].bytes(), pair[1].bytes()) else {
            continue;
        };
        if value.len() != 5 {
            return Err(JournalError("subscription value is not 5 bytes"));
        }
        let id = u32::from_le_bytes(value[1..5].try_into().expect("4 bytes"));
        out.subscribe(client, &String::from_utf8_lossy(filter), value[0], id);
    }
    for id in inbound.items().iter().filter_map(Reply::bytes) {
        out.inbound_qos2(client, decimal(id)? as u16, true);
    }
    for triple in deliveries.items().chunks_exact(3) {
        let (Some(packet_id), Some(score), Some(value)) =
            (triple[0].bytes(), triple[1].bytes(), triple[2].bytes())
        else {
            continue;
        };
        let packet_id = decimal(packet_id)? as u16;
        if value[..] == [RELEASED] {
            out.release(client, packet_id); // PUBREL state alone
            continue;
        }
        let sequence = decimal(score)?;
        let (flag, qos, retain, subscription_ids, body) = stored_delivery(value)?;
        let message = stored_message(body)?;
        out.enqueue(
            client,
            sequence,
            packet_id,
            &message,
            qos,
            retain,
            &subscription_ids,
            0,
        );
        if flag == RELEASED {
            out.release(client, packet_id);
        }
    }
    for pair in outbox.items().chunks_exact(2) {
        let (Some(route), Some(value)) = (pair[0].bytes(), pair[1].bytes()) else {
            continue;
        };
        let (shard, to, share_filter, to_node, body) = stored_route(value)?;
        let kept = KeptRoute {
            shard,
            to,
            to_node: to_node.as_deref(),
            route: decimal(route)?,
            share_filter: (!share_filter.is_empty()).then_some(share_filter.as_str()),
            publisher: client,
        };
        out.outbox(&kept, &stored_message(body)?, 0);
    }
    Ok(())
}

/// An `_outbox` value: the keeping shard, the receiving one, the share filter, the
/// receiving node for a route to another node (`shards` 0: the filter field is
/// `<node>\0<share filter>`), and the message (`RedisCodec::outbox_route`).
fn stored_route(value: &Bytes) -> Result<StoredRoute, JournalError> {
    let short = JournalError("stored route cut short");
    let head = value.get(..8).ok_or(short)?;
    let field = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let shard = BusPlace {
        me: field(0),
        shards: field(2),
    };
    let filter_end = 8 + usize::from(field(6));
    let filter = value.get(8..filter_end).ok_or(short)?;
    let filter =
        String::from_utf8(filter.to_vec()).map_err(|_| JournalError("share filter not UTF-8"))?;
    let (to_node, filter) = match (shard.shards, filter.split_once('\0')) {
        (0, Some((node, filter))) => (Some(node.to_owned()), filter.to_owned()),
        _ => (None, filter),
    };
    Ok((shard, field(4), filter, to_node, value.slice(filter_end..)))
}

type StoredRoute = (BusPlace, u16, String, Option<String>, Bytes);

type Delivery = (u8, QoS, bool, Vec<u32>, Bytes);

fn stored_delivery(value: &Bytes) -> Result<Delivery, JournalError> {
    let short = JournalError("stored delivery cut short");
    let header = value.get(..4).ok_or(short)?;
    let count = usize::from(header[3]);
    let ids = value.get(4..4 + 4 * count).ok_or(short)?;
    let qos = QoS::from_u8(header[1]).ok_or(JournalError("bad QoS"))?;
    let subscription_ids = ids
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    Ok((
        header[0],
        qos,
        header[2] != 0,
        subscription_ids,
        value.slice(4 + 4 * count..),
    ))
}

/// A Message record body as a message the journal writes again (expiry stays in
/// unix ms: written with a wall offset of 0).
fn stored_message(body: Bytes) -> Result<Message, JournalError> {
    let Record::Message(stored) = decode_record(MESSAGE, body)? else {
        unreachable!("a MESSAGE body decodes to a Message");
    };
    Ok(Message {
        id: stored.id,
        topic: stored
            .topic
            .try_into()
            .map_err(|_| JournalError("topic not UTF-8"))?,
        payload: stored.payload,
        qos: stored.qos,
        retain: stored.retain,
        properties: stored.properties,
        publisher: None,
        expires_at: stored.expires_at,
        journal_batch: Default::default(),
        held_for_batch: 0,
    })
}

fn decimal(text: &[u8]) -> Result<u64, JournalError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(JournalError("not a decimal number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Properties, Property};
    use crate::durability::record::StoredWill;
    use crate::engine::EngineConfig;
    use crate::store::resp::Replies;
    use crate::topic::ShareStrategy;

    fn message(id: u64, expiry_interval: Option<u32>) -> Message {
        let props = Properties(
            expiry_interval
                .map(Property::MessageExpiryInterval)
                .into_iter()
                .collect(),
        );
        let mut m = Message::from_publish("a/b", b"hi", QoS::AtLeastOnce, false, &props, None, 0);
        m.id = id;
        m
    }

    /// The one buffer of a single server.
    fn one(buffers: Vec<(u16, Bytes, usize)>) -> (Bytes, usize) {
        let [(0, bytes, count)] = &buffers[..] else {
            panic!("one buffer for node 0: {buffers:?}");
        };
        (bytes.clone(), *count)
    }

    fn codec() -> RedisCodec {
        let mut codec = RedisCodec::new("p:", 10_000, 600_000);
        assert!(codec.set_sha("apply", "sha-apply"));
        assert!(codec.set_sha("remove_all", "sha-remove-all"));
        assert!(codec.set_sha("fetch", "sha-fetch"));
        codec
    }

    /// The commands in a pipelined buffer, each as its arguments (a command is a
    /// RESP array, so the reply reader reads it back).
    fn commands(bytes: &[u8]) -> Vec<Vec<Bytes>> {
        let mut replies = Replies::new();
        replies.feed(bytes);
        let mut out = Vec::new();
        while let Some(reply) = replies.next_reply().unwrap() {
            out.push(
                reply
                    .items()
                    .iter()
                    .map(|a| a.bytes().unwrap().clone())
                    .collect(),
            );
        }
        assert_eq!(replies.buffered(), 0);
        out
    }

    fn text(args: &[Bytes]) -> Vec<String> {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn one_apply_per_client_in_journal_order_and_session_records_as_commands() {
        let m = message(7, None);
        let mut j = Journal::new(true);
        j.session("c", 60, ClientType::Device);
        j.subscribe("c", "a/#", 1, 9);
        j.enqueue("c", 65_535, 1, &m, QoS::AtLeastOnce, false, &[9], 0);
        j.enqueue("d", 1, 2, &m, QoS::ExactlyOnce, false, &[], 0);
        j.ack("c", 77); // stored by an earlier batch
        j.enqueue("c", 65_536, 2, &m, QoS::AtLeastOnce, false, &[9], 0);
        j.release("d", 2);
        j.session_end("e");
        j.retain("t", Some(&m), 0);
        let (_, data) = j.take().unwrap();
        let (bytes, count) = one(codec().batch(data, 0, false).unwrap());
        let cmds = commands(&bytes);
        assert_eq!(cmds.len(), count);
        let heads: Vec<String> = cmds.iter().map(|c| text(&c[..2]).join(" ")).collect();
        assert_eq!(
            heads,
            [
                "HSET p:{c}_session",
                "SADD p:clients",
                "HSET p:{c}_subscriptions",
                "EVALSHA sha-remove-all",
                "SREM p:clients",
                "HSET p:retained",
                "EVALSHA sha-apply",
                "EVALSHA sha-apply",
            ]
        );
        assert_eq!(text(&cmds[0][2..]), ["expiry", "60", "type", "0"]);
        assert_eq!(&cmds[2][3][..], &[1, 9, 0, 0, 0]);
        let apply_c = text(&cmds[6]);
        let value = cmds[6][11].clone();
        assert_eq!(
            apply_c[2..11],
            [
                "3",
                "p:{c}_messages",
                "p:{c}_last_packet_id",
                "p:{c}_session",
                "10000",
                "S",
                "65535",
                "1",
                "600000"
            ]
            .map(String::from)[..]
        );
        assert_eq!(
            apply_c[12..18],
            ["A", "77", "S", "65536", "2", "600000"].map(String::from)[..]
        );
        assert_eq!(apply_c.len(), 19);
        // flag, qos, retain, one subscription id, then the Message record body.
        assert_eq!(&value[..8], &[0, 1, 0, 1, 9, 0, 0, 0]);
        assert_eq!(
            stored_message(value.slice(8..)).unwrap().topic.as_str(),
            "a/b"
        );
        let apply_d = text(&cmds[7]);
        assert_eq!(
            apply_d[2..6],
            [
                "3",
                "p:{d}_messages",
                "p:{d}_last_packet_id",
                "p:{d}_session"
            ]
            .map(String::from)[..]
        );
        assert_eq!(apply_d[12..], ["R", "2"].map(String::from)[..]);
    }

    #[test]
    fn a_delivery_acknowledged_within_the_batch_never_reaches_redis() {
        let m = message(7, None);
        let mut j = Journal::new(true);
        j.enqueue("c", 1, 2, &m, QoS::AtLeastOnce, false, &[], 0);
        j.enqueue("c", 2, 3, &m, QoS::ExactlyOnce, false, &[], 0);
        j.enqueue("c", 3, 4, &m, QoS::AtLeastOnce, false, &[], 0);
        j.ack("c", 2);
        j.release("c", 3);
        j.ack("c", 9); // stored by an earlier batch
        j.enqueue("d", 1, 2, &m, QoS::AtLeastOnce, false, &[], 0);
        j.ack("d", 2);
        let (_, data) = j.take().unwrap();
        let (bytes, count) = one(codec().batch(data, 0, false).unwrap());
        assert_eq!(count, 1, "d has nothing left to store");
        let ops: Vec<String> = text(&commands(&bytes)[0][6..])
            .into_iter()
            .filter(|a| a.len() == 1 && a.chars().all(|c| c.is_ascii_uppercase()))
            .collect();
        // Saves of 3 (PUBREC: kept) and 4, the PUBREL mark, the earlier batch's removal.
        assert_eq!(ops, ["S", "S", "R", "A"]);
    }

    #[test]
    fn a_client_s_deliveries_go_out_before_its_next_session_record() {
        let m = message(1, None);
        let mut j = Journal::new(true);
        j.enqueue("c", 1, 2, &m, QoS::AtLeastOnce, false, &[], 0);
        j.session_end("c");
        j.session("c", 5, ClientType::Device);
        let (_, data) = j.take().unwrap();
        let (bytes, _) = one(codec().batch(data, 0, true).unwrap());
        let heads: Vec<String> = commands(&bytes)
            .iter()
            .map(|c| String::from_utf8_lossy(&c[0]).into_owned())
            .collect();
        assert_eq!(heads, ["EVAL", "EVAL", "SREM", "HSET", "SADD"]);
        let first = commands(&bytes)[0][1].clone();
        assert_eq!(&first[..], APPLY.as_bytes(), "EVAL carries the source");
    }

    #[test]
    fn the_ttl_is_the_configured_one_or_the_message_s_own_expiry_if_sooner() {
        let codec = codec();
        assert_eq!(codec.ttl_ms(None, 1_000), 600_000);
        assert_eq!(codec.ttl_ms(Some(11_000), 1_000), 10_000);
        assert_eq!(codec.ttl_ms(Some(10_000_000), 1_000), 600_000);
        assert_eq!(codec.ttl_ms(Some(500), 1_000), 1, "already expired");
        assert_eq!(RedisCodec::new("", 1, 0).ttl_ms(None, 0), 0, "no TTL");
    }

    #[test]
    fn a_delivery_without_its_message_is_refused() {
        let m = message(3, None);
        let mut j = Journal::new(true);
        j.enqueue("c", 1, 2, &m, QoS::AtLeastOnce, false, &[], 0);
        let (_, data) = j.take().unwrap();
        // Drop the Message record (the first one) from the batch.
        let mut reader = RecordReader::new(data.clone());
        let (_, body) = reader.next_raw().unwrap().unwrap();
        let rest = data.slice(5 + body.len()..);
        assert!(codec().batch(rest, 0, false).is_err());
    }

    fn bulk(b: &[u8]) -> Reply {
        Reply::Bulk(Some(Bytes::copy_from_slice(b)))
    }

    fn array(items: Vec<Reply>) -> Reply {
        Reply::Array(Some(items))
    }

    #[test]
    fn load_rebuilds_sessions_deliveries_in_score_order_past_the_wrap_and_retained() {
        let codec = codec();
        let m = message(7, Some(3600));
        let mut j = Journal::new(true);
        j.enqueue("c", 65_535, 1, &m, QoS::AtLeastOnce, false, &[], 0);
        j.enqueue("c", 65_536, 2, &m, QoS::ExactlyOnce, false, &[4], 0);
        let (_, data) = j.take().unwrap();
        let (bytes, _) = one(codec.batch(data, 0, false).unwrap());
        let apply = &commands(&bytes)[0];
        let first = apply[11].clone();
        let mut second = apply[16].to_vec();
        second[0] = RELEASED; // PUBREC arrived: the script set the flag byte
        let (_, count) = one(codec.load_commands(&["c".into(), "gone".into()], true, false));
        assert_eq!(count, 2 * LOAD_REPLIES_PER_CLIENT + 1);
        let replies = vec![
            array(vec![
                bulk(b"expiry"),
                bulk(b"60"),
                bulk(b"type"),
                bulk(b"1"),
            ]),
            array(vec![bulk(b"a/#"), bulk(&[1, 4, 0, 0, 0])]),
            array(vec![bulk(b"12")]),
            // fetch: packet id, score, value, in score order: a PUBREL state alone (an
            // application client's, its delivery in Kafka), then 65535 (id 1) before
            // 65536 (id 2)
            array(vec![
                bulk(b"9"),
                bulk(b"0"),
                bulk(&[RELEASED]),
                bulk(b"1"),
                bulk(b"65535"),
                Reply::Bulk(Some(first)),
                bulk(b"2"),
                bulk(b"65536"),
                bulk(&second),
            ]),
            Reply::Bulk(None), // no will
            array(vec![]),     // no kept route
            // "gone": listed in clients but its session hash was removed
            array(vec![]),
            array(vec![]),
            array(vec![]),
            array(vec![]),
            Reply::Bulk(None),
            array(vec![]),
            array(vec![bulk(b"r/t"), bulk(&apply[11][4..])]),
        ];
        let records = codec
            .load_records(&["c".into(), "gone".into()], &[(0, &replies)])
            .unwrap();
        let decoded: Vec<Record> = RecordReader::new(records.clone())
            .map(Result::unwrap)
            .collect();
        let kinds: Vec<&str> = decoded
            .iter()
            .map(|r| match r {
                Record::Session { .. } => "session",
                Record::Subscribe { .. } => "subscribe",
                Record::InboundQos2 { .. } => "inbound",
                Record::Message(_) => "message",
                Record::Enqueue { .. } => "enqueue",
                Record::Release { .. } => "release",
                Record::Retain { .. } => "retain",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "session",
                "subscribe",
                "inbound",
                "release",
                "message",
                "enqueue",
                "message",
                "enqueue",
                "release",
                "message",
                "retain"
            ]
        );
        assert!(matches!(
            &decoded[0],
            Record::Session {
                expiry_interval: 60,
                client_type: ClientType::Application,
                ..
            }
        ));
        assert!(matches!(&decoded[3], Record::Release { packet_id: 9, .. }));
        assert!(matches!(
            &decoded[7],
            Record::Enqueue { sequence: 65_536, packet_id: 2, qos: QoS::ExactlyOnce, subscription_ids, .. }
                if subscription_ids == &[4]
        ));
        let Record::Message(stored) = &decoded[4] else {
            unreachable!()
        };
        assert_eq!(stored.expires_at, m.expires_at, "expiry kept in unix ms");

        let mut engine = crate::engine::Engine::new(
            EngineConfig {
                journal: true,
                ..EngineConfig::default()
            },
            ShareStrategy::RoundRobin,
        );
        let report = engine.restore(records, 0);
        assert_eq!(report.error, None);
        assert_eq!(
            (report.sessions, report.messages, report.retained),
            (1, 3, 1),
            "two deliveries and a PUBREL state"
        );
    }

    /// A codec on a three-node cluster (slots split as `redis-cli --cluster create`
    /// splits them) and the node of each test client's keys.
    fn cluster_codec() -> RedisCodec {
        let mut codec = codec();
        codec
            .set_slots(&[(0, 5460, 0), (5461, 10922, 1), (10923, 16383, 2)])
            .unwrap();
        codec
    }

    fn node_of(key: &str) -> u16 {
        match crate::store::slots::key_hash_slot(key.as_bytes()) {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        }
    }

    #[test]
    fn on_a_cluster_each_command_goes_to_the_node_of_its_first_key_in_journal_order() {
        let m = message(7, None);
        // Clients spread over the nodes.
        let clients: Vec<String> = (0..12).map(|n| format!("client-{n}")).collect();
        let mut j = Journal::new(true);
        for (n, client) in clients.iter().enumerate() {
            j.session(client, 60, ClientType::Device);
            j.subscribe(client, "a/#", 1, 0);
            j.enqueue(client, n as u64, 1, &m, QoS::AtLeastOnce, false, &[], 0);
        }
        j.retain("t", Some(&m), 0);
        let (_, data) = j.take().unwrap();
        let buffers = cluster_codec().batch(data, 0, false).unwrap();
        assert_eq!(buffers.len(), 3, "every node has keys");
        let mut seen = 0;
        for (node, bytes, count) in &buffers {
            let cmds = commands(bytes);
            assert_eq!(cmds.len(), *count);
            seen += count;
            let keys: Vec<String> = cmds
                .iter()
                .map(|c| {
                    let at = if c[0].starts_with(b"EVAL") { 3 } else { 1 };
                    String::from_utf8_lossy(&c[at]).into_owned()
                })
                .collect();
            for key in &keys {
                assert_eq!(node_of(key), *node, "{key} routed to node {node}");
            }
            // A node's buffer keeps journal order: each client's session before its
            // subscription before its deliveries.
            for client in &clients {
                let at = |suffix: &str| {
                    keys.iter()
                        .position(|k| *k == format!("p:{{{client}}}{suffix}"))
                };
                if let (Some(session), Some(subscription), Some(messages)) =
                    (at("_session"), at("_subscriptions"), at("_messages"))
                {
                    assert!(session < subscription && subscription < messages);
                }
            }
        }
        // HSET + SADD + HSET + apply per client, and the retained HSET.
        assert_eq!(seen, clients.len() * 4 + 1);
    }

    #[test]
    fn every_key_of_a_client_shares_a_slot_even_when_its_id_starts_with_a_brace() {
        let codec = codec();
        for client in ["}x", "", "a}b", "{c}"] {
            let slots: Vec<u16> = CLIENT_KEYS
                .iter()
                .map(|suffix| {
                    crate::store::slots::key_hash_slot(&codec.key_parts(client, suffix).concat())
                })
                .collect();
            assert!(
                slots.windows(2).all(|w| w[0] == w[1]),
                "{client:?}: {slots:?}"
            );
        }
        assert_ne!(
            codec.key_parts("}x", b"_messages").concat(),
            codec.key_parts("{}x", b"_messages").concat()
        );
    }

    #[test]
    fn load_merges_the_nodes_replies_back_into_command_order() {
        let codec = cluster_codec();
        // One client per node, listed in an order that is not node order.
        let mut by_node: HashMap<u16, String> = HashMap::new();
        for n in 0.. {
            let client = format!("load-{n}");
            by_node
                .entry(node_of(&format!("p:{{{client}}}_session")))
                .or_insert(client);
            if by_node.len() == 3 {
                break;
            }
        }
        let clients = vec![
            by_node[&2].clone(),
            by_node[&0].clone(),
            by_node[&1].clone(),
        ];
        let buffers = codec.load_commands(&clients, true, false);
        let retained_node = node_of("p:retained");
        // Each node answers its own commands: session expiry = 10 * node.
        let replies: Vec<(u16, Vec<Reply>)> = buffers
            .iter()
            .map(|(node, _, count)| {
                let mut replies = Vec::new();
                for _ in 0..LOAD_REPLIES_PER_CLIENT.min(*count) {
                    replies.push(array(vec![]));
                }
                replies[0] = array(vec![
                    bulk(b"expiry"),
                    bulk(format!("{}", 10 * node).as_bytes()),
                ]);
                if *node == retained_node {
                    replies.push(array(vec![]));
                }
                (*node, replies)
            })
            .collect();
        let borrowed: Vec<(u16, &[Reply])> = replies.iter().map(|(n, r)| (*n, &r[..])).collect();
        let records = codec.load_records(&clients, &borrowed).unwrap();
        let sessions: Vec<(String, u32)> = RecordReader::new(records)
            .map(Result::unwrap)
            .filter_map(|r| match r {
                Record::Session {
                    client,
                    expiry_interval,
                    ..
                } => Some((client, expiry_interval)),
                _ => None,
            })
            .collect();
        assert_eq!(
            sessions,
            [
                (clients[0].clone(), 20),
                (clients[1].clone(), 0),
                (clients[2].clone(), 10)
            ]
        );
        // A node that answered too few is an error, not a shifted load.
        let short: Vec<(u16, &[Reply])> = borrowed
            .iter()
            .map(|(n, r)| (*n, if *n == 1 { &r[1..] } else { *r }))
            .collect();
        assert!(codec.load_records(&clients, &short).is_err());
    }

    #[test]
    fn a_redis_error_in_a_load_reply_fails_the_load() {
        let replies = vec![
            array(vec![]),
            array(vec![]),
            array(vec![]),
            Reply::Error("NOSCRIPT No matching script".into()),
            Reply::Bulk(None),
            array(vec![]),
        ];
        let error = codec()
            .load_records(&["c".into()], &[(0, &replies)])
            .unwrap_err();
        assert!(error.0.contains("NOSCRIPT"));
    }

    #[test]
    fn a_kept_route_is_stored_before_its_packet_id_and_dropped_once_confirmed() {
        // To a shard, and to another node of a cluster (its place's `shards` 0).
        for (to_node, stored_shards) in [(None, 2), (Some("node-b"), 0)] {
            let codec = codec();
            let m = message(7, None);
            let place = BusPlace { me: 1, shards: 2 };
            let kept = KeptRoute {
                shard: place,
                to: 0,
                to_node,
                route: 42,
                share_filter: Some("$share/g/a/#"),
                publisher: "c",
            };
            let mut j = Journal::new(true);
            j.outbox(&kept, &m, 0);
            j.inbound_qos2("c", 5, true);
            j.outbox_done("c", 42);
            let (_, data) = j.take().unwrap();
            let (bytes, _) = one(codec.batch(data, 0, false).unwrap());
            let cmds = commands(&bytes);
            let heads: Vec<String> = cmds.iter().map(|c| text(&c[..3]).join(" ")).collect();
            assert_eq!(
                heads,
                [
                    "HSET p:{c}_outbox 42",
                    "SADD p:{c}_inbound_qos2 5",
                    "HDEL p:{c}_outbox 42"
                ]
            );
            // Loaded back: the route as kept, its publisher the client it is stored with.
            let value = cmds[0][3].clone();
            let replies = vec![
                array(vec![bulk(b"expiry"), bulk(b"60")]),
                array(vec![]),
                array(vec![bulk(b"5")]),
                array(vec![]),
                Reply::Bulk(None),
                array(vec![bulk(b"42"), Reply::Bulk(Some(value))]),
            ];
            let records = codec.load_records(&["c".into()], &[(0, &replies)]).unwrap();
            let outbox: Vec<Record> = RecordReader::new(records)
                .map(Result::unwrap)
                .filter(|r| matches!(r, Record::Outbox { .. }))
                .collect();
            assert_eq!(
                outbox,
                [Record::Outbox {
                    shard: BusPlace {
                        me: 1,
                        shards: stored_shards
                    },
                    to: 0,
                    route: 42,
                    message_id: 7,
                    share_filter: "$share/g/a/#".into(),
                    publisher: "c".into(),
                    to_node: to_node.unwrap_or("").into(),
                }]
            );
        }
    }

    #[test]
    fn a_sessions_positions_of_one_source_send_only_the_last() {
        let mut j = Journal::new(true);
        j.applied("c", "shard:1", 5);
        j.applied("c", "node-b", 9);
        j.applied("c", "shard:1", 6);
        let (_, data) = j.take().unwrap();
        let (bytes, _) = one(codec().batch(data, 0, false).unwrap());
        let apply = text(&commands(&bytes)[0]);
        assert_eq!(apply[7..], ["C", "node-b", "9", "C", "shard:1", "6"]);
    }

    #[test]
    fn a_qos2_publishers_packet_id_goes_after_the_deliveries_its_message_made() {
        let m = message(7, None);
        let mut j = Journal::new(true);
        j.enqueue("sub", 1, 1, &m, QoS::ExactlyOnce, false, &[], 0);
        j.inbound_qos2("pub", 5, true);
        j.enqueue("other", 1, 1, &m, QoS::ExactlyOnce, false, &[], 0);
        j.inbound_qos2("late", 6, true);
        j.session_end("late");
        let (_, data) = j.take().unwrap();
        let (bytes, _) = one(codec().batch(data, 0, false).unwrap());
        let heads: Vec<String> = commands(&bytes)
            .iter()
            .map(|c| text(&c[..3]).join(" "))
            .collect();
        assert_eq!(
            heads,
            [
                // a later record of its own client still comes after it
                "SADD p:{late}_inbound_qos2 6",
                "EVALSHA sha-remove-all 7",
                "SREM p:clients late",
                "EVALSHA sha-apply 3",
                "EVALSHA sha-apply 3",
                "SADD p:{pub}_inbound_qos2 5",
            ]
        );
    }

    #[test]
    fn a_client_with_only_a_will_loads_as_a_session_ending_at_once() {
        let will = crate::codec::Will {
            topic: "gone/c".try_into().unwrap(),
            payload: Bytes::from_static(b"bye"),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: Properties::default(),
        };
        let stored = StoredWill {
            due_at: 0,
            delay_seconds: 0,
            will,
        };
        let mut j = Journal::new(true);
        j.will("c", Some(&stored));
        let (_, data) = j.take().unwrap();
        let (bytes, _) = one(codec().batch(data, 0, false).unwrap());
        let set = &commands(&bytes)[0];
        assert_eq!(text(&set[..2]), ["SET", "p:{c}_will"]);
        let replies = vec![
            array(vec![]),
            array(vec![]),
            array(vec![]),
            array(vec![]),
            Reply::Bulk(Some(set[2].clone())),
            array(vec![]),
        ];
        let records = codec()
            .load_records(&["c".into()], &[(0, &replies)])
            .unwrap();
        let decoded: Vec<Record> = RecordReader::new(records).map(Result::unwrap).collect();
        assert!(matches!(
            &decoded[..],
            [Record::Session { expiry_interval: 0, .. }, Record::Will { will: Some(w), .. }]
                if w == &stored
        ));
    }
}
