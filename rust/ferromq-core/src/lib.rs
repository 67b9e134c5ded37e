//! ferromq-core: the sans-IO MQTT engine of ferromq.
//!
//! Nothing in this crate touches a socket, a clock or Python. Inputs are bytes and
//! decisions; outputs are bytes and events. That keeps every part deterministic and
//! testable with `cargo test`, fuzzable with `cargo fuzz` and benchmarkable without a
//! network. The pyo3 binding lives in the separate `ferromq-py` crate.
//!
//! - [`codec`]: every packet of MQTT 3.1, 3.1.1 and 5.0, streaming decode and encode.
//! - [`topic`]: topic-name and topic-filter rules, and the subscription index.
//! - [`retain`]: the retained-message index.
//! - [`durability`]: the record vocabulary, the stored log and the frames that leave a
//!   process (bus, cluster), each with its format version.
//! - [`store`]: external stores' encodings (Redis), built from journal batches.
//! - [`transport`]: what sits between a socket and MQTT: the PROXY protocol header
//!   and WebSocket framing.
//! - [`bus`]: the cross-shard bus (shared-memory rings between a node's shards).
//! - [`acl`]: access-control rules compiled by Python, checked per message.
//! - [`export`]: the `[stream]` records (Avro) for the Spark pipeline, in batches.
//! - [`schema`]: payload schemas (JSON Schema, Avro) for validation at ingress.
//! - [`choice`]: settings chosen by name (`FromStr` per enum, one table each).

pub mod acl;
pub mod bus;
pub mod choice;
pub mod codec;
pub mod durability;
pub mod engine;
pub mod export;
pub mod retain;
pub mod schema;
pub mod store;
pub mod topic;
pub mod transport;
