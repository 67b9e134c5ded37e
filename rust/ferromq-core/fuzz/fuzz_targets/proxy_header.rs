//! Fuzz the PROXY protocol header parser. Nothing may panic; a complete header is
//! found again in exactly its own bytes; an incomplete answer holds for every prefix
//! (the listener consumes those bytes as header bytes, so none of them may be the
//! client's stream).
#![no_main]

use ferromq_core::transport::proxy::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(Some(header)) => {
            assert!(header.len <= data.len());
            assert_eq!(parse(&data[..header.len]), Ok(Some(header)));
            for end in 0..header.len {
                assert_eq!(parse(&data[..end]), Ok(None));
            }
        }
        Ok(None) => {
            for end in 0..data.len() {
                assert_eq!(parse(&data[..end]), Ok(None));
            }
        }
        Err(_) => {}
    }
});
