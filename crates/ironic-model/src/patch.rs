//! RFC 6902 JSON Patch restricted to what Ironic accepts (`add`, `replace`, `remove`),
//! with Ironic's error wording (reference §4.1).

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::names::py_repr_str;
use crate::secrets;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Replace,
    Remove,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Remove => "remove",
        }
    }
}

/// One validated patch operation.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchOp {
    pub op: Op,
    /// The JSON pointer, e.g. `/extra/foo`.
    pub path: String,
    /// `None` when the operation carried no `value` member.
    pub value: Option<Value>,
}

impl PatchOp {
    /// The first path segment (`extra` for `/extra/foo`).
    pub fn root(&self) -> &str {
        self.path[1..].split('/').next().unwrap_or("")
    }
}

/// JSON's name for the type of `v`, as messages say it ("a string", "an object", …).
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Python's repr of a JSON value, used because Ironic quotes values that way.
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_repr_str(s),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", py_repr_str(k), py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn schema_err(msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("Schema error for patch: {msg}"))
}

/// A path segment is `[\w-]+` (letters, digits, underscore, hyphen).
fn valid_path(path: &str) -> bool {
    path.starts_with('/')
        && path[1..].split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        })
}

/// Validates a patch document against Ironic's patch schema.
pub fn parse(doc: &Value) -> Result<Vec<PatchOp>> {
    let Value::Array(items) = doc else {
        return Err(schema_err(format_args!(
            "{} is not of type 'array'",
            py_repr(&secrets::masked(doc))
        )));
    };
    let mut ops = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(obj) = item else {
            return Err(schema_err(format_args!(
                "{} is not of type 'object'",
                py_repr(&secrets::masked(item))
            )));
        };
        if let Some(extra) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "op" | "path" | "value"))
        {
            return Err(schema_err(format_args!(
                "Additional properties are not allowed ({} was unexpected)",
                py_repr_str(extra)
            )));
        }
        let path = match obj.get("path") {
            None => return Err(schema_err("'path' is a required property")),
            Some(Value::String(p)) => p.clone(),
            Some(other) => {
                return Err(schema_err(format_args!(
                    "{} is not of type 'string'",
                    py_repr(other)
                )));
            }
        };
        let op = match obj.get("op") {
            None => return Err(schema_err("'op' is a required property")),
            Some(Value::String(s)) => match s.as_str() {
                "add" => Op::Add,
                "replace" => Op::Replace,
                "remove" => Op::Remove,
                _ => {
                    return Err(schema_err(format_args!(
                        "{} is not one of ['add', 'replace', 'remove']",
                        py_repr_str(s)
                    )));
                }
            },
            Some(other) => {
                return Err(schema_err(format_args!(
                    "{} is not of type 'string'",
                    py_repr(other)
                )));
            }
        };
        if !valid_path(&path) {
            return Err(schema_err(format_args!(
                "{} does not match '^(/[\\\\w-]+)+$'",
                py_repr_str(&path)
            )));
        }
        ops.push(PatchOp {
            op,
            path,
            value: obj.get("value").cloned(),
        });
    }
    Ok(ops)
}

/// The operation as upstream's messages show it, with its value masked when the path
/// or the value holds a secret (these messages are answered and logged).
fn describe(op: &PatchOp) -> String {
    let mut s = format!(
        "{{'op': '{}', 'path': {}",
        op.op.as_str(),
        py_repr_str(&op.path)
    );
    if let Some(v) = &op.value {
        let shown = if secrets::is_secret_path(&op.path) {
            Value::String(secrets::MASK.into())
        } else {
            secrets::masked(v)
        };
        s.push_str(&format!(", 'value': {}", py_repr(&shown)));
    }
    s.push('}');
    s
}

fn patch_error(op: &PatchOp, reason: impl std::fmt::Display) -> Error {
    Error::Invalid(format!(
        "Couldn't apply patch '{}'. Reason: {reason}",
        describe(op)
    ))
}

/// Applies one operation to `doc` (an object).
pub fn apply(doc: &mut Map<String, Value>, op: &PatchOp) -> Result<()> {
    let segs: Vec<&str> = op.path[1..].split('/').collect();
    let (last, parents) = segs
        .split_last()
        .ok_or_else(|| patch_error(op, "empty path"))?;
    // Walk to the parent container.
    let mut cur: &mut Value = {
        let first = parents.first();
        match first {
            None => return apply_in_object(doc, last, op),
            Some(k) => doc
                .get_mut(*k)
                .ok_or_else(|| patch_error(op, format_args!("can't find member '{k}'")))?,
        }
    };
    for k in &parents[1..] {
        cur = match cur {
            Value::Object(o) => o
                .get_mut(*k)
                .ok_or_else(|| patch_error(op, format_args!("can't find member '{k}'")))?,
            Value::Array(a) => {
                let i = parse_index(k, a.len(), false)
                    .ok_or_else(|| patch_error(op, "index out of range"))?;
                &mut a[i]
            }
            _ => {
                return Err(patch_error(
                    op,
                    format_args!("member '{k}' is not a container"),
                ));
            }
        };
    }
    match cur {
        Value::Object(o) => apply_in_object(o, last, op),
        Value::Array(a) => apply_in_array(a, last, op),
        _ => Err(patch_error(op, "the parent is not a container")),
    }
}

