//! The cross-shard bus of a node (issue 16): how shards, each a process with its own
//! engine, hand each other publishes, subscription changes and session moves.
//!
//! - [`ring`]: one direction between two shards, a single-producer single-consumer
//!   byte ring in shared memory, written in batches once per loop tick.
//! - [`admission`]: the node's admission counts (connections, rates, flapping) in
//!   shared memory every shard updates with atomics.
pub mod admission;
pub mod ring;

use crate::codec::{read_fixed_header, FrameDecoder, Packet, PacketType, PROTOCOL_MAX_PACKET_SIZE};

/// FNV-1a (64-bit) of `data`: the same in every process, build and restart, unlike
/// SipHash keys. Shard owners, shared-group topic hashes and the node's admission
/// counters all hash with it.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shard of `count` that owns `client_id`: [`fnv1a`] of its UTF-8 bytes, modulo
/// `count`. Stable across processes, builds and restarts, since every shard, the
/// accept path and a restart with another number of shards must agree on it.
pub fn shard_of(client_id: &str, count: u16) -> u16 {
    (fnv1a(client_id.as_bytes()) % u64::from(count.max(1))) as u16
}

/// Which shard of `count` a connection belongs to, from the MQTT bytes it sent first:
/// `Some(owner)` once its CONNECT is whole, None while more bytes are needed. A first
/// packet that is not a well-formed CONNECT, or is larger than `max_packet_size`, or
/// names no client id, stays `here`: this shard's engine refuses it with the reason
/// the protocol asks for, or assigns the id.
pub fn connect_owner(data: &[u8], max_packet_size: u32, here: u16, count: u16) -> Option<u16> {
    let header = match read_fixed_header(data, PROTOCOL_MAX_PACKET_SIZE) {
        Ok(Some(header)) => header,
        Ok(None) => return None,
        Err(_) => return Some(here),
    };
    if header.frame_len > max_packet_size as usize || header.packet_type != PacketType::Connect {
        return Some(here);
    }
    let frame = data.get(..header.frame_len)?;
    let (packets, _, _) = FrameDecoder::new(PROTOCOL_MAX_PACKET_SIZE, None).decode_slice(frame);
    match packets.into_iter().next() {
        Some(Packet::Connect(connect)) if !connect.client_id.as_str().is_empty() => {
            Some(shard_of(connect.client_id.as_str(), count))
        }
        _ => Some(here),
    }
}

#[cfg(test)]
mod tests {
    use super::{connect_owner, shard_of};

    #[test]
    fn owners_are_stable_and_spread() {
        // Pinned: a change of the hash would move every stored session.
        assert_eq!(shard_of("sensor-1", 2), shard_of("sensor-1", 2));
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as u16);
        let counts = (0..1000).fold([0u32; 4], |mut counts, i| {
            counts[usize::from(shard_of(&format!("client-{i}"), 4))] += 1;
            counts
        });
        assert!(
            counts.iter().all(|&n| (200..300).contains(&n)),
            "{counts:?}"
        );
        assert_eq!(shard_of("anything", 1), 0);
    }

    /// CONNECT, MQTT 3.1.1, client id `id`.
    fn connect(id: &str) -> Vec<u8> {
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, id.len() as u8];
        body.extend_from_slice(id.as_bytes());
        let mut packet = vec![0x10, body.len() as u8];
        packet.extend(body);
        packet
    }

    #[test]
    fn a_connect_goes_to_its_client_ids_owner_once_whole() {
        let packet = connect("sensor-1");
        for end in 0..packet.len() {
            assert_eq!(
                connect_owner(&packet[..end], 1024, 0, 4),
                None,
                "{end} bytes"
            );
        }
        assert_eq!(
            connect_owner(&packet, 1024, 0, 4),
            Some(shard_of("sensor-1", 4))
        );
        let mut more = packet.clone();
        more.extend_from_slice(&[0xc0, 0]); // a PINGREQ behind it
        assert_eq!(
            connect_owner(&more, 1024, 0, 4),
            Some(shard_of("sensor-1", 4))
        );
    }

    #[test]
    fn what_is_not_a_routable_connect_stays_here() {
        assert_eq!(connect_owner(&connect(""), 1024, 3, 4), Some(3));
        assert_eq!(connect_owner(&[0xc0, 0], 1024, 3, 4), Some(3)); // PINGREQ first
        assert_eq!(connect_owner(&connect("sensor-1"), 8, 3, 4), Some(3)); // too large
        assert_eq!(
            connect_owner(&[0x10, 0xff, 0xff, 0xff, 0xff], 1024, 3, 4),
            Some(3)
        );
        let mut bad = connect("sensor-1");
        bad[3] = b'X'; // protocol name "MXTT"
        assert_eq!(connect_owner(&bad, 1024, 3, 4), Some(3));
    }
}
