//! HPE OneView with dynamic allocation (`docs/oneview.md`, reference
//! `../shared/reference/oneview.md` §2): the `oneview` hardware type. A node names its
//! server hardware (`driver_info.server_hardware_uri`) and, in
//! `properties.capabilities`, the server hardware type and the server profile template
//! to allocate it with. Ironic applies a server profile of its own
//! (`driver_info.applied_server_profile_uri`) only while it uses the hardware: from
//! deploy or cleaning preparation until the end of cleaning.
//!
//! Ownership: no profile on the hardware = free; our profile = used by Ironic; any
//! other profile = used by OneView. Nodes whose `driver_info.dynamic_allocation` is
//! missing or false are in the deprecated pre-allocation model: the operator applied a
//! profile, and the driver neither checks ownership nor creates or deletes profiles.

pub mod client;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::HardwareType;
use crate::interfaces::{
    BiosInterface, BootDevice, BootInterface, DeployInterface, Driver, DriverError,
    DriverErrorKind, DriverFuture, Interface, ManagementInterface, NodeChanges, NodeInfo, Outcome,
    PowerInterface, RaidInterface,
};
use crate::steps::Step;
use client::{Client, OvError};

/// `maintenance_reason` of a node OneView took (untranslated, as upstream).
pub const IN_USE_BY_ONEVIEW: &str = "node in use by OneView";
/// Prefix of the error when the hardware cannot be allocated for cleaning; the
/// periodic check recognises such `clean failed` nodes by it.
pub const ALLOCATION_ERROR: &str = "server hardware allocation error";
pub const APPLIED_PROFILE: &str = "applied_server_profile_uri";

pub use ironic_catalog::ONEVIEW;

/// Who uses the server hardware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Free,
    Ironic,
    OneView(String),
}

/// What a node says about its hardware.
#[derive(Debug, Clone)]
pub struct NodeData {
    pub server_hardware_uri: String,
    pub server_hardware_type_uri: String,
    pub server_profile_template_uri: String,
    pub enclosure_group_uri: Option<String>,
    pub applied_profile: Option<String>,
    pub dynamic: bool,
}

/// `k:v,k:v` capabilities (or an object) as pairs.
fn capabilities(node: NodeInfo<'_>) -> Vec<(String, String)> {
    match node.properties.get("capabilities") {
        Some(Value::String(s)) => s
            .split(',')
            .filter_map(|kv| kv.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect(),
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect(),
        _ => Vec::new(),
    }
}

/// `dynamic_allocation`: a boolean or a strict boolean word; missing = false.
pub fn dynamic_allocation(node: NodeInfo<'_>) -> Result<bool, DriverError> {
    match node.driver_info.get("dynamic_allocation") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "1" | "t" | "true" | "on" | "y" | "yes" => Ok(true),
            "0" | "f" | "false" | "off" | "n" | "no" => Ok(false),
            _ => Err(DriverError::invalid(format!(
                "Invalid dynamic_allocation value {s:?} in driver_info: use true or false."
            ))),
        },
        Some(v) => Err(DriverError::invalid(format!(
            "Invalid dynamic_allocation value {v} in driver_info: use true or false."
        ))),
    }
}

