//! Runbooks (1.92; `description` and `traits` 1.112): named lists of steps, owned by a
//! project or by the deployment, that a node runs in manual cleaning or servicing when
//! its traits allow it (`runbook` in `PUT …/states/provision`). Checked here against
//! upstream's schema and rules; stored by `ironic-db` `runbooks.rs`.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::names::{is_valid_logical_name, validate_trait};
use crate::node::JsonObject;
use crate::patch::py_repr;
use crate::{Error, Version};

/// The interfaces a runbook step may name (upstream's order, as its message lists them).
pub const STEP_INTERFACES: &[&str] = &[
    "vendor",
    "power",
    "management",
    "firmware",
    "deploy",
    "bios",
    "raid",
];

/// Fields in upstream's order with the microversion that shows them (`links` goes
/// before `steps`).
pub const FIELDS: &[(&str, u16)] = &[
    ("uuid", 92),
    ("created_at", 92),
    ("updated_at", 92),
    ("name", 92),
    ("extra", 92),
    ("public", 92),
    ("owner", 92),
    ("disable_ramdisk", 92),
    ("description", 112),
    ("steps", 92),
    ("traits", 112),
];

pub const DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "name"];

/// What a PATCH may change (and `description` from 1.112), in upstream's wording order.
pub const PATCHABLE: &[&str] = &[
    "disable_ramdisk",
    "extra",
    "name",
    "owner",
    "public",
    "steps",
];

#[derive(Debug, Clone, PartialEq)]
pub struct RunbookStep {
    pub interface: String,
    pub step: String,
    pub args: JsonObject,
    pub order: u64,
}

