//! Interpolation of rule arguments: Python's `str.format` over the variables `node`,
//! `inventory`, `plugin_data` and, in loops, `item` (spec §3.6). Every replacement
//! field renders with Python's `str()`, so a formatted string stays a string. A string
//! that cannot be formatted is kept unchanged (upstream's `safe_format`), except that a
//! missing key gives `null` for `is-empty`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use ironic_model::node::JsonObject;
use ironic_model::secrets::{self, log_safe};
use ironic_model::{Node, Version};
use serde_json::{Map, Value};

use super::py::{self, MASK, py_repr, py_repr_str, py_str};

/// What templates may refer to.
pub(super) struct Vars<'a> {
    /// The node's attributes ([`node_view`]).
    pub node: &'a JsonObject,
    pub inventory: &'a JsonObject,
    pub plugin_data: &'a JsonObject,
    /// The loop item, in loops.
    pub item: Option<&'a Value>,
    /// Whether secrets of the inventory and plugin data are masked.
    pub mask: bool,
    /// A sensitive rule's: a failed interpolation is logged without its text.
    pub quiet: bool,
}

/// Why a template could not be formatted: `key` when Python would raise `KeyError`
/// (an unknown variable or a missing key), which `is-empty` reads as `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FmtError {
    pub key: bool,
    pub msg: String,
}

fn other(msg: impl Into<String>) -> FmtError {
    FmtError {
        key: false,
        msg: msg.into(),
    }
}

fn key_error(msg: String) -> FmtError {
    FmtError { key: true, msg }
}

