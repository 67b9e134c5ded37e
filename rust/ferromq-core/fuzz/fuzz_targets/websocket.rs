//! Fuzz the WebSocket deframer: arbitrary client bytes, fed whole and in arbitrary
//! chunks (the unused rest passed again with the next chunk, as the engine's caller
//! does). Nothing may panic, and chunking must not change the outcome: the same MQTT
//! stream, the same replies, the same end (open, closed, or the same refusal).
#![no_main]

use bytes::BytesMut;
use ferromq_core::transport::websocket::{Deframer, FrameError, Progress};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq)]
enum End {
    Open,
    Closed,
    Refused(FrameError),
}

fn run(input: &[u8], chunk: usize) -> (Vec<u8>, Vec<u8>, End) {
    let mut deframer = Deframer::new(4096);
    let (mut data, mut replies) = (BytesMut::new(), BytesMut::new());
    let mut held: Vec<u8> = Vec::new();
    for piece in input.chunks(chunk) {
        held.extend_from_slice(piece);
        match deframer.deframe(&held, &mut data, &mut replies) {
            Ok(Progress::Open(used)) => {
                assert!(used <= held.len());
                held.drain(..used);
            }
            Ok(Progress::Closed) => return (data.to_vec(), replies.to_vec(), End::Closed),
            Err(err) => return (data.to_vec(), replies.to_vec(), End::Refused(err)),
        }
    }
    (data.to_vec(), replies.to_vec(), End::Open)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let whole = run(input, input.len().max(1));
    let chunked = run(input, usize::from(selector).max(1));
    assert_eq!(whole, chunked);
});