/// The node's OneView data; a missing key and an empty value are both named.
pub fn node_data(node: NodeInfo<'_>) -> Result<NodeData, DriverError> {
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    let sh = text(node.driver_info.get("server_hardware_uri"));
    if sh.is_empty() {
        return Err(DriverError::invalid(
            "Missing the keys for the following OneView data in node's driver_info: server_hardware_uri.",
        ));
    }
    let caps = capabilities(node);
    let cap = |k: &str| {
        caps.iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let missing: Vec<&str> = ["server_hardware_type_uri", "server_profile_template_uri"]
        .into_iter()
        .filter(|k| cap(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(DriverError::invalid(format!(
            "Missing the keys for the following OneView data in node's properties/capabilities: {}.",
            missing.join(", ")
        )));
    }
    let applied = text(node.driver_info.get(APPLIED_PROFILE));
    // Every URI is a path on the appliance, in its own collection: the client refuses
    // anything else anyway (see `crate::outbound`); this names the field.
    let eg = cap("enclosure_group_uri");
    for (field, value, prefix) in [
        (
            "driver_info/server_hardware_uri",
            Some(&sh),
            "/rest/server-hardware/",
        ),
        (
            "properties/capabilities server_hardware_type_uri",
            cap("server_hardware_type_uri").as_ref(),
            "/rest/server-hardware-types/",
        ),
        (
            "properties/capabilities server_profile_template_uri",
            cap("server_profile_template_uri").as_ref(),
            "/rest/server-profile-templates/",
        ),
        (
            "properties/capabilities enclosure_group_uri",
            eg.as_ref(),
            "/rest/enclosure-groups/",
        ),
        (
            "driver_info/applied_server_profile_uri",
            Some(&applied).filter(|a| !a.is_empty()),
            "/rest/server-profiles/",
        ),
    ] {
        if let Some(value) = value
            && let Err(why) = crate::outbound::check_path(value, prefix)
        {
            return Err(DriverError::invalid(format!(
                "The node's {field} {value:?} must be a path on the OneView appliance under {prefix}: {why}."
            )));
        }
    }
    Ok(NodeData {
        server_hardware_uri: sh,
        server_hardware_type_uri: cap("server_hardware_type_uri").unwrap_or_default(),
        server_profile_template_uri: cap("server_profile_template_uri").unwrap_or_default(),
        enclosure_group_uri: eg,
        applied_profile: (!applied.is_empty()).then_some(applied),
        dynamic: dynamic_allocation(node)?,
    })
}

fn ov(e: OvError) -> DriverError {
    DriverError::from(e)
}

impl From<OvError> for DriverError {
    fn from(e: OvError) -> DriverError {
        let kind = match &e {
            OvError::Unreachable(_) => DriverErrorKind::Unreachable,
            OvError::Config(_) | OvError::Refused(_) => DriverErrorKind::Invalid,
            _ => DriverErrorKind::Failed,
        };
        DriverError {
            kind,
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}

/// The shared state of the `oneview` interfaces: the appliance's client, or why there
/// is none (a configuration error every call reports).
pub struct Core {
    client: Result<Client, OvError>,
}

impl Core {
    fn client(&self) -> Result<&Client, DriverError> {
        self.client
            .as_ref()
            .map_err(|e| DriverError::from(e.clone()))
    }

    /// Who uses the node's hardware now (one GET).
    pub async fn owner(&self, node: NodeInfo<'_>) -> Result<Owner, DriverError> {
        let d = node_data(node)?;
        let sh = self
            .client()?
            .get(&d.server_hardware_uri)
            .await
            .map_err(ov)?;
        let sp = sh
            .get("serverProfileUri")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        Ok(match sp {
            None => Owner::Free,
            Some(p) if Some(p) == d.applied_profile.as_deref() => Owner::Ironic,
            Some(p) => Owner::OneView(p.to_string()),
        })
    }

    /// The checks every interface makes: the template and the hardware agree with
    /// each other and with the node.
    async fn validate_common(&self, node: NodeInfo<'_>) -> Result<NodeData, DriverError> {
        let d = node_data(node)?;
        let sh = self
            .client()?
            .get(&d.server_hardware_uri)
            .await
            .map_err(ov)?;
        let spt = self
            .client()?
            .get(&d.server_profile_template_uri)
            .await
            .map_err(ov)?;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let mut errors = Vec::new();
        if s(&spt, "serverHardwareTypeUri") != s(&sh, "serverHardwareTypeUri") {
            errors.push(format!(
                "Server profile template {} serverHardwareTypeUri is inconsistent with server hardware {} serverHardwareTypeUri.",
                d.server_profile_template_uri, d.server_hardware_uri
            ));
        }
        if s(&spt, "enclosureGroupUri") != s(&sh, "serverGroupUri") {
            errors.push(format!(
                "Server profile template {} enclosureGroupUri is inconsistent with server hardware {} serverGroupUri.",
                d.server_profile_template_uri, d.server_hardware_uri
            ));
        }
        if spt.pointer("/boot/manageBoot").and_then(Value::as_bool) != Some(true) {
            errors.push(format!(
                "Server profile template {} does not manage the boot order.",
                d.server_profile_template_uri
            ));
        }
        if d.server_hardware_type_uri != s(&sh, "serverHardwareTypeUri") {
            errors.push(format!(
                "Node server_hardware_type_uri {} is inconsistent with server hardware {} serverHardwareTypeUri.",
                d.server_hardware_type_uri, d.server_hardware_uri
            ));
        }
        if let Some(eg) = &d.enclosure_group_uri
            && *eg != s(&sh, "serverGroupUri")
        {
            errors.push(format!(
                "Node enclosure_group_uri {eg} is inconsistent with server hardware {} serverGroupUri.",
                d.server_hardware_uri
            ));
        }
        if d.dynamic && s(&spt, "macType") != "Physical" {
            errors.push(format!(
                "Server profile template {} must use physical MAC addresses for dynamic allocation.",
                d.server_profile_template_uri
            ));
        }
        if errors.is_empty() {
            Ok(d)
        } else {
            Err(DriverError::invalid(errors.join(" ")))
        }
    }

    /// Applies a profile of ours from the node's template, or reuses the one applied;
    /// returns the node changes (`applied_server_profile_uri`).
    async fn allocate(&self, node: NodeInfo<'_>, name: String) -> Result<NodeChanges, DriverError> {
        let d = node_data(node)?;
        let mut changes = NodeChanges::none();
        match self.owner(node).await? {
            Owner::Ironic => return Ok(changes),
            Owner::OneView(p) => {
                return Err(DriverError::conflict(format!(
                    "Server hardware {} is already in use by OneView (server profile {p}).",
                    d.server_hardware_uri
                )));
            }
            Owner::Free => {}
        }
        let mut p = self
            .client()?
            .get(&format!("{}/new-profile", d.server_profile_template_uri))
            .await
            .map_err(ov)?;
        p["name"] = json!(name);
        p["serverHardwareUri"] = json!(d.server_hardware_uri);
        p["serverProfileTemplateUri"] = json!("");
        let task = self
            .client()?
            .run("POST", "/rest/server-profiles", &p)
            .await
            .map_err(|e| {
                let msg = format!(
                    "Error while creating a Server Profile for Server Hardware {}: {e}",
                    d.server_hardware_uri
                );
                ov(e).context(msg)
            })?;
        let uri = task
            .pointer("/associatedResource/resourceUri")
            .and_then(Value::as_str)
            .filter(|u| u.starts_with("/rest/server-profiles/"))
            .ok_or_else(|| {
                DriverError::failed("OneView reported no server profile for the allocation")
            })?;
        changes
            .driver_info
            .insert(APPLIED_PROFILE.into(), json!(uri));
        Ok(changes)
    }

    /// Powers off and removes our profile (if the hardware has it); the node forgets
    /// it.
    async fn deallocate(&self, node: NodeInfo<'_>) -> Result<NodeChanges, DriverError> {
        let d = node_data(node)?;
        let mut changes = NodeChanges::none();
        let Some(mine) = d.applied_profile.clone() else {
            return Ok(changes);
        };
        if self.owner(node).await? == Owner::Ironic {
            self.power_to(&d, "Off", Some("PressAndHold")).await?;
            changes.power_state = Some("power off".into());
            match self.client()?.run("DELETE", &mine, &json!({})).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    let msg = format!("Error while deleting applied Server Profile {mine}: {e}");
                    return Err(ov(e).context(msg));
                }
            }
        }
        // Not ours any more (someone removed it): only forget it.
        changes
            .driver_info
            .insert(APPLIED_PROFILE.into(), Value::Null);
        Ok(changes)
    }

    async fn power_to(
        &self,
        d: &NodeData,
        state: &str,
        control: Option<&str>,
    ) -> Result<(), DriverError> {
        let mut body = json!({"powerState": state});
        if let Some(c) = control {
            body["powerControl"] = json!(c);
        }
        self.client()?
            .run(
                "PUT",
                &format!("{}/powerState", d.server_hardware_uri),
                &body,
            )
            .await
            .map(|_| ())
            .map_err(|e| {
                let msg = format!(
                    "Could not set the power of {} to {state}: {e}",
                    d.server_hardware_uri
                );
                ov(e).context(msg)
            })
    }
}

/// One of the `oneview` interfaces.
struct Iface {
    kind: &'static str,
    core: Arc<Core>,
}

impl Interface for Iface {
    fn validate<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            if !matches!(self.kind, "power" | "management" | "deploy") {
                return Ok(());
            }
            let d = self.core.validate_common(node).await?;
            if !d.dynamic {
                return Ok(());
            }
            match (self.kind, self.core.owner(node).await?) {
                // Taken by OneView: only moving the node to manageable is fine.
                ("power", Owner::OneView(p))
                    if node.target_provision_state != Some("manageable") =>
                {
                    Err(DriverError::conflict(format!(
                        "Server hardware {} is in use by OneView (server profile {p}).",
                        d.server_hardware_uri
                    )))
                }
                ("management", o) if o != Owner::Ironic => Err(DriverError::conflict(format!(
                    "Server hardware {} is not in use by Ironic: the boot device is managed through Ironic's server profile, applied when deploying or cleaning.",
                    d.server_hardware_uri
                ))),
                _ => Ok(()),
            }
        })
    }

    fn execute_step<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        step: &'a Step,
    ) -> DriverFuture<'a, Outcome> {
        Box::pin(async move {
            match (self.kind, step.step.as_str()) {
                // The profile applied in `prepare` is the deployment; nothing more.
                ("deploy", "deploy") => Ok(Outcome::Done),
                _ => Err(DriverError::invalid(format!(
                    "the oneview driver has no step {}",
                    step.name()
                ))),
            }
        })
    }
}