/// A step of a replacement field's evaluation.
enum Cur<'a> {
    /// The node object (attributes by `.name`, or `[name]`).
    Node(&'a JsonObject),
    /// The inventory or the plugin data, and whether they read masked.
    Obj(&'a JsonObject, bool),
    /// A value, and whether it reads masked.
    Val(Cow<'a, Value>, bool),
}

/// Python's `template.format(**vars)`.
pub(super) fn format(template: &str, vars: &Vars<'_>) -> Result<String, FmtError> {
    format_with(template, vars, false)
}

/// [`format`]; with `literal_data`, what a field brings from anywhere but the loop item
/// (the inventory and plugin data a ramdisk sent, the node) has its braces doubled, so
/// that a second pass writes it as it is instead of evaluating it as a template.
fn format_with(template: &str, vars: &Vars<'_>, literal_data: bool) -> Result<String, FmtError> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::with_capacity(template.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' if chars.get(i + 1) == Some(&'{') => {
                out.push('{');
                i += 2;
            }
            '{' => {
                if i + 1 >= chars.len() {
                    return Err(other("Single '{' encountered in format string"));
                }
                let start = i + 1;
                let mut depth = 1usize;
                let mut j = start;
                while j < chars.len() {
                    match chars[j] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if j >= chars.len() {
                    return Err(other("expected '}' before end of string"));
                }
                let field = &chars[start..j];
                let text = render_field(field, vars)?;
                if literal_data && !from_item(field) {
                    out.push_str(&text.replace('{', "{{").replace('}', "}}"));
                } else {
                    out.push_str(&text);
                }
                i = j + 1;
            }
            '}' if chars.get(i + 1) == Some(&'}') => {
                out.push('}');
                i += 2;
            }
            '}' => return Err(other("Single '}' encountered in format string")),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Whether a replacement field reads the loop item (`{item}`, `{item[k]}`, `{item.x}`).
fn from_item(field: &[char]) -> bool {
    let end = field
        .iter()
        .position(|c| matches!(c, '.' | '[' | '!' | ':'))
        .unwrap_or(field.len());
    field[..end].iter().collect::<String>() == "item"
}

/// One replacement field: `name(.attr|[key])*[!conv][:spec]`.
fn render_field(field: &[char], vars: &Vars<'_>) -> Result<String, FmtError> {
    // The field name ends at a top-level `!` or `:` (brackets protect them).
    let mut k = 0;
    while k < field.len() {
        match field[k] {
            '{' => return Err(other("unexpected '{' in field name")),
            '[' => {
                while k < field.len() && field[k] != ']' {
                    k += 1;
                }
                if k < field.len() {
                    k += 1;
                }
            }
            '!' | ':' => break,
            _ => k += 1,
        }
    }
    let name = &field[..k];
    let mut conversion = None;
    let mut spec: &[char] = &[];
    if k < field.len() {
        let rest = &field[k..];
        if rest[0] == '!' {
            let Some(c) = rest.get(1) else {
                return Err(other(
                    "end of string while looking for conversion specifier",
                ));
            };
            conversion = Some(*c);
            match rest.get(2) {
                None => {}
                Some(':') => spec = &rest[3..],
                Some(_) => return Err(other("expected ':' after conversion specifier")),
            }
        } else {
            spec = &rest[1..];
        }
    }
    let cur = resolve(name, vars)?;
    let repr = match conversion {
        None | Some('s') => false,
        Some('r') => true,
        Some(c) => return Err(other(format!("Unknown conversion specifier {c}"))),
    };
    if !spec.is_empty() {
        // Format specifications are valid Python; we do not implement them.
        return Err(other("format specifications are not supported"));
    }
    let (v, mask) = match cur {
        Cur::Node(o) => (Cow::Owned(Value::Object(o.clone())), false),
        Cur::Obj(o, mask) => (Cow::Owned(Value::Object(o.clone())), mask),
        Cur::Val(v, mask) => (v, mask),
    };
    Ok(if repr {
        py_repr(&v, mask)
    } else {
        py_str(&v, mask)
    })
}

/// Evaluates a field name: the variable, then each `.attr` and `[key]`.
fn resolve<'a>(name: &[char], vars: &Vars<'a>) -> Result<Cur<'a>, FmtError> {
    let first_end = name
        .iter()
        .position(|c| *c == '.' || *c == '[')
        .unwrap_or(name.len());
    let first: String = name[..first_end].iter().collect();
    if first.is_empty() || first.chars().all(|c| c.is_ascii_digit()) {
        let index = if first.is_empty() {
            "0"
        } else {
            first.as_str()
        };
        return Err(other(format!(
            "Replacement index {index} out of range for positional args tuple"
        )));
    }
    let mut cur = match (first.as_str(), vars.item) {
        ("node", _) => Cur::Node(vars.node),
        ("inventory", _) => Cur::Obj(vars.inventory, vars.mask),
        ("plugin_data", _) => Cur::Obj(vars.plugin_data, vars.mask),
        ("item", Some(item)) => Cur::Val(Cow::Borrowed(item), false),
        _ => return Err(key_error(py_repr_str(&first))),
    };
    let mut i = first_end;
    while i < name.len() {
        if name[i] == '.' {
            let start = i + 1;
            let mut j = start;
            while j < name.len() && name[j] != '.' && name[j] != '[' {
                j += 1;
            }
            if j == start {
                return Err(other("Empty attribute in format string"));
            }
            let attr: String = name[start..j].iter().collect();
            cur = getattr(cur, &attr)?;
            i = j;
        } else {
            // `[`: the only other character a name part can end at.
            let start = i + 1;
            let mut j = start;
            while j < name.len() && name[j] != ']' {
                j += 1;
            }
            if j >= name.len() {
                return Err(other("Missing ']' in format string"));
            }
            if j == start {
                return Err(other("Empty attribute in format string"));
            }
            let key: String = name[start..j].iter().collect();
            cur = getitem(cur, &key)?;
            i = j + 1;
            if i < name.len() && name[i] != '.' && name[i] != '[' {
                return Err(other(
                    "Only '.' or '[' may follow ']' in format field specifier",
                ));
            }
        }
    }
    Ok(cur)
}

fn getattr<'a>(cur: Cur<'a>, attr: &str) -> Result<Cur<'a>, FmtError> {
    let type_name = match cur {
        Cur::Node(view) => {
            return match view.get(attr) {
                Some(v) => Ok(Cur::Val(Cow::Borrowed(v), false)),
                None => Err(other(format!(
                    "'Node' object has no attribute {}",
                    py_repr_str(attr)
                ))),
            };
        }
        Cur::Obj(..) => "dict",
        Cur::Val(v, _) => py::type_name(&v),
    };
    Err(other(format!(
        "'{type_name}' object has no attribute {}",
        py_repr_str(attr)
    )))
}

/// `[key]` on an object: a key of digits is an integer, which no JSON key is.
fn object_item<'a>(o: &'a JsonObject, key: &str, mask: bool) -> Result<Cur<'a>, FmtError> {
    if key.chars().all(|c| c.is_ascii_digit()) {
        return Err(key_error(key.to_string()));
    }
    if mask && py::is_sensitive(key) {
        return Ok(Cur::Val(Cow::Owned(Value::String(MASK.into())), mask));
    }
    match o.get(key) {
        Some(Value::Object(inner)) => Ok(Cur::Obj(inner, mask)),
        Some(v) => Ok(Cur::Val(Cow::Borrowed(v), mask)),
        None => Err(key_error(py_repr_str(key))),
    }
}

