//! Console, boot device, NMI, virtual media, target RAID configuration and vendor
//! passthru: each asks
//! the node's interface of that kind, under the node's lock where it changes
//! something. An interface the node does not have (`no-console`, `no-raid`,
//! `no-vendor`, or one without the operation) is upstream's 400 "does not support".

use crate::lock::{Held, Patience};
use ironic_catalog::vendor::{driver_vendor_methods, node_vendor_methods};
use ironic_drivers::interfaces::{BootDevice, Indicator, ManagementInterface, NodeInfo};
use ironic_model::{Error, Node};
use ironic_rpc::Context;
use ironic_rpc::calls::{AttachVirtualMedia, DetachVirtualMedia, GetVirtualMedia};
use ironic_rpc::calls::{ChangeNodeBootMode, ChangeNodePowerState, ChangeNodeSecureBoot};
use ironic_rpc::calls::{
    GetBootDevice, GetConsoleInformation, GetIndicatorState, GetSupportedBootDevices,
    GetSupportedIndicators, InjectNmi, JsonDoc, SetBootDevice, SetConsoleMode, SetIndicatorState,
    SetTargetRaidConfig, VendorPassthru,
};
use serde_json::json;

fn unsupported(driver: &str, what: &str) -> Error {
    Error::invalid(format!(
        "Driver {driver} does not support {what} (disabled or not implemented)."
    ))
}

/// The node's implementation of `kind`, refusing the `no-…` ones.
fn interface<'a>(node: &'a Node, kind: &str) -> Result<&'a str, Error> {
    match node.interfaces.get(kind) {
        Some(i) if !i.starts_with("no-") => Ok(i),
        _ => Err(unsupported(&node.driver, kind)),
    }
}

fn driver_error(node: &Node, what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Failed to {what} for node {}: {e}", node.uuid))
}

/// The management interface, when it handles virtual media; else upstream's 400 naming
/// the operation.
fn vmedia<'a>(
    drivers: &'a ironic_drivers::Registry,
    n: &Node,
    what: &str,
) -> Result<&'a dyn ManagementInterface, Error> {
    interface(n, "management")?;
    let m = crate::nodes::driver(drivers, n)?.management();
    if !m.can_virtual_media() {
        return Err(unsupported(&n.driver, what));
    }
    Ok(m)
}

/// Power and management calls: power, console, boot device and mode, NMI,
/// indicators, RAID configuration, virtual media, vendor passthru.
pub(crate) struct Management {
    db: ironic_db::Db,
    drivers: ironic_drivers::Registry,
    locks: crate::lock::Locks,
    work: crate::work::Runner,
}

impl Management {
    pub(crate) fn new(
        db: ironic_db::Db,
        drivers: ironic_drivers::Registry,
        locks: crate::lock::Locks,
        work: crate::work::Runner,
    ) -> Management {
        Management {
            db,
            drivers,
            locks,
            work,
        }
    }
}

