//! Which shard a connection belongs to (issue 16, docs/shards.md, "Sessions"): a client
//! id has one owner shard, `shard_of`, and the shard that accepted a connection reads
//! its first packet with `connect_client_id` to learn it before anything else happens,
//! so a session only ever lives on its owner.

use bytes::BytesMut;
use ferromq_core::codec::{
    read_fixed_header, FrameDecoder, Packet, PacketType, PROTOCOL_MAX_PACKET_SIZE,
};
use ferromq_core::transport::websocket::{Deframer, Progress};
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(shard_of, m)?)?;
    m.add_function(wrap_pyfunction!(connect_client_id, m)?)?;
    Ok(())
}

/// The shard of `count` that owns `client_id` (FNV-1a of its UTF-8 bytes, modulo
/// `count`): the same in every process and after every restart.
#[pyfunction]
fn shard_of(client_id: &str, count: u16) -> PyResult<u16> {
    if count == 0 {
        return Err(errors::bad_argument("shard count must be at least 1"));
    }
    Ok(ferromq_core::bus::shard_of(client_id, count))
}

/// The client id of the CONNECT at the start of `data`, the bytes a connection sent
/// first (`framing` "websocket": the client's frames after the upgrade). `None` while
/// the packet is incomplete; `ValueError` when the bytes are not a well-formed CONNECT
/// (the accepting shard then keeps the connection and its engine refuses it with the
/// reason code the protocol asks for).
#[pyfunction]
fn connect_client_id(data: &[u8], framing: &str) -> PyResult<Option<String>> {
    let mqtt: BytesMut;
    let bytes = match framing {
        "mqtt" => data,
        "websocket" => {
            let mut payload = BytesMut::new();
            let mut replies = BytesMut::new();
            match Deframer::new(PROTOCOL_MAX_PACKET_SIZE).deframe(data, &mut payload, &mut replies)
            {
                Ok(Progress::Open(_)) => {}
                Ok(Progress::Closed) => {
                    return Err(errors::bad_argument("websocket closed before CONNECT"))
                }
                Err(error) => return Err(errors::bad_argument(error.detail)),
            }
            mqtt = payload;
            &mqtt
        }
        other => {
            return Err(errors::bad_argument(format!(
                "unknown framing {other:?} (mqtt or websocket)"
            )))
        }
    };
    let header = match read_fixed_header(bytes, PROTOCOL_MAX_PACKET_SIZE) {
        Ok(Some(header)) => header,
        Ok(None) => return Ok(None),
        Err(error) => return Err(errors::bad_argument(error.to_string())),
    };
    if header.packet_type != PacketType::Connect {
        return Err(errors::bad_argument("the first packet is not a CONNECT"));
    }
    let Some(frame) = bytes.get(..header.frame_len) else {
        return Ok(None);
    };
    let (packets, _, error) = FrameDecoder::new(PROTOCOL_MAX_PACKET_SIZE, None).decode_slice(frame);
    match (packets.into_iter().next(), error) {
        (Some(Packet::Connect(connect)), _) => Ok(Some(connect.client_id.as_str().to_owned())),
        (_, Some(error)) => Err(errors::bad_argument(error.to_string())),
        _ => Err(errors::bad_argument("the first packet is not a CONNECT")),
    }
}
