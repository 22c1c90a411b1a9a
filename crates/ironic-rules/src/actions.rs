//! Actions (spec §3.8), on arguments already interpolated. Node and port attributes
//! are changed through their patch documents, so that the model checks every value as
//! it checks a PATCH; the messages around a failure are upstream's.

use std::time::Duration;

use ironic_model::node::{JsonObject, Source};
use ironic_model::port::{Port, PortSpec};
use ironic_model::secrets::log_safe;
use ironic_model::{Node, Version};
use serde_json::{Map, Value};

use super::py::{self, ConvError, PyError, key_error, py_repr, py_str, type_name};
use super::{ApiCaller, Failure, Subject};
use ironic_model::names::MAX_TRAITS_PER_NODE;

/// Runs the action `op` with its named arguments.
///
/// `quiet`: the action is a sensitive rule's, so nothing of its arguments is logged
/// (its failure text is replaced by the engine).
pub(super) async fn execute(
    op: &str,
    args: Map<String, Value>,
    s: &mut Subject<'_>,
    http: &dyn ApiCaller,
    quiet: bool,
) -> Result<(), Failure> {
    let arg = |name: &str| args.get(name).cloned().unwrap_or(Value::Null);
    match op {
        "fail" => Err(Failure::Final(format!(
            "Failed to inspect hardware. Reason: {}",
            py_str(&arg("msg"), false)
        ))),
        "log" => log(&arg("msg"), &arg("level"), s, quiet),
        "set-attribute" => {
            let (path, value) = (arg("path"), arg("value"));
            let mut t = NodeTarget(&mut *s.node);
            set_attr(&mut t, &path, value.clone(), quiet).map_err(|e| {
                Failure::action(format!(
                    "Failed to set attribute {} with value {}: {}",
                    py_str(&path, false),
                    py_str(&value, false),
                    e.text(&path, &value, "")
                ))
            })?;
            Ok(())
        }
        "extend-attribute" => {
            let (path, value) = (arg("path"), arg("value"));
            let mut t = NodeTarget(&mut *s.node);
            extend_attr(
                &mut t,
                &path,
                value.clone(),
                py::truthy(&arg("unique")),
                quiet,
            )
            .map_err(|e| {
                Failure::action(format!(
                    "Failed to extend attribute {}: {}",
                    py_str(&path, false),
                    e.text(&path, &value, "")
                ))
            })?;
            Ok(())
        }
        "del-attribute" => {
            let path = arg("path");
            let mut t = NodeTarget(&mut *s.node);
            del_attr(&mut t, &path).map_err(|e| {
                Failure::action(format!(
                    "Failed to delete attribute at {}: {}",
                    py_str(&path, false),
                    e.text(&path, &Value::Null, "")
                ))
            })?;
            Ok(())
        }
        "set-capability" => set_capability(s.node, &arg("name"), &arg("value")),
        "unset-capability" => unset_capability(s.node, &arg("name")),
        "add-trait" => add_trait(s.node, &arg("name")),
        "remove-trait" => remove_trait(s.node, &arg("name"), quiet),
        "set-plugin-data" => {
            let path = arg("path");
            set_plugin_data(s.plugin_data, &path, arg("value")).map_err(|e| {
                Failure::action(format!(
                    "Failed to set plugin data at {}: {e}",
                    py_str(&path, false)
                ))
            })
        }
        "extend-plugin-data" => {
            let path = arg("path");
            extend_plugin_data(
                s.plugin_data,
                &path,
                arg("value"),
                py::truthy(&arg("unique")),
            )
            .map_err(|e| {
                Failure::action(format!(
                    "Failed to extend plugin data at {}: {e}",
                    py_str(&path, false)
                ))
            })
        }
        "unset-plugin-data" => {
            let path = arg("path");
            unset_plugin_data(s.plugin_data, &path, quiet).map_err(|e| {
                Failure::action(format!(
                    "Failed to unset plugin data at {}: {e}",
                    py_str(&path, false)
                ))
            })
        }
        "set-port-attribute" | "extend-port-attribute" | "del-port-attribute" => {
            port_action(op, &args, s, quiet)
        }
        "api-call" => api_call(&args, http, quiet).await,
        other => Err(Failure::Generic(format!("Unsupported action '{other}'."))),
    }
}

