//! What `fake-hardware` does when asked to run a step: nothing to real hardware, but
//! it checks its arguments like a real driver would, and the long steps take the time
//! they are given (the conductor shows the node in `clean wait` meanwhile).

use std::time::Duration;

use serde_json::Value;

use crate::interfaces::DriverError;
pub use crate::interfaces::Outcome;
use crate::steps::Step;

/// The longest a fake step may run.
pub const MAX_SECONDS: f64 = 3600.0;

/// Runs one step of `fake-hardware`; `Err` is the reason the step failed.
pub fn execute(step: &Step) -> Result<Outcome, DriverError> {
    match (step.interface.as_str(), step.step.as_str()) {
        ("bios", "apply_configuration") | ("firmware", "update") => {
            let ok = step
                .args
                .get("settings")
                .and_then(Value::as_array)
                .is_some_and(|l| {
                    l.iter()
                        .all(|s| s.get("name").and_then(Value::as_str).is_some())
                });
            if ok {
                Ok(Outcome::Done)
            } else {
                Err(DriverError::invalid(
                    "settings must be a list of objects with a \"name\"",
                ))
            }
        }
        ("raid", "apply_configuration") => {
            let ok = step
                .args
                .get("raid_config")
                .and_then(|c| c.get("logical_disks"))
                .and_then(Value::as_array)
                .is_some_and(|l| !l.is_empty());
            if ok {
                Ok(Outcome::Done)
            } else {
                Err(DriverError::invalid(
                    "raid_config must have a non-empty list of logical_disks",
                ))
            }
        }
        ("deploy", "sleep") | ("deploy", "burn_in") => {
            match step.args.get("seconds").and_then(Value::as_f64) {
                Some(s) if (0.0..=MAX_SECONDS).contains(&s) => {
                    Ok(Outcome::Wait(Duration::from_secs_f64(s)))
                }
                _ => Err(DriverError::invalid(format!(
                    "seconds must be a number between 0 and {MAX_SECONDS}"
                ))),
            }
        }
        _ => Ok(Outcome::Done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(interface: &str, name: &str, args: Value) -> Step {
        Step {
            interface: interface.into(),
            step: name.into(),
            args: args.as_object().cloned().unwrap_or_default(),
            priority: 0,
            abortable: false,
        }
    }

    #[test]
    fn arguments_are_checked_when_the_step_runs() {
        let ok = step(
            "bios",
            "apply_configuration",
            json!({"settings": [{"name": "a", "value": 1}]}),
        );
        assert_eq!(execute(&ok), Ok(Outcome::Done));
        let bad = step("bios", "apply_configuration", json!({"settings": "x"}));
        assert!(execute(&bad).is_err());
        let wait = step("deploy", "sleep", json!({"seconds": 1.5}));
        assert_eq!(
            execute(&wait),
            Ok(Outcome::Wait(Duration::from_millis(1500)))
        );
        assert!(execute(&step("deploy", "burn_in", json!({"seconds": -1}))).is_err());
        assert_eq!(
            execute(&step("vendor", "log_passthrough", json!({}))),
            Ok(Outcome::Done)
        );
    }
}