impl RunbookStep {
    pub fn to_json(&self) -> Value {
        json!({"interface": self.interface, "step": self.step, "args": self.args, "order": self.order})
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Runbook {
    pub id: i64,
    pub uuid: crate::ids::RunbookUuid,
    pub name: String,
    pub description: Option<String>,
    pub steps: Vec<RunbookStep>,
    pub traits: Vec<String>,
    pub disable_ramdisk: bool,
    pub public: bool,
    pub owner: Option<String>,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl Runbook {
    /// The document a PATCH applies to.
    pub fn patch_doc(&self) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("name".into(), json!(self.name));
        d.insert("description".into(), json!(self.description));
        d.insert(
            "steps".into(),
            Value::Array(self.steps.iter().map(RunbookStep::to_json).collect()),
        );
        d.insert("disable_ramdisk".into(), json!(self.disable_ramdisk));
        d.insert("public".into(), json!(self.public));
        d.insert("owner".into(), json!(self.owner));
        d.insert("extra".into(), Value::Object(self.extra.clone()));
        d
    }

    /// Its steps in the order they run (`order`, then as listed).
    pub fn ordered_steps(&self) -> Vec<RunbookStep> {
        let mut s = self.steps.clone();
        s.sort_by_key(|x| x.order);
        s
    }
}

pub fn not_found(ident: &str) -> Error {
    Error::NotFound(format!("Runbook {ident} could not be found."))
}

/// A runbook document after validation (`uuid` as given, if any).
#[derive(Debug, Clone, PartialEq)]
pub struct RunbookDoc {
    pub uuid: Option<crate::ids::RunbookUuid>,
    pub name: String,
    pub description: Option<String>,
    pub steps: Vec<RunbookStep>,
    pub disable_ramdisk: bool,
    pub public: bool,
    pub owner: Option<String>,
    pub extra: JsonObject,
}

fn schema(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("Schema error for {what}: {msg}"))
}

/// A runbook name: a trait below 1.112, a logical name from it (upstream's schema).
pub fn check_name(name: &Value, v: Version, what: &str) -> Result<String, Error> {
    let Some(n) = name.as_str() else {
        return Err(schema(
            what,
            format_args!("{} is not of type 'string'", py_repr(name)),
        ));
    };
    if v.at_least(112) {
        if !is_valid_logical_name(n) {
            return Err(schema(
                what,
                format_args!("{} does not match '^[A-Za-z0-9\\\\-._~]+$'", py_repr(name)),
            ));
        }
    } else if validate_trait(n).is_err() {
        return Err(schema(
            what,
            format_args!(
                "{} is not valid under any of the given schemas. Possible root cause: {} does not match '^CUSTOM_[A-Z0-9_]+$'",
                py_repr(name),
                py_repr(name)
            ),
        ));
    }
    Ok(n.to_string())
}

fn check_step(s: &Value, what: &str) -> Result<RunbookStep, Error> {
    let Some(o) = s.as_object() else {
        return Err(schema(
            what,
            format_args!("{} is not of type 'object'", py_repr(s)),
        ));
    };
    for k in ["interface", "step", "args", "order"] {
        if !o.contains_key(k) {
            return Err(schema(what, format_args!("'{k}' is a required property")));
        }
    }
    if let Some(k) = o
        .keys()
        .find(|k| !["interface", "step", "args", "order"].contains(&k.as_str()))
    {
        return Err(schema(
            what,
            format_args!("Additional properties are not allowed ('{k}' was unexpected)"),
        ));
    }
    let interface = match o["interface"].as_str() {
        Some(i) if STEP_INTERFACES.contains(&i) => i.to_string(),
        _ => {
            return Err(schema(
                what,
                format_args!(
                    "{} is not one of [{}]",
                    py_repr(&o["interface"]),
                    STEP_INTERFACES
                        .iter()
                        .map(|i| format!("'{i}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    };
    let step = match o["step"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => {
            return Err(schema(
                what,
                format_args!("{} should be non-empty", py_repr(&o["step"])),
            ));
        }
    };
    let Some(args) = o["args"].as_object().cloned() else {
        return Err(schema(
            what,
            format_args!("{} is not of type 'object'", py_repr(&o["args"])),
        ));
    };
    let order = match &o["order"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    }
    .ok_or_else(|| {
        schema(
            what,
            format_args!(
                "{} is not valid under any of the given schemas",
                py_repr(&o["order"])
            ),
        )
    })?;
    Ok(RunbookStep {
        interface,
        step,
        args,
        order,
    })
}

/// A runbook document (POST, or the result of a PATCH) against upstream's schema at
/// version `v`; `what` names it in schema errors (`runbook`, `patch`).
pub fn validate_doc(doc: &Value, v: Version, what: &str) -> Result<RunbookDoc, Error> {
    let Some(o) = doc.as_object() else {
        return Err(schema(
            what,
            format_args!("{} is not of type 'object'", py_repr(doc)),
        ));
    };
    let mut allowed = vec![
        "uuid",
        "name",
        "steps",
        "disable_ramdisk",
        "public",
        "owner",
        "extra",
    ];
    if v.at_least(112) || what == "patch" {
        allowed.push("description");
    }
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(schema(
            what,
            format_args!("Additional properties are not allowed ('{k}' was unexpected)"),
        ));
    }
    for k in ["name", "steps"] {
        if o.get(k).is_none_or(Value::is_null) {
            return Err(schema(what, format_args!("'{k}' is a required property")));
        }
    }
    let name = check_name(&o["name"], v, what)?;
    let Some(list) = o["steps"].as_array() else {
        return Err(schema(
            what,
            format_args!("{} is not of type 'array'", py_repr(&o["steps"])),
        ));
    };
    if list.is_empty() {
        return Err(schema(what, "[] should be non-empty"));
    }
    let steps = list
        .iter()
        .map(|s| check_step(s, what))
        .collect::<Result<Vec<_>, _>>()?;
    let mut dups: Vec<String> = Vec::new();
    for (i, a) in steps.iter().enumerate() {
        let d = format!("interface: {}, step: {}", a.interface, a.step);
        if steps[..i]
            .iter()
            .any(|b| b.interface == a.interface && b.step == a.step)
            && !dups.contains(&d)
        {
            dups.push(d);
        }
    }
    if !dups.is_empty() {
        return Err(Error::Invalid(format!(
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: {}.",
            dups.join("; ")
        )));
    }
    let text = |k: &str, max: usize| -> Result<Option<String>, Error> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
            Some(Value::String(s)) => Err(schema(
                what,
                format_args!("{} is too long", py_repr(&Value::String(s.clone()))),
            )),
            Some(other) => Err(schema(
                what,
                format_args!("{} is not of type 'string', 'null'", py_repr(other)),
            )),
        }
    };
    let flag = |k: &str| -> Result<bool, Error> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(schema(
                what,
                format_args!("{} is not of type 'boolean'", py_repr(other)),
            )),
        }
    };
    let uuid = match o.get("uuid") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) => Some(
            crate::ids::RunbookUuid::parse(u)
                .ok_or_else(|| schema(what, format_args!("'{u}' is not a 'uuid'")))?,
        ),
        Some(other) => {
            return Err(schema(
                what,
                format_args!("{} is not of type 'string', 'null'", py_repr(other)),
            ));
        }
    };
    let extra = match o.get("extra") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(e)) => e.clone(),
        Some(other) => {
            return Err(schema(
                what,
                format_args!("{} is not of type 'object', 'null'", py_repr(other)),
            ));
        }
    };
    Ok(RunbookDoc {
        uuid,
        name,
        description: text("description", 255)?,
        steps,
        disable_ramdisk: flag("disable_ramdisk")?,
        public: flag("public")?,
        owner: text("owner", 255)?,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_version() {
        let v = |m| Version { minor: m };
        assert!(check_name(&json!("CUSTOM_X"), v(92), "runbook").is_ok());
        assert!(check_name(&json!("my-runbook"), v(111), "runbook").is_err());
        assert!(check_name(&json!("my-runbook"), v(112), "runbook").is_ok());
        assert!(check_name(&json!("bad name!"), v(112), "runbook").is_err());
    }

    #[test]
    fn steps_need_every_key_and_no_duplicates() {
        let v = Version { minor: 112 };
        let doc = |steps: Value| json!({"name": "rb", "steps": steps});
        let e = validate_doc(
            &doc(json!([{"interface": "bios", "step": "x", "args": {}}])),
            v,
            "runbook",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Schema error for runbook: 'order' is a required property"
        );
        let step = json!({"interface": "bios", "step": "x", "args": {}, "order": "2"});
        let ok = validate_doc(&doc(json!([step])), v, "runbook").unwrap();
        assert_eq!(ok.steps[0].order, 2);
        let e = validate_doc(&doc(json!([step, step])), v, "runbook").unwrap_err();
        assert!(
            e.to_string()
                .contains("Duplicates: interface: bios, step: x."),
            "{e}"
        );
        assert!(validate_doc(&doc(json!([])), v, "runbook").is_err());
    }
}
