//! Payload schemas, compiled once and checked per message by the engine's
//! validation at ingress (`engine::validation`): a JSON Schema for JSON payloads
//! (`json`) or an Avro schema for Avro binary payloads (`avro`). Pure functions of
//! the schema text and the payload bytes; an error is one line saying what failed
//! and where.

mod avro;
mod json;

pub use avro::AvroSchema;
pub use json::JsonSchema;

/// A schema a payload is checked against.
#[derive(Debug, Clone)]
pub enum PayloadSchema {
    Json(JsonSchema),
    Avro(AvroSchema),
}

impl PayloadSchema {
    /// Check `payload`; the error says what failed and where.
    pub fn check(&self, payload: &[u8]) -> Result<(), String> {
        match self {
            PayloadSchema::Json(schema) => schema.check(payload),
            PayloadSchema::Avro(schema) => schema.check(payload),
        }
    }
}
