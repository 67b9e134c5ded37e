//! What sits between a socket and MQTT, sans IO: the PROXY protocol header a load
//! balancer puts before a connection's first byte (`proxy`), and the WebSocket framing
//! MQTT may travel in (`websocket`, which the engine undoes per connection, see
//! `engine/framing.rs`). TLS is the event loop's (Python's `ssl`), not this crate's.

pub mod proxy;
pub mod websocket;
