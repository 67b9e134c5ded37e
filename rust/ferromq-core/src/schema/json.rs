//! JSON Schema, compiled once and checked per payload (draft 2020-12 and draft-07
//! vocabulary, the part telemetry schemas use).
//!
//! Supported: boolean schemas; `type` (one or a list; `integer` is a number with no
//! fraction); `enum`, `const`; `properties`, `required`, `additionalProperties`,
//! `patternProperties`, `minProperties`, `maxProperties`; `items` (one schema),
//! `prefixItems`, `minItems`, `maxItems`, `uniqueItems`; `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`; `minLength`, `maxLength`
//! (in characters), `pattern`; `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`;
//! `$ref` to this document's `#/$defs/...` or `#/definitions/...`. Annotations
//! (`$schema`, `$id`, `title`, `description`, `default`, `examples`, `format`,
//! `$comment`, `deprecated`, `readOnly`, `writeOnly`) are accepted and not checked.
//! Any other keyword is refused when the schema is compiled, so that nothing a
//! schema asks for is silently left unchecked.
//!
//! Patterns are Rust `regex` (linear time; no look-around or backreferences) and,
//! as JSON Schema says, match anywhere unless anchored. The payload is parsed with
//! `serde_json` (its nesting limit is 128), then walked; the first failure is
//! returned with its JSON Pointer.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Value};

/// A compiled schema.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    root: Node,
    defs: Vec<Node>,
}

#[derive(Debug, Clone)]
enum Node {
    Any,
    Never,
    Checks(Box<[Check]>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Null,
    Boolean,
    Object,
    Array,
    Number,
    Integer,
    String,
}

const TYPES: [(&str, Type); 7] = [
    ("null", Type::Null),
    ("boolean", Type::Boolean),
    ("object", Type::Object),
    ("array", Type::Array),
    ("number", Type::Number),
    ("integer", Type::Integer),
    ("string", Type::String),
];

#[derive(Debug, Clone)]
enum Check {
    Types(Vec<Type>),
    Enum(Vec<Value>),
    Const(Value),
    Properties(Vec<(String, Node)>),
    Required(Vec<String>),
    Additional {
        known: Vec<String>,
        patterns: Vec<Regex>,
        schema: Box<Node>,
    },
    PatternProperties(Vec<(Regex, Node)>),
    MinProperties(usize),
    MaxProperties(usize),
    Items {
        after: usize,
        schema: Box<Node>,
    },
    PrefixItems(Vec<Node>),
    MinItems(usize),
    MaxItems(usize),
    UniqueItems,
    Minimum(f64),
    Maximum(f64),
    ExclusiveMinimum(f64),
    ExclusiveMaximum(f64),
    MultipleOf(f64),
    MinLength(usize),
    MaxLength(usize),
    Pattern(Regex),
    AllOf(Vec<Node>),
    AnyOf(Vec<Node>),
    OneOf(Vec<Node>),
    Not(Box<Node>),
    IfThenElse {
        condition: Box<Node>,
        then: Box<Node>,
        otherwise: Box<Node>,
    },
    Ref(usize),
}

const ANNOTATIONS: [&str; 12] = [
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$anchor",
];

/// Compiles a schema document: `$defs` / `definitions` resolved by name.
struct Compiler<'a> {
    document: &'a Value,
    refs: HashMap<String, usize>,
    defs: Vec<Option<Node>>,
}

impl JsonSchema {
    /// Compile the schema text; the error names the keyword and where it is.
    pub fn compile(text: &str) -> Result<JsonSchema, String> {
        let document: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut compiler = Compiler {
            document: &document,
            refs: HashMap::new(),
            defs: Vec::new(),
        };
        let root = compiler.node(&document, "#")?;
        let defs = compiler
            .defs
            .into_iter()
            .map(|d| d.unwrap_or(Node::Any))
            .collect();
        Ok(JsonSchema { root, defs })
    }

