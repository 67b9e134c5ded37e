//! Store encodings built in compiled code, so that writing a journal batch to an
//! external store costs Python nothing per message (docs/architecture.md, "Durable
//! store"). Sans-IO like the engine: bytes in, bytes out; the Python store moves them.
//!
//! - [`resp`]: the Redis protocol, commands written into one buffer and replies read
//!   back in bulk.
//! - [`redis`]: the Redis layout (TBMQ's, seed 000), its Lua scripts, a journal batch
//!   as one pipelined buffer per node, and Redis's contents back as journal records.
//! - [`slots`]: Redis Cluster hash slots and the slot → node table.

pub mod redis;
pub mod resp;
pub mod slots;
