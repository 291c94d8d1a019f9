//! Python's `json.dumps` as upstream's responses were written by it (`ensure_ascii`,
//! `", "` and `": "` separators): the byte stream Cyborg's clients have always seen, for
//! the error envelope ([`super::error`]) and webob's pages ([`super::webob`]) alike.

use serde_json::Value;

/// A JSON string literal as Python's `json.dumps` writes it (`ensure_ascii`).
pub fn py_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value as Python's `json.dumps` writes it (used where upstream embeds JSON
/// text in a field, e.g. a deployable's `attributes_list`).
pub fn py_dumps(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_string(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_dumps).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", py_string(k), py_dumps(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