fn map_power(s: &str) -> String {
    match s {
        "On" | "PoweringOff" => "power on",
        "Off" | "PoweringOn" => "power off",
        "Resetting" => "rebooting",
        _ => "error",
    }
    .to_string()
}

impl PowerInterface for Iface {
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move {
            let d = node_data(node)?;
            let sh = self
                .core
                .client()?
                .get(&d.server_hardware_uri)
                .await
                .map_err(ov)?;
            Ok(map_power(
                sh.get("powerState").and_then(Value::as_str).unwrap_or(""),
            ))
        })
    }

    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        _timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String> {
        Box::pin(async move {
            let d = node_data(node)?;
            if d.dynamic
                && let Owner::OneView(_) = self.core.owner(node).await?
            {
                return Err(DriverError::conflict(format!(
                    "Cannot change the power state of node {}: the node is in use by OneView.",
                    node.uuid
                )));
            }
            let c = &self.core;
            match target {
                "power on" => c.power_to(&d, "On", None).await?,
                "power off" => c.power_to(&d, "Off", Some("PressAndHold")).await?,
                "soft power off" => c.power_to(&d, "Off", Some("MomentaryPress")).await?,
                "rebooting" => {
                    c.power_to(&d, "Off", Some("PressAndHold")).await?;
                    c.power_to(&d, "On", None).await?;
                }
                "soft rebooting" => {
                    c.power_to(&d, "Off", Some("MomentaryPress")).await?;
                    c.power_to(&d, "On", None).await?;
                }
                other => {
                    return Err(DriverError::invalid(format!(
                        "unknown power state {other:?}"
                    )));
                }
            }
            self.get_power_state(node).await
        })
    }
}

