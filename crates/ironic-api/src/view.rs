//! The JSON representation of a node at a microversion: which fields show, in Ironic's
//! order, with secrets masked. Serialised straight from the domain type, no
//! intermediate JSON tree.

use chrono::{DateTime, Utc};
use ironic_model::node::{F, FIELDS, FieldMask, JsonObject};
use ironic_model::{Node, Version, secrets};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

use crate::policy::{Policy, Redaction};
use crate::topology::Snapshot;

/// Everything a node rendering depends on besides the node.
pub struct ViewCtx<'a> {
    pub version: Version,
    /// Base URL of links, without a trailing slash.
    pub base: &'a str,
    /// `None`: every field the version shows. `Some`: only these (and `links`).
    pub mask: Option<FieldMask>,
    /// Add the `ports`/`states`/`portgroups`/`volume` link arrays (detail views).
    pub link_arrays: bool,
    pub topology: &'a Snapshot,
    /// `None`: restricted fields show (system readers). `Some`: each node's
    /// `last_error`, `reservation`, `driver_info` and `driver_internal_info` show only
    /// if the caller passes that field's policy for the node (its owner does, a lessee
    /// does not), else upstream's redaction text.
    pub redaction: Option<Redaction>,
}

/// What a caller without a field's policy sees instead of it (upstream's texts, with
/// their differences in capitalisation).
fn redacted(p: Policy) -> Value {
    let name = p.name();
    match p {
        Policy::NodeGetLastError => Value::String(format!(
            "** Value Redacted - Requires {name} permission. **"
        )),
        Policy::NodeGetReservation => {
            Value::String(format!("** Redacted - requires {name} permission. **"))
        }
        Policy::NodeGetDriverInternalInfo => {
            serde_json::json!({"content": format!("** Redacted - Requires {name} permission. **")})
        }
        _ => {
            serde_json::json!({"content": format!("** Redacted - requires {name} permission. **")})
        }
    }
}

pub struct NodeView<'a> {
    pub node: &'a Node,
    pub ctx: &'a ViewCtx<'a>,
}

impl NodeView<'_> {
    /// About how many bytes a node takes in an answer, to size the answer's buffer
    /// ([`crate::json_response_sized`]): ~2.5 KB detailed, ~350 bytes in the default
    /// list; a node read alone has room for its larger JSON fields.
    pub const BYTES_ALONE: usize = 4096;
    pub const BYTES_DETAILED: usize = 3072;
    pub const BYTES_LISTED: usize = 512;
}

/// ISO 8601 with microseconds and offset, as Ironic prints timestamps.
pub struct Ts<'a>(pub &'a DateTime<Utc>);

impl Serialize for Ts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `2026-11-26T17:20:40.123456+00:00`, as upstream writes times. By hand: chrono's
/// `format` parses its pattern again for every time written, a visible share of
/// rendering a page of nodes.
impl std::fmt::Display for Ts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = self.0;
        // A leap second's nanoseconds run past 10^9; chrono shows it as second 60.
        let (nanos, leap) = (
            t.nanosecond() % 1_000_000_000,
            t.nanosecond() / 1_000_000_000,
        );
        // Outside 0..=9999 a year has its sign, as chrono (ISO 8601) writes it.
        let year = t.year();
        if (0..=9999).contains(&year) {
            write!(f, "{year:04}")?;
        } else {
            write!(f, "{year:+05}")?;
        }
        write!(
            f,
            "-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00",
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second() + leap,
            nanos / 1000
        )
    }
}

fn ts(t: &Option<DateTime<Utc>>) -> Option<Ts<'_>> {
    t.as_ref().map(Ts)
}

use secrets::Masked;

/// `obj` with secrets hidden, as a JSON value.
pub fn masked(obj: &JsonObject) -> Value {
    serde_json::to_value(Masked { obj, extra: &[] }).unwrap_or(Value::Null)
}

