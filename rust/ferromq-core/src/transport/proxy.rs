//! The PROXY protocol header (HAProxy's "PROXY protocol", versions 1 and 2), sans IO.
//!
//! A load balancer in front of the broker opens each connection with one header
//! naming the client it relays, before any other byte (TLS, WebSocket or MQTT). The
//! listener reads it from the socket and takes the client's address from it.
//!
//! [`parse`] reads the front of a buffer and answers one of three things, so a reader
//! can take the header off a socket without ever reading a byte past it (which on a
//! TLS listener belongs to the handshake):
//! - `Ok(Some(header))`: the header is the first `header.len` bytes;
//! - `Ok(None)`: the header is not complete yet, and **every byte given is part of
//!   it** (a prefix of a signature, a v1 line without its CRLF, a v2 header short of
//!   its announced length), so the reader may consume them all and read on;
//! - `Err`: this is not a PROXY header; close the connection.
//!
//! Version 1 (text, spec §2.1): `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n` or
//! `PROXY UNKNOWN ...\r\n`, at most 107 bytes. Version 2 (binary, §2.2): the 12-byte
//! signature, version 2 with command LOCAL (a health check: no client, the socket's
//! own address stands) or PROXY, the family, a 16-bit length, the addresses, then
//! TLVs (skipped). The source is `None` for UNKNOWN, LOCAL, UNSPEC and UNIX.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest version 1 header, CRLF included (§2.1).
const V1_MAX: usize = 107;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
const V2_FIXED: usize = 16;

/// A complete PROXY header at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// 1 or 2.
    pub version: u8,
    /// Bytes the header takes; what follows is the client's stream.
    pub len: usize,
    /// The client's address, when the header names one.
    pub source: Option<SocketAddr>,
}

/// What makes a buffer not a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyError {
    pub detail: &'static str,
}

fn bad(detail: &'static str) -> ProxyError {
    ProxyError { detail }
}

/// The header at the front of `input`; see the module header for the three answers.
pub fn parse(input: &[u8]) -> Result<Option<ProxyHeader>, ProxyError> {
    let prefix_of = |signature: &[u8]| {
        let n = input.len().min(signature.len());
        input[..n] == signature[..n]
    };
    if prefix_of(V2_SIGNATURE) {
        parse_v2(input)
    } else if prefix_of(V1_PREFIX) {
        parse_v1(input)
    } else {
        Err(bad("no PROXY protocol header"))
    }
}

fn parse_v1(input: &[u8]) -> Result<Option<ProxyHeader>, ProxyError> {
    let window = &input[..input.len().min(V1_MAX)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        return if input.len() >= V1_MAX {
            Err(bad("PROXY v1 header longer than 107 bytes"))
        } else {
            Ok(None)
        };
    };
    match input.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(bad("PROXY v1 header with a CR not followed by LF")),
    }
    let line = std::str::from_utf8(&input[V1_PREFIX.len()..cr])
        .map_err(|_| bad("PROXY v1 header that is not ASCII"))?;
    let mut fields = line.split(' ');
    let source = match fields.next() {
        Some("UNKNOWN") => None,
        Some(family @ ("TCP4" | "TCP6")) => {
            let [Some(src), Some(dst), Some(sport), Some(dport), None] =
                std::array::from_fn(|_| fields.next())
            else {
                return Err(bad("PROXY v1 header without 4 address fields"));
            };
            let v4 = family == "TCP4";
            let ip = |text: &str| -> Result<IpAddr, ProxyError> {
                let addr = if v4 {
                    text.parse::<Ipv4Addr>().map(IpAddr::V4)
                } else {
                    text.parse::<Ipv6Addr>().map(IpAddr::V6)
                };
                addr.map_err(|_| bad("PROXY v1 header with an address not of its family"))
            };
            let port = |text: &str| -> Result<u16, ProxyError> {
                let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
                let minimal = text == "0" || !text.starts_with('0');
                match text.parse() {
                    Ok(port) if digits && minimal => Ok(port),
                    _ => Err(bad("PROXY v1 header with a bad port")),
                }
            };
            ip(dst)?;
            port(dport)?;
            Some(SocketAddr::new(ip(src)?, port(sport)?))
        }
        _ => return Err(bad("PROXY v1 header with an unknown protocol")),
    };
    Ok(Some(ProxyHeader {
        version: 1,
        len: cr + 2,
        source,
    }))
}