fn log(msg: &Value, level: &Value, s: &Subject<'_>, quiet: bool) -> Result<(), Failure> {
    let Value::String(level) = level else {
        return Err(Failure::Generic(format!(
            "'{}' object has no attribute 'lower'",
            type_name(level)
        )));
    };
    let level = level.to_lowercase();
    let node = s.node.uuid.as_str();
    // A sensitive rule's message is its own argument: not logged.
    let msg = if quiet {
        "(a sensitive rule's message, not shown)".to_string()
    } else {
        py_str(msg, false)
    };
    // What a rule logs may be what the ramdisk sent: escaped, so that it cannot start a
    // line of its own.
    let msg = log_safe(&msg);
    match level.as_str() {
        "debug" => tracing::debug!(node = %node, "inspection rule: {msg}"),
        "info" => tracing::info!(node = %node, "inspection rule: {msg}"),
        "warning" => tracing::warn!(node = %node, "inspection rule: {msg}"),
        "error" | "critical" => tracing::error!(node = %node, "inspection rule: {msg}"),
        _ => {
            return Err(Failure::execution(format!(
                "Invalid log level: {level}. Choose from {{'debug', 'info', 'warning', 'error', 'critical'}}"
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Attributes of nodes and ports.

/// Something whose attributes the attribute actions change.
trait Target {
    /// Upstream's class name, as Python's `AttributeError` says it.
    const CLASS: &'static str;
    /// The writable attributes.
    fn writable(&self) -> JsonObject;
    /// Whether `name` is an attribute at all (those not writable are read-only).
    fn known(&self, name: &str) -> bool;
    /// Writes the (changed) writable attributes back, checked; `Err` is the reason.
    fn commit(&mut self, doc: JsonObject) -> Result<(), PyError>;
    /// Whether the attribute `name` holds text (a number or boolean set on it becomes
    /// its Python `str()`, as upstream's string fields take it).
    fn is_text(name: &str) -> bool;
}

/// A whole attribute's new value: numbers and booleans become text on text attributes.
fn coerce<T: Target>(name: &str, value: Value) -> Value {
    match value {
        Value::Number(_) | Value::Bool(_) if T::is_text(name) => {
            Value::String(py_str(&value, false))
        }
        other => other,
    }
}

/// The node through its patch document, plus `driver_internal_info`.
struct NodeTarget<'a>(&'a mut Node);

const DII: &str = "driver_internal_info";

impl Target for NodeTarget<'_> {
    const CLASS: &'static str = "Node";

    fn writable(&self) -> JsonObject {
        let mut doc = self.0.patch_doc(Version::MAX);
        doc.insert(
            DII.into(),
            Value::Object(self.0.driver_internal_info.clone()),
        );
        doc
    }

    fn known(&self, name: &str) -> bool {
        super::template::node_fields(self.0).contains_key(name)
    }

    fn is_text(name: &str) -> bool {
        use ironic_model::node::Kind as K;
        ironic_model::node::field(name).is_some_and(|f| {
            matches!(
                f.kind,
                K::Text(_)
                    | K::Name
                    | K::Uuid
                    | K::ConductorGroup
                    | K::Driver
                    | K::Interface
                    | K::Chassis
                    | K::ParentNode
                    | K::NonEmptyText(_)
            )
        })
    }

    fn commit(&mut self, mut doc: JsonObject) -> Result<(), PyError> {
        let dii = match doc.remove(DII) {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(PyError(format!(
                    "Schema error for patch: {} is not of type 'object', 'null'",
                    py_repr(&other, false)
                )));
            }
        };
        let mut node = self.0.clone();
        let ident = node.uuid.to_string();
        node.apply_doc(&doc, Version::MAX, Source::Patch { ident: &ident })
            .map_err(|e| PyError(e.message().to_string()))?;
        node.driver_internal_info = dii;
        *self.0 = node;
        Ok(())
    }
}

/// A port through its patch document; its node and port group stay as they are.
struct PortTarget<'a>(&'a mut Port);

const PORT_FIXED: &[&str] = &["node_uuid", "portgroup_uuid"];
const PORT_READ_ONLY: &[&str] = &[
    "id",
    "uuid",
    "created_at",
    "updated_at",
    "internal_info",
    "node_id",
    "portgroup_id",
];

impl Target for PortTarget<'_> {
    const CLASS: &'static str = "Port";

    fn writable(&self) -> JsonObject {
        let mut doc = self.0.doc();
        for k in PORT_FIXED {
            doc.remove(*k);
        }
        doc
    }

    fn known(&self, name: &str) -> bool {
        PORT_FIXED.contains(&name)
            || PORT_READ_ONLY.contains(&name)
            || self.0.doc().contains_key(name)
    }

    fn is_text(name: &str) -> bool {
        matches!(
            name,
            "address" | "name" | "description" | "vendor" | "category" | "physical_network"
        )
    }

    fn commit(&mut self, doc: JsonObject) -> Result<(), PyError> {
        let mut full = self.0.doc();
        for (k, v) in doc {
            if !PORT_FIXED.contains(&k.as_str()) {
                full.insert(k, v);
            }
        }
        let spec = PortSpec::from_doc(&full, Version::MAX)
            .map_err(|e| PyError(e.message().to_string()))?;
        self.0.set(spec);
        Ok(())
    }
}

/// Why an attribute action failed.
#[derive(Debug)]
enum AttrError {
    /// A known attribute rules may not change.
    ReadOnly,
    /// `extend` on something that is not a list.
    NonList,
    /// Python's (or the model's) text.
    Py(String),
}

impl AttrError {
    /// The detail after `Failed to … attribute <path>…: `; `gap` is the space upstream
    /// puts before `value` (a double one for ports).
    fn text(&self, path: &Value, value: &Value, gap: &str) -> String {
        match self {
            AttrError::ReadOnly => "attribute is read-only".into(),
            AttrError::NonList => format!(
                "Inspection rule action execution failed. Reason: Cannot extend non-list attribute {} with{gap} value {}",
                py_str(path, false),
                py_str(value, false)
            ),
            AttrError::Py(m) => m.clone(),
        }
    }
}

/// Upstream's `normalize_path`: with a `/`, strip the outer ones and split on `/`;
/// otherwise split on `.`.
fn node_path(path: &Value) -> Result<Vec<String>, AttrError> {
    match path {
        Value::String(p) if p.contains('/') => {
            Ok(p.trim_matches('/').split('/').map(str::to_string).collect())
        }
        Value::String(p) => Ok(p.split('.').map(str::to_string).collect()),
        Value::Array(_) | Value::Object(_) => Err(AttrError::Py(format!(
            "'{}' object has no attribute 'split'",
            type_name(path)
        ))),
        other => Err(AttrError::Py(format!(
            "argument of type '{}' is not iterable",
            type_name(other)
        ))),
    }
}

/// The attribute a nested path starts from.
fn base_of<T: Target>(t: &T, doc: &JsonObject, name: &str) -> Result<Value, AttrError> {
    match doc.get(name) {
        Some(v) => Ok(v.clone()),
        None if t.known(name) => Err(AttrError::ReadOnly),
        None => Err(AttrError::Py(format!(
            "'{}' object has no attribute {}",
            T::CLASS,
            py::py_repr_str(name)
        ))),
    }
}

/// `setdefault(key, default)` on a value Python would call it on.
fn setdefault<'v>(
    cur: &'v mut Value,
    key: &str,
    default: Value,
) -> Result<&'v mut Value, AttrError> {
    match cur {
        Value::Object(o) => Ok(o.entry(key.to_string()).or_insert(default)),
        other => Err(AttrError::Py(format!(
            "'{}' object has no attribute 'setdefault'",
            type_name(other)
        ))),
    }
}