impl Management {
    pub(crate) async fn change_node_power_state(
        &self,
        _ctx: &Context,
        req: ChangeNodePowerState,
    ) -> Result<(), Error> {
        let ChangeNodePowerState {
            node,
            new_state,
            timeout_secs,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            if h.node.disable_power_off && matches!(new_state.as_str(), "power off" | "soft power off") {
                tracing::error!(node = %h.node.uuid, "refusing to power off a node with disable_power_off");
                return Err(Error::Conflict(format!(
                    "Failed to set node power state to {new_state}."
                )));
            }
            if ironic_drivers::interfaces::power_result(&new_state).is_none() {
                return Err(Error::invalid(format!(
                    "The requested action \"{new_state}\" can not be performed on node \"{}\" while it is in state \"{}\".",
                    h.node.uuid,
                    h.node.power_state.as_deref().unwrap_or("None")
                )));
            }
            let after = crate::nodes::driver(&self.drivers, &h.node)?
                .power()
                .set_power_state(NodeInfo::from(&h.node), &new_state, timeout_secs)
                .await
                .map_err(|why| {
                    Error::invalid(format!(
                        "Failed to change the power state of node {} to {new_state}: {why}",
                        h.node.uuid
                    ))
                })?;
            h.node.power_state = Some(after.clone());
            h.node.target_power_state = None;
            h.node.last_error = None;
            h.save().await?;
            tracing::info!(node = %h.node.uuid, action = %new_state, power_state = after, "power changed");
            Ok(())
        })
        .await
    }
    pub(crate) async fn change_node_boot_mode(
        &self,
        _ctx: &Context,
        req: ChangeNodeBootMode,
    ) -> Result<(), Error> {
        self.change_boot_mode(req.node, BootModeChange::Mode(req.target))
            .await
    }
    pub(crate) async fn change_node_secure_boot(
        &self,
        _ctx: &Context,
        req: ChangeNodeSecureBoot,
    ) -> Result<(), Error> {
        self.change_boot_mode(req.node, BootModeChange::SecureBoot(req.target))
            .await
    }

    /// Inserts a virtual medium (1.89), as upstream: checked under the node's lock (the
    /// management interface validated, a node in a power failure refused, 503), then
    /// done in the background holding the lock; what fails there (the driver cannot, the
    /// BMC refuses) is the node's `last_error` and an error in its history, the client
    /// having had its 204.
    pub(crate) async fn attach_virtual_media(
        &self,
        _ctx: &Context,
        req: AttachVirtualMedia,
    ) -> Result<(), Error> {
        let AttachVirtualMedia {
            node,
            device_type,
            image_url,
            image_download_source,
        } = req;
        let mut held = self.vmedia_start(&node, "attach").await?;
        let drivers = self.drivers.clone();
        self.work.spawn("virtual media attach", async move {
            let n = &mut held.node;
            let done = match vmedia(&drivers, n, "attach_virtual_media") {
                Err(e) => Err(e.to_string()),
                Ok(m) => m
                    .attach_virtual_media(NodeInfo::from(&*n), &device_type, &image_url)
                    .await
                    .map(|changes| changes.apply(n))
                    .map_err(|e| e.to_string()),
            };
            if done.is_ok() {
                tracing::info!(node = %n.uuid, device_type, source = image_download_source, "virtual media attached");
            }
            let failed = done.err().map(|e| {
                format!("Could not attach device {device_type} to node {}: {e}", n.uuid)
            });
            finish(held, failed).await;
        });
        Ok(())
    }

    /// Ejects virtual media (1.89): checked, then done in the background, as
    /// [`Management::attach_virtual_media`].
    pub(crate) async fn detach_virtual_media(
        &self,
        _ctx: &Context,
        req: DetachVirtualMedia,
    ) -> Result<(), Error> {
        let DetachVirtualMedia { node, device_types } = req;
        let mut held = self.vmedia_start(&node, "detach").await?;
        let drivers = self.drivers.clone();
        self.work.spawn("virtual media detach", async move {
            let n = &mut held.node;
            let done = match vmedia(&drivers, n, "detach_virtual_media") {
                Err(e) => Err(e.to_string()),
                Ok(m) => m
                    .detach_virtual_media(NodeInfo::from(&*n), device_types.as_deref())
                    .await
                    .map(|changes| changes.apply(n))
                    .map_err(|e| e.to_string()),
            };
            if done.is_ok() {
                tracing::info!(node = %n.uuid, ?device_types, "virtual media detached");
            }
            // Upstream's message names the list as Python shows it.
            let which = match &device_types {
                None => "None".to_string(),
                Some(t) => format!(
                    "[{}]",
                    t.iter()
                        .map(|d| format!("'{d}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let failed = done.err().map(|e| {
                format!(
                    "Could not detach device(s) {which} from node {}: {e}",
                    n.uuid
                )
            });
            finish(held, failed).await;
        });
        Ok(())
    }

    /// The synchronous half of a virtual media call: the node locked, its management
    /// interface validated, a power failure refused (upstream's 503), the last error
    /// cleared (a new operation starts).
    async fn vmedia_start(&self, node: &ironic_rpc::NodeRef, verb: &str) -> Result<Held, Error> {
        let mut held = self.locks.hold(node, Patience::Retry).await?;
        let checked = async {
            let n = &held.node;
            interface(n, "management")?;
            crate::nodes::driver(&self.drivers, n)?
                .validate_interface(NodeInfo::from(n), "management")
                .await
                .map_err(|e| Error::invalid(e.to_string()))?;
            if n.maintenance && n.fault.as_deref() == Some("power failure") {
                return Err(Error::Unavailable(format!(
                    "Unable to {verb} virtual media for node {} due to power failure state",
                    n.uuid
                )));
            }
            Ok(())
        }
        .await;
        if let Err(e) = checked {
            return held.bail(e).await;
        }
        held.node.last_error = None;
        if let Err(e) = held.save().await {
            return held.bail(e).await;
        }
        Ok(held)
    }

    /// The node's virtual media (1.93), as the hardware reports them.
    pub(crate) async fn get_virtual_media(
        &self,
        _ctx: &Context,
        req: GetVirtualMedia,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        let m = vmedia(&self.drivers, &n, "get_virtual_media")?;
        let mut doc = m
            .get_virtual_media(NodeInfo::from(&n))
            .await
            .map_err(|e| driver_error(&n, "get the virtual media", e))?;
        if let Some(iso) = ironic_drivers::boot::published_iso(&n.driver_internal_info) {
            mask_within(&mut doc, iso);
        }
        Ok(JsonDoc(doc))
    }

    pub(crate) async fn get_console_information(
        &self,
        _ctx: &Context,
        req: GetConsoleInformation,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        interface(&n, "console")?;
        if !n.console_enabled {
            return Err(Error::invalid(format!(
                "Console access is not enabled on node {}",
                n.uuid
            )));
        }
        // The fake console has nothing to connect to: upstream's empty answer.
        Ok(JsonDoc(json!({})))
    }

    pub(crate) async fn set_console_mode(
        &self,
        _ctx: &Context,
        req: SetConsoleMode,
    ) -> Result<(), Error> {
        let SetConsoleMode { node, enabled } = req;
        self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                interface(&h.node, "console")?;
                if h.node.console_enabled == enabled {
                    return Ok(());
                }
                h.node.console_enabled = enabled;
                h.save().await?;
                tracing::info!(node = %h.node.uuid, enabled, "console changed");
                Ok(())
            })
            .await
    }

    pub(crate) async fn get_boot_device(
        &self,
        _ctx: &Context,
        req: GetBootDevice,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        interface(&n, "management")?;
        let d = crate::nodes::driver(&self.drivers, &n)?
            .management()
            .get_boot_device(NodeInfo::from(&n))
            .await
            .map_err(|e| driver_error(&n, "get the boot device", e))?;
        Ok(JsonDoc(match d {
            Some(d) => json!({"boot_device": d.device, "persistent": d.persistent}),
            None => json!({"boot_device": null, "persistent": null}),
        }))
    }

    pub(crate) async fn get_supported_boot_devices(
        &self,
        _ctx: &Context,
        req: GetSupportedBootDevices,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        interface(&n, "management")?;
        let devices = crate::nodes::driver(&self.drivers, &n)?
            .management()
            .supported_boot_devices(NodeInfo::from(&n));
        Ok(JsonDoc(json!(devices)))
    }

    pub(crate) async fn set_boot_device(
        &self,
        _ctx: &Context,
        req: SetBootDevice,
    ) -> Result<(), Error> {
        let SetBootDevice {
            node,
            device,
            persistent,
        } = req;
        self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                interface(&h.node, "management")?;
                let management = crate::nodes::driver(&self.drivers, &h.node)?.management();
                if !management
                    .supported_boot_devices(NodeInfo::from(&h.node))
                    .contains(&device.as_str())
                {
                    return Err(Error::invalid(format!(
                        "Invalid boot device {device} specified."
                    )));
                }
                let changes = management
                    .set_boot_device(
                        NodeInfo::from(&h.node),
                        BootDevice {
                            device: device.clone(),
                            persistent,
                        },
                    )
                    .await
                    .map_err(|e| driver_error(&h.node, "set the boot device", e))?;
                if !changes.is_empty() {
                    changes.apply(&mut h.node);
                    h.save().await?;
                }
                tracing::info!(node = %h.node.uuid, device, persistent, "boot device set");
                Ok(())
            })
            .await
    }

    pub(crate) async fn inject_nmi(&self, _ctx: &Context, req: InjectNmi) -> Result<(), Error> {
        self.locks
            .with_lock(&req.node, Patience::Retry, async move |h| {
                interface(&h.node, "management")?;
                let management = crate::nodes::driver(&self.drivers, &h.node)?.management();
                if !management.can_inject_nmi() {
                    return Err(unsupported(&h.node.driver, "inject_nmi"));
                }
                management
                    .inject_nmi(NodeInfo::from(&h.node))
                    .await
                    .map_err(|e| driver_error(&h.node, "inject NMI", e))?;
                tracing::info!(node = %h.node.uuid, "NMI injected");
                Ok(())
            })
            .await
    }

    pub(crate) async fn get_supported_indicators(
        &self,
        _ctx: &Context,
        req: GetSupportedIndicators,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        interface(&n, "management")?;
        let management = crate::nodes::driver(&self.drivers, &n)?.management();
        let list = indicators(&n, management).await?;
        Ok(JsonDoc(serde_json::Value::Array(
            list.into_iter()
                .map(|i| {
                    json!({"component": i.component, "name": i.name,
                           "readonly": i.readonly, "states": i.states})
                })
                .collect(),
        )))
    }

    pub(crate) async fn get_indicator_state(
        &self,
        _ctx: &Context,
        req: GetIndicatorState,
    ) -> Result<JsonDoc, Error> {
        let n = crate::nodes::read(&self.db, &req.node).await?;
        interface(&n, "management")?;
        let management = crate::nodes::driver(&self.drivers, &n)?.management();
        let indicator = find_indicator(&n, management, &req.indicator).await?;
        let state = management
            .get_indicator_state(NodeInfo::from(&n), &indicator)
            .await
            .map_err(|e| driver_error(&n, "get the indicator state", e))?;
        Ok(JsonDoc(json!({"state": state})))
    }

    pub(crate) async fn set_indicator_state(
        &self,
        _ctx: &Context,
        req: SetIndicatorState,
    ) -> Result<(), Error> {
        let SetIndicatorState {
            node,
            indicator,
            state,
        } = req;
        self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                interface(&h.node, "management")?;
                parse_indicator(&indicator)?;
                let management = crate::nodes::driver(&self.drivers, &h.node)?.management();
                if !management.can_set_indicators() {
                    return Err(unsupported(&h.node.driver, "set_indicator_state"));
                }
                let found = find_indicator(&h.node, management, &indicator).await?;
                if found.readonly {
                    return Err(Error::invalid(format!(
                        "Indicator {indicator} of node {} is read-only.",
                        h.node.uuid
                    )));
                }
                let state = state.to_ascii_lowercase();
                if !found.states.contains(&state) {
                    return Err(Error::invalid(format!(
                        "Invalid state {state} for indicator {indicator}; it takes one of: {}.",
                        found.states.join(", ")
                    )));
                }
                let changes = management
                    .set_indicator_state(NodeInfo::from(&h.node), &found, &state)
                    .await
                    .map_err(|e| driver_error(&h.node, "set the indicator state", e))?;
                if !changes.is_empty() {
                    changes.apply(&mut h.node);
                    h.save().await?;
                }
                tracing::info!(node = %h.node.uuid, indicator, state, "indicator set");
                Ok(())
            })
            .await
    }

    /// 1.76: the boot mode or secure boot state, under the node's lock. An interface
    /// that cannot is 400 at once; what the hardware refuses is recorded in
    /// `last_error` (the API has answered 202, as upstream's), and the node keeps its
    /// recorded state. Nothing is sent when the hardware is already there.
    pub(crate) async fn change_boot_mode(
        &self,
        node: ironic_rpc::NodeRef,
        change: BootModeChange,
    ) -> Result<(), Error> {
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            interface(&h.node, "management")?;
            let management = crate::nodes::driver(&self.drivers, &h.node)?.management();
            let what = change.operation();
            if !management.can_change_boot_mode() {
                return Err(unsupported(&h.node.driver, what));
            }
            let info = NodeInfo::from(&h.node);
            let outcome = match &change {
                BootModeChange::Mode(mode) => match management.get_boot_mode(info).await {
                    Ok(Some(current)) if current == *mode => Ok(None),
                    _ => management.set_boot_mode(info, mode).await.map(Some),
                },
                BootModeChange::SecureBoot(on) => match management.get_secure_boot(info).await {
                    Ok(Some(current)) if current == *on => Ok(None),
                    _ => management.set_secure_boot(info, *on).await.map(Some),
                },
            };
            h.node.last_error = None;
            match outcome {
                Ok(changes) => {
                    if let Some(changes) = changes {
                        changes.apply(&mut h.node);
                    }
                    match &change {
                        BootModeChange::Mode(mode) => h.node.boot_mode = Some(mode.clone()),
                        BootModeChange::SecureBoot(on) => h.node.secure_boot = Some(*on),
                    }
                    tracing::info!(node = %h.node.uuid, change = %change, "boot mode changed");
                }
                Err(e) => {
                    tracing::warn!(node = %h.node.uuid, change = %change, error = %ironic_model::secrets::log_safe(&e.to_string()), "boot mode change failed");
                    h.node.last_error = Some(format!("Failed to change {change}: {e}"));
                }
            }
            // The history records a failure (`Held::save`).
            h.save().await?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn set_target_raid_config(
        &self,
        _ctx: &Context,
        req: SetTargetRaidConfig,
    ) -> Result<(), Error> {
        let SetTargetRaidConfig {
            node,
            target_raid_config,
        } = req;
        self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                interface(&h.node, "raid")?;
                h.node.target_raid_config =
                    target_raid_config.as_object().cloned().unwrap_or_default();
                h.save().await?;
                tracing::info!(node = %h.node.uuid, "target RAID configuration set");
                Ok(())
            })
            .await
    }

    pub(crate) async fn vendor_passthru(
        &self,
        _ctx: &Context,
        req: VendorPassthru,
    ) -> Result<JsonDoc, Error> {
        let VendorPassthru {
            node,
            driver,
            method,
            http_method,
            info,
        } = req;
        let run = |methods: &'static [ironic_catalog::vendor::VendorMethod]| {
            let m = methods
                .iter()
                .find(|m| m.name == method)
                .ok_or_else(|| Error::invalid(format!("No handler for method {method}")))?;
            if !m.http_methods.contains(&http_method.as_str()) {
                return Err(Error::invalid(format!(
                    "The method {method} does not support HTTP {http_method}"
                )));
            }
            // The fake `echo`: what it was given.
            Ok(JsonDoc(json!({"return": info, "async": m.is_async})))
        };
        match node {
            Some(node) => {
                self.locks
                    .with_lock(&node, Patience::Retry, async move |h| {
                        let vendor = interface(&h.node, "vendor")?;
                        run(node_vendor_methods(vendor))
                    })
                    .await
            }
            None => {
                let hw = self.drivers.get(&driver).ok_or_else(|| {
                    Error::NotFound(format!("Driver {driver} could not be found."))
                })?;
                run(driver_vendor_methods(hw))
            }
        }
    }
}