fn parse_v2(input: &[u8]) -> Result<Option<ProxyHeader>, ProxyError> {
    let Some(fixed) = input.get(..V2_FIXED) else {
        return Ok(None);
    };
    let (version, command) = (fixed[12] >> 4, fixed[12] & 0x0F);
    if version != 2 {
        return Err(bad("PROXY v2 header with a version other than 2"));
    }
    let local = match command {
        0x0 => true,
        0x1 => false,
        _ => return Err(bad("PROXY v2 header with an unknown command")),
    };
    let (family, transport) = (fixed[13] >> 4, fixed[13] & 0x0F);
    if family > 3 || transport > 2 {
        return Err(bad("PROXY v2 header with an unknown address family"));
    }
    let body_len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let len = V2_FIXED + body_len;
    let Some(body) = input.get(V2_FIXED..len) else {
        return Ok(None);
    };
    let needed = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if !local && body_len < needed {
        return Err(bad("PROXY v2 header shorter than its addresses"));
    }
    let source = match family {
        _ if local => None,
        1 => {
            let ip: [u8; 4] = body[0..4].try_into().expect("4 bytes");
            let port = u16::from_be_bytes([body[8], body[9]]);
            Some(SocketAddr::new(IpAddr::from(ip), port))
        }
        2 => {
            let ip: [u8; 16] = body[0..16].try_into().expect("16 bytes");
            let port = u16::from_be_bytes([body[32], body[33]]);
            Some(SocketAddr::new(IpAddr::from(ip), port))
        }
        _ => None,
    };
    Ok(Some(ProxyHeader {
        version: 2,
        len,
        source,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn addr(text: &str) -> Option<SocketAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn version_1_lines() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 50312 1883\r\n\x10MQTT";
        let header = parse(line).unwrap().unwrap();
        assert_eq!(header.len, line.len() - 5);
        assert_eq!(header.source, addr("192.0.2.7:50312"));
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 1883\r\n";
        assert_eq!(
            parse(line).unwrap().unwrap().source,
            addr("[2001:db8::7]:4000")
        );
        let line = b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n";
        assert_eq!(parse(line).unwrap().unwrap().source, None);
        assert_eq!(parse(b"PROXY UNKNOWN\r\n").unwrap().unwrap().len, 15);
    }

    #[test]
    fn version_2_headers() {
        let mut body = vec![192, 0, 2, 7, 10, 0, 0, 1];
        body.extend_from_slice(&50312u16.to_be_bytes());
        body.extend_from_slice(&1883u16.to_be_bytes());
        body.extend_from_slice(&[0x04, 0x00, 0x01, 0x00]); // a TLV, skipped
        let wire = v2(1, 0x11, &body);
        let header = parse(&[&wire[..], b"rest"].concat()).unwrap().unwrap();
        assert_eq!((header.version, header.len), (2, wire.len()));
        assert_eq!(header.source, addr("192.0.2.7:50312"));

        let mut body = [0u8; 36];
        body[15] = 7;
        body[32..34].copy_from_slice(&4000u16.to_be_bytes());
        let header = parse(&v2(1, 0x21, &body)).unwrap().unwrap();
        assert_eq!(header.source, addr("[::7]:4000"));

        assert_eq!(parse(&v2(0, 0x00, &[])).unwrap().unwrap().source, None);
        assert_eq!(parse(&v2(1, 0x00, &[])).unwrap().unwrap().source, None);
    }

    #[test]
    fn every_proper_prefix_is_incomplete_and_all_header() {
        let v1 = b"PROXY TCP4 192.0.2.7 10.0.0.1 50312 1883\r\n".to_vec();
        let v2 = v2(1, 0x11, &[1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
        for wire in [v1, v2] {
            for end in 0..wire.len() {
                assert_eq!(parse(&wire[..end]), Ok(None), "{:?}", &wire[..end]);
            }
        }
    }

    #[test]
    fn refusals() {
        let long = [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 100]].concat();
        let short_v2 = v2(1, 0x11, &[1, 2, 3]);
        let mut bad_version = v2(1, 0x11, &[0; 12]);
        bad_version[12] = 0x11;
        let cases: [(&[u8], &str); 11] = [
            (b"\x10\x0c\x00\x04MQTT", "no PROXY"),
            (b"GET /mqtt HTTP/1.1\r\n", "no PROXY"),
            (&long, "longer than 107"),
            (b"PROXY TCP4 1.2.3.4 1.2.3.5 1 2\rX", "CR not followed"),
            (b"PROXY UDP4 1.2.3.4 1.2.3.5 1 2\r\n", "unknown protocol"),
            (b"PROXY TCP4 1.2.3.4 1.2.3.5 1\r\n", "4 address fields"),
            (b"PROXY TCP4 ::1 1.2.3.5 1 2\r\n", "not of its family"),
            (b"PROXY TCP4 1.2.3.4 1.2.3.5 01 2\r\n", "bad port"),
            (b"PROXY TCP4 1.2.3.4 1.2.3.5 70000 2\r\n", "bad port"),
            (&short_v2, "shorter than its addresses"),
            (&bad_version, "version other than 2"),
        ];
        for (wire, detail) in cases {
            let err = parse(wire).unwrap_err();
            assert!(err.detail.contains(detail), "{wire:?}: {}", err.detail);
        }
    }
}
