//! Fuzz the streaming decoder: arbitrary bytes, fed in arbitrary chunks, for every
//! protocol version and before CONNECT. Whatever decodes must re-encode and decode to
//! the same packet; nothing may panic.
#![no_main]

use bytes::BytesMut;
use ferromq_core::codec::{decode_packet, FrameDecoder, ProtocolVersion};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    let version = match selector % 4 {
        0 => None,
        1 => Some(ProtocolVersion::V3_1),
        2 => Some(ProtocolVersion::V3_1_1),
        _ => Some(ProtocolVersion::V5),
    };
    let chunk = usize::from(selector / 4).max(1);
    let mut decoder = FrameDecoder::new(1 << 20, version);
    let mut buffer = BytesMut::new();
    for piece in stream.chunks(chunk) {
        buffer.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(packet)) => {
                    let version = decoder.version().expect("a packet fixes the version");
                    let wire = packet.to_bytes(version).expect("decoded packets encode");
                    let again = decode_packet(wire, version).expect("re-encoded packets decode");
                    assert_eq!(again, packet);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
