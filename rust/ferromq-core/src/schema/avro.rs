//! Avro binary payloads checked against an Avro schema (`.avsc`, Avro 1.11
//! specification): the payload must decode as one datum of the schema and end
//! exactly there (no container file header, no single-object prefix).
//!
//! Every type is walked: `null`, `boolean` (0 or 1), `int` and `long` (zig-zag
//! varints within 32 and 64 bits), `float`, `double`, `bytes`, `string` (UTF-8),
//! `record`, `enum` (index within the symbols), `array` and `map` (blocks,
//! negative counts with their byte size), `union` (branch index in range), `fixed`
//! (its size); named types by name or full name (with namespaces), recursive ones
//! too. Logical types are annotations over these and are checked as their base
//! type. Nesting deeper than 64 levels in a payload is refused (a recursive schema
//! must not let a payload exhaust the stack).

use std::collections::HashMap;

use serde_json::Value;

/// A compiled Avro schema.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    root: Type,
    named: Vec<Type>,
}

#[derive(Debug, Clone)]
enum Type {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Record(Vec<(String, Type)>),
    Enum(usize),
    Array(Box<Type>),
    Map(Box<Type>),
    Union(Vec<Type>),
    Fixed(usize),
    Named(usize),
}

const MAX_DEPTH: usize = 64;

impl AvroSchema {
    /// Compile the schema text; the error names what is wrong and where.
    pub fn compile(text: &str) -> Result<AvroSchema, String> {
        let document: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut compiler = Compiler::default();
        let root = compiler.parse(&document, None, "schema")?;
        let named = compiler
            .named
            .into_iter()
            .map(|t| t.unwrap_or(Type::Null))
            .collect();
        Ok(AvroSchema { root, named })
    }

    /// Check a payload: one datum of the schema and nothing after it.
    pub fn check(&self, payload: &[u8]) -> Result<(), String> {
        let mut reader = Reader {
            bytes: payload,
            at: 0,
        };
        self.datum(&self.root, &mut reader, 0)?;
        if reader.at != payload.len() {
            return Err(format!(
                "{} bytes after the datum (at byte {})",
                payload.len() - reader.at,
                reader.at
            ));
        }
        Ok(())
    }

    fn datum(&self, kind: &Type, reader: &mut Reader<'_>, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        match kind {
            Type::Null => Ok(()),
            Type::Boolean => match reader.byte()? {
                0 | 1 => Ok(()),
                other => Err(reader.error(&format!("boolean byte {other}"))),
            },
            Type::Int => {
                let value = reader.long()?;
                i32::try_from(value)
                    .map(drop)
                    .map_err(|_| reader.error(&format!("int {value} out of range")))
            }
            Type::Long => reader.long().map(drop),
            Type::Float => reader.take(4).map(drop),
            Type::Double => reader.take(8).map(drop),
            Type::Bytes => reader.sized().map(drop),
            Type::String => {
                let bytes = reader.sized()?;
                std::str::from_utf8(bytes)
                    .map(drop)
                    .map_err(|_| reader.error("string is not UTF-8"))
            }
            Type::Record(fields) => fields
                .iter()
                .try_for_each(|(_, field)| self.datum(field, reader, depth + 1)),
            Type::Enum(symbols) => {
                let index = reader.long()?;
                if index < 0 || index as u64 >= *symbols as u64 {
                    return Err(reader.error(&format!("enum index {index} of {symbols} symbols")));
                }
                Ok(())
            }
            Type::Array(items) => self.blocks(reader, depth, |schema, reader, depth| {
                schema.datum(items, reader, depth + 1)
            }),
            Type::Map(values) => self.blocks(reader, depth, |schema, reader, depth| {
                let key = reader.sized()?;
                std::str::from_utf8(key).map_err(|_| reader.error("map key is not UTF-8"))?;
                schema.datum(values, reader, depth + 1)
            }),
            Type::Union(branches) => {
                let index = reader.long()?;
                let branch = usize::try_from(index)
                    .ok()
                    .and_then(|n| branches.get(n))
                    .ok_or_else(|| {
                        reader.error(&format!("union branch {index} of {}", branches.len()))
                    })?;
                self.datum(branch, reader, depth + 1)
            }
            Type::Fixed(size) => reader.take(*size).map(drop),
            Type::Named(n) => self.datum(&self.named[*n], reader, depth + 1),
        }
    }

    /// An array's or a map's blocks: a count, then (negative count) a byte size,
    /// then the items; a zero count ends them.
    fn blocks(
        &self,
        reader: &mut Reader<'_>,
        depth: usize,
        mut item: impl FnMut(&AvroSchema, &mut Reader<'_>, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let mut count = reader.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                count = count
                    .checked_neg()
                    .ok_or_else(|| reader.error("block count"))?;
                reader.long()?; // the block's size in bytes
            }
            for _ in 0..count {
                item(self, reader, depth)?;
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, problem: &str) -> String {
        format!("at byte {}: {problem}", self.at)
    }

    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| self.error("the payload ends inside a datum"))?;
        self.at += 1;
        Ok(byte)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| self.error("the payload ends inside a datum"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A zig-zag varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            if shift == 63 && byte > 1 {
                return Err(self.error("varint longer than 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(self.error("varint longer than 10 bytes"))
    }

    fn sized(&mut self) -> Result<&'a [u8], String> {
        let length = self.long()?;
        let length = usize::try_from(length).map_err(|_| self.error("negative length"))?;
        self.take(length)
    }
}

#[derive(Default)]
struct Compiler {
    names: HashMap<String, usize>,
    named: Vec<Option<Type>>,
}

fn full_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(space) if !name.contains('.') && !space.is_empty() => format!("{space}.{name}"),
        _ => name.to_owned(),
    }
}