/// Walks `parts` creating `{}` where missing (Python's `setdefault`).
fn walk_create<'v>(mut cur: &'v mut Value, parts: &[String]) -> Result<&'v mut Value, AttrError> {
    for part in parts {
        cur = setdefault(cur, part, Value::Object(Map::new()))?;
    }
    Ok(cur)
}

/// `cur[key] = value`.
fn setitem(cur: &mut Value, key: &str, value: Value) -> Result<(), AttrError> {
    match cur {
        Value::Object(o) => {
            o.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(_) => Err(AttrError::Py(
            "list indices must be integers or slices, not str".into(),
        )),
        other => Err(AttrError::Py(format!(
            "'{}' object does not support item assignment",
            type_name(other)
        ))),
    }
}

/// `cur[key]` (read, for a walk); a missing key is Python's `KeyError`.
fn getitem_mut<'v>(cur: &'v mut Value, key: &str) -> Result<&'v mut Value, AttrError> {
    match cur {
        Value::Object(o) => o.get_mut(key).ok_or_else(|| AttrError::Py(key_error(key))),
        Value::Array(_) => Err(AttrError::Py(
            "list indices must be integers or slices, not str".into(),
        )),
        Value::String(_) => Err(AttrError::Py(
            "string indices must be integers, not 'str'".into(),
        )),
        other => Err(AttrError::Py(format!(
            "'{}' object is not subscriptable",
            type_name(other)
        ))),
    }
}