/// The end of background work on a held node: `failed` becomes its `last_error`
/// (which its history records), the node is saved and its lock given back.
async fn finish(mut held: Held, failed: Option<String>) {
    if let Some(msg) = failed {
        tracing::error!(node = %held.node.uuid, "{}", ironic_model::secrets::log_safe(&msg));
        held.node.last_error = Some(msg);
    }
    let uuid = held.node.uuid.clone();
    if let Err(e) = held.save_and_release().await {
        tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
    }
}

async fn indicators(
    node: &Node,
    management: &dyn ManagementInterface,
) -> Result<Vec<Indicator>, Error> {
    management
        .supported_indicators(NodeInfo::from(node))
        .await
        .map_err(|e| driver_error(node, "get the supported indicators", e))?
        .ok_or_else(|| unsupported(&node.driver, "get_supported_indicators"))
}

/// `<name>@<component>` as (name, component); upstream's 400 otherwise.
fn parse_indicator(unique: &str) -> Result<(&str, &str), Error> {
    unique
        .split_once('@')
        .ok_or_else(|| Error::invalid(format!("Malformed indicator name \"{unique}\"")))
}

/// `<name>@<component>` among the node's indicators, with upstream's errors.
async fn find_indicator(
    node: &Node,
    management: &dyn ManagementInterface,
    unique: &str,
) -> Result<Indicator, Error> {
    let (name, component) = parse_indicator(unique)?;
    let list = indicators(node, management).await?;
    if !list.iter().any(|i| i.component == component) {
        return Err(Error::invalid(format!(
            "Invalid component {component} specified."
        )));
    }
    list.into_iter()
        .find(|i| i.component == component && i.name == name)
        .ok_or_else(|| Error::invalid(format!("Invalid indicator {name} specified.")))
}