impl Compiler {
    fn parse(&mut self, schema: &Value, namespace: Option<&str>, at: &str) -> Result<Type, String> {
        match schema {
            Value::String(name) => self.by_name(name, namespace, at),
            Value::Array(branches) => {
                let parsed = branches
                    .iter()
                    .enumerate()
                    .map(|(n, b)| self.parse(b, namespace, &format!("{at}[{n}]")))
                    .collect::<Result<_, _>>()?;
                Ok(Type::Union(parsed))
            }
            Value::Object(object) => {
                let kind = object
                    .get("type")
                    .ok_or_else(|| format!("{at}: no \"type\""))?;
                let Value::String(kind) = kind else {
                    return self.parse(kind, namespace, &format!("{at}.type"));
                };
                match kind.as_str() {
                    "record" | "error" | "enum" | "fixed" => {
                        self.named_type(kind, object, namespace, at)
                    }
                    "array" => {
                        let items = object
                            .get("items")
                            .ok_or_else(|| format!("{at}: an array needs \"items\""))?;
                        let items = self.parse(items, namespace, &format!("{at}.items"))?;
                        Ok(Type::Array(Box::new(items)))
                    }
                    "map" => {
                        let values = object
                            .get("values")
                            .ok_or_else(|| format!("{at}: a map needs \"values\""))?;
                        let values = self.parse(values, namespace, &format!("{at}.values"))?;
                        Ok(Type::Map(Box::new(values)))
                    }
                    primitive => self.by_name(primitive, namespace, at),
                }
            }
            other => Err(format!("{at}: not a schema: {other}")),
        }
    }

    fn by_name(&self, name: &str, namespace: Option<&str>, at: &str) -> Result<Type, String> {
        Ok(match name {
            "null" => Type::Null,
            "boolean" => Type::Boolean,
            "int" => Type::Int,
            "long" => Type::Long,
            "float" => Type::Float,
            "double" => Type::Double,
            "bytes" => Type::Bytes,
            "string" => Type::String,
            _ => {
                let n = self
                    .names
                    .get(&full_name(name, namespace))
                    .or_else(|| self.names.get(name))
                    .ok_or_else(|| format!("{at}: unknown type {name:?}"))?;
                Type::Named(*n)
            }
        })
    }