/// `del cur[key]`.
fn delitem(cur: &mut Value, key: &str) -> Result<(), AttrError> {
    match cur {
        Value::Object(o) => o
            .shift_remove(key)
            .map(|_| ())
            .ok_or_else(|| AttrError::Py(key_error(key))),
        Value::Array(_) => Err(AttrError::Py(
            "list indices must be integers or slices, not str".into(),
        )),
        other => Err(AttrError::Py(format!(
            "'{}' object does not support item deletion",
            type_name(other)
        ))),
    }
}

/// `set-attribute`: `Ok(true)` when something was written.
fn set_attr<T: Target>(
    t: &mut T,
    path: &Value,
    value: Value,
    quiet: bool,
) -> Result<bool, AttrError> {
    let parts = node_path(path)?;
    let mut doc = t.writable();
    match parts.as_slice() {
        [name] => {
            if doc.contains_key(name) {
                doc.insert(name.clone(), coerce::<T>(name, value));
            } else if t.known(name) {
                return Err(AttrError::ReadOnly);
            } else {
                if quiet {
                    tracing::warn!(
                        "sensitive inspection rule set an unknown {} attribute: ignored",
                        T::CLASS
                    );
                } else {
                    tracing::warn!(attribute = %log_safe(name), "inspection rule set an unknown {} attribute: ignored", T::CLASS);
                }
                return Ok(false);
            }
        }
        [first, mid @ .., last] => {
            let mut base = base_of(t, &doc, first)?;
            let container = walk_create(&mut base, mid)?;
            setitem(container, last, value)?;
            doc.insert(first.clone(), base);
        }
        [] => return Ok(false),
    }
    t.commit(doc).map_err(|e| AttrError::Py(e.0))?;
    Ok(true)
}

