//! The `key=value` fields of a text log line (`ferromq.log.TextFormatter`), spelt in
//! one call per line: a connection storm logs two lines per connection at `info`, and
//! spelling ten fields in Python was most of a line's cost.
//!
//! A value is written as JSON spells it (`null`, `true`, `false`, numbers), a string
//! bare when it is one token (no whitespace, `=`, `"` or `\`) and JSON-quoted
//! otherwise (logfmt), anything else as its `str()` under the same rule. An unpaired
//! surrogate in a string is written as U+FFFD.

use std::fmt::Write;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(logfmt, m)?)?;
    Ok(())
}

/// `fields` as `key=value key=value ...` (empty for no fields).
#[pyfunction]
fn logfmt(fields: &Bound<'_, PyDict>) -> PyResult<String> {
    let mut line = String::with_capacity(32 * fields.len());
    for (key, value) in fields.iter() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&key.cast::<PyString>()?.to_string_lossy());
        line.push('=');
        write_value(&mut line, &value)?;
    }
    Ok(line)
}

fn write_value(line: &mut String, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if value.is_none() {
        line.push_str("null");
    } else if let Ok(flag) = value.cast::<PyBool>() {
        line.push_str(if flag.is_true() { "true" } else { "false" });
    } else if let Ok(text) = value.cast::<PyString>() {
        write_text(line, &text.to_string_lossy());
    } else if let Ok(number) = value.cast::<PyInt>() {
        // As `int.__repr__` spells it: an IntEnum member is its number.
        match number.extract::<i64>() {
            Ok(small) => write!(line, "{small}").expect("a String takes any write"),
            Err(_) => {
                let int = number.py().get_type::<PyInt>();
                line.push_str(
                    &int.call_method1("__repr__", (number,))?
                        .extract::<String>()?,
                );
            }
        }
    } else if let Ok(number) = value.cast::<PyFloat>() {
        let float = number.value();
        if float.is_nan() {
            line.push_str("NaN");
        } else if float.is_infinite() {
            line.push_str(if float > 0.0 { "Infinity" } else { "-Infinity" });
        } else {
            // Python's shortest repr, as json.dumps writes a float.
            line.push_str(&number.repr()?.to_string_lossy());
        }
    } else {
        write_text(line, &value.str()?.to_string_lossy());
    }
    Ok(())
}

fn is_bare(text: &str) -> bool {
    !text.is_empty()
        && !text.chars().any(|c| {
            // Python's `\s` (str.isspace): Unicode white space and the separators
            // U+001C..U+001F.
            c.is_whitespace() || matches!(c, '=' | '"' | '\\' | '\u{1c}'..='\u{1f}')
        })
}

/// `text` bare, or quoted as `json.dumps(text, ensure_ascii=False)` writes it.
fn write_text(line: &mut String, text: &str) {
    if is_bare(text) {
        line.push_str(text);
        return;
    }
    line.push('"');
    for c in text.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            '\u{8}' => line.push_str("\\b"),
            '\u{c}' => line.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                write!(line, "\\u{:04x}", c as u32).expect("a String takes any write")
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(text: &str) -> String {
        let mut line = String::new();
        write_text(&mut line, text);
        line
    }

    #[test]
    fn a_token_is_bare_and_anything_else_quoted_as_json() {
        assert_eq!(quoted("dev-1"), "dev-1");
        assert_eq!(quoted("127.0.0.1:50412"), "127.0.0.1:50412");
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted("a b"), "\"a b\"");
        assert_eq!(quoted("k=v"), "\"k=v\"");
        assert_eq!(quoted("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
        assert_eq!(
            quoted("line\nnext\ttab\u{1}"),
            "\"line\\nnext\\ttab\\u0001\""
        );
        assert_eq!(quoted("unit\u{1f}sep"), "\"unit\\u001fsep\"");
        assert_eq!(quoted("héllo"), "héllo");
        assert_eq!(quoted("no\u{a0}break"), "\"no\u{a0}break\"");
    }
}
