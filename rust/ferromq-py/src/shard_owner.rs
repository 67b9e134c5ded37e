//! Which shard a connection belongs to (issue 16, docs/shards.md, "Sessions"): a client
//! id has one owner shard, `shard_of`, and the shard that accepted a connection reads
//! its first packet with `connect_owner` to learn it before anything else happens,
//! so a session only ever lives on its owner.

use bytes::BytesMut;
use ferromq_core::bus;
use ferromq_core::codec::PROTOCOL_MAX_PACKET_SIZE;
use ferromq_core::transport::websocket::{Deframer, Progress};
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(shard_of, m)?)?;
    m.add_function(wrap_pyfunction!(connect_owner, m)?)?;
    Ok(())
}

/// The shard of `count` that owns `client_id` (FNV-1a of its UTF-8 bytes, modulo
/// `count`): the same in every process and after every restart.
#[pyfunction]
fn shard_of(client_id: &str, count: u16) -> PyResult<u16> {
    if count == 0 {
        return Err(errors::bad_argument("shard count must be at least 1"));
    }
    Ok(bus::shard_of(client_id, count))
}

/// The shard of `count` that owns the connection whose first bytes are `data`
/// (`framing` "websocket": the client's frames after the upgrade), as
/// `ferromq_core::bus::connect_owner` decides it: None while its CONNECT is not whole;
/// `here` when the bytes are not a well-formed CONNECT, are larger than
/// `max_packet_size` or name no client id (this shard's engine then refuses the
/// connection with the reason code the protocol asks for, or assigns the id).
#[pyfunction]
fn connect_owner(
    data: &[u8],
    framing: &str,
    max_packet_size: u32,
    here: u16,
    count: u16,
) -> PyResult<Option<u16>> {
    match framing {
        "mqtt" => Ok(bus::connect_owner(data, max_packet_size, here, count)),
        "websocket" => {
            let mut payload = BytesMut::new();
            let mut replies = BytesMut::new();
            match Deframer::new(PROTOCOL_MAX_PACKET_SIZE).deframe(data, &mut payload, &mut replies)
            {
                Ok(Progress::Open(_)) => {
                    Ok(bus::connect_owner(&payload, max_packet_size, here, count))
                }
                Ok(Progress::Closed) | Err(_) => Ok(Some(here)),
            }
        }
        other => Err(errors::bad_argument(format!(
            "unknown framing {other:?} (mqtt or websocket)"
        ))),
    }
}