/// `extend-attribute`: the list at the path (created when missing) gains `value`,
/// unless `unique` and an equal element is there.
fn extend_attr<T: Target>(
    t: &mut T,
    path: &Value,
    value: Value,
    unique: bool,
    quiet: bool,
) -> Result<bool, AttrError> {
    let parts = node_path(path)?;
    let mut doc = t.writable();
    let push = |list: &mut Value| match list {
        Value::Array(items) => {
            if !unique || !items.iter().any(|i| py::py_eq(i, &value)) {
                items.push(value.clone());
            }
            Ok(())
        }
        _ => Err(AttrError::NonList),
    };
    match parts.as_slice() {
        [name] => match doc.get_mut(name) {
            Some(current) => push(current)?,
            None if t.known(name) => return Err(AttrError::ReadOnly),
            None => {
                if quiet {
                    tracing::warn!(
                        "sensitive inspection rule extended an unknown {} attribute: ignored",
                        T::CLASS
                    );
                } else {
                    tracing::warn!(attribute = %log_safe(name), "inspection rule extended an unknown {} attribute: ignored", T::CLASS);
                }
                return Ok(false);
            }
        },
        [first, mid @ .., last] => {
            let mut base = base_of(t, &doc, first)?;
            let container = walk_create(&mut base, mid)?;
            let list = setdefault(container, last, Value::Array(Vec::new()))?;
            push(list)?;
            doc.insert(first.clone(), base);
        }
        [] => return Ok(false),
    }
    t.commit(doc).map_err(|e| AttrError::Py(e.0))?;
    Ok(true)
}

/// `del-attribute`: a nested key removed (missing → Python's `KeyError`); a whole
/// attribute reset to null (which the model may refuse).
fn del_attr<T: Target>(t: &mut T, path: &Value) -> Result<bool, AttrError> {
    let parts = node_path(path)?;
    let mut doc = t.writable();
    match parts.as_slice() {
        [name] => {
            if doc.contains_key(name) {
                doc.insert(name.clone(), Value::Null);
            } else if t.known(name) {
                return Err(AttrError::ReadOnly);
            } else {
                return Err(AttrError::Py(format!(
                    "'{}' object has no attribute {}",
                    T::CLASS,
                    py::py_repr_str(name)
                )));
            }
        }
        [first, mid @ .., last] => {
            let mut base = base_of(t, &doc, first)?;
            let mut cur = &mut base;
            for part in mid {
                cur = getitem_mut(cur, part)?;
            }
            delitem(cur, last)?;
            doc.insert(first.clone(), base);
        }
        [] => return Ok(false),
    }
    t.commit(doc).map_err(|e| AttrError::Py(e.0))?;
    Ok(true)
}

