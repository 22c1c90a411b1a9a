//! `[inspection_rules] built_in_rules`: a YAML list of inspection rules every
//! inspection runs besides the API's, re-read each time so that an edit needs no
//! restart. Each is checked as an API rule is, except that its priority has no upper
//! bound and its uuid (synthetic when absent) no format. Invisible to the API.

use std::path::Path;

use ironic_model::inspection_rule::{InspectionRule, Origin, validate_doc};
use serde_json::Value;

/// The rules of the file at `path`, in file order; any problem with the file is the
/// reason the inspection fails.
pub(super) fn load(path: &Path) -> Result<Vec<InspectionRule>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Cannot read built-in rules file ({}): {e}", path.display()))?;
    parse(&text, &path.display().to_string())
}

fn parse(text: &str, shown: &str) -> Result<Vec<InspectionRule>, String> {
    let doc: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("Cannot parse built-in rules file ({shown}): {e}"))?;
    let Value::Array(items) = doc else {
        return Err(format!(
            "Built-in rules file ({shown}) should contain a list of rules"
        ));
    };
    let mut anonymous = 0u64;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let d = validate_doc(&item, Origin::BuiltIn).map_err(|e| e.message().to_string())?;
        let uuid = match d.uuid.clone() {
            Some(u) => u,
            None => {
                let u = format!("00000000-0000-0000-0000-{anonymous:012x}");
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