/// `[key]` on a value that is not an object.
fn value_item<'a>(v: &'a Value, key: &str, mask: bool) -> Result<Cur<'a>, FmtError> {
    let index: Option<usize> = if key.chars().all(|c| c.is_ascii_digit()) {
        Some(key.parse().unwrap_or(usize::MAX))
    } else {
        None
    };
    match (v, index) {
        (Value::Object(o), _) => object_item(o, key, mask),
        (Value::Array(a), Some(i)) => match a.get(i) {
            Some(Value::Object(inner)) => Ok(Cur::Obj(inner, mask)),
            Some(x) => Ok(Cur::Val(Cow::Borrowed(x), mask)),
            None => Err(other("list index out of range")),
        },
        (Value::Array(_), None) => Err(other("list indices must be integers or slices, not str")),
        (Value::String(s), Some(i)) => s
            .chars()
            .nth(i)
            .map(|c| Cur::Val(Cow::Owned(Value::String(c.to_string())), mask))
            .ok_or_else(|| other("string index out of range")),
        (Value::String(_), None) => Err(other("string indices must be integers, not 'str'")),
        (x, _) => Err(other(format!(
            "'{}' object is not subscriptable",
            py::type_name(x)
        ))),
    }
}

fn getitem<'a>(cur: Cur<'a>, key: &str) -> Result<Cur<'a>, FmtError> {
    match cur {
        // The node reads `[name]` as its attribute (upstream's dict compatibility).
        Cur::Node(_) if key.chars().all(|c| c.is_ascii_digit()) => {
            Err(other("attribute name must be string"))
        }
        Cur::Node(view) => getattr(Cur::Node(view), key),
        Cur::Obj(o, mask) => object_item(o, key, mask),
        Cur::Val(Cow::Borrowed(v), mask) => value_item(v, key, mask),
        // Owned values are strings (a character, the mask): their items are owned too.
        Cur::Val(Cow::Owned(v), mask) => match value_item(&v, key, mask)? {
            Cur::Val(x, m) => Ok(Cur::Val(Cow::Owned(x.into_owned()), m)),
            Cur::Obj(o, m) => Ok(Cur::Val(Cow::Owned(Value::Object(o.clone())), m)),
            Cur::Node(o) => Ok(Cur::Val(Cow::Owned(Value::Object(o.clone())), false)),
        },
    }
}

/// Upstream's `safe_format`: the formatted string; on failure the string unchanged
/// (a warning), or `null` for a missing key under `is-empty`.
fn safe_format(s: &str, vars: &Vars<'_>, is_empty: bool) -> Value {
    match format(s, vars) {
        Ok(out) => Value::String(out),
        Err(e) => failed(s, e, vars, is_empty),
    }
}

/// A string formatted twice, as upstream formats a looped argument (so that a loop item
/// may itself be a template: `loop: ["{inventory[x]}"]`, `value: "{item}"`). Only what
/// came from the item is formatted again: text the first pass took from the inventory,
/// the plugin data or the node is kept as it is, so that a ramdisk cannot send a
/// template (`{node.driver_info[…]}`) to be evaluated.
fn format_twice(s: &str, vars: &Vars<'_>, is_empty: bool) -> Value {
    let first = match format_with(s, vars, true) {
        Ok(first) => first,
        Err(e) => return failed(s, e, vars, is_empty),
    };
    match format(&first, vars) {
        Ok(out) => Value::String(out),
        Err(e) => {
            // The first pass's text as it reads (its escapes undone).
            let once = format(s, vars).unwrap_or(first);
            failed(&once, e, vars, is_empty)
        }
    }
}

/// A failed format of `s`: `null` for a missing key under `is-empty`, else `s` as it is
/// (a warning).
fn failed(s: &str, e: FmtError, vars: &Vars<'_>, is_empty: bool) -> Value {
    match e {
        e if e.key && is_empty => {
            if vars.quiet {
                tracing::debug!("interpolation failed (missing field) for is-empty, using None");
            } else {
                tracing::debug!(value = %log_safe(s), "interpolation failed (missing field) for is-empty, using None");
            }
            Value::Null
        }
        e => {
            if vars.quiet {
                tracing::warn!(
                    "interpolation of an argument of a sensitive inspection rule failed"
                );
            } else {
                tracing::warn!(value = %log_safe(s), error = %log_safe(&e.msg), "interpolation of an inspection rule argument failed");
            }
            Value::String(s.to_string())
        }
    }
}

