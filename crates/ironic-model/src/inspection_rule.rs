//! Inspection rules (1.96): conditions over what an inspection found and actions that
//! change the node when they hold. Checked here against upstream's schema and argument
//! rules (the API's POST and PATCH, and the built-in rules file); stored by `ironic-db`
//! `inspection_rules.rs`; run by the conductor with `ironic-rules` after the inspection
//! hooks.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::Error;
use crate::error::SchemaError;
use crate::ids::is_uuid_like;
use crate::node::JsonObject;
use crate::patch::py_repr;

/// The one phase rules run in today.
pub const PHASE_MAIN: &str = "main";

/// The highest priority a rule created through the API may have (built-in rules have
/// no upper bound).
pub const MAX_PRIORITY: i64 = 9999;

/// Action operators, in upstream's order (its schema error lists them so).
pub const ACTION_OPS: &[&str] = &[
    "fail",
    "log",
    "set-attribute",
    "extend-attribute",
    "del-attribute",
    "set-capability",
    "unset-capability",
    "add-trait",
    "remove-trait",
    "set-plugin-data",
    "extend-plugin-data",
    "unset-plugin-data",
    "set-port-attribute",
    "extend-port-attribute",
    "del-port-attribute",
    "api-call",
];

/// Condition operators without their negation, in upstream's order; each may be
/// negated with a leading `!`.
pub const CONDITION_OPS: &[&str] = &[
    "eq", "lt", "gt", "is-empty", "in-net", "matches", "contains", "one-of", "is-none", "is-true",
    "is-false",
];

/// The values `multiple` may take (how a looped condition's results combine).
pub const MULTIPLE: &[&str] = &["any", "all", "first", "last"];

/// Fields in upstream's representation order (`links` last).
pub const FIELDS: &[&str] = &[
    "uuid",
    "created_at",
    "updated_at",
    "description",
    "priority",
    "sensitive",
    "phase",
    "conditions",
    "actions",
];

/// What a list shows without `fields` or `detail`.
pub const DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "description", "priority", "phase"];

/// What a PATCH may change.
pub const PATCHABLE: &[&str] = &[
    "actions",
    "conditions",
    "description",
    "phase",
    "priority",
    "sensitive",
];

/// An operator's arguments: the names it needs (a list form maps onto them in order),
/// the optional ones with their defaults, and those templated outside loops.
#[derive(Debug)]
pub struct Signature {
    pub required: &'static [&'static str],
    pub optional: &'static [(&'static str, Default)],
    pub interpolated: &'static [&'static str],
}

/// An optional argument's default.
#[derive(Debug, Clone, Copy)]
pub enum Default {
    False,
    Null,
    Number(f64),
    Str(&'static str),
    EmptyList,
}

impl Default {
    pub fn value(self) -> Value {
        match self {
            Default::False => Value::Bool(false),
            Default::Null => Value::Null,
            Default::Number(n) if n.fract() == 0.0 => Value::from(n as i64),
            Default::Number(n) => Value::from(n),
            Default::Str(s) => Value::String(s.into()),
            Default::EmptyList => Value::Array(Vec::new()),
        }
    }
}

const fn sig(
    required: &'static [&'static str],
    optional: &'static [(&'static str, Default)],
    interpolated: &'static [&'static str],
) -> Signature {
    Signature {
        required,
        optional,
        interpolated,
    }
}

const COMPARE: Signature = sig(
    &["values"],
    &[("force_strings", Default::False)],
    &["values"],
);
const ONE_VALUE: Signature = sig(&["value"], &[], &["value"]);
const REGEX: Signature = sig(&["value", "regex"], &[], &["value"]);

