//! Deploy templates (API 1.55+): a trait name and the deploy steps a node whose
//! instance asks for that trait runs (reference §4.5, §10). This module holds the type
//! and the validation of its JSON document, with upstream's JSON-schema wording.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::error::SchemaError;
use crate::names::{trait_error_message, validate_trait};
use crate::node::JsonObject;
use crate::patch::py_repr;
use crate::{Error, Result};

/// Interfaces a template step may name, in upstream's order.
pub const STEP_INTERFACES: &[&str] = &[
    "vendor",
    "power",
    "management",
    "firmware",
    "deploy",
    "bios",
    "raid",
];

/// The largest priority a step may have (the column is a 32-bit integer).
pub const MAX_PRIORITY: u32 = i32::MAX as u32;

#[derive(Debug, Clone, PartialEq)]
pub struct TemplateStep {
    pub interface: String,
    pub step: String,
    pub args: JsonObject,
    /// 0 disables the step (a driver default or the core step); above 0 runs it.
    pub priority: u32,
}

impl TemplateStep {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "interface": self.interface,
            "step": self.step,
            "args": self.args,
            "priority": self.priority,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeployTemplate {
    pub id: crate::ids::TemplateId,
    pub uuid: crate::ids::TemplateUuid,
    pub name: String,
    pub steps: Vec<TemplateStep>,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl DeployTemplate {
    /// The document PATCH applies to (`description` is accepted and not kept, as
    /// upstream).
    pub fn patch_doc(&self) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("uuid".into(), Value::String(self.uuid.to_string()));
        d.insert("name".into(), Value::String(self.name.clone()));
        d.insert(
            "steps".into(),
            Value::Array(self.steps.iter().map(TemplateStep::to_json).collect()),
        );
        d.insert("extra".into(), Value::Object(self.extra.clone()));
        d
    }
}

/// Why a node's instance traits cannot select deploy templates (the request's fault: a
/// 400 at the API).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceTraitsError {
    #[error(
        "Error parsing traits from Node {node} instance traits field. A list of strings is expected."
    )]
    NotAList { node: String },
    #[error(
        "Cannot specify instance traits that are not also set on the node. Node {node} is missing traits {}",
        .missing.join(", ")
    )]
    NotOnNode { node: String, missing: Vec<String> },
}

impl From<InstanceTraitsError> for Error {
    fn from(e: InstanceTraitsError) -> Self {
        Error::Invalid(e.to_string())
    }
}

/// For callers that still carry the reason as text (the conductor's deploy plan).
/// The traits the node's instance asks for (`instance_info.traits`), which select the
/// deploy templates; they must be a list of strings, all set on the node.
pub fn instance_traits(
    node: &crate::Node,
) -> std::result::Result<Vec<String>, InstanceTraitsError> {
    let uuid = node.uuid.as_str();
    let list = match node.instance_info.get("traits") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(l)) => l,
        Some(_) => {
            return Err(InstanceTraitsError::NotAList { node: uuid.into() });
        }
    };
    let mut traits = Vec::with_capacity(list.len());
    for t in list {
        match t.as_str() {
            Some(s) => traits.push(s.to_string()),
            None => {
                return Err(InstanceTraitsError::NotAList { node: uuid.into() });
            }
        }
    }
    let missing: Vec<&str> = traits
        .iter()
        .filter(|t| !node.traits.contains(t))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(InstanceTraitsError::NotOnNode {
            node: uuid.into(),
            missing: missing.into_iter().map(str::to_string).collect(),
        });
    }
    Ok(traits)
}

/// `driver_internal_info` key of the `deploy_steps` argument of the deploy running.
pub const USER_DEPLOY_STEPS: &str = "user_deploy_steps";

/// The `deploy_steps` argument of the deploy running, as the conductor stored it.
pub fn user_deploy_steps(node: &crate::Node) -> Vec<TemplateStep> {
    node.driver_internal_info
        .get(USER_DEPLOY_STEPS)
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(|s| validate_step(s).ok()).collect())
        .unwrap_or_default()
}

pub fn not_found(ident: &str) -> Error {
    Error::NotFound(format!("Deploy template {ident} could not be found."))
}

/// What a valid document holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateDoc {
    pub uuid: Option<crate::ids::TemplateUuid>,
    pub name: String,
    pub steps: Vec<TemplateStep>,
    pub extra: JsonObject,
}