const BOOT_DEVICES: &[(&str, &str)] = &[("pxe", "PXE"), ("disk", "HardDisk"), ("cdrom", "CD")];

impl ManagementInterface for Iface {
    fn supported_boot_devices(&self, _node: NodeInfo<'_>) -> Vec<&'static str> {
        BOOT_DEVICES.iter().map(|(d, _)| *d).collect()
    }

    fn get_boot_device<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<BootDevice>> {
        Box::pin(async move {
            let d = node_data(node)?;
            let sh = self
                .core
                .client()?
                .get(&d.server_hardware_uri)
                .await
                .map_err(ov)?;
            let Some(sp) = sh.get("serverProfileUri").and_then(Value::as_str) else {
                return Err(DriverError::conflict(format!(
                    "Server hardware {} has no server profile assigned.",
                    d.server_hardware_uri
                )));
            };
            let p = self.core.client()?.get(sp).await.map_err(ov)?;
            let first = p
                .pointer("/boot/order/0")
                .and_then(Value::as_str)
                .unwrap_or("");
            Ok(BOOT_DEVICES
                .iter()
                .find(|(_, o)| *o == first)
                .map(|(dev, _)| BootDevice {
                    device: (*dev).to_string(),
                    persistent: true,
                }))
        })
    }

    fn set_boot_device<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device: BootDevice,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let d = node_data(node)?;
            let Some((_, entry)) = BOOT_DEVICES.iter().find(|(dev, _)| *dev == device.device)
            else {
                return Err(DriverError::invalid(format!(
                    "Invalid boot device {:?}: supported are pxe, disk, cdrom.",
                    device.device
                )));
            };
            let sh = self
                .core
                .client()?
                .get(&d.server_hardware_uri)
                .await
                .map_err(ov)?;
            let Some(sp) = sh.get("serverProfileUri").and_then(Value::as_str) else {
                return Err(DriverError::conflict(format!(
                    "Server hardware {} has no server profile assigned.",
                    d.server_hardware_uri
                )));
            };
            let mut p = self.core.client()?.get(sp).await.map_err(ov)?;
            let mut order: Vec<Value> = p
                .pointer("/boot/order")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if order.first().and_then(Value::as_str) == Some(*entry) {
                return Ok(NodeChanges::none());
            }
            order.retain(|o| o.as_str() != Some(*entry));
            order.insert(0, json!(entry));
            p["boot"]["order"] = Value::Array(order);
            self.core.client()?.run("PUT", sp, &p).await.map_err(ov)?;
            Ok(NodeChanges::none())
        })
    }
}