fn port_action(
    op: &str,
    args: &Map<String, Value>,
    s: &mut Subject<'_>,
    quiet: bool,
) -> Result<(), Failure> {
    let arg = |name: &str| args.get(name).cloned().unwrap_or(Value::Null);
    let port_id = arg("port_id");
    let id = py_str(&port_id, false);
    let found = match &port_id {
        Value::String(p) => s
            .ports
            .iter()
            .position(|x| x.uuid.eq_ignore_ascii_case(p) || x.address.eq_ignore_ascii_case(p)),
        _ => None,
    };
    let Some(index) = found else {
        return Err(Failure::Final(format!("Port {id} could not be found.")));
    };
    let Some(port) = s.ports.get_mut(index) else {
        return Err(Failure::Final(format!("Port {id} could not be found.")));
    };
    let path = arg("path");
    let value = arg("value");
    let p = py_str(&path, false);
    let mut t = PortTarget(port);
    let changed = match op {
        "set-port-attribute" => set_attr(&mut t, &path, value.clone(), quiet).map_err(|e| {
            Failure::action(format!(
                "Failed to set attribute {p} for port {id}: {}",
                e.text(&path, &value, "")
            ))
        })?,
        "extend-port-attribute" => extend_attr(
            &mut t,
            &path,
            value.clone(),
            py::truthy(&arg("unique")),
            quiet,
        )
        .map_err(|e| {
            Failure::action(format!(
                "Failed to extend attribute {p} for port {id}: {}",
                e.text(&path, &value, " ")
            ))
        })?,
        _ => del_attr(&mut t, &path).map_err(|e| {
            Failure::action(format!(
                "Failed to delete attribute {p} for port {id}: {}",
                e.text(&path, &value, "")
            ))
        })?,
    };
    if changed {
        s.changed_ports.insert(index);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Capabilities and traits.

/// `':'.join([a, b])`'s complaint about a non-string item.
fn join_error(index: usize, v: &Value) -> String {
    format!(
        "sequence item {index}: expected str instance, {} found",
        type_name(v)
    )
}

fn set_capability(node: &mut Node, name: &Value, value: &Value) -> Result<(), Failure> {
    let fail = |e: String| {
        Failure::action(format!(
            "Failed to set capability {}: {e}",
            py_str(name, false)
        ))
    };
    let (Value::String(n), Value::String(v)) = (name, value) else {
        return Err(fail(if name.is_string() {
            join_error(1, value)
        } else {
            join_error(0, name)
        }));
    };
    let new_cap = format!("{n}:{v}");
    let caps = match node.properties.get("capabilities") {
        Some(existing) if py::truthy(existing) => match existing {
            Value::String(e) => format!("{e},{new_cap}"),
            other => return Err(fail(join_error(0, other))),
        },
        _ => new_cap,
    };
    node.properties
        .insert("capabilities".into(), Value::String(caps));
    Ok(())
}

fn unset_capability(node: &mut Node, name: &Value) -> Result<(), Failure> {
    let caps = match node.properties.get("capabilities") {
        None => String::new(),
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return Err(Failure::action(format!(
                "Failed to unset capability {}: '{}' object has no attribute 'split'",
                py_str(name, false),
                type_name(other)
            )));
        }
    };
    let prefix = format!("{}:", py_str(name, false));
    let kept: Vec<&str> = caps
        .split(',')
        .filter(|c| !c.starts_with(&prefix))
        .collect();
    node.properties
        .insert("capabilities".into(), Value::String(kept.join(",")));
    Ok(())
}

/// A trait name as upstream's string field takes it.
fn trait_name(name: &Value) -> Result<String, PyError> {
    match name {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(py_str(name, false)),
        other => Err(PyError(format!(
            "A string is required in field trait, not a {}",
            type_name(other)
        ))),
    }
}

fn add_trait(node: &mut Node, name: &Value) -> Result<(), Failure> {
    let fail = |e: String| {
        Failure::action(format!(
            "Failed to add new trait {}: {e}",
            py_str(name, false)
        ))
    };
    let t = trait_name(name).map_err(|e| fail(e.0))?;
    if node.traits.contains(&t) {
        return Ok(());
    }
    let count = node.traits.len() + 1;
    let max = MAX_TRAITS_PER_NODE;
    if count > max {
        return Err(fail(format!(
            "Could not modify traits for node {} as it would exceed the maximum number of traits per node ({count} vs. {max})",
            node.id
        )));
    }
    node.traits.push(t);
    Ok(())
}

fn remove_trait(node: &mut Node, name: &Value, quiet: bool) -> Result<(), Failure> {
    let t = trait_name(name).map_err(|e| {
        Failure::action(format!(
            "Failed to remove trait {}: {e}",
            py_str(name, false)
        ))
    })?;
    match node.traits.iter().position(|x| *x == t) {
        Some(i) => {
            node.traits.remove(i);
        }
        None if quiet => tracing::warn!(
            node = %node.uuid,
            "a sensitive inspection rule removed a trait the node does not have"
        ),
        None => {
            let t = log_safe(&t);
            tracing::warn!(
                node = %node.uuid,
                "Failed to remove trait {t}: Trait {t} could not be found on node {}.",
                node.uuid
            )
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Plugin data (dotted paths).

/// The keys of a plugin-data path: a string split on `.`, a list as it is.
fn data_path(path: &Value) -> Result<Vec<String>, PyError> {
    match path {
        Value::String(p) => Ok(p.split('.').map(str::to_string).collect()),
        Value::Array(items) => Ok(items.iter().map(|k| py_str(k, false)).collect()),
        other => Err(PyError(format!(
            "'{}' object is not subscriptable",
            type_name(other)
        ))),
    }
}

/// Upstream's `update_nested_dict`.
fn update_nested(data: &mut JsonObject, keys: &[String], value: Value) -> Result<(), PyError> {
    let Some((last, mid)) = keys.split_last() else {
        return Err("list index out of range".into());
    };
    let mut root = Value::Object(std::mem::take(data));
    let result = (|| {
        let container = walk_create(&mut root, mid)?;
        setitem(container, last, value)
    })();
    if let Value::Object(o) = root {
        *data = o;
    }
    result.map_err(|e| match e {
        AttrError::Py(m) => PyError(m),
        AttrError::ReadOnly | AttrError::NonList => "unexpected error".into(),
    })
}

fn set_plugin_data(data: &mut JsonObject, path: &Value, value: Value) -> Result<(), PyError> {
    let keys = data_path(path)?;
    update_nested(data, &keys, value)
}

/// The value at `keys`, if every step exists (upstream's `_get_nested_value`).
fn get_nested<'v>(data: &'v JsonObject, keys: &[String]) -> Option<&'v Value> {
    let (first, rest) = keys.split_first()?;
    let mut cur = data.get(first)?;
    for k in rest {
        cur = cur.as_object()?.get(k)?;
    }
    Some(cur)
}

fn extend_plugin_data(
    data: &mut JsonObject,
    path: &Value,
    value: Value,
    unique: bool,
) -> Result<(), PyError> {
    let keys = data_path(path)?;
    let mut list = match get_nested(data, &keys) {
        Some(Value::Array(items)) if !items.is_empty() => items.clone(),
        Some(other) if py::truthy(other) => {
            return Err(PyError(format!(
                "'{}' object has no attribute 'append'",
                type_name(other)
            )));
        }
        _ => Vec::new(),
    };
    if !unique || !list.iter().any(|i| py::py_eq(i, &value)) {
        list.push(value);
    }
    update_nested(data, &keys, Value::Array(list))
}

/// The object at `keys` (every step an object).
fn object_at<'v>(data: &'v JsonObject, keys: &[String]) -> Option<&'v JsonObject> {
    let mut cur = data;
    for k in keys {
        cur = cur.get(k)?.as_object()?;
    }
    Some(cur)
}

