//! A node's target RAID configuration (`PUT /v1/nodes/{node}/states/raid`, 1.12):
//! upstream's schema, checked field by field, and the logical disk properties a RAID
//! interface documents (`GET /v1/drivers/{driver}/raid/logical_disk_properties`).

use serde_json::{Map, Value, json};

use crate::Error;
use crate::names::py_repr_str;
use crate::patch::py_repr;

pub const RAID_LEVELS: &[&str] = &["JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0"];

fn err(msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("RAID config validation error: {msg}"))
}

fn one_of(v: &Value, allowed: &[&str]) -> Result<(), Error> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(()),
        _ => Err(err(format_args!(
            "{} is not one of [{}]",
            py_repr(v),
            allowed
                .iter()
                .map(|a| py_repr_str(a))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Checks a target RAID configuration against upstream's schema.
pub fn check_target_raid_config(cfg: &Value) -> Result<(), Error> {
    let Some(obj) = cfg.as_object() else {
        return Err(err(format_args!(
            "{} is not of type 'object'",
            py_repr(cfg)
        )));
    };
    if let Some(k) = obj.keys().find(|k| *k != "logical_disks") {
        return Err(err(format_args!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let disks = match obj.get("logical_disks") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(err("[] should be non-empty")),
        Some(v) => return Err(err(format_args!("{} is not of type 'array'", py_repr(v)))),
        None => return Err(err("'logical_disks' is a required property")),
    };
    for d in disks {
        let Some(d) = d.as_object() else {
            return Err(err(format_args!("{} is not of type 'object'", py_repr(d))));
        };
        for required in ["raid_level", "size_gb"] {
            if !d.contains_key(required) {
                return Err(err(format_args!("'{required}' is a required property")));
            }
        }
        for (k, v) in d {
            match k.as_str() {
                "raid_level" => one_of(v, RAID_LEVELS)?,
                "size_gb" => {
                    let ok = v.as_u64().is_some() || v.as_str() == Some("MAX");
                    if !ok {
                        return Err(err(format_args!(
                            "{} is not valid under any of the given schemas",
                            py_repr(v)
                        )));
                    }
                }
                "disk_type" => one_of(v, &["hdd", "ssd"])?,
                "interface_type" => one_of(v, &["sata", "scsi", "sas"])?,
                "is_root_volume" | "share_physical_disks" if !v.is_boolean() => {
                    return Err(err(format_args!("{} is not of type 'boolean'", py_repr(v))));
                }
                "volume_name" | "controller" if !v.is_string() => {
                    return Err(err(format_args!("{} is not of type 'string'", py_repr(v))));
                }
                "number_of_physical_disks" if v.as_u64().is_none_or(|n| n < 1) => {
                    return Err(err(format_args!(
                        "{} is not a positive integer",
                        py_repr(v)
                    )));
                }
                "physical_disks" if !v.is_array() => {
                    return Err(err(format_args!("{} is not of type 'array'", py_repr(v))));
                }
                "is_root_volume"
                | "share_physical_disks"
                | "volume_name"
                | "controller"
                | "number_of_physical_disks"
                | "physical_disks" => {}
                other => {
                    return Err(err(format_args!(
                        "Additional properties are not allowed ('{other}' was unexpected)"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The logical disk properties of a RAID interface that implements the generic schema.
pub fn logical_disk_properties() -> Map<String, Value> {
    let v = json!({
        "raid_level": "RAID level for the logical disk. Valid values are 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0' and '6+0'. Required.",
        "size_gb": "Size in GiB (Integer) for the logical disk. Use 'MAX' as size_gb if this logical disk is supposed to use the rest of the space available. Required.",
        "volume_name": "Name of the volume to be created. If this is not specified, it will be auto-generated. Optional.",
        "is_root_volume": "Specifies whether this disk is a root volume. By default, this is False. Optional.",
        "share_physical_disks": "Specifies whether other logical disks can share physical disks with this logical disk. By default, this is False. Optional.",
        "disk_type": "The type of disk preferred. Valid values are 'hdd' and 'ssd'. If this is not specified, disk type will not be a selection criterion for choosing backing physical disks. Optional.",
        "interface_type": "The interface type of disk. Valid values are 'sata', 'scsi' and 'sas'. If this is not specified, interface type will not be a selection criterion for choosing backing physical disks. Optional.",
        "number_of_physical_disks": "The number of disks to use for this logical disk. By default, the driver uses the minimum number of disks required for that RAID level. Optional.",
        "controller": "The name of the controller as read by the RAID interface. Optional.",
        "physical_disks": "The physical disks to use for this logical disk. Optional."
    });
    v.as_object().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_schema() {
        let ok =
            json!({"logical_disks": [{"size_gb": 100, "raid_level": "1", "is_root_volume": true}]});
        assert!(check_target_raid_config(&ok).is_ok());
        let max = json!({"logical_disks": [{"size_gb": "MAX", "raid_level": "JBOD"}]});
        assert!(check_target_raid_config(&max).is_ok());
        let bad = json!({"logical_disks": [{"size_gb": 100, "raid_level": "7"}]});
        assert_eq!(
            check_target_raid_config(&bad).err().map(|e| e.to_string()),
            Some("RAID config validation error: '7' is not one of ['JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0']".into())
        );
        for bad in [
            json!({}),
            json!({"logical_disks": []}),
            json!({"logical_disks": [{"raid_level": "1"}]}),
            json!({"logical_disks": [{"raid_level": "1", "size_gb": -1}]}),
            json!({"logical_disks": [{"raid_level": "1", "size_gb": 1, "colour": "red"}]}),
        ] {
            assert!(check_target_raid_config(&bad).is_err(), "{bad}");
        }
    }
}