/// `[{"href": <base>/v1/<path><suffix>, "rel": "self"}, {"href": <base>/<path><suffix>,
/// "rel": "bookmark"}]`: a resource's own links (`suffix` empty) or those of one of its
/// sub-resources (`/ports`, `/states`, ...).
pub struct Links<'a> {
    pub base: &'a str,
    pub path: &'a str,
    pub suffix: &'a str,
}

/// A link's `href`, written straight into the answer: `<base>/v1/<path><suffix>` (self)
/// or `<base>/<path><suffix>` (bookmark). A detailed node has five pairs of links; made
/// as strings first, they were a tenth of rendering a page.
struct Href<'a> {
    base: &'a str,
    v1: bool,
    path: &'a str,
    suffix: &'a str,
}

impl std::fmt::Display for Href<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.base)?;
        f.write_str(if self.v1 { "/v1/" } else { "/" })?;
        f.write_str(self.path)?;
        f.write_str(self.suffix)
    }
}

impl Serialize for Href<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

struct Link<'a> {
    href: Href<'a>,
    rel: &'a str,
}

impl Serialize for Link<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("href", &self.href)?;
        m.serialize_entry("rel", self.rel)?;
        m.end()
    }
}

impl Serialize for Links<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (base, path, suffix) = (self.base, self.path, self.suffix);
        let mut seq = s.serialize_seq(Some(2))?;
        for (v1, rel) in [(true, "self"), (false, "bookmark")] {
            seq.serialize_element(&Link {
                href: Href {
                    base,
                    v1,
                    path,
                    suffix,
                },
                rel,
            })?;
        }
        seq.end()
    }
}

/// A page of a collection as the API answers it, `{"<key>": [...], "next": "<url>"}`
/// (`next` only when there may be more), each item written straight into the answer by
/// `view` (nodes: [`NodeView`]; allocations: `allocations.rs` `AllocationView`).
pub struct ListPage<'a, T, V> {
    pub key: &'static str,
    pub items: &'a [T],
    pub view: V,
    pub next: Option<&'a str>,
}

impl<'a, T, V, W> Serialize for ListPage<'a, T, V>
where
    V: Fn(&'a T) -> W,
    W: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry(self.key, &Items(self))?;
        if let Some(next) = self.next {
            m.serialize_entry("next", next)?;
        }
        m.end()
    }
}

/// The items of a [`ListPage`], as a JSON array.
struct Items<'p, 'a, T, V>(&'p ListPage<'a, T, V>);

impl<'a, T, V, W> Serialize for Items<'_, 'a, T, V>
where
    V: Fn(&'a T) -> W,
    W: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let page = self.0;
        let mut seq = s.serialize_seq(Some(page.items.len()))?;
        for item in page.items {
            seq.serialize_element(&(page.view)(item))?;
        }
        seq.end()
    }
}

/// [`Links`] as a JSON value, for documents built with `json!`.
pub fn links_value(base: &str, path: &str) -> Value {
    serde_json::to_value(Links {
        base,
        path,
        suffix: "",
    })
    .unwrap_or(Value::Null)
}