    /// Check a payload; the error says what failed and where (a JSON Pointer).
    pub fn check(&self, payload: &[u8]) -> Result<(), String> {
        let value: Value = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
        self.check_node(&self.root, &value, &mut String::new())
    }

    fn check_node(&self, node: &Node, value: &Value, at: &mut String) -> Result<(), String> {
        match node {
            Node::Any => Ok(()),
            Node::Never => Err(failure(at, "no value is allowed here")),
            Node::Checks(checks) => checks.iter().try_for_each(|c| self.check_one(c, value, at)),
        }
    }

    fn passes(&self, node: &Node, value: &Value) -> bool {
        self.check_node(node, value, &mut String::new()).is_ok()
    }

    fn check_one(&self, check: &Check, value: &Value, at: &mut String) -> Result<(), String> {
        match (check, value) {
            (Check::Types(types), _) => {
                if types.iter().any(|t| has_type(value, *t)) {
                    return Ok(());
                }
                let names: Vec<&str> = types.iter().map(|t| type_name(*t)).collect();
                let wanted = names.join(" or ");
                Err(failure(
                    at,
                    &format!("expected {wanted}, got {}", kind_of(value)),
                ))
            }
            (Check::Enum(options), _) => (options.iter().any(|o| same(o, value)))
                .then_some(())
                .ok_or_else(|| failure(at, "not one of the enum's values")),
            (Check::Const(expected), _) => same(expected, value)
                .then_some(())
                .ok_or_else(|| failure(at, &format!("expected {expected}"))),
            (Check::Properties(properties), Value::Object(object)) => {
                for (name, schema) in properties {
                    if let Some(inner) = object.get(name) {
                        self.descend(schema, inner, at, name)?;
                    }
                }
                Ok(())
            }
            (Check::Required(names), Value::Object(object)) => {
                match names.iter().find(|n| !object.contains_key(*n)) {
                    Some(missing) => Err(failure(at, &format!("missing property {missing:?}"))),
                    None => Ok(()),
                }
            }
            (
                Check::Additional {
                    known,
                    patterns,
                    schema,
                },
                Value::Object(object),
            ) => {
                for (name, inner) in object {
                    let listed = known.iter().any(|k| k == name)
                        || patterns.iter().any(|p| p.is_match(name));
                    if !listed {
                        if matches!(**schema, Node::Never) {
                            return Err(failure(at, &format!("property {name:?} is not allowed")));
                        }
                        self.descend(schema, inner, at, name)?;
                    }
                }
                Ok(())
            }
            (Check::PatternProperties(patterns), Value::Object(object)) => {
                for (name, inner) in object {
                    for (pattern, schema) in patterns {
                        if pattern.is_match(name) {
                            self.descend(schema, inner, at, name)?;
                        }
                    }
                }
                Ok(())
            }
            (Check::MinProperties(n), Value::Object(object)) => bound(
                object.len() >= *n,
                at,
                &format!("fewer than {n} properties"),
            ),
            (Check::MaxProperties(n), Value::Object(object)) => {
                bound(object.len() <= *n, at, &format!("more than {n} properties"))
            }
            (Check::Items { after, schema }, Value::Array(items)) => {
                for (n, item) in items.iter().enumerate().skip(*after) {
                    self.descend(schema, item, at, &n.to_string())?;
                }
                Ok(())
            }
            (Check::PrefixItems(schemas), Value::Array(items)) => {
                for (n, (schema, item)) in schemas.iter().zip(items).enumerate() {
                    self.descend(schema, item, at, &n.to_string())?;
                }
                Ok(())
            }
            (Check::MinItems(n), Value::Array(items)) => {
                bound(items.len() >= *n, at, &format!("fewer than {n} items"))
            }
            (Check::MaxItems(n), Value::Array(items)) => {
                bound(items.len() <= *n, at, &format!("more than {n} items"))
            }
            (Check::UniqueItems, Value::Array(items)) => {
                let repeated = items
                    .iter()
                    .enumerate()
                    .any(|(n, a)| items[..n].iter().any(|b| same(a, b)));
                bound(!repeated, at, "items are not unique")
            }
            (Check::Minimum(limit), Value::Number(n)) => {
                bound(number(n) >= *limit, at, &format!("less than {limit}"))
            }
            (Check::Maximum(limit), Value::Number(n)) => {
                bound(number(n) <= *limit, at, &format!("greater than {limit}"))
            }
            (Check::ExclusiveMinimum(limit), Value::Number(n)) => {
                bound(number(n) > *limit, at, &format!("not greater than {limit}"))
            }
            (Check::ExclusiveMaximum(limit), Value::Number(n)) => {
                bound(number(n) < *limit, at, &format!("not less than {limit}"))
            }
            (Check::MultipleOf(step), Value::Number(n)) => {
                let ratio = number(n) / step;
                let whole = (ratio - ratio.round()).abs() < 1e-9;
                bound(whole, at, &format!("not a multiple of {step}"))
            }
            (Check::MinLength(n), Value::String(text)) => {
                let length = text.chars().count();
                bound(length >= *n, at, &format!("shorter than {n} characters"))
            }
            (Check::MaxLength(n), Value::String(text)) => {
                let length = text.chars().count();
                bound(length <= *n, at, &format!("longer than {n} characters"))
            }
            (Check::Pattern(pattern), Value::String(text)) => bound(
                pattern.is_match(text),
                at,
                &format!("does not match {:?}", pattern.as_str()),
            ),
            (Check::AllOf(schemas), _) => schemas
                .iter()
                .try_for_each(|schema| self.check_node(schema, value, at)),
            (Check::AnyOf(schemas), _) => bound(
                schemas.iter().any(|schema| self.passes(schema, value)),
                at,
                "matches none of anyOf",
            ),
            (Check::OneOf(schemas), _) => {
                let matched = schemas.iter().filter(|s| self.passes(s, value)).count();
                bound(
                    matched == 1,
                    at,
                    &format!("matches {matched} of oneOf, not exactly one"),
                )
            }
            (Check::Not(schema), _) => {
                bound(!self.passes(schema, value), at, "matches the schema of not")
            }
            (
                Check::IfThenElse {
                    condition,
                    then,
                    otherwise,
                },
                _,
            ) => {
                let branch = if self.passes(condition, value) {
                    then
                } else {
                    otherwise
                };
                self.check_node(branch, value, at)
            }
            (Check::Ref(n), _) => self.check_node(&self.defs[*n], value, at),
            // A keyword for another type says nothing about this value.
            _ => Ok(()),
        }
    }