/// The signature of an operator (a condition's may carry a leading `!`); `None` for an
/// unknown one.
pub fn signature(op: &str) -> Option<&'static Signature> {
    const UNIQUE: &[(&str, Default)] = &[("unique", Default::False)];
    static IN_NET: Signature = sig(&["address", "subnet"], &[], &["address", "subnet"]);
    static ONE_OF: Signature = sig(&["value"], &[("values", Default::EmptyList)], &["value"]);
    static FAIL: Signature = sig(&["msg"], &[], &[]);
    static LOG: Signature = sig(&["msg"], &[("level", Default::Str("info"))], &["msg"]);
    static SET_ATTR: Signature = sig(&["path", "value"], &[], &["value"]);
    static EXTEND_ATTR: Signature = sig(&["path", "value"], UNIQUE, &["value"]);
    static DEL_ATTR: Signature = sig(&["path"], &[], &[]);
    static SET_CAP: Signature = sig(&["name", "value"], &[], &["value"]);
    static NAME: Signature = sig(&["name"], &[], &[]);
    static SET_PD: Signature = sig(&["path", "value", "plugin_data"], &[], &["value"]);
    static EXTEND_PD: Signature = sig(&["path", "value", "plugin_data"], UNIQUE, &["value"]);
    static UNSET_PD: Signature = sig(&["path", "plugin_data"], &[], &[]);
    static SET_PORT: Signature = sig(&["port_id", "path", "value"], &[], &["value"]);
    static EXTEND_PORT: Signature = sig(&["port_id", "path", "value"], UNIQUE, &["value"]);
    static DEL_PORT: Signature = sig(&["port_id", "path"], &[], &[]);
    static API_CALL: Signature = sig(
        &["url"],
        &[
            ("headers", Default::Null),
            ("proxies", Default::Null),
            ("timeout", Default::Number(5.0)),
            ("retries", Default::Number(3.0)),
            ("backoff_factor", Default::Number(0.3)),
        ],
        &["url"],
    );
    Some(match op.strip_prefix('!').unwrap_or(op) {
        "eq" | "lt" | "gt" => &COMPARE,
        "is-empty" | "is-none" | "is-true" | "is-false" => &ONE_VALUE,
        "in-net" => &IN_NET,
        "matches" | "contains" => &REGEX,
        "one-of" => &ONE_OF,
        "fail" => &FAIL,
        "log" => &LOG,
        "set-attribute" => &SET_ATTR,
        "extend-attribute" => &EXTEND_ATTR,
        "del-attribute" => &DEL_ATTR,
        "set-capability" => &SET_CAP,
        "unset-capability" | "add-trait" | "remove-trait" => &NAME,
        "set-plugin-data" => &SET_PD,
        "extend-plugin-data" => &EXTEND_PD,
        "unset-plugin-data" => &UNSET_PD,
        "set-port-attribute" => &SET_PORT,
        "extend-port-attribute" => &EXTEND_PORT,
        "del-port-attribute" => &DEL_PORT,
        "api-call" => &API_CALL,
        _ => return None,
    })
}

/// The plugin-data operators take the plugin data as an argument that validation
/// itself supplies (upstream's: it shows in the stored arguments as `{}`).
pub fn takes_plugin_data(op: &str) -> bool {
    matches!(
        op,
        "set-plugin-data" | "extend-plugin-data" | "unset-plugin-data"
    )
}

/// Every condition operator upstream's schema accepts: the plain ones, then negated.
pub fn condition_ops() -> Vec<String> {
    CONDITION_OPS
        .iter()
        .map(|o| (*o).to_string())
        .chain(CONDITION_OPS.iter().map(|o| format!("!{o}")))
        .collect()
}

/// A rule as stored. Conditions and actions are kept as given (`op`, `args`, `loop`,
/// `multiple` and whatever else the client sent, which is stored but never shown).
#[derive(Debug, Clone, PartialEq)]
pub struct InspectionRule {
    pub id: i64,
    pub uuid: crate::ids::RuleUuid,
    pub description: Option<String>,
    pub priority: i64,
    pub sensitive: bool,
    pub phase: String,
    pub conditions: Vec<JsonObject>,
    pub actions: Vec<JsonObject>,
    /// From `[inspection_rules] built_in_rules`: never stored, never shown.
    pub built_in: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl InspectionRule {
    /// The document a PATCH applies to (the stored, unmasked data).
    pub fn patch_doc(&self) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("uuid".into(), Value::String(self.uuid.to_string()));
        d.insert(
            "description".into(),
            self.description.clone().map_or(Value::Null, Value::String),
        );
        d.insert("priority".into(), Value::from(self.priority));
        d.insert("sensitive".into(), Value::Bool(self.sensitive));
        d.insert("phase".into(), Value::String(self.phase.clone()));
        d.insert("conditions".into(), objects(&self.conditions));
        d.insert("actions".into(), objects(&self.actions));
        d
    }