impl DeployInterface for Iface {
    fn prepare<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let d = node_data(node)?;
            if !d.dynamic || node.provision_state != "deploying" {
                return Ok(NodeChanges::none());
            }
            let display = node
                .instance_info
                .get("display_name")
                .and_then(Value::as_str)
                .unwrap_or("None");
            let instance = node.instance_uuid.unwrap_or(node.uuid);
            self.core
                .allocate(node, format!("{display} [{instance}]"))
                .await
        })
    }

    fn tear_down<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let d = node_data(node)?;
            // The profile stays for cleaning (which reuses and then removes it), unless
            // no cleaning follows.
            if d.dynamic && node.skip_automated_cleaning {
                return self.core.deallocate(node).await;
            }
            if d.dynamic && self.core.owner(node).await? == Owner::Ironic {
                self.core.power_to(&d, "Off", Some("PressAndHold")).await?;
            }
            Ok(NodeChanges {
                power_state: Some("power off".into()),
                ..NodeChanges::none()
            })
        })
    }

    fn prepare_cleaning<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let d = node_data(node)?;
            if !d.dynamic {
                return Ok(NodeChanges::none());
            }
            self.core
                .allocate(node, format!("Ironic Cleaning [{}]", node.uuid))
                .await
                .map_err(|e| {
                    let msg = format!("{ALLOCATION_ERROR}: {e}");
                    e.context(msg)
                })
        })
    }

    fn tear_down_cleaning<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let d = node_data(node)?;
            if !d.dynamic {
                return Ok(NodeChanges::none());
            }
            self.core.deallocate(node).await
        })
    }
}

/// The appliance's profile boots the node: nothing to prepare.
impl BootInterface for Iface {}

impl RaidInterface for Iface {}
impl BiosInterface for Iface {}

/// The `oneview` hardware type bound to one appliance.
pub struct OneView {
    pub core: Arc<Core>,
    power: Iface,
    management: Iface,
    deploy: Iface,
    boot: Iface,
    raid: Iface,
    bios: Iface,
    network: Iface,
    storage: Iface,
}