fn value_of(op: &PatchOp) -> Result<Value> {
    op.value
        .clone()
        .ok_or_else(|| patch_error(op, "The operation does not contain a 'value' member"))
}

fn apply_in_object(o: &mut Map<String, Value>, key: &str, op: &PatchOp) -> Result<()> {
    match op.op {
        Op::Add => {
            o.insert(key.to_string(), value_of(op)?);
        }
        Op::Replace => {
            let v = value_of(op)?;
            match o.get_mut(key) {
                Some(slot) => *slot = v,
                None => {
                    return Err(patch_error(
                        op,
                        format_args!("can't replace a non-existent object '{key}'"),
                    ));
                }
            }
        }
        Op::Remove => {
            if o.shift_remove(key).is_none() {
                return Err(patch_error(
                    op,
                    format_args!("can't remove a non-existent object '{key}'"),
                ));
            }
        }
    }
    Ok(())
}

fn parse_index(seg: &str, len: usize, allow_end: bool) -> Option<usize> {
    if seg == "-" && allow_end {
        return Some(len);
    }
    if seg.len() > 1 && seg.starts_with('0') {
        return None;
    }
    let i: usize = seg.parse().ok()?;
    if i < len || (allow_end && i == len) {
        Some(i)
    } else {
        None
    }
}

fn apply_in_array(a: &mut Vec<Value>, seg: &str, op: &PatchOp) -> Result<()> {
    match op.op {
        Op::Add => {
            let v = value_of(op)?;
            let i = parse_index(seg, a.len(), true)
                .ok_or_else(|| patch_error(op, "can't insert outside of list"))?;
            a.insert(i, v);
        }
        Op::Replace => {
            let v = value_of(op)?;
            let i = parse_index(seg, a.len(), false)
                .ok_or_else(|| patch_error(op, "can't replace outside of list"))?;
            a[i] = v;
        }
        Op::Remove => {
            let i = parse_index(seg, a.len(), false)
                .ok_or_else(|| patch_error(op, "can't remove a non-existent object"))?;
            a.remove(i);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, patch: Value) -> Result<Value> {
        let mut d = doc.as_object().cloned().unwrap_or_default();
        for op in parse(&patch)? {
            apply(&mut d, &op)?;
        }
        Ok(Value::Object(d))
    }

    #[test]
    fn add_replace_remove() {
        let d = json!({"extra": {"a": 1}, "name": null});
        assert_eq!(
            run(
                d.clone(),
                json!([{"op": "add", "path": "/extra/b", "value": [1]}])
            )
            .ok(),
            Some(json!({"extra": {"a": 1, "b": [1]}, "name": null}))
        );
        assert_eq!(
            run(d.clone(), json!([{"op": "remove", "path": "/name"}])).ok(),
            Some(json!({"extra": {"a": 1}}))
        );
        assert_eq!(
            run(
                json!({"e": {"l": [1, 2]}}),
                json!([{"op": "add", "path": "/e/l/-", "value": 3}])
            )
            .ok(),
            Some(json!({"e": {"l": [1, 2, 3]}}))
        );
        let err = run(
            d.clone(),
            json!([{"op": "remove", "path": "/extra/missing"}]),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "Couldn't apply patch '{'op': 'remove', 'path': '/extra/missing'}'. Reason: can't remove a non-existent object 'missing'"
        );
        let err = run(d, json!([{"op": "add", "path": "/extra/foo"}])).unwrap_err();
        assert!(
            err.message()
                .ends_with("The operation does not contain a 'value' member")
        );
    }

    #[test]
    fn schema_errors() {
        let m = |p: Value| parse(&p).unwrap_err().message().to_string();
        assert_eq!(
            m(json!({"op": "add", "path": "/extra/foo", "value": "bar"})),
            "Schema error for patch: {'op': 'add', 'path': '/extra/foo', 'value': 'bar'} is not of type 'array'"
        );
        assert_eq!(
            m(json!([{"op": "move", "from": "/a", "path": "/b"}])),
            "Schema error for patch: Additional properties are not allowed ('from' was unexpected)"
        );
        assert_eq!(
            m(json!([{"op": "frobnicate", "path": "/a"}])),
            "Schema error for patch: 'frobnicate' is not one of ['add', 'replace', 'remove']"
        );
        assert_eq!(
            m(json!([{"op": "add"}])),
            "Schema error for patch: 'path' is a required property"
        );
        assert_eq!(
            m(json!([{"op": "add", "path": "extra/foo", "value": 1}])),
            "Schema error for patch: 'extra/foo' does not match '^(/[\\\\w-]+)+$'"
        );
    }
}