    /// Takes the checked fields of a document.
    pub fn set(&mut self, d: RuleDoc) {
        self.description = d.description;
        self.priority = d.priority;
        self.sensitive = d.sensitive;
        self.phase = d.phase;
        self.conditions = d.conditions;
        self.actions = d.actions;
    }
}

fn objects(items: &[JsonObject]) -> Value {
    Value::Array(items.iter().cloned().map(Value::Object).collect())
}

pub fn not_found(ident: &str) -> Error {
    Error::NotFound(format!("Rule {ident} could not be found."))
}

/// A rule document after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDoc {
    pub uuid: Option<crate::ids::RuleUuid>,
    pub description: Option<String>,
    pub priority: i64,
    pub sensitive: bool,
    pub phase: String,
    pub conditions: Vec<JsonObject>,
    pub actions: Vec<JsonObject>,
}

/// Who wrote the document: it changes the wording of schema errors and whether the
/// priority is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Create,
    Patch,
    BuiltIn,
}

impl Origin {
    fn schema(self, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(match self {
            Origin::Create => format!("Schema error: {msg}"),
            Origin::Patch => format!("Schema error for patch: {msg}"),
            Origin::BuiltIn => format!("Validation failed for inspection rule: {msg}"),
        })
    }
}

/// An integer, or a string of one: the CLI (`baremetal inspection rule create
/// --priority 10`) sends the number as text, which upstream's schema refuses.
fn is_integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A boolean, or one of Ironic's boolean words (the CLI sends `--sensitive true` as
/// text); `None` for null.
fn as_flag(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => crate::node::parse_bool_word(s),
        _ => None,
    }
}