fn object_at_mut<'v>(data: &'v mut JsonObject, keys: &[String]) -> Option<&'v mut JsonObject> {
    let mut cur = data;
    for k in keys {
        cur = cur.get_mut(k)?.as_object_mut()?;
    }
    Some(cur)
}

/// Upstream's `_unset_nested_dict`; a missing path is only a warning. The last key of
/// an object takes the object with it (removed from its own parent); ours also removes
/// a top-level key that is alone (upstream removes nothing then).
fn unset_plugin_data(data: &mut JsonObject, path: &Value, quiet: bool) -> Result<(), PyError> {
    let keys = data_path(path)?;
    let Some((last, parents)) = keys.split_last() else {
        return Err("list index out of range".into());
    };
    let Some(container) = object_at(data, parents).filter(|c| c.contains_key(last)) else {
        if quiet {
            tracing::warn!("sensitive inspection rule: plugin data path not found");
        } else {
            tracing::warn!(path = %log_safe(&py_str(path, false)), "inspection rule: plugin data path not found");
        }
        return Ok(());
    };
    let alone = container.len() == 1;
    let (holder, key) = match parents.split_last() {
        Some((parent, grand)) if alone => (grand, parent),
        _ => (parents, last),
    };
    if let Some(o) = object_at_mut(data, holder) {
        o.shift_remove(key);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// api-call.

/// Statuses retried (urllib3's `status_forcelist` upstream).
const RETRY_STATUSES: &[u16] = &[429, 500, 502, 503, 504];

/// urllib3's ceiling on a backoff.
const BACKOFF_MAX: f64 = 120.0;

/// The longest timeout of one attempt, and the most retries: the rules run under the
/// node's lock, so a rule's call must end in bounded time (upstream has no bound).
const TIMEOUT_MAX: f64 = 120.0;
const RETRIES_MAX: u32 = 10;

fn invalid_parameter(e: ConvError) -> Failure {
    match e {
        ConvError::Value(m) => Failure::action(format!("Invalid parameter: {m}")),
        ConvError::Type(m) => Failure::Generic(m),
    }
}

/// An HTTP reason phrase (requests prints the server's; we have only the code).
fn reason(code: u16) -> &'static str {
    match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

async fn api_call(
    args: &Map<String, Value>,
    http: &dyn ApiCaller,
    quiet: bool,
) -> Result<(), Failure> {
    let arg = |name: &str| args.get(name).cloned().unwrap_or(Value::Null);
    let url = py_str(&arg("url"), false);
    let timeout = py::py_to_float(&arg("timeout")).map_err(invalid_parameter)?;
    if timeout <= 0.0 {
        return Err(Failure::action(
            "Invalid parameter: timeout must be greater than zero",
        ));
    }
    let retries = py::py_to_int(&arg("retries")).map_err(invalid_parameter)?;
    let backoff = py::py_to_float(&arg("backoff_factor")).map_err(invalid_parameter)?;
    let headers = match arg("headers") {
        Value::Object(h) => h,
        other if !py::truthy(&other) => JsonObject::new(),
        _ => {
            return Err(Failure::action(
                "Invalid parameter: headers must be a dictionary",
            ));
        }
    };
    let timeout =
        Duration::try_from_secs_f64(timeout.min(TIMEOUT_MAX)).unwrap_or(Duration::from_secs(5));
    let retries = u32::try_from(retries.max(0))
        .unwrap_or(u32::MAX)
        .min(RETRIES_MAX);
    // The URL as failures and logs show it: scheme, host, port and path only (a
    // webhook's token is often in its query or user information).
    let shown = ironic_model::secrets::shown_url(&url);
    let mut errors: u32 = 0;
    loop {
        let outcome = http.get(&url, &headers, timeout).await;
        let retry = match &outcome {
            Ok(code) => RETRY_STATUSES.contains(code),
            Err(_) => true,
        };
        if retry && errors < retries {
            errors += 1;
            // urllib3: no wait before the first retry, then factor × 2^(n-1).
            if errors > 1 {
                let exp = i32::try_from(errors - 1).unwrap_or(i32::MAX);
                let wait = (backoff * 2f64.powi(exp)).clamp(0.0, BACKOFF_MAX);
                if let Ok(d) = Duration::try_from_secs_f64(wait)
                    && !d.is_zero()
                {
                    http.pause(d).await;
                }
            }
            if quiet {
                tracing::debug!(
                    attempt = errors,
                    "api-call action of a sensitive rule: retrying"
                );
            } else {
                tracing::debug!(url = %log_safe(&shown), attempt = errors, "api-call action: retrying");
            }
            continue;
        }
        let detail = match outcome {
            Ok(code) if code < 400 => return Ok(()),
            Ok(code) if code < 500 => {
                format!("{code} Client Error: {} for url: {shown}", reason(code))
            }
            Ok(code) if code < 600 => {
                format!("{code} Server Error: {} for url: {shown}", reason(code))
            }
            Ok(_) => return Ok(()),
            Err(e) => e.to_string(),
        };
        return Err(Failure::action(format!(
            "Request to {shown} failed: {detail}"
        )));
    }
}
