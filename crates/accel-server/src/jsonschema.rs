//! A small JSON-Schema (draft 4 subset) validator whose messages match Python's
//! `jsonschema` package.
//!
//! Upstream Placement validates every body and query string with `jsonschema` and puts
//! the library's message in the error `detail`; clients and the gabbi suite match
//! fragments such as `'name' is a required property` or `Failed validating 'maxLength'`.
//! Rather than translate another library's wording, this module implements the
//! keywords Placement's schemas use and words errors the same way.

use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The first validation error found, already formatted like Python's
/// `str(ValidationError)` (newlines flattened, as webob renders them).
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaError {
    pub message: String,
    pub keyword: &'static str,
    pub schema_path: String,
    pub instance_path: String,
    pub instance: String,
    /// What [`more_relevant`] ranks by (boxed: errors travel in `Result`s).
    rank: Box<Rank>,
}

#[derive(Debug, Clone, PartialEq)]
struct Rank {
    /// The instance path's elements.
    path: Vec<String>,
    /// Whether the instance has the `type` of the schema holding the failed keyword
    /// (`None` until the check that raised it has looked).
    matches_type: Option<bool>,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}  Failed validating '{}' in schema{}:  On instance{}:     {}",
            self.message, self.keyword, self.schema_path, self.instance_path, self.instance
        )
    }
}

/// Validates `instance` against `schema`.
pub fn validate(instance: &Value, schema: &Value) -> Result<(), SchemaError> {
    check(instance, schema, &mut Vec::new(), &mut Vec::new())
}

/// Compiled patterns, shared: a `Regex` clone would start with an empty match cache
/// (rebuilt on every request), an `Arc` keeps the warmed one.
fn regex(p: &str) -> std::sync::Arc<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, std::sync::Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.entry(p.to_owned())
        .or_insert_with(|| {
            std::sync::Arc::new(Regex::new(p).unwrap_or_else(|_| Regex::new("$^").expect("static")))
        })
        .clone()
}

/// Python's `repr()` of a JSON value.
pub fn pyrepr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => pystr(s),
        Value::Array(a) => format!("[{}]", a.iter().map(pyrepr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", pystr(k), pyrepr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn pystr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

fn path_str(p: &[String]) -> String {
    p.iter().map(|s| format!("[{s}]")).collect()
}

fn fail(
    keyword: &'static str,
    message: String,
    spath: &[String],
    ipath: &[String],
    instance: &Value,
) -> SchemaError {
    SchemaError {
        message,
        keyword,
        schema_path: path_str(spath),
        instance_path: path_str(ipath),
        instance: pyrepr(instance),
        rank: Box::new(Rank {
            path: ipath.to_vec(),
            matches_type: None,
        }),
    }
}

/// Python `jsonschema.validate` reports `best_match` of all errors, not the first: the
/// shallowest instance path wins, then the greater path among siblings, then a
/// keyword other than `anyOf`/`oneOf`, then an error whose instance does not even have
/// its schema's type; on a tie the earlier error stays.
fn more_relevant(new: &SchemaError, best: &SchemaError) -> bool {
    use std::cmp::Ordering;
    let path_cmp = || {
        for (a, b) in new.rank.path.iter().zip(&best.rank.path) {
            let o = match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => a.cmp(b),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    };
    let weak = |e: &SchemaError| matches!(e.keyword, "anyOf" | "oneOf");
    let key_cmp = best
        .rank
        .path
        .len()
        .cmp(&new.rank.path.len())
        .then_with(path_cmp)
        .then_with(|| weak(best).cmp(&weak(new)))
        .then_with(|| {
            new.rank
                .matches_type
                .unwrap_or(false)
                .cmp(&best.rank.matches_type.unwrap_or(false))
                .reverse()
        });
    key_cmp == Ordering::Greater
}

/// Keeps the more relevant of the error so far and a new one.
fn keep_best(best: &mut Option<SchemaError>, new: SchemaError) {
    match best {
        Some(b) if !more_relevant(&new, b) => {}
        _ => *best = Some(new),
    }
}

fn type_ok(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn check(
    inst: &Value,
    schema: &Value,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
) -> Result<(), SchemaError> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    let mut best = None;
    for (kw, arg) in s {
        if let Err(mut e) = keyword(inst, s, kw, arg, spath, ipath) {
            if e.rank.matches_type.is_none() {
                e.rank.matches_type = Some(match s.get("type") {
                    Some(Value::String(t)) => type_ok(inst, t),
                    Some(Value::Array(ts)) => ts
                        .iter()
                        .filter_map(Value::as_str)
                        .any(|t| type_ok(inst, t)),
                    _ => false,
                });
            }
            keep_best(&mut best, e);
        }
    }
    best.map_or(Ok(()), Err)
}

/// The keywords this validator implements, all Placement's schemas use; like Python's
/// `jsonschema`, it passes over any other.
const KEYWORDS: &[&str] = &[
    "type",
    "required",
    "properties",
    "patternProperties",
    "additionalProperties",
    "items",
    "minProperties",
    "maxProperties",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "enum",
    "format",
    "anyOf",
    "oneOf",
    "not",
];

/// [`pyrepr`] when formatted: most keywords hold, and a message is only built for one
/// that fails.
struct Repr<'a>(&'a Value);

impl std::fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&pyrepr(self.0))
    }
}