    fn descend(
        &self,
        node: &Node,
        value: &Value,
        at: &mut String,
        key: &str,
    ) -> Result<(), String> {
        let length = at.len();
        at.push('/');
        at.push_str(&key.replace('~', "~0").replace('/', "~1"));
        let result = self.check_node(node, value, at);
        at.truncate(length);
        result
    }
}

fn failure(at: &str, problem: &str) -> String {
    let at = if at.is_empty() { "/" } else { at };
    format!("at {at}: {problem}")
}

fn bound(ok: bool, at: &str, problem: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(failure(at, problem))
    }
}

fn number(n: &serde_json::Number) -> f64 {
    n.as_f64().unwrap_or(f64::NAN)
}

fn has_type(value: &Value, wanted: Type) -> bool {
    match (wanted, value) {
        (Type::Null, Value::Null)
        | (Type::Boolean, Value::Bool(_))
        | (Type::Object, Value::Object(_))
        | (Type::Array, Value::Array(_))
        | (Type::Number, Value::Number(_))
        | (Type::String, Value::String(_)) => true,
        (Type::Integer, Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_name(wanted: Type) -> &'static str {
    TYPES
        .iter()
        .find(|(_, t)| *t == wanted)
        .map_or("?", |(name, _)| name)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Number(_) => "number",
        Value::String(_) => "string",
    }
}

/// JSON equality, where 1 and 1.0 are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number(x) == number(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

impl Compiler<'_> {
    fn node(&mut self, schema: &Value, at: &str) -> Result<Node, String> {
        let object = match schema {
            Value::Bool(true) => return Ok(Node::Any),
            Value::Bool(false) => return Ok(Node::Never),
            Value::Object(object) => object,
            other => {
                return Err(format!(
                    "{at}: a schema is an object or a boolean, not {other}"
                ))
            }
        };
        let mut checks = Vec::new();
        for (keyword, value) in object {
            let here = format!("{at}/{keyword}");
            if let Some(check) = self.check(object, keyword, value, &here)? {
                checks.push(check);
            }
        }
        Ok(if checks.is_empty() {
            Node::Any
        } else {
            Node::Checks(checks.into())
        })
    }

    fn nodes(&mut self, value: &Value, at: &str) -> Result<Vec<Node>, String> {
        let Value::Array(items) = value else {
            return Err(format!("{at}: expected an array of schemas"));
        };
        items
            .iter()
            .enumerate()
            .map(|(n, item)| self.node(item, &format!("{at}/{n}")))
            .collect()
    }

    fn check(
        &mut self,
        parent: &Map<String, Value>,
        keyword: &str,
        value: &Value,
        at: &str,
    ) -> Result<Option<Check>, String> {
        let check = match keyword {
            "type" => Check::Types(types(value, at)?),
            "enum" => match value {
                Value::Array(options) => Check::Enum(options.clone()),
                _ => return Err(format!("{at}: expected an array")),
            },
            "const" => Check::Const(value.clone()),
            "properties" => {
                let Value::Object(properties) = value else {
                    return Err(format!("{at}: expected an object"));
                };
                let mut compiled = Vec::new();
                for (name, schema) in properties {
                    compiled.push((name.clone(), self.node(schema, &format!("{at}/{name}"))?));
                }
                Check::Properties(compiled)
            }
            "required" => Check::Required(strings(value, at)?),
            "additionalProperties" => {
                let known = match parent.get("properties") {
                    Some(Value::Object(p)) => p.keys().cloned().collect(),
                    _ => Vec::new(),
                };
                let patterns = match parent.get("patternProperties") {
                    Some(Value::Object(p)) => {
                        p.keys().map(|k| pattern(k, at)).collect::<Result<_, _>>()?
                    }
                    _ => Vec::new(),
                };
                Check::Additional {
                    known,
                    patterns,
                    schema: Box::new(self.node(value, at)?),
                }
            }
            "patternProperties" => {
                let Value::Object(patterns) = value else {
                    return Err(format!("{at}: expected an object"));
                };
                let mut compiled = Vec::new();
                for (key, schema) in patterns {
                    let node = self.node(schema, &format!("{at}/{key}"))?;
                    compiled.push((pattern(key, at)?, node));
                }
                Check::PatternProperties(compiled)
            }
            "minProperties" => Check::MinProperties(count(value, at)?),
            "maxProperties" => Check::MaxProperties(count(value, at)?),
            "items" => match value {
                Value::Array(_) => {
                    // draft-07's tuple form: 2020-12 calls it prefixItems.
                    return Err(format!("{at}: an array of schemas; use prefixItems"));
                }
                _ => Check::Items {
                    after: match parent.get("prefixItems") {
                        Some(Value::Array(prefix)) => prefix.len(),
                        _ => 0,
                    },
                    schema: Box::new(self.node(value, at)?),
                },
            },
            "prefixItems" => Check::PrefixItems(self.nodes(value, at)?),
            "minItems" => Check::MinItems(count(value, at)?),
            "maxItems" => Check::MaxItems(count(value, at)?),
            "uniqueItems" => match value {
                Value::Bool(true) => Check::UniqueItems,
                Value::Bool(false) => return Ok(None),
                _ => return Err(format!("{at}: expected a boolean")),
            },
            "minimum" => Check::Minimum(limit(value, at)?),
            "maximum" => Check::Maximum(limit(value, at)?),
            "exclusiveMinimum" => Check::ExclusiveMinimum(limit(value, at)?),
            "exclusiveMaximum" => Check::ExclusiveMaximum(limit(value, at)?),
            "multipleOf" => match limit(value, at)? {
                step if step > 0.0 => Check::MultipleOf(step),
                _ => return Err(format!("{at}: must be greater than 0")),
            },
            "minLength" => Check::MinLength(count(value, at)?),
            "maxLength" => Check::MaxLength(count(value, at)?),
            "pattern" => match value {
                Value::String(text) => Check::Pattern(pattern(text, at)?),
                _ => return Err(format!("{at}: expected a string")),
            },
            "allOf" => Check::AllOf(self.nodes(value, at)?),
            "anyOf" => Check::AnyOf(self.nodes(value, at)?),
            "oneOf" => Check::OneOf(self.nodes(value, at)?),
            "not" => Check::Not(Box::new(self.node(value, at)?)),
            "if" => Check::IfThenElse {
                condition: Box::new(self.node(value, at)?),
                then: Box::new(match parent.get("then") {
                    Some(then) => self.node(then, at)?,
                    None => Node::Any,
                }),
                otherwise: Box::new(match parent.get("else") {
                    Some(otherwise) => self.node(otherwise, at)?,
                    None => Node::Any,
                }),
            },
            "then" | "else" | "$defs" | "definitions" => return Ok(None), // read by others
            "$ref" => match value {
                Value::String(target) => Check::Ref(self.reference(target, at)?),
                _ => return Err(format!("{at}: expected a string")),
            },
            _ if ANNOTATIONS.contains(&keyword) => return Ok(None),
            _ => return Err(format!("{at}: the keyword {keyword:?} is not supported")),
        };
        Ok(Some(check))
    }

    /// The index of a `#/$defs/name` (or `#/definitions/name`) target, compiled once.
    fn reference(&mut self, target: &str, at: &str) -> Result<usize, String> {
        if let Some(&n) = self.refs.get(target) {
            return Ok(n);
        }
        let name = target
            .strip_prefix("#/$defs/")
            .map(|name| ("$defs", name))
            .or_else(|| {
                target
                    .strip_prefix("#/definitions/")
                    .map(|n| ("definitions", n))
            });
        let schema = match (name, target) {
            (_, "#") => self.document,
            (Some((section, name)), _) => self
                .document
                .get(section)
                .and_then(|defs| defs.get(name))
                .ok_or_else(|| format!("{at}: {target:?} is not in this document"))?,
            (None, _) => {
                return Err(format!(
                    "{at}: {target:?}: only this document's #/$defs/... is supported"
                ))
            }
        };
        let n = self.defs.len();
        self.refs.insert(target.to_owned(), n);
        self.defs.push(None); // a recursive reference finds its index
        let node = self.node(schema, target)?;
        self.defs[n] = Some(node);
        Ok(n)
    }
}

