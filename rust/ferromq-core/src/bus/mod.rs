//! The cross-shard bus of a node (issue 16): how shards, each a process with its own
//! engine, hand each other publishes, subscription changes and session moves.
//!
//! - [`ring`]: one direction between two shards, a single-producer single-consumer
//!   byte ring in shared memory, written in batches once per loop tick.
pub mod ring;
