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

/// The fake hardware's inventory (see `Fake::inspect_hardware`): two NICs whose MACs
/// come from the node's uuid, the first the PXE one.
/// The fake machine's firmware: a BIOS and a BMC, the BIOS's serial number from the
/// node's uuid.
pub fn firmware_components(node_uuid: &str) -> Vec<ironic_model::firmware::Reported> {
    let hex: String = node_uuid.chars().filter(char::is_ascii_hexdigit).collect();
    let c = |component: &str, version: &str, model: &str, serial: Option<String>| {
        ironic_model::firmware::Reported {
            component: component.into(),
            current_version: Some(version.into()),
            vendor: Some("Fake Inc.".into()),
            model: Some(model.into()),
            serial_number: serial,
        }
    };
    vec![
        c(
            "bios",
            "1.0.0",
            "Fake BIOS",
            Some(format!("BIOS-{}", hex.get(..8).unwrap_or(""))),
        ),
        c("bmc", "2.1.0", "Fake BMC", None),
    ]
}

pub fn inventory(node_uuid: &str) -> crate::interfaces::Inspection {
    let hex: String = node_uuid.chars().filter(char::is_ascii_hexdigit).collect();
    let pairs = |from: usize| -> String {
        (0..3)
            .map(|i| hex.get(from + 2 * i..from + 2 * i + 2).unwrap_or("00"))
            .collect::<Vec<_>>()
            .join(":")
            .to_ascii_lowercase()
    };
    let (mac0, mac1) = (
        format!("52:54:00:{}", pairs(0)),
        format!("52:54:01:{}", pairs(6)),
    );
    let nic = |name: &str, mac: &str, carrier: bool| {
        serde_json::json!({"name": name, "mac_address": mac, "has_carrier": carrier,
                           "ipv4_address": null, "ipv6_address": null})
    };
    let interfaces = vec![nic("eth0", &mac0, true), nic("eth1", &mac1, false)];
    let inventory = serde_json::json!({
        "interfaces": interfaces,
        "cpu": {"count": 8, "architecture": "x86_64", "model_name": "Fake CPU",
                "flags": ["vmx", "lm"]},
        "memory": {"physical_mb": 16384, "total": 17179869184u64},
        "disks": [{"name": "/dev/sda", "model": "Fake Disk", "size": 107374182400u64,
                   "rotational": false}],
        "boot": {"current_boot_mode": "uefi", "pxe_interface": mac0},
        "bmc_address": null,
        "system_vendor": {"manufacturer": "Fake Inc.", "product_name": "Box",
                          "serial_number": format!("SN-{}", hex.get(..8).unwrap_or(""))},
    });
    let plugin_data = serde_json::json!({
        "boot_interface": mac0,
        "macs": [mac0, mac1],
    });
    crate::interfaces::Inspection {
        inventory: inventory.as_object().cloned().unwrap_or_default(),
        plugin_data: plugin_data.as_object().cloned().unwrap_or_default(),
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