fn types(value: &Value, at: &str) -> Result<Vec<Type>, String> {
    let names = match value {
        Value::String(name) => vec![name.clone()],
        _ => strings(value, at)?,
    };
    names
        .iter()
        .map(|name| {
            TYPES
                .iter()
                .find(|(known, _)| known == name)
                .map(|(_, t)| *t)
                .ok_or_else(|| format!("{at}: unknown type {name:?}"))
        })
        .collect()
}

fn strings(value: &Value, at: &str) -> Result<Vec<String>, String> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.clone()),
                _ => Err(format!("{at}: expected an array of strings")),
            })
            .collect(),
        _ => Err(format!("{at}: expected an array of strings")),
    }
}

fn count(value: &Value, at: &str) -> Result<usize, String> {
    value
        .as_u64()
        .map(|n| n as usize)
        .ok_or_else(|| format!("{at}: expected a non-negative integer"))
}

fn limit(value: &Value, at: &str) -> Result<f64, String> {
    value
        .as_f64()
        .ok_or_else(|| format!("{at}: expected a number"))
}

fn pattern(text: &str, at: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| {
        let message = e.to_string();
        let problem = message
            .lines()
            .last()
            .unwrap_or("")
            .trim_start_matches("error: ");
        format!("{at}: pattern {text:?}: {problem}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const READING: &str = r##"{
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["device", "value"],
        "properties": {
            "device": {"type": "string", "pattern": "^dev-[0-9]+$"},
            "value": {"type": "number", "minimum": -40, "maximum": 125},
            "unit": {"enum": ["C", "F"]},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3}
        },
        "additionalProperties": false,
        "$defs": {"tag": {"type": "string", "minLength": 1}}
    }"##;

    fn check(schema: &str, payload: &str) -> Result<(), String> {
        JsonSchema::compile(schema)
            .unwrap()
            .check(payload.as_bytes())
    }

    #[test]
    fn a_valid_reading_passes() {
        let ok = r#"{"device": "dev-1", "value": 21.5, "unit": "C", "tags": ["a"]}"#;
        assert_eq!(check(READING, ok), Ok(()));
    }

    #[test]
    fn each_failure_says_what_and_where() {
        let cases = [
            (r#"{"value": 1}"#, "at /: missing property \"device\""),
            (
                r#"{"device": "x", "value": 1}"#,
                "at /device: does not match",
            ),
            (
                r#"{"device": "dev-1", "value": 200}"#,
                "at /value: greater than 125",
            ),
            (
                r#"{"device": "dev-1", "value": "hot"}"#,
                "at /value: expected number, got string",
            ),
            (
                r#"{"device": "dev-1", "value": 1, "unit": "K"}"#,
                "at /unit: not one of",
            ),
            (
                r#"{"device": "dev-1", "value": 1, "x": 1}"#,
                "at /: property \"x\" is not allowed",
            ),
            (
                r#"{"device": "dev-1", "value": 1, "tags": [""]}"#,
                "at /tags/0: shorter than 1",
            ),
            ("[1, 2", "not JSON"),
            ("21.5", "at /: expected object, got number"),
        ];
        for (payload, expected) in cases {
            let error = check(READING, payload).unwrap_err();
            assert!(error.starts_with(expected), "{payload}: {error}");
        }
    }

    #[test]
    fn integers_combinators_and_recursion() {
        assert!(check(r#"{"type": "integer"}"#, "3.0").is_ok());
        assert!(check(r#"{"type": "integer"}"#, "3.5").is_err());
        let either = r#"{"oneOf": [{"type": "string"}, {"type": "integer", "multipleOf": 5}]}"#;
        assert!(check(either, "10").is_ok());
        assert!(check(either, "7").is_err());
        let conditional = r#"{"if": {"properties": {"kind": {"const": "t"}}},
            "then": {"required": ["celsius"]}, "else": {"required": ["raw"]}}"#;
        assert!(check(conditional, r#"{"kind": "t", "celsius": 1}"#).is_ok());
        assert!(check(conditional, r#"{"kind": "t", "raw": 1}"#).is_err());
        assert!(check(conditional, r#"{"kind": "u", "raw": 1}"#).is_ok());
        // No "kind": `properties` holds, so the condition does, and "celsius" is required.
        assert!(check(conditional, r#"{"raw": 1}"#).is_err());
        let tree = r##"{"$defs": {"node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"}"##;
        assert!(check(tree, r#"{"children": [{"children": []}]}"#).is_ok());
        assert!(check(tree, r#"{"children": [{"children": 1}]}"#).is_err());
        assert!(check(r#"{"uniqueItems": true}"#, "[1, 1.0]").is_err());
    }

    #[test]
    fn a_schema_asking_for_what_is_not_checked_is_refused() {
        let refused = |schema: &str| JsonSchema::compile(schema).unwrap_err();
        assert!(refused(r#"{"unevaluatedProperties": false}"#).contains("not supported"));
        assert!(refused(r#"{"$ref": "other.json"}"#).contains("only this document"));
        assert!(refused(r#"{"type": "decimal"}"#).contains("unknown type"));
        assert!(refused(r#"{"pattern": "("}"#).contains("pattern"));
        assert!(refused("{").contains("not JSON"));
    }
}