/// A change of 1.76: the boot mode, or the secure boot state.
#[derive(Debug, Clone)]
pub(crate) enum BootModeChange {
    Mode(String),
    SecureBoot(bool),
}

impl BootModeChange {
    fn operation(&self) -> &'static str {
        match self {
            BootModeChange::Mode(_) => "set_boot_mode",
            BootModeChange::SecureBoot(_) => "set_secure_boot_state",
        }
    }
}

/// As upstream's `last_error` words it: "boot mode to 'uefi'", "secure_boot state to
/// 'True'".
impl std::fmt::Display for BootModeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BootModeChange::Mode(m) => write!(f, "boot mode to '{m}'"),
            BootModeChange::SecureBoot(on) => write!(
                f,
                "secure_boot state to '{}'",
                if *on { "True" } else { "False" }
            ),
        }
    }
}

/// `doc` with `secret` masked in every string (the BMC shows the URL of the ramdisk's
/// boot ISO, whose name guards the agent's token inside, to the node's readers).
fn mask_within(doc: &mut serde_json::Value, secret: &str) {
    use serde_json::Value;
    match doc {
        Value::String(s) if s.contains(secret) => {
            *s = s.replace(secret, ironic_model::secrets::MASK);
        }
        Value::Array(a) => a.iter_mut().for_each(|v| mask_within(v, secret)),
        Value::Object(o) => o.values_mut().for_each(|v| mask_within(v, secret)),
        _ => {}
    }
}