/// Validates a template document (`what` is `template` for POST, `patch` after a
/// PATCH) and returns its parts; errors are 400 with upstream's wording.
pub fn validate_doc(doc: &Value, what: &str) -> Result<TemplateDoc> {
    let schema = |msg: SchemaError| Error::invalid(format!("Schema error for {what}: {msg}"));
    let Value::Object(o) = doc else {
        return Err(schema(crate::schema!(
            "{} is not of type 'object'",
            py_repr(doc)
        )));
    };
    if let Some(k) = o.keys().find(|k| {
        !matches!(
            k.as_str(),
            "uuid" | "name" | "steps" | "extra" | "description"
        )
    }) {
        return Err(schema(crate::schema!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    for required in ["name", "steps"] {
        if o.get(required).is_none() {
            return Err(schema(crate::schema!(
                "'{required}' is a required property"
            )));
        }
    }
    let name = match &o["name"] {
        Value::String(n) => {
            validate_trait(n).map_err(|e| Error::invalid(trait_error_message(what, n, &e)))?;
            n.clone()
        }
        v => {
            return Err(schema(crate::schema!(
                "{} is not of type 'string'",
                py_repr(v)
            )));
        }
    };
    let uuid = match o.get("uuid") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if crate::ids::canonical_uuid(u).is_some() => {
            crate::ids::TemplateUuid::parse(u)
        }
        Some(v) => return Err(schema(crate::schema!("{} is not a 'uuid'", py_repr(v)))),
    };
    let extra = match o.get("extra") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(e)) => e.clone(),
        Some(v) => {
            return Err(schema(crate::schema!(
                "{} is not of type 'object', 'null'",
                py_repr(v)
            )));
        }
    };
    match o.get("description") {
        None | Some(Value::Null) => {}
        Some(Value::String(d)) if d.chars().count() <= 255 => {}
        Some(v @ Value::String(_)) => {
            return Err(schema(crate::schema!("{} is too long", py_repr(v))));
        }
        Some(v) => {
            return Err(schema(crate::schema!(
                "{} is not of type 'string', 'null'",
                py_repr(v)
            )));
        }
    }
    let list = match &o["steps"] {
        Value::Array(l) if l.is_empty() => return Err(schema("[] should be non-empty".into())),
        Value::Array(l) => l,
        v => {
            return Err(schema(crate::schema!(
                "{} is not of type 'array'",
                py_repr(v)
            )));
        }
    };
    let mut steps = Vec::with_capacity(list.len());
    for s in list {
        steps.push(validate_step(s).map_err(schema)?);
    }
    let mut dups: Vec<String> = Vec::new();
    for (i, a) in steps.iter().enumerate() {
        if steps[..i]
            .iter()
            .any(|b| b.interface == a.interface && b.step == a.step)
        {
            let d = format!("interface: {}, step: {}", a.interface, a.step);
            if !dups.contains(&d) {
                dups.push(d);
            }
        }
    }
    if !dups.is_empty() {
        return Err(Error::invalid(format!(
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: {}.",
            dups.join("; ")
        )));
    }
    Ok(TemplateDoc {
        uuid,
        name,
        steps,
        extra,
    })
}