fn type_name_list(types: &[&str]) -> String {
    types
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn not_of_type(v: &Value, types: &[&str]) -> SchemaError {
    crate::schema!("{} is not of type {}", py_repr(v), type_name_list(types))
}

fn enum_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// One condition or action item against upstream's item schema (its keyword order:
/// `required`, then the properties `op`, `args`, `multiple`, `loop`).
fn check_item(item: &Value, ops: &[String], condition: bool) -> Result<(), SchemaError> {
    let Value::Object(o) = item else {
        return Err(not_of_type(item, &["object"]));
    };
    for required in ["op", "args"] {
        if !o.contains_key(required) {
            return Err(crate::schema!("'{required}' is a required property"));
        }
    }
    if let Some(op) = o.get("op")
        && !op.as_str().is_some_and(|s| ops.iter().any(|x| x == s))
    {
        return Err(crate::schema!(
            "{} is not one of {}",
            py_repr(op),
            enum_list(ops)
        ));
    }
    if let Some(a) = o.get("args")
        && !matches!(a, Value::Array(_) | Value::Object(_))
    {
        return Err(not_of_type(a, &["array", "object"]));
    }
    if condition && let Some(m) = o.get("multiple") {
        let all: Vec<String> = MULTIPLE.iter().map(|s| (*s).to_string()).collect();
        if !m.as_str().is_some_and(|s| MULTIPLE.contains(&s)) {
            return Err(crate::schema!(
                "{} is not one of {}",
                py_repr(m),
                enum_list(&all)
            ));
        }
    }
    if let Some(l) = o.get("loop")
        && !matches!(l, Value::Array(_) | Value::Object(_))
    {
        return Err(not_of_type(l, &["array", "object"]));
    }
    Ok(())
}

fn check_text(v: &Value, max: usize) -> Result<(), SchemaError> {
    match v {
        Value::Null => Ok(()),
        Value::String(s) if s.chars().count() <= max => Ok(()),
        Value::String(_) => Err(crate::schema!("{} is too long", py_repr(v))),
        other => Err(not_of_type(other, &["string", "null"])),
    }
}

/// Upstream's JSON schema for a rule, checked in its keyword order so that the first
/// error is the one upstream reports.
fn check_schema(body: &Value) -> Result<(), SchemaError> {
    let Value::Object(o) = body else {
        return Err(not_of_type(body, &["object"]));
    };
    if let Some(a) = o.get("actions") {
        let Value::Array(items) = a else {
            return Err(not_of_type(a, &["array"]));
        };
        if items.is_empty() {
            return Err("[] should be non-empty".into());
        }
        let ops: Vec<String> = ACTION_OPS.iter().map(|s| (*s).to_string()).collect();
        for i in items {
            check_item(i, &ops, false)?;
        }
    }
    // Null is accepted as "none" (upstream refuses it, yet its CLI sends it when
    // `--conditions` is not given).
    if let Some(c) = o.get("conditions").filter(|c| !c.is_null()) {
        let Value::Array(items) = c else {
            return Err(not_of_type(c, &["array"]));
        };
        let ops = condition_ops();
        for i in items {
            check_item(i, &ops, true)?;
        }
    }
    if let Some(d) = o.get("description") {
        check_text(d, 255)?;
    }
    if let Some(p) = o.get("phase") {
        check_text(p, 16)?;
    }
    if let Some(p) = o.get("priority") {
        match is_integer(p) {
            None => return Err(not_of_type(p, &["integer"])),
            Some(n) if n < 0 => {
                return Err(crate::schema!(
                    "{} is less than the minimum of 0",
                    py_repr(p)
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(s) = o.get("sensitive")
        && !s.is_null()
        && as_flag(s).is_none()
    {
        return Err(not_of_type(s, &["boolean", "null"]));
    }
    if let Some(u) = o.get("uuid")
        && !matches!(u, Value::String(_) | Value::Null)
    {
        return Err(not_of_type(u, &["string", "null"]));
    }
    if !o.contains_key("actions") {
        return Err("'actions' is a required property".into());
    }
    // jsonschema names them sorted.
    let mut extra: Vec<&String> = o.keys().collect();
    extra.sort();
    let extra: Vec<String> = extra
        .into_iter()
        .filter(|k| {
            ![
                "actions",
                "conditions",
                "description",
                "phase",
                "priority",
                "sensitive",
                "uuid",
            ]
            .contains(&k.as_str())
        })
        .map(|k| format!("'{k}'"))
        .collect();
    match extra.len() {
        0 => Ok(()),
        1 => Err(crate::schema!(
            "Additional properties are not allowed ({} was unexpected)",
            extra[0]
        )),
        _ => Err(crate::schema!(
            "Additional properties are not allowed ({} were unexpected)",
            extra.join(", ")
        )),
    }
}

/// An operator's arguments against its signature. Object arguments of the plugin-data
/// operators gain `"plugin_data": {}` (upstream's, visible in what is shown).
pub fn check_args(op: &str, args: &mut Value) -> Result<(), SchemaError> {
    let Some(sig) = signature(op) else {
        return Err(crate::schema!("Unknown operator: {op}"));
    };
    let plugin = takes_plugin_data(op);
    match args {
        Value::Object(given) => {
            if plugin {
                given.insert("plugin_data".into(), Value::Object(Map::new()));
            }
            let missing: Vec<&str> = sig
                .required
                .iter()
                .copied()
                .filter(|r| !given.contains_key(*r))
                .collect();
            let unexpected: Vec<&str> = given
                .keys()
                .map(String::as_str)
                .filter(|k| !sig.required.contains(k) && !sig.optional.iter().any(|(o, _)| o == k))
                .collect();
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!(
                    "missing required argument(s): {}",
                    missing.join(", ")
                ));
            }
            if !unexpected.is_empty() {
                parts.push(format!("unexpected argument(s): {}", unexpected.join(", ")));
            }
            if parts.is_empty() {
                Ok(())
            } else {
                Err(SchemaError(parts.join("; ")))
            }
        }
        Value::Array(given) => {
            let needed: Vec<&str> = sig
                .required
                .iter()
                .copied()
                .filter(|r| !(plugin && *r == "plugin_data"))
                .collect();
            if given.len() < needed.len() {
                Err(crate::schema!(
                    "Not enough arguments provided. Missing: {}",
                    needed[given.len()..].join(", ")
                ))
            } else {
                Ok(())
            }
        }
        _ => Err(crate::schema!(
            "{} is not of type 'array', 'object'",
            py_repr(args)
        )),
    }
}

/// Arguments by name: an object as given, a list mapped onto the signature (required
/// names, then optional ones; surplus dropped), with optional defaults filled in.
pub fn named_args(op: &str, args: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(sig) = signature(op) else {
        return out;
    };
    match args {
        Value::Object(o) => out = o.clone(),
        Value::Array(a) => {
            let names = sig
                .required
                .iter()
                .copied()
                .filter(|r| !(takes_plugin_data(op) && *r == "plugin_data"))
                .chain(sig.optional.iter().map(|(n, _)| *n));
            for (name, v) in names.zip(a) {
                out.insert(name.into(), v.clone());
            }
        }
        _ => {}
    }
    for (name, d) in sig.optional {
        if !out.contains_key(*name) {
            out.insert((*name).into(), d.value());
        }
    }
    out
}

/// Validates a rule document (a POST body, a patched rule, a built-in rule): upstream's
/// schema, then each operator's arguments (the first failure, alone), then phase and
/// priority (every failure, together).
pub fn validate_doc(body: &Value, origin: Origin) -> Result<RuleDoc, Error> {
    check_schema(body).map_err(|m| origin.schema(m))?;
    let Value::Object(o) = body else {
        return Err(origin.schema(not_of_type(body, &["object"])));
    };
    let items = |key: &str| -> Result<Vec<JsonObject>, Error> {
        let mut out = Vec::new();
        for item in o.get(key).and_then(Value::as_array).into_iter().flatten() {
            let Value::Object(mut item) = item.clone() else {
                continue;
            };
            let op = item
                .get("op")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if let Some(args) = item.get_mut("args") {
                check_args(&op, args)?;
            }
            out.push(item);
        }
        Ok(out)
    };
    let conditions = items("conditions")?;
    let actions = items("actions")?;
    let phase = match o.get("phase") {
        None => Some(PHASE_MAIN.to_string()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    };
    let priority = o.get("priority").and_then(is_integer).unwrap_or(0);
    let mut errors = Vec::new();
    if phase.as_deref() != Some(PHASE_MAIN) {
        errors.push(format!(
            "Invalid phase: {}. Valid phases are: {PHASE_MAIN}",
            phase.as_deref().unwrap_or("None")
        ));
    }
    if origin != Origin::BuiltIn && priority > MAX_PRIORITY {
        errors.push(format!(
            "Priority must be between 0 and {MAX_PRIORITY} for user-defined rules."
        ));
    }
    match errors.len() {
        0 => {}
        1 => return Err(Error::Invalid(errors.remove(0))),
        _ => {
            return Err(Error::Invalid(format!(
                "Multiple validation errors occurred: {}",
                errors.join("; ")
            )));
        }
    }
    let uuid = match o.get("uuid") {
        Some(Value::String(u)) if !u.is_empty() => {
            if origin != Origin::BuiltIn && !is_uuid_like(u) {
                return Err(Error::invalid(format!("Expected UUID for uuid: {u}")));
            }
            // Kept as given, lower-cased, as upstream (a built-in rule's may be any
            // identifier).
            Some(crate::ids::RuleUuid::from_db(u.to_ascii_lowercase()))
        }
        _ => None,
    };
    Ok(RuleDoc {
        uuid,
        description: o
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        priority,
        sensitive: o.get("sensitive").and_then(as_flag).unwrap_or(false),
        phase: PHASE_MAIN.to_string(),
        conditions,
        actions,
    })
}

/// How a condition or action is shown: `op` and `args`, then `loop` (and, for a
/// condition, `multiple`) only when it loops; other stored keys are never shown.
pub fn item_view(item: &JsonObject, condition: bool) -> Value {
    let mut out = Map::new();
    out.insert("op".into(), item.get("op").cloned().unwrap_or(Value::Null));
    out.insert(
        "args".into(),
        item.get("args").cloned().unwrap_or(Value::Null),
    );
    if let Some(l) = item.get("loop").filter(|l| is_non_empty(l)) {
        out.insert("loop".into(), l.clone());
        if condition {
            out.insert(
                "multiple".into(),
                item.get("multiple")
                    .cloned()
                    .unwrap_or_else(|| Value::String("any".into())),
            );
        }
    }
    Value::Object(out)
}

/// A loop that iterates at all (`[]`, `{}` and null do not).
pub fn is_non_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Null => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(body: Value) -> String {
        validate_doc(&body, Origin::Create)
            .err()
            .map(|e| e.message().to_string())
            .unwrap_or_default()
    }

    const LOG: &str = r#"{"op": "log", "args": {"msg": "x"}}"#;

    fn log() -> Value {
        serde_json::from_str(LOG).unwrap_or(Value::Null)
    }

    #[test]
    fn schema_errors_read_as_upstream() {
        assert_eq!(
            err(json!({"conditions": []})),
            "Schema error: 'actions' is a required property"
        );
        assert_eq!(
            err(json!({"actions": []})),
            "Schema error: [] should be non-empty"
        );
        assert!(
            err(json!({"actions": [{"op": "explode", "args": {}}]})).starts_with(
                "Schema error: 'explode' is not one of ['fail', 'log', 'set-attribute',"
            )
        );
        assert!(
            err(json!({"actions": [log()], "conditions": [{"op": "approx", "args": {}}]}))
                .ends_with("'!is-none', '!is-true', '!is-false']")
        );
        assert_eq!(
            err(json!({"actions": [{"op": "log"}]})),
            "Schema error: 'args' is a required property"
        );
        assert_eq!(
            err(json!({"actions": [log()], "priority": -1})),
            "Schema error: -1 is less than the minimum of 0"
        );
        assert_eq!(
            err(json!({"actions": [log()], "name": "x"})),
            "Schema error: Additional properties are not allowed ('name' was unexpected)"
        );
        assert_eq!(
            err(json!({"actions": [log()], "priority": true})),
            "Schema error: True is not of type 'integer'"
        );
        // What jsonschema 4.26 says of upstream's schema (its first error).
        for (body, says) in [
            (
                json!({"actions": [{"op": "explode"}]}),
                "'args' is a required property",
            ),
            (
                json!({"actions": "x", "conditions": 5}),
                "'x' is not of type 'array'",
            ),
            (json!({"conditions": 5}), "5 is not of type 'array'"),
            (
                json!({"actions": [log()], "foo": 1, "bar": 2}),
                "Additional properties are not allowed ('bar', 'foo' were unexpected)",
            ),
            (
                json!({"actions": [log()], "conditions": [{"op": "eq", "args": 5, "multiple": "some", "loop": 3}]}),
                "5 is not of type 'array', 'object'",
            ),
            (
                json!({"actions": [log()], "conditions": [{"op": "eq", "args": {}, "multiple": "some", "loop": 3}]}),
                "'some' is not one of ['any', 'all', 'first', 'last']",
            ),
            (
                json!({"actions": [log()], "phase": 5}),
                "5 is not of type 'string', 'null'",
            ),
            (
                json!({"actions": [log()], "sensitive": "maybe"}),
                "'maybe' is not of type 'boolean', 'null'",
            ),
            (json!({"actions": [5]}), "5 is not of type 'object'"),
            (
                json!({"actions": [{"op": "log", "args": {}, "loop": "s"}]}),
                "'s' is not of type 'array', 'object'",
            ),
            (json!([]), "[] is not of type 'object'"),
            (
                json!({"actions": [log()], "priority": -1.5}),
                "-1.5 is not of type 'integer'",
            ),
        ] {
            assert_eq!(err(body.clone()), format!("Schema error: {says}"), "{body}");
        }
        assert!(
            validate_doc(
                &json!({"actions": [log()], "priority": 5.0}),
                Origin::Create
            )
            .is_ok()
        );
        // What the CLI sends: numbers and flags as text.
        let d = validate_doc(
            &json!({"actions": [log()], "priority": "10", "sensitive": "true"}),
            Origin::Create,
        );
        assert_eq!(d.map(|d| (d.priority, d.sensitive)).ok(), Some((10, true)));
        assert_eq!(
            err(json!({"actions": [log()], "priority": "ten"})),
            "Schema error: 'ten' is not of type 'integer'"
        );
    }

    #[test]
    fn argument_errors_come_first_and_alone() {
        assert_eq!(
            err(json!({"actions": [{"op": "add-trait", "args": {"value": "CUSTOM_X"}}]})),
            "missing required argument(s): name; unexpected argument(s): value"
        );
        assert_eq!(
            err(
                json!({"priority": 10000, "actions": [{"op": "add-trait", "args": {}}],
                       "conditions": [{"op": "eq", "args": {}}]})
            ),
            "missing required argument(s): values"
        );
        assert_eq!(
            err(json!({"actions": [{"op": "set-attribute", "args": ["/extra/a"]}]})),
            "Not enough arguments provided. Missing: value"
        );
    }

    #[test]
    fn phase_and_priority_errors_are_collected() {
        assert_eq!(
            err(json!({"phase": "early", "actions": [log()]})),
            "Invalid phase: early. Valid phases are: main"
        );
        assert_eq!(
            err(json!({"priority": 10000, "actions": [log()]})),
            "Priority must be between 0 and 9999 for user-defined rules."
        );
        assert_eq!(
            err(json!({"phase": "early", "priority": 10000, "actions": [log()]})),
            "Multiple validation errors occurred: Invalid phase: early. Valid phases are: main; Priority must be between 0 and 9999 for user-defined rules."
        );
        assert!(
            validate_doc(
                &json!({"priority": 10000, "actions": [log()]}),
                Origin::BuiltIn
            )
            .is_ok()
        );
    }

    #[test]
    fn plugin_data_operators_gain_their_argument() {
        let d = validate_doc(
            &json!({"actions": [{"op": "set-plugin-data", "args": {"path": "a.b", "value": 1}}]}),
            Origin::Create,
        );
        let args = d
            .map(|d| d.actions[0]["args"].clone())
            .unwrap_or(Value::Null);
        assert_eq!(args, json!({"path": "a.b", "value": 1, "plugin_data": {}}));
    }

    #[test]
    fn list_arguments_map_onto_the_signature() {
        let a = named_args("api-call", &json!(["http://x", {"h": "1"}]));
        assert_eq!(a["url"], "http://x");
        assert_eq!(a["headers"], json!({"h": "1"}));
        assert_eq!(a["timeout"], json!(5));
        assert_eq!(a["backoff_factor"], json!(0.3));
        let b = named_args("set-plugin-data", &json!(["a.b", 2]));
        assert_eq!(b["value"], json!(2));
    }

    #[test]
    fn loops_show_multiple_only_for_conditions_that_loop() {
        let c = json!({"op": "eq", "args": {"values": [1, 1]}, "multiple": "all", "force_strings": true});
        let Value::Object(c) = c else { return };
        assert_eq!(
            item_view(&c, true),
            json!({"op": "eq", "args": {"values": [1, 1]}})
        );
        let mut looped = c.clone();
        looped.insert("loop".into(), json!([1]));
        assert_eq!(
            item_view(&looped, true),
            json!({"op": "eq", "args": {"values": [1, 1]}, "loop": [1], "multiple": "all"})
        );
    }
}
