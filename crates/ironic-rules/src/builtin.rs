//! `[inspection_rules] built_in_rules`: a YAML list of inspection rules every
//! inspection runs besides the API's, re-read each time so that an edit needs no
//! restart (the caller reads the file). Each is checked as an API rule is, except that
//! its priority has no upper bound and its uuid (synthetic when absent) no format.
//! Invisible to the API.

use ironic_model::RuleUuid;
use ironic_model::inspection_rule::{InspectionRule, Origin, validate_doc};
use serde_json::Value;

/// Why the built-in rules cannot be used; the text is the reason the inspection fails.
#[derive(Debug, thiserror::Error)]
pub enum BuiltInError {
    /// The file cannot be read (`shown`: its path as messages show it).
    #[error("Cannot read built-in rules file ({shown}): {error}")]
    Read {
        shown: String,
        error: std::io::Error,
    },
    #[error("Cannot parse built-in rules file ({shown}): {error}")]
    Parse {
        shown: String,
        error: serde_yaml_ng::Error,
    },
    #[error("Built-in rules file ({shown}) should contain a list of rules")]
    NotAList { shown: String },
    /// A rule fails the API's checks (the model's message).
    #[error("{}", .0.message())]
    Invalid(ironic_model::Error),
}

/// The rules of the file whose text is `text`, in file order (`shown`: the file as
/// messages show it).
pub fn parse(text: &str, shown: &str) -> Result<Vec<InspectionRule>, BuiltInError> {
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|error| BuiltInError::Parse {
        shown: shown.to_string(),
        error,
    })?;
    let Value::Array(items) = doc else {
        return Err(BuiltInError::NotAList {
            shown: shown.to_string(),
        });
    };
    let mut anonymous = 0u64;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let d = validate_doc(&item, Origin::BuiltIn).map_err(BuiltInError::Invalid)?;
        let uuid = match d.uuid.clone() {
            Some(u) => u,
            None => {
                let u = RuleUuid::from_db(format!("00000000-0000-0000-0000-{anonymous:012x}"));
                anonymous += 1;
                u
            }
        };
        let mut rule = InspectionRule {
            id: 0,
            uuid,
            description: None,
            priority: 0,
            sensitive: false,
            phase: String::new(),
            conditions: Vec::new(),
            actions: Vec::new(),
            built_in: true,
            created_at: ironic_model::node::now(),
            updated_at: None,
        };
        rule.set(d);
        out.push(rule);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_come_in_file_order_with_synthetic_uuids() {
        let yaml = r#"
- description: first
  priority: 20000
  actions:
    - op: add-trait
      args: {name: CUSTOM_A}
- uuid: 5f0c9b0e-0b8f-4e52-9c3c-000000000042
  conditions:
    - op: eq
      args: {values: [1, 1]}
  actions:
    - op: log
      args: {msg: hi}
- actions:
    - op: fail
      args: {msg: stop}
"#;
        let rules = parse(yaml, "r.yaml").unwrap_or_default();
        let uuids: Vec<&str> = rules.iter().map(|r| r.uuid.as_str()).collect();
        assert_eq!(
            uuids,
            [
                "00000000-0000-0000-0000-000000000000",
                "5f0c9b0e-0b8f-4e52-9c3c-000000000042",
                "00000000-0000-0000-0000-000000000001"
            ]
        );
        assert_eq!(rules[0].priority, 20000);
        assert!(rules.iter().all(|r| r.built_in && r.phase == "main"));
    }

    fn parse(text: &str, shown: &str) -> Result<Vec<InspectionRule>, String> {
        super::parse(text, shown).map_err(|e| e.to_string())
    }

    #[test]
    fn a_bad_file_is_an_error_naming_it() {
        assert_eq!(
            parse("a: 1", "r.yaml").err().as_deref(),
            Some("Built-in rules file (r.yaml) should contain a list of rules")
        );
        let bad = parse("- actions: []", "r.yaml").err().unwrap_or_default();
        assert_eq!(
            bad,
            "Validation failed for inspection rule: [] should be non-empty"
        );
        assert!(
            parse("- [", "r.yaml")
                .err()
                .unwrap_or_default()
                .starts_with("Cannot parse built-in rules file (r.yaml)")
        );
    }
}