/// Checks `v` against `sub` one level down (`at` appended to the schema path, `key` to
/// the instance path), keeping the more relevant of its error and `best`'s in `best`.
fn descend(
    best: &mut Option<SchemaError>,
    (v, sub): (&Value, &Value),
    at: impl IntoIterator<Item = String>,
    key: String,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
) {
    let depth = spath.len();
    spath.extend(at);
    ipath.push(key);
    let r = check(v, sub, spath, ipath);
    spath.truncate(depth);
    ipath.pop();
    if let Err(e) = r {
        keep_best(best, e);
    }
}

/// `'name'`, a schema or instance path element.
fn quoted(name: &str) -> String {
    ["'", name, "'"].concat()
}

/// What a `min*`/`max*` keyword counts: an object's properties, an array's items, a
/// string's characters; `None` for an instance of another type (the keyword holds).
fn size(kw: &str, inst: &Value) -> Option<u64> {
    let n = match kw {
        "minProperties" | "maxProperties" => inst.as_object()?.len(),
        "minItems" | "maxItems" => inst.as_array()?.len(),
        _ => inst.as_str()?.chars().count(),
    };
    Some(n as u64)
}

fn keyword(
    inst: &Value,
    s: &Map<String, Value>,
    kw: &str,
    arg: &Value,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
) -> Result<(), SchemaError> {
    let Some(&kw) = KEYWORDS.iter().find(|k| **k == kw) else {
        return Ok(());
    };
    let r = Repr(inst);
    let message = match kw {
        "type" => {
            let types: Vec<&str> = match arg {
                Value::String(t) => vec![t.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            (!types.iter().any(|t| type_ok(inst, t))).then(|| {
                let names: Vec<String> = types.iter().map(|t| format!("'{t}'")).collect();
                format!("{r} is not of type {}", names.join(", "))
            })
        }
        "required" => match (inst.as_object(), arg.as_array()) {
            (Some(o), Some(req)) => req
                .iter()
                .filter_map(Value::as_str)
                .find(|name| !o.contains_key(*name))
                .map(|name| format!("'{name}' is a required property")),
            _ => None,
        },
        "properties" | "patternProperties" | "items" => {
            let mut best = None;
            match (inst, arg) {
                (Value::Object(o), Value::Object(props)) if kw == "properties" => {
                    for (k, sub) in props {
                        if let Some(v) = o.get(k) {
                            let at = [quoted(kw), quoted(k)];
                            descend(&mut best, (v, sub), at, quoted(k), spath, ipath);
                        }
                    }
                }
                (Value::Object(o), Value::Object(pats)) if kw == "patternProperties" => {
                    for (pat, sub) in pats {
                        let re = regex(pat);
                        for (k, v) in o.iter().filter(|(k, _)| re.is_match(k)) {
                            let at = [quoted(kw), quoted(pat)];
                            descend(&mut best, (v, sub), at, quoted(k), spath, ipath);
                        }
                    }
                }
                (Value::Array(a), _) if kw == "items" => {
                    for (i, v) in a.iter().enumerate() {
                        let at = [quoted(kw)];
                        descend(&mut best, (v, arg), at, i.to_string(), spath, ipath);
                    }
                }
                _ => {}
            }
            best.map_or(Ok(()), Err)?;
            None
        }
        "additionalProperties" => {
            let Some(o) = inst.as_object() else {
                return Ok(());
            };
            let props = s.get("properties").and_then(Value::as_object);
            let pats: Vec<&String> = s
                .get("patternProperties")
                .and_then(Value::as_object)
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            let extras: Vec<&String> = o
                .keys()
                .filter(|k| !props.is_some_and(|p| p.contains_key(*k)))
                .filter(|k| !pats.iter().any(|p| regex(p).is_match(k)))
                .collect();
            match arg {
                Value::Bool(false) if !extras.is_empty() => {
                    let quoted = extras
                        .iter()
                        .map(|k| pystr(k))
                        .collect::<Vec<_>>()
                        .join(", ");
                    Some(if !pats.is_empty() {
                        let mut p: Vec<String> = pats.iter().map(|p| pystr(p)).collect();
                        p.sort();
                        let verb = if extras.len() == 1 { "does" } else { "do" };
                        format!(
                            "{quoted} {verb} not match any of the regexes: {}",
                            p.join(", ")
                        )
                    } else {
                        let verb = if extras.len() == 1 { "was" } else { "were" };
                        format!(
                            "Additional properties are not allowed ({quoted} {verb} unexpected)"
                        )
                    })
                }
                Value::Object(_) => {
                    let mut best = None;
                    for k in extras {
                        let at = [quoted(kw)];
                        let v = &o[k.as_str()];
                        descend(&mut best, (v, arg), at, quoted(k), spath, ipath);
                    }
                    best.map_or(Ok(()), Err)?;
                    None
                }
                _ => None,
            }
        }
        "minProperties" | "minItems" | "minLength" => match (size(kw, inst), arg.as_u64()) {
            (Some(len), Some(n)) if len < n => Some(match kw {
                _ if n == 1 => format!("{r} should be non-empty"),
                "minProperties" => format!("{r} does not have enough properties"),
                _ => format!("{r} is too short"),
            }),
            _ => None,
        },
        "maxProperties" | "maxItems" | "maxLength" => match (size(kw, inst), arg.as_u64()) {
            (Some(len), Some(n)) if len > n => Some(match kw {
                "maxProperties" => format!("{r} has too many properties"),
                _ => format!("{r} is too long"),
            }),
            _ => None,
        },
        "uniqueItems" => match (inst.as_array(), arg.as_bool()) {
            (Some(a), Some(true)) => (0..a.len())
                .any(|i| a[i + 1..].contains(&a[i]))
                .then(|| format!("{r} has non-unique elements")),
            _ => None,
        },
        "pattern" => match (inst.as_str(), arg.as_str()) {
            (Some(t), Some(p)) if !regex(p).is_match(t) => {
                Some(format!("{r} does not match {}", pystr(p)))
            }
            _ => None,
        },
        "minimum" | "maximum" => match (inst.as_f64(), arg.as_f64()) {
            (Some(x), Some(m)) if inst.is_number() && kw == "minimum" && x < m => {
                Some(format!("{r} is less than the minimum of {arg}"))
            }
            (Some(x), Some(m)) if inst.is_number() && kw == "maximum" && x > m => {
                Some(format!("{r} is greater than the maximum of {arg}"))
            }
            _ => None,
        },
        "enum" => match arg.as_array() {
            Some(opts) if !opts.contains(inst) => {
                Some(format!("{r} is not one of {}", pyrepr(arg)))
            }
            _ => None,
        },
        "format" => match (inst.as_str(), arg.as_str()) {
            (Some(t), Some("uuid")) if !accel_core::ids::is_uuid_like(t) => {
                Some(format!("{r} is not a 'uuid'"))
            }
            _ => None,
        },
        "anyOf" | "oneOf" => {
            let Some(subs) = arg.as_array() else {
                return Ok(());
            };
            let ok = subs
                .iter()
                .filter(|sub| check(inst, sub, &mut Vec::new(), &mut Vec::new()).is_ok())
                .count();
            match ok {
                0 => Some(format!("{r} is not valid under any of the given schemas")),
                1 => None,
                _ if kw == "oneOf" => Some(format!("{r} is valid under each of the given schemas")),
                _ => None,
            }
        }
        "not" => check(inst, arg, &mut Vec::new(), &mut Vec::new())
            .is_ok()
            .then(|| format!("{r} should not be valid under {}", pyrepr(arg))),
        _ => None,
    };
    match message {
        Some(message) => Err(fail(kw, message, spath, ipath, inst)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(i: Value, s: Value) -> String {
        validate(&i, &s).unwrap_err().to_string()
    }

    /// Python's `jsonschema.validate` reports `best_match`, not the first error found
    /// (the differential test saw `{"allocations": {}}` without `project_id`).
    #[test]
    fn reports_the_error_python_best_match_picks() {
        let s = json!({"type": "object",
                       "properties": {"allocations": {"type": "object", "minProperties": 1},
                                      "b": {"type": "string"}},
                       "required": ["allocations", "project_id"]});
        assert!(err(json!({"allocations": {}}), s.clone())
            .starts_with("'project_id' is a required property"));
        assert!(err(json!({"allocations": {}, "project_id": 1, "b": 2}), s)
            .starts_with("2 is not of type 'string'"));
        assert!(
            err(json!([1, "x", "y"]), json!({"items": {"type": "integer"}}))
                .starts_with("'y' is not of type 'integer'")
        );
        assert!(err(
            json!({"a": 5}),
            json!({"type": "object", "properties": {"a": {"type": "string", "minimum": 7}}})
        )
        .starts_with("5 is not of type 'string'"));
    }

    #[test]
    fn messages_match_python() {
        let s = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}},
                       "required": ["name"], "additionalProperties": false});
        assert!(err(json!({}), s.clone())
            .starts_with("'name' is a required property  Failed validating 'required' in schema:"));
        assert!(err(json!({"name": "x", "bad_field": 1}), s.clone())
            .starts_with("Additional properties are not allowed ('bad_field' was unexpected)"));
        assert!(err(json!({"name": "xxxx"}), s.clone())
            .contains("Failed validating 'maxLength' in schema['properties']['name']"));
        assert!(err(json!({"name": 5}), s).starts_with("5 is not of type 'string'"));
        assert!(err(json!(0), json!({"minimum": 1})).starts_with("0 is less than the minimum of 1"));
        assert!(err(json!("instance"), json!({"pattern": "^[A-Z0-9_]+$"}))
            .starts_with("'instance' does not match '^[A-Z0-9_]+$'"));
        assert!(err(
            json!({"x": 1}),
            json!({"patternProperties": {"^a$": {}}, "additionalProperties": false})
        )
        .starts_with("'x' does not match any of the regexes: '^a$'"));
        assert!(err(json!({}), json!({"minProperties": 1})).contains("should be non-empty"));
        assert!(validate(
            &json!("7e4e8a3a-0f5e-4a43-9a50-3c2b1d9a4b5c"),
            &json!({"format": "uuid"})
        )
        .is_ok());
        assert!(validate(&json!("nope"), &json!({"format": "uuid"})).is_err());
        assert_eq!(
            pyrepr(&json!({"a": [true, null, "b"]})),
            "{'a': [True, None, 'b']}"
        );
    }
}
