//! Redis Cluster key routing: which of the 16,384 hash slots a key lives in, and
//! which node serves a slot.
//!
//! The slot is `CRC16(key) mod 16384`, CRC16 being the XMODEM variant (polynomial
//! 0x1021, initial value 0, no reflection), over the key's hash tag if it has one:
//! the bytes between the first `{` and the first `}` after it, when there is at
//! least one byte between them; otherwise over the whole key (Redis Cluster
//! specification, "Keys distribution model" and "Hash tags"). Table-driven: one
//! lookup per byte.
//!
//! [`SlotMap`] is the slot → node table the Python store gets from `CLUSTER SLOTS`
//! once per topology: a flat 16,384-entry array, so routing a command is one hash
//! and one index. [`Outbox`] holds one command buffer per node; a command goes to
//! the buffer of the node serving its first key, so each node's buffer keeps the
//! order its commands were written in.

use bytes::Bytes;

use super::resp::CommandWriter;

/// Hash slots in a Redis Cluster.
pub const SLOTS: usize = 16_384;

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

static CRC16: [u16; 256] = crc16_table();

/// CRC16-XMODEM, as Redis Cluster uses it.
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The hash slot of `key` (`CLUSTER KEYSLOT`).
pub fn key_hash_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS as u16
}

/// The part of `key` that is hashed when it has a non-empty `{…}` tag.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

const UNSERVED: u16 = u16::MAX;

/// The slot → node table of one cluster topology; every slot has a node.
#[derive(Debug, Clone)]
pub struct SlotMap {
    nodes: Box<[u16]>,
    /// Node indexes run from 0 to `count - 1`.
    count: usize,
}

impl SlotMap {
    /// From `(first slot, last slot, node index)` ranges, inclusive as `CLUSTER
    /// SLOTS` gives them. Refused, naming the first such slot, when a slot has no
    /// node (a cluster not fully served cannot take every client's keys), and when a
    /// range lies outside the slot space.
    pub fn new(ranges: &[(u16, u16, u16)]) -> Result<SlotMap, String> {
        let mut nodes = vec![UNSERVED; SLOTS].into_boxed_slice();
        for &(first, last, node) in ranges {
            if first > last || usize::from(last) >= SLOTS || node == UNSERVED {
                return Err(format!("bad slot range {first}-{last} -> node {node}"));
            }
            nodes[usize::from(first)..=usize::from(last)].fill(node);
        }
        if let Some(slot) = nodes.iter().position(|&n| n == UNSERVED) {
            return Err(format!("no node serves slot {slot}"));
        }
        let count = ranges
            .iter()
            .map(|r| usize::from(r.2) + 1)
            .max()
            .unwrap_or(0);
        Ok(SlotMap { nodes, count })
    }

    /// The node serving `slot`.
    pub fn node(&self, slot: u16) -> u16 {
        self.nodes[usize::from(slot)]
    }

    /// The node serving the key made of `parts` back to back.
    pub fn key_node(&self, parts: &[&[u8]]) -> u16 {
        self.node(key_hash_slot(&parts.concat()))
    }

    pub fn nodes(&self) -> usize {
        self.count
    }
}

/// One command buffer per node.
#[derive(Debug)]
pub struct Outbox {
    writers: Vec<CommandWriter>,
}

impl Outbox {
    pub fn new(nodes: usize) -> Outbox {
        Outbox {
            writers: (0..nodes.max(1)).map(|_| CommandWriter::new()).collect(),
        }
    }

    /// The buffer of `node` (from the same [`SlotMap`], or 0 for a single server).
    pub fn to(&mut self, node: u16) -> &mut CommandWriter {
        &mut self.writers[usize::from(node)]
    }

    /// `(node, bytes, commands)` of every node that has commands, by node index.
    pub fn finish(self) -> Vec<(u16, Bytes, usize)> {
        self.writers
            .into_iter()
            .enumerate()
            .filter(|(_, w)| !w.is_empty())
            .map(|(node, w)| {
                let (bytes, count) = w.finish();
                (node as u16, bytes, count)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_the_xmodem_variant() {
        // The check value of CRC-16/XMODEM, and the Redis Cluster spec's example.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_match_redis_cluster_keyslot() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_hash_slot(b"foo"), 12182);
        assert_eq!(key_hash_slot(b"bar"), 5061);
        assert_eq!(key_hash_slot(b"hello"), 866);
        assert_eq!(key_hash_slot(b""), 0);
    }

    #[test]
    fn a_hash_tag_is_the_first_non_empty_braces_after_the_first_open() {
        let user = key_hash_slot(b"user1000");
        assert_eq!(key_hash_slot(b"{user1000}.following"), user);
        assert_eq!(key_hash_slot(b"x{user1000}.followers"), user);
        // The first `}` after the first `{` closes the tag.
        assert_eq!(key_hash_slot(b"foo{bar}{zap}"), key_hash_slot(b"bar"));
        assert_eq!(key_hash_slot(b"foo{{bar}}zap"), key_hash_slot(b"{bar"));
        // Empty tag or no closing brace: the whole key.
        assert_eq!(key_hash_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_hash_slot(b"foo{bar"), crc16(b"foo{bar") % 16384);
    }

    #[test]
    fn the_map_routes_each_slot_to_its_range_s_node() {
        let map = SlotMap::new(&[(0, 5460, 0), (5461, 10922, 1), (10923, 16383, 2)]).unwrap();
        assert_eq!([map.node(0), map.node(5461), map.node(16383)], [0, 1, 2]);
        assert_eq!(map.nodes(), 3);
        assert_eq!(
            SlotMap::new(&[(0, 99, 1), (101, 16383, 0)]).unwrap_err(),
            "no node serves slot 100"
        );
        assert!(SlotMap::new(&[(10, 5, 0)]).is_err());
        assert!(SlotMap::new(&[(0, 16384, 0)]).is_err());
    }

    #[test]
    fn the_outbox_keeps_each_node_s_commands_in_order_and_skips_idle_nodes() {
        let mut out = Outbox::new(3);
        out.to(2).command(&[b"SET", b"a", b"1"]);
        out.to(0).command(&[b"SET", b"b", b"1"]);
        out.to(2).command(&[b"DEL", b"a"]);
        let buffers = out.finish();
        let nodes: Vec<(u16, usize)> = buffers.iter().map(|(n, _, c)| (*n, *c)).collect();
        assert_eq!(nodes, [(0, 1), (2, 2)]);
        assert_eq!(
            &buffers[1].1[..],
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n"
        );
    }
}