impl OneView {
    /// A configuration the client refuses (no or a bad `manager_url`) is reported by
    /// every call on a `oneview` node, validation first.
    pub fn new(settings: client::Settings) -> OneView {
        let core = Arc::new(Core {
            client: Client::new(settings),
        });
        let i = |kind| Iface {
            kind,
            core: core.clone(),
        };
        OneView {
            power: i("power"),
            management: i("management"),
            deploy: i("deploy"),
            boot: i("boot"),
            raid: i("raid"),
            bios: i("bios"),
            network: i("network"),
            storage: i("storage"),
            core,
        }
    }
}

impl Driver for OneView {
    fn hardware_type(&self) -> &'static HardwareType {
        &ONEVIEW
    }
    fn power(&self) -> &dyn PowerInterface {
        &self.power
    }
    fn management(&self) -> &dyn ManagementInterface {
        &self.management
    }
    fn deploy(&self) -> &dyn DeployInterface {
        &self.deploy
    }
    fn boot(&self) -> &dyn BootInterface {
        &self.boot
    }
    fn raid(&self) -> &dyn RaidInterface {
        &self.raid
    }
    fn bios(&self) -> &dyn BiosInterface {
        &self.bios
    }
    fn other(&self, interface_type: &str) -> Option<&dyn Interface> {
        match interface_type {
            "network" => Some(&self.network),
            "storage" => Some(&self.storage),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironic_model::node::JsonObject;

    fn info<'a>(di: &'a JsonObject, props: &'a JsonObject, empty: &'a JsonObject) -> NodeInfo<'a> {
        NodeInfo {
            uuid: "u",
            driver_info: di,
            driver_internal_info: empty,
            properties: props,
            instance_info: empty,
            power_state: None,
            provision_state: "manageable",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        }
    }

    fn props_ok() -> JsonObject {
        json!({"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/t,server_profile_template_uri:/rest/server-profile-templates/s"})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn node_data_names_what_is_missing() {
        let empty = JsonObject::new();
        let e = node_data(info(&empty, &empty, &empty)).unwrap_err();
        assert!(
            e.message.contains("driver_info: server_hardware_uri"),
            "{e}"
        );
        let di =
            json!({"server_hardware_uri": "/rest/server-hardware/1", "dynamic_allocation": "True"});
        let di = di.as_object().unwrap();
        let props = json!({"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/t,server_profile_template_uri:"});
        let props = props.as_object().unwrap();
        let e = node_data(info(di, props, &empty)).unwrap_err();
        assert!(
            e.message
                .contains("properties/capabilities: server_profile_template_uri"),
            "{e}"
        );
        let props = json!({"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/t,server_profile_template_uri:/rest/server-profile-templates/s,boot_mode:bios"});
        let d = node_data(info(di, props.as_object().unwrap(), &empty)).unwrap();
        assert!(d.dynamic);
        assert_eq!(
            d.server_profile_template_uri,
            "/rest/server-profile-templates/s"
        );
        // A URI that is not a path in its collection on the appliance is refused, by name.
        for hostile in [
            "@other.host/rest/server-hardware/1",
            "https://other.host/rest/server-hardware/1",
            "/rest/server-hardware/../login-sessions",
            "/rest/server-profiles/1",
        ] {
            let di = json!({"server_hardware_uri": hostile});
            let e = node_data(info(di.as_object().unwrap(), &props_ok(), &empty)).unwrap_err();
            assert!(
                e.message.contains("driver_info/server_hardware_uri")
                    && e.message.contains("under /rest/server-hardware/"),
                "{hostile}: {e}"
            );
        }
        let props = json!({"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/t,server_profile_template_uri://evil/rest/x"});
        let e = node_data(info(di, props.as_object().unwrap(), &empty)).unwrap_err();
        assert!(e.message.contains("server_profile_template_uri"), "{e}");
        let bad = json!({"server_hardware_uri": "x", "dynamic_allocation": "maybe"});
        assert!(dynamic_allocation(info(bad.as_object().unwrap(), &empty, &empty)).is_err());
    }

    #[test]
    fn power_states_map_as_upstream() {
        assert_eq!(map_power("PoweringOff"), "power on");
        assert_eq!(map_power("PoweringOn"), "power off");
        assert_eq!(map_power("Resetting"), "rebooting");
    }
}