    fn named_type(
        &mut self,
        kind: &str,
        object: &serde_json::Map<String, Value>,
        namespace: Option<&str>,
        at: &str,
    ) -> Result<Type, String> {
        let Some(Value::String(name)) = object.get("name") else {
            return Err(format!("{at}: a {kind} needs a \"name\""));
        };
        let space = match object.get("namespace") {
            Some(Value::String(space)) => Some(space.as_str()),
            _ => namespace,
        };
        let full = full_name(name, space);
        let inner_space = full.rsplit_once('.').map(|(space, _)| space.to_owned());
        let n = self.named.len();
        if self.names.insert(full.clone(), n).is_some() {
            return Err(format!("{at}: {full:?} is defined twice"));
        }
        self.named.push(None); // a recursive record finds its index
        let here = format!("{at}({full})");
        let parsed = match kind {
            "enum" => match object.get("symbols") {
                Some(Value::Array(symbols)) => Type::Enum(symbols.len()),
                _ => return Err(format!("{here}: an enum needs \"symbols\"")),
            },
            "fixed" => match object.get("size").and_then(Value::as_u64) {
                Some(size) => Type::Fixed(size as usize),
                None => return Err(format!("{here}: a fixed needs a \"size\"")),
            },
            _ => {
                let Some(Value::Array(fields)) = object.get("fields") else {
                    return Err(format!("{here}: a record needs \"fields\""));
                };
                let mut parsed = Vec::with_capacity(fields.len());
                for (i, field) in fields.iter().enumerate() {
                    let field_name = match field.get("name") {
                        Some(Value::String(name)) => name.clone(),
                        _ => return Err(format!("{here}.fields[{i}]: no \"name\"")),
                    };
                    let kind = field
                        .get("type")
                        .ok_or_else(|| format!("{here}.{field_name}: no \"type\""))?;
                    let kind = self.parse(
                        kind,
                        inner_space.as_deref(),
                        &format!("{here}.{field_name}"),
                    )?;
                    parsed.push((field_name, kind));
                }
                Type::Record(parsed)
            }
        };
        self.named[n] = Some(parsed);
        Ok(Type::Named(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READING: &str = r#"{
        "type": "record", "name": "Reading", "namespace": "iot",
        "fields": [
            {"name": "device", "type": "string"},
            {"name": "value", "type": "double"},
            {"name": "unit", "type": {"type": "enum", "name": "Unit", "symbols": ["C", "F"]}},
            {"name": "tags", "type": {"type": "map", "values": "long"}},
            {"name": "next", "type": ["null", "Reading"]}
        ]
    }"#;

    fn zigzag(value: i64) -> Vec<u8> {
        let mut n = ((value << 1) ^ (value >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn reading(device: &str, unit: i64, next: Option<Vec<u8>>) -> Vec<u8> {
        let mut out = zigzag(device.len() as i64);
        out.extend_from_slice(device.as_bytes());
        out.extend_from_slice(&21.5f64.to_le_bytes());
        out.extend(zigzag(unit));
        out.extend(zigzag(1)); // one map entry
        out.extend(zigzag(1));
        out.push(b'k');
        out.extend(zigzag(-7));
        out.extend(zigzag(0));
        match next {
            None => out.extend(zigzag(0)),
            Some(inner) => {
                out.extend(zigzag(1));
                out.extend(inner);
            }
        }
        out
    }

    #[test]
    fn a_datum_of_the_schema_passes_and_others_fail() {
        let schema = AvroSchema::compile(READING).unwrap();
        let inner = reading("dev-2", 1, None);
        assert_eq!(schema.check(&reading("dev-1", 0, Some(inner))), Ok(()));
        assert!(schema
            .check(&reading("dev-1", 2, None))
            .unwrap_err()
            .contains("enum index 2"));
        let mut trailing = reading("dev-1", 0, None);
        trailing.push(0);
        assert!(schema
            .check(&trailing)
            .unwrap_err()
            .contains("1 bytes after"));
        let whole = reading("dev-1", 0, None);
        assert!(schema
            .check(&whole[..whole.len() - 3])
            .unwrap_err()
            .contains("ends inside"));
        assert!(schema.check(b"{\"device\": 1}").is_err());
    }

    #[test]
    fn a_recursive_payload_deeper_than_the_limit_is_refused() {
        let schema = AvroSchema::compile(READING).unwrap();
        let mut payload = reading("d", 0, None);
        for _ in 0..40 {
            payload = reading("d", 0, Some(payload));
        }
        assert!(schema.check(&payload).unwrap_err().contains("deeper than"));
    }

    #[test]
    fn bad_schemas_name_the_problem() {
        let refused = |text: &str| AvroSchema::compile(text).unwrap_err();
        assert!(refused(r#"{"type": "record", "name": "R"}"#).contains("needs \"fields\""));
        assert!(refused(r#""Unknown""#).contains("unknown type"));
        assert!(refused("{").contains("not JSON"));
        assert!(refused(r#"{"type": "array"}"#).contains("needs \"items\""));
    }
}