/// Upstream's `interpolate_variables`: strings formatted (twice in loops), object keys
/// formatted and values interpolated, list string elements formatted once and other
/// elements interpolated; anything else unchanged.
pub(super) fn interpolate(v: &Value, vars: &Vars<'_>, in_loop: bool, is_empty: bool) -> Value {
    match v {
        Value::String(s) if in_loop => format_twice(s, vars, is_empty),
        Value::String(s) => safe_format(s, vars, is_empty),
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, item) in o {
                let key = match safe_format(k, vars, is_empty) {
                    Value::String(k) => k,
                    other => py_str(&other, false),
                };
                out.insert(key, interpolate(item, vars, in_loop, is_empty));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| match item {
                    Value::String(s) => safe_format(s, vars, is_empty),
                    other => interpolate(other, vars, in_loop, is_empty),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Python's `str()` of an aware UTC datetime: `2024-05-01 10:20:30[.123456]+00:00`.
fn py_datetime(t: &DateTime<Utc>) -> String {
    let micros = t.timestamp_subsec_micros();
    if micros == 0 {
        t.format("%Y-%m-%d %H:%M:%S+00:00").to_string()
    } else {
        format!("{}.{micros:06}+00:00", t.format("%Y-%m-%d %H:%M:%S"))
    }
}

fn opt_time(t: Option<&DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| Value::String(py_datetime(t)))
}

fn opt_str(s: Option<&str>) -> Value {
    s.map_or(Value::Null, |s| Value::String(s.to_string()))
}

/// The node's attributes as templates see them (`{node.<field>}`): the writable fields
/// of the newest version, then the read-only ones (timestamps as Python prints them),
/// and `auto_discovered`; secrets masked as the API masks them (whatever
/// `[inspection_rules] mask_secrets` says, which is about the inspection data): values
/// under secret keys at any depth (`driver_info`'s BMC passwords, `driver_internal_info`'s
/// agent token, …) and secret patterns in text are [`secrets::MASK`], so that a rule
/// cannot copy them where readers see them.
pub(super) fn node_view(node: &Node) -> JsonObject {
    match secrets::masked(&Value::Object(node_fields(node))) {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// The node's attributes, unmasked (which exist: see [`node_view`]).
pub(super) fn node_fields(node: &Node) -> JsonObject {
    let mut v = node.patch_doc(Version::MAX);
    let mut put = |k: &str, x: Value| {
        v.insert(k.to_string(), x);
    };
    put("id", Value::from(node.id.0));
    put("uuid", Value::String(node.uuid.to_string()));
    put("created_at", Value::String(py_datetime(&node.created_at)));
    put("updated_at", opt_time(node.updated_at.as_ref()));
    put(
        "provision_state",
        Value::String(node.provision_state.as_str().to_string()),
    );
    put(
        "target_provision_state",
        opt_str(node.target_provision_state.map(|s| s.as_str())),
    );
    put(
        "provision_updated_at",
        opt_time(node.provision_updated_at.as_ref()),
    );
    put("power_state", opt_str(node.power_state.as_deref()));
    put(
        "target_power_state",
        opt_str(node.target_power_state.as_deref()),
    );
    put(
        "driver_internal_info",
        Value::Object(node.driver_internal_info.clone()),
    );
    put(
        "traits",
        Value::Array(node.traits.iter().cloned().map(Value::String).collect()),
    );
    put("console_enabled", Value::Bool(node.console_enabled));
    put("clean_step", Value::Object(node.clean_step.clone()));
    put("deploy_step", Value::Object(node.deploy_step.clone()));
    put("service_step", Value::Object(node.service_step.clone()));
    put("raid_config", Value::Object(node.raid_config.clone()));
    put(
        "target_raid_config",
        Value::Object(node.target_raid_config.clone()),
    );
    put("fault", opt_str(node.fault.as_deref()));
    put("last_error", opt_str(node.last_error.as_deref()));
    put(
        "maintenance_reason",
        opt_str(node.maintenance_reason.as_deref()),
    );
    put("reservation", opt_str(node.reservation.as_deref()));
    put(
        "inspection_started_at",
        opt_time(node.inspection_started_at.as_ref()),
    );
    put(
        "inspection_finished_at",
        opt_time(node.inspection_finished_at.as_ref()),
    );
    put(
        "allocation_id",
        node.allocation_id.map_or(Value::Null, |a| Value::from(a.0)),
    );
    put("allocation_uuid", opt_str(node.allocation_uuid.as_deref()));
    put("boot_mode", opt_str(node.boot_mode.as_deref()));
    put(
        "secure_boot",
        node.secure_boot.map_or(Value::Null, Value::Bool),
    );
    if !v.contains_key("instance_name") {
        v.insert(
            "instance_name".into(),
            opt_str(node.instance_name.as_deref()),
        );
    }
    v.insert("health".into(), opt_str(node.health.as_deref()));
    let auto = node.driver_internal_info.get("auto_discovered") == Some(&Value::Bool(true));
    v.insert("auto_discovered".into(), Value::Bool(auto));
    v
}