/// One step of a template, or of the `deploy_steps` argument (1.69): upstream checks
/// both against the same schema. `Err` is the schema error's message.
pub fn validate_step(s: &Value) -> std::result::Result<TemplateStep, SchemaError> {
    let Value::Object(o) = s else {
        return Err(crate::schema!("{} is not of type 'object'", py_repr(s)));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "interface" | "step" | "args" | "priority"))
    {
        return Err(crate::schema!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        ));
    }
    for required in ["interface", "step", "args", "priority"] {
        if o.get(required).is_none() {
            return Err(crate::schema!("'{required}' is a required property"));
        }
    }
    let interface = match &o["interface"] {
        Value::String(i) if STEP_INTERFACES.contains(&i.as_str()) => i.clone(),
        v => {
            let list: Vec<String> = STEP_INTERFACES.iter().map(|i| format!("'{i}'")).collect();
            return Err(crate::schema!(
                "{} is not one of [{}]",
                py_repr(v),
                list.join(", ")
            ));
        }
    };
    let step = match &o["step"] {
        Value::String(s) if s.is_empty() => return Err("'' should be non-empty".into()),
        Value::String(s) => s.clone(),
        v => return Err(crate::schema!("{} is not of type 'string'", py_repr(v))),
    };
    let args = match &o["args"] {
        Value::Object(a) => a.clone(),
        v => return Err(crate::schema!("{} is not of type 'object'", py_repr(v))),
    };
    let priority = match &o["priority"] {
        Value::Number(n) => match n.as_i64() {
            Some(p) if p < 0 => return Err(crate::schema!("{p} is less than the minimum of 0")),
            Some(p) if p > i64::from(MAX_PRIORITY) => {
                return Err(crate::schema!(
                    "{p} is greater than the maximum of {MAX_PRIORITY}"
                ));
            }
            Some(p) => p as u32,
            None => return Err(crate::schema!("{n} is not of type 'integer'")),
        },
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            match s.parse::<u32>() {
                Ok(p) if p <= MAX_PRIORITY => p,
                _ => {
                    return Err(crate::schema!(
                        "{s} is greater than the maximum of {MAX_PRIORITY}"
                    ));
                }
            }
        }
        Value::String(s) => {
            return Err(crate::schema!(
                "{} does not match '^[0-9]+$'",
                py_repr(&Value::String(s.clone()))
            ));
        }
        v => {
            return Err(crate::schema!(
                "{} is not valid under any of the given schemas",
                py_repr(v)
            ));
        }
    };
    Ok(TemplateStep {
        interface,
        step,
        args,
        priority,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn err(doc: Value) -> String {
        validate_doc(&doc, "template")
            .unwrap_err()
            .message()
            .to_string()
    }

    fn step(v: Value) -> Value {
        json!({"name": "CUSTOM_X", "steps": [v]})
    }

    #[test]
    fn a_valid_document() {
        let d = validate_doc(
            &json!({"name": "CUSTOM_RAID1", "extra": {"a": 1}, "description": "x",
                "steps": [{"interface": "raid", "step": "apply_configuration", "args": {}, "priority": "150"}]}),
            "template",
        )
        .unwrap();
        assert_eq!(d.name, "CUSTOM_RAID1");
        assert_eq!(d.steps[0].priority, 150);
        assert_eq!(d.uuid, None);
    }

    #[test]
    fn errors_follow_upstream() {
        assert_eq!(
            err(json!({"name": "CUSTOM_EMPTY", "steps": []})),
            "Schema error for template: [] should be non-empty"
        );
        assert_eq!(
            err(json!({"name": "CUSTOM_NOSTEPS"})),
            "Schema error for template: 'steps' is a required property"
        );
        assert_eq!(
            err(
                json!({"name": "not-a-trait", "steps": [{"interface": "bios", "step": "x", "args": {}, "priority": 1}]})
            ),
            "Schema error for template: 'not-a-trait' is not valid under any of the given schemas. Possible root cause: 'not-a-trait' does not match '^CUSTOM_[A-Z0-9_]+$'"
        );
        assert_eq!(
            err(step(
                json!({"interface": "foo", "step": "bar", "args": {}, "priority": 10})
            )),
            "Schema error for template: 'foo' is not one of ['vendor', 'power', 'management', 'firmware', 'deploy', 'bios', 'raid']"
        );
        assert_eq!(
            err(step(
                json!({"interface": "bios", "step": "x", "args": {}, "priority": -1})
            )),
            "Schema error for template: -1 is less than the minimum of 0"
        );
        assert_eq!(
            err(step(
                json!({"interface": "bios", "step": "x", "args": {}, "priority": "high"})
            )),
            "Schema error for template: 'high' does not match '^[0-9]+$'"
        );
        assert_eq!(
            err(step(
                json!({"interface": "bios", "step": "x", "priority": 10})
            )),
            "Schema error for template: 'args' is a required property"
        );
        assert_eq!(
            err(step(json!({"interface": "bios", "step": "x", "args": {}}))),
            "Schema error for template: 'priority' is a required property"
        );
        assert_eq!(
            err(step(
                json!({"interface": "bios", "step": "x", "args": {}, "priority": 1, "foo": 1})
            )),
            "Schema error for template: Additional properties are not allowed ('foo' was unexpected)"
        );
        let s =
            json!({"interface": "bios", "step": "apply_configuration", "args": {}, "priority": 1});
        assert_eq!(
            err(json!({"name": "CUSTOM_D", "steps": [s, s]})),
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: apply_configuration."
        );
        assert_eq!(
            err(json!({"name": "CUSTOM_D", "steps": [s], "foo": 1})),
            "Schema error for template: Additional properties are not allowed ('foo' was unexpected)"
        );
        assert!(
            err(step(
                json!({"interface": "bios", "step": "x", "args": {}, "priority": 3_000_000_000u64})
            ))
            .contains("maximum")
        );
    }
}