impl Serialize for NodeView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.node;
        let c = self.ctx;
        let v = c.version;
        let mut m = s.serialize_map(None)?;
        let self_path = format!("nodes/{}", n.uuid);
        for (i, spec) in FIELDS.iter().enumerate() {
            if spec.field == F::Conductor {
                m.serialize_entry(
                    "links",
                    &Links {
                        base: c.base,
                        path: &self_path,
                        suffix: "",
                    },
                )?;
            }
            if !v.at_least(spec.min) {
                continue;
            }
            if let Some(mask) = c.mask
                && !mask.contains(i)
            {
                continue;
            }
            let key = spec.name;
            let hidden = c.redaction.as_ref().and_then(|r| {
                let p = match spec.field {
                    F::LastError => Policy::NodeGetLastError,
                    F::Reservation => Policy::NodeGetReservation,
                    F::DriverInfo => Policy::NodeGetDriverInfo,
                    F::DriverInternalInfo => Policy::NodeGetDriverInternalInfo,
                    _ => return None,
                };
                (!r.shows(p, n)).then_some(p)
            });
            if let Some(p) = hidden {
                m.serialize_entry(key, &redacted(p))?;
                continue;
            }
            match spec.field {
                F::Uuid => m.serialize_entry(key, n.uuid.as_str())?,
                F::CreatedAt => m.serialize_entry(key, &Ts(&n.created_at))?,
                F::UpdatedAt => m.serialize_entry(key, &ts(&n.updated_at))?,
                F::AutomatedClean => m.serialize_entry(key, &n.automated_clean)?,
                F::Interface(idx) => m.serialize_entry(key, &n.interfaces.0[idx])?,
                F::CleanStep => m.serialize_entry(key, &n.clean_step)?,
                F::ConductorGroup => m.serialize_entry(key, &n.conductor_group)?,
                F::ConsoleEnabled => m.serialize_entry(key, &n.console_enabled)?,
                F::DeployStep => m.serialize_entry(key, &n.deploy_step)?,
                F::Description => m.serialize_entry(key, &n.description)?,
                F::Driver => m.serialize_entry(key, &n.driver)?,
                F::DriverInfo => m.serialize_entry(
                    key,
                    &Masked {
                        obj: &n.driver_info,
                        extra: &[],
                    },
                )?,
                F::DriverInternalInfo => m.serialize_entry(
                    key,
                    &Masked {
                        obj: &n.driver_internal_info,
                        extra: &[],
                    },
                )?,
                F::Extra => m.serialize_entry(key, &n.extra)?,
                F::Fault => m.serialize_entry(key, &n.fault)?,
                F::InspectionFinishedAt => {
                    m.serialize_entry(key, &ts(&n.inspection_finished_at))?
                }
                F::InspectionStartedAt => m.serialize_entry(key, &ts(&n.inspection_started_at))?,
                F::InstanceInfo => m.serialize_entry(
                    key,
                    &Masked {
                        obj: &n.instance_info,
                        extra: &["configdrive", "image_url"],
                    },
                )?,
                F::InstanceUuid => m.serialize_entry(key, &n.instance_uuid)?,
                F::LastError => {
                    m.serialize_entry(key, &n.last_error.as_deref().map(secrets::mask_text))?
                }
                F::Lessee => m.serialize_entry(key, &n.lessee)?,
                F::Maintenance => m.serialize_entry(key, &n.maintenance)?,
                F::MaintenanceReason => m.serialize_entry(key, &n.maintenance_reason)?,
                F::Name => m.serialize_entry(key, &n.name)?,
                F::Owner => m.serialize_entry(key, &n.owner)?,
                F::PowerState => m.serialize_entry(key, &n.power_state)?,
                F::Properties => m.serialize_entry(key, &n.properties)?,
                F::Protected => m.serialize_entry(key, &n.protected)?,
                F::ProtectedReason => m.serialize_entry(key, &n.protected_reason)?,
                F::ProvisionState => m.serialize_entry(key, &n.provision_state.display(v))?,
                F::ProvisionUpdatedAt => m.serialize_entry(key, &ts(&n.provision_updated_at))?,
                F::RaidConfig => m.serialize_entry(key, &n.raid_config)?,
                F::Reservation => m.serialize_entry(key, &n.reservation)?,
                F::ResourceClass => m.serialize_entry(key, &n.resource_class)?,
                F::Retired => m.serialize_entry(key, &n.retired)?,
                F::RetiredReason => m.serialize_entry(key, &n.retired_reason)?,
                F::TargetPowerState => m.serialize_entry(key, &n.target_power_state)?,
                F::TargetProvisionState => {
                    m.serialize_entry(key, &n.target_provision_state.and_then(|s| s.display(v)))?
                }
                F::TargetRaidConfig => m.serialize_entry(key, &n.target_raid_config)?,
                F::Traits => m.serialize_entry(key, &n.traits)?,
                F::Conductor => m.serialize_entry(
                    key,
                    &c.topology
                        .owner(&n.conductor_group, &n.driver, n.uuid.as_str()),
                )?,
                F::AllocationUuid => m.serialize_entry(key, &n.allocation_uuid)?,
                F::ChassisUuid => m.serialize_entry(key, &n.chassis_uuid)?,
                F::NetworkData => m.serialize_entry(key, &n.network_data)?,
                F::BootMode => m.serialize_entry(key, &n.boot_mode)?,
                F::SecureBoot => m.serialize_entry(key, &n.secure_boot)?,
                F::Shard => m.serialize_entry(key, &n.shard)?,
                F::ParentNode => m.serialize_entry(key, &n.parent_node)?,
                F::ServiceStep => m.serialize_entry(key, &n.service_step)?,
                F::DisablePowerOff => m.serialize_entry(key, &n.disable_power_off)?,
                F::InstanceName => m.serialize_entry(key, &n.instance_name)?,
                F::Health => m.serialize_entry(key, &n.health)?,
            }
        }
        if c.link_arrays {
            m.serialize_entry(
                "ports",
                &Links {
                    base: c.base,
                    path: &self_path,
                    suffix: "/ports",
                },
            )?;
            if v.at_least(14) {
                m.serialize_entry(
                    "states",
                    &Links {
                        base: c.base,
                        path: &self_path,
                        suffix: "/states",
                    },
                )?;
            }
            if v.at_least(24) {
                m.serialize_entry(
                    "portgroups",
                    &Links {
                        base: c.base,
                        path: &self_path,
                        suffix: "/portgroups",
                    },
                )?;
            }
            if v.at_least(32) {
                m.serialize_entry(
                    "volume",
                    &Links {
                        base: c.base,
                        path: &self_path,
                        suffix: "/volume",
                    },
                )?;
            }
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_recursively() {
        let o = json!({"ipmi_password": "x", "nested": {"auth_token": "y", "ok": 1}, "ipmi_address": "1.2.3.4"});
        let obj = o.as_object().cloned().unwrap_or_default();
        let out = serde_json::to_value(Masked {
            obj: &obj,
            extra: &["image_url"],
        })
        .unwrap();
        assert_eq!(
            out,
            json!({"ipmi_password": "******", "nested": {"auth_token": "******", "ok": 1}, "ipmi_address": "1.2.3.4"})
        );
    }

    /// Times are written as chrono's `%Y-%m-%dT%H:%M:%S%.6f+00:00` writes them: padded
    /// fields, microseconds truncated, years of one to four digits.
    #[test]
    fn times_are_written_as_chrono_formats_them() {
        let mut t = DateTime::<Utc>::from_timestamp(-62_000_000_000, 0).unwrap();
        // From year 5 to about year 2388 in irregular steps, with every kind of nanosecond.
        for i in 0..10_000i64 {
            t += chrono::Duration::seconds(7_456_543 + i * 13)
                + chrono::Duration::nanoseconds(i * 987_654_321 % 1_000_000_000);
            let want = t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string();
            assert_eq!(Ts(&t).to_string(), want);
        }
        let t = DateTime::<Utc>::from_timestamp(1_764_177_640, 1_999).unwrap();
        assert_eq!(Ts(&t).to_string(), "2025-11-26T17:20:40.000001+00:00");
        // Years with a sign, a leap second.
        for year in [-12345, -1, 0, 9999, 10000, 12345] {
            let t = chrono::NaiveDate::from_ymd_opt(year, 2, 3)
                .and_then(|d| d.and_hms_micro_opt(4, 5, 6, 7))
                .unwrap()
                .and_utc();
            let want = t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string();
            assert_eq!(Ts(&t).to_string(), want, "{year}");
        }
        let t = DateTime::<Utc>::from_timestamp(1_483_228_799, 1_500_000_000).unwrap();
        assert_eq!(Ts(&t).to_string(), "2016-12-31T23:59:60.500000+00:00");
    }
}
