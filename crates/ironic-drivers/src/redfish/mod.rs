//! The `redfish` hardware type (`docs/drivers.md`): a node's BMC speaks DMTF Redfish
//! at `driver_info.redfish_address`. Power (reset actions, waited for until the BMC
//! shows the new state) and management (boot device and boot mode through the
//! system's boot source override) are driven over HTTP(S) with basic authentication.
//!
//! `driver_info`: `redfish_address` (required; `https://` by default), `redfish_system_id`
//! (the system's id or `/redfish/v1/Systems/<id>` path; optional when the BMC has one
//! system), `redfish_username`, `redfish_password` (masked in every answer),
//! `redfish_verify_ca` (true, false, or a CA bundle path), `redfish_auth_type`
//! (`basic` or `auto`; sessions are not used yet).

pub mod client;

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::HardwareType;
use crate::interfaces::{
    BiosInterface, BootDevice, BootInterface, DeployInterface, Driver, DriverError,
    DriverErrorKind, DriverFuture, Indicator, Interface, ManagementInterface, NodeChanges,
    NodeInfo, PowerInterface, RaidInterface, driver_info_text,
};
use crate::outbound::{Origin, shown_url};
use client::{Bmc, Http, RfError, Settings};

pub use ironic_catalog::REDFISH;

/// How the HTTPS certificate of a BMC is checked (`redfish_verify_ca`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Verify {
    WebRoots,
    No,
    CaFile(String),
}

/// What a node's `driver_info` says about its BMC (`Debug` shows the password masked).
#[derive(Clone, PartialEq, Eq)]
pub struct RedfishInfo {
    pub origin: Origin,
    pub system_id: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    verify: Verify,
}

impl std::fmt::Debug for RedfishInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishInfo")
            .field("origin", &self.origin)
            .field("system_id", &self.system_id)
            .field("username", &self.username)
            .field(
                "password",
                &self.password.as_ref().map(|_| ironic_model::secrets::MASK),
            )
            .field("verify", &self.verify)
            .finish()
    }
}

/// Reads and checks a node's `driver_info` (the messages name the field).
pub fn parse_info(node: NodeInfo<'_>) -> Result<RedfishInfo, DriverError> {
    let di = node.driver_info;
    let Some(address) = driver_info_text(di, "redfish_address")? else {
        return Err(DriverError::invalid(
            "Missing the following Redfish properties in node's driver_info: redfish_address",
        ));
    };
    let origin = Origin::parse(address, "https")
        .map_err(|e| DriverError::invalid(format!("Invalid Redfish address {e}")))?;
    let system_id = driver_info_text(di, "redfish_system_id")?.map(str::to_owned);
    if let Some(id) = &system_id
        && (id.contains("..") || id.contains('?') || id.contains('#'))
    {
        return Err(DriverError::invalid(format!(
            "Invalid Redfish system id {id:?}"
        )));
    }
    let verify = match di.get("redfish_verify_ca") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => Verify::WebRoots,
        Some(Value::Bool(false)) => Verify::No,
        Some(Value::String(s)) => match ironic_model::node::parse_bool_word(s) {
            Some(true) => Verify::WebRoots,
            Some(false) => Verify::No,
            // Canonical, so that spellings of one file (`/etc//ssl/x`) share a client.
            None if std::path::Path::new(s).is_file() => Verify::CaFile(
                std::fs::canonicalize(s)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| s.clone()),
            ),
            None => {
                return Err(DriverError::invalid(format!(
                    "Invalid value {s:?} for redfish_verify_ca: a boolean or the path of an existing CA bundle"
                )));
            }
        },
        Some(other) => {
            return Err(DriverError::invalid(format!(
                "Invalid value {other} for redfish_verify_ca: a boolean or the path of an existing CA bundle"
            )));
        }
    };
    match driver_info_text(di, "redfish_auth_type")? {
        None | Some("basic" | "auto") => {}
        Some(other) => {
            return Err(DriverError::invalid(format!(
                "Invalid redfish_auth_type {other:?}: basic and auto are supported"
            )));
        }
    }
    Ok(RedfishInfo {
        origin,
        system_id,
        username: driver_info_text(di, "redfish_username")?.map(str::to_owned),
        password: driver_info_text(di, "redfish_password")?.map(str::to_owned),
        verify,
    })
}

fn rf(e: RfError) -> DriverError {
    let kind = match &e {
        RfError::Refused(_) => DriverErrorKind::Invalid,
        _ => DriverErrorKind::Failed,
    };
    DriverError::new(kind, e.to_string())
}

/// The most HTTP clients kept (one per CA bundle that nodes name, and two more).
const MAX_CLIENTS: usize = 64;

/// The driver of one process's [`crate::Registry`]: its `[redfish]` settings and one
/// HTTP client per TLS setting, shared by every node.
pub struct Redfish {
    iface: Iface,
}

/// What every interface of the driver works with.
struct Core {
    settings: Settings,
    clients: Mutex<HashMap<Verify, Http>>,
}

/// Every interface of the type (they share the BMC connection logic).
struct Iface(std::sync::Arc<Core>);

impl Redfish {
    pub fn new(settings: Settings) -> Redfish {
        Redfish {
            iface: Iface(std::sync::Arc::new(Core {
                settings,
                clients: Mutex::new(HashMap::new()),
            })),
        }
    }
}

impl Core {
    fn http(&self, v: &Verify) -> Result<Http, DriverError> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| DriverError::failed("Redfish client cache poisoned"))?;
        if let Some(c) = clients.get(v) {
            return Ok(c.clone());
        }
        // One client per CA bundle named by some node: bounded, whatever the nodes name.
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|k, _| !matches!(k, Verify::CaFile(_)));
        }
        let tls = match v {
            Verify::WebRoots => crate::tls::client_config(false, None),
            Verify::No => crate::tls::client_config(true, None),
            Verify::CaFile(p) => crate::tls::client_config(false, Some(p)),
        }
        .map_err(|e| DriverError::invalid(format!("redfish_verify_ca: {e}")))?;
        let c = crate::tls::https_client(tls, Some(self.settings.request_timeout));
        clients.insert(v.clone(), c.clone());
        Ok(c)
    }
}

/// A node's BMC, ready for calls.
struct Conn {
    info: RedfishInfo,
    http: Http,
}

impl Conn {
    fn bmc<'a>(&'a self, settings: &'a Settings) -> Bmc<'a> {
        Bmc {
            origin: self.info.origin.clone(),
            username: self.info.username.as_deref(),
            password: self.info.password.as_deref(),
            http: &self.http,
            settings,
        }
    }
}

/// The path of the node's system: its `redfish_system_id`, else the only member of
/// `/redfish/v1/Systems`.
async fn system_path(bmc: &Bmc<'_>, info: &RedfishInfo) -> Result<String, DriverError> {
    if let Some(id) = &info.system_id {
        return Ok(if id.starts_with('/') {
            id.clone()
        } else {
            format!("/redfish/v1/Systems/{id}")
        });
    }
    let systems = bmc.get("/redfish/v1/Systems").await.map_err(rf)?;
    let members: Vec<&str> = systems
        .get("Members")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("@odata.id").and_then(Value::as_str))
        .collect();
    match members.as_slice() {
        [one] => Ok((*one).to_string()),
        [] => Err(DriverError::failed(format!(
            "The Redfish BMC at {} has no systems",
            bmc.origin.base()
        ))),
        _ => Err(DriverError::invalid(format!(
            "The Redfish BMC at {} has {} systems: redfish_system_id must name one",
            bmc.origin.base(),
            members.len()
        ))),
    }
}

/// Redfish `PowerState` as Ironic's (transitional states as where they lead).
fn map_power(s: &str) -> Option<&'static str> {
    match s {
        "On" | "PoweringOn" | "Paused" => Some("power on"),
        "Off" | "PoweringOff" => Some("power off"),
        _ => None,
    }
}

/// The reset action and the state it leads to.
fn reset_for(target: &str) -> Option<(&'static str, &'static str)> {
    match target {
        "power on" => Some(("On", "power on")),
        "power off" => Some(("ForceOff", "power off")),
        "soft power off" => Some(("GracefulShutdown", "power off")),
        "rebooting" => Some(("ForceRestart", "power on")),
        "soft rebooting" => Some(("GracefulRestart", "power on")),
        _ => None,
    }
}

/// Ironic's boot devices and Redfish's `BootSourceOverrideTarget` values.
const BOOT_DEVICES: &[(&str, &str)] = &[
    ("pxe", "Pxe"),
    ("disk", "Hdd"),
    ("cdrom", "Cd"),
    ("bios", "BiosSetup"),
    ("floppy", "Floppy"),
    ("usb", "Usb"),
    ("uefi-http", "UefiHttp"),
];

impl Core {
    fn conn(&self, node: NodeInfo<'_>) -> Result<Conn, DriverError> {
        let info = parse_info(node)?;
        let http = self.http(&info.verify)?;
        Ok(Conn { info, http })
    }

    async fn system(&self, c: &Conn) -> Result<(String, Value), DriverError> {
        let bmc = c.bmc(&self.settings);
        let path = system_path(&bmc, &c.info).await?;
        let sys = bmc.get(&path).await.map_err(rf)?;
        Ok((path, sys))
    }

    async fn power_state(&self, node: NodeInfo<'_>) -> Result<String, DriverError> {
        let c = self.conn(node)?;
        let (_, sys) = self.system(&c).await?;
        let s = sys.get("PowerState").and_then(Value::as_str).unwrap_or("");
        map_power(s).map(str::to_owned).ok_or_else(|| {
            DriverError::failed(format!(
                "The Redfish BMC at {} reports an unknown power state {s:?}",
                c.info.origin.base()
            ))
        })
    }

    async fn set_power(
        &self,
        node: NodeInfo<'_>,
        target: &str,
        timeout: Option<u32>,
    ) -> Result<String, DriverError> {
        let Some((reset, expect)) = reset_for(target) else {
            return Err(DriverError::invalid(format!(
                "The Redfish power interface cannot set {target:?}"
            )));
        };
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let (path, sys) = self.system(&c).await?;
        let current = sys
            .get("PowerState")
            .and_then(Value::as_str)
            .and_then(map_power);
        // Already there: nothing to do (upstream's; a reboot always resets).
        if matches!(target, "power on" | "power off" | "soft power off") && current == Some(expect)
        {
            return Ok(expect.to_string());
        }
        // A reboot of a node that is off is a power on.
        let reset = if target.contains("reboot") && current == Some("power off") {
            "On"
        } else {
            reset
        };
        let action = action(&sys, "#ComputerSystem.Reset", &path);
        bmc.call("POST", &action, Some(&json!({"ResetType": reset})))
            .await
            .map_err(|e| {
                let msg = format!(
                    "Failed to set the power state of node {} to {target}: {e}",
                    node.uuid
                );
                rf(e).context(msg)
            })?;
        let wait = timeout
            .map(|t| std::time::Duration::from_secs(u64::from(t).min(POWER_WAIT_LIMIT)))
            .unwrap_or(self.settings.power_state_change_timeout);
        let deadline = tokio::time::Instant::now() + wait;
        // Bounded by the deadline; a reboot shows as "on" at once on most BMCs.
        loop {
            let sys = bmc.get(&path).await.map_err(rf)?;
            let now = sys.get("PowerState").and_then(Value::as_str).unwrap_or("");
            if now == if expect == "power on" { "On" } else { "Off" } {
                return Ok(expect.to_string());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DriverError::failed(format!(
                    "Timeout reached while waiting for the Redfish BMC at {} to power node {} {} (it reports {now:?} after {:?})",
                    c.info.origin.base(),
                    node.uuid,
                    if expect == "power on" { "on" } else { "off" },
                    wait
                )));
            }
            tokio::time::sleep(self.settings.power_poll_interval).await;
        }
    }

    async fn boot_device(&self, node: NodeInfo<'_>) -> Result<Option<BootDevice>, DriverError> {
        let c = self.conn(node)?;
        let (_, sys) = self.system(&c).await?;
        let boot = sys.get("Boot").cloned().unwrap_or(Value::Null);
        let target = boot.get("BootSourceOverrideTarget").and_then(Value::as_str);
        let enabled = boot
            .get("BootSourceOverrideEnabled")
            .and_then(Value::as_str);
        Ok(match (target, enabled) {
            (_, Some("Disabled")) | (None, _) | (Some("None"), _) => None,
            (Some(t), e) => BOOT_DEVICES
                .iter()
                .find(|(_, r)| *r == t)
                .map(|(d, _)| BootDevice {
                    device: (*d).to_string(),
                    persistent: e == Some("Continuous"),
                }),
        })
    }

    async fn set_boot(&self, node: NodeInfo<'_>, device: &BootDevice) -> Result<(), DriverError> {
        let Some((_, target)) = BOOT_DEVICES.iter().find(|(d, _)| *d == device.device) else {
            return Err(DriverError::invalid(format!(
                "Invalid boot device {} specified, valid devices are: {}",
                device.device,
                BOOT_DEVICES
                    .iter()
                    .map(|(d, _)| *d)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let path = system_path(&bmc, &c.info).await?;
        let body = json!({"Boot": {
            "BootSourceOverrideTarget": target,
            "BootSourceOverrideEnabled": if device.persistent { "Continuous" } else { "Once" },
        }});
        bmc.call("PATCH", &path, Some(&body)).await.map_err(|e| {
            let msg = format!("Failed to set the boot device of node {}: {e}", node.uuid);
            rf(e).context(msg)
        })?;
        Ok(())
    }

    async fn boot_mode(&self, node: NodeInfo<'_>) -> Result<Option<String>, DriverError> {
        let c = self.conn(node)?;
        let (_, sys) = self.system(&c).await?;
        Ok(
            match sys
                .pointer("/Boot/BootSourceOverrideMode")
                .and_then(Value::as_str)
            {
                Some("UEFI") => Some("uefi".into()),
                Some("Legacy") => Some("bios".into()),
                _ => None,
            },
        )
    }

    async fn set_mode(&self, node: NodeInfo<'_>, mode: &str) -> Result<(), DriverError> {
        let m = match mode {
            "uefi" => "UEFI",
            "bios" => "Legacy",
            other => {
                return Err(DriverError::invalid(format!(
                    "Invalid boot mode {other}: uefi or bios"
                )));
            }
        };
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let path = system_path(&bmc, &c.info).await?;
        bmc.call(
            "PATCH",
            &path,
            Some(&json!({"Boot": {"BootSourceOverrideMode": m}})),
        )
        .await
        .map_err(|e| {
            let msg = format!("Failed to set the boot mode of node {}: {e}", node.uuid);
            rf(e).context(msg)
        })?;
        Ok(())
    }
}

/// Redfish `IndicatorLED` values and upstream's indicator states.
const LED_STATES: &[(&str, &str)] = &[("Lit", "on"), ("Blinking", "blinking"), ("Off", "off")];

/// An indicator's id: the resource's `UUID`, else its `Id` (upstream names them by UUID).
fn resource_id(r: &Value) -> Option<String> {
    r.get("UUID")
        .or_else(|| r.get("Id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

impl Core {
    /// The system's secure boot resource, if it has one: (path, body).
    async fn secure_boot_resource(&self, c: &Conn) -> Result<Option<(String, Value)>, DriverError> {
        let (_, sys) = self.system(c).await?;
        let Some(link) = sys.pointer("/SecureBoot/@odata.id").and_then(Value::as_str) else {
            return Ok(None);
        };
        let bmc = c.bmc(&self.settings);
        let body = bmc.get(link).await.map_err(rf)?;
        Ok(Some((link.to_string(), body)))
    }

    async fn secure_boot(&self, node: NodeInfo<'_>) -> Result<Option<bool>, DriverError> {
        let c = self.conn(node)?;
        Ok(self
            .secure_boot_resource(&c)
            .await?
            .and_then(|(_, b)| b.get("SecureBootEnable").and_then(Value::as_bool)))
    }

    async fn set_secure(&self, node: NodeInfo<'_>, on: bool) -> Result<(), DriverError> {
        let c = self.conn(node)?;
        let Some((path, _)) = self.secure_boot_resource(&c).await? else {
            return Err(DriverError::invalid(format!(
                "The Redfish BMC at {} offers no secure boot resource for node {}",
                c.info.origin.base(),
                node.uuid
            )));
        };
        let bmc = c.bmc(&self.settings);
        bmc.call("PATCH", &path, Some(&json!({"SecureBootEnable": on})))
            .await
            .map_err(|e| {
                let msg = format!("Failed to set secure boot of node {}: {e}", node.uuid);
                rf(e).context(msg)
            })?;
        Ok(())
    }

    /// The system's and its chassis' LEDs, with the path of each: upstream's
    /// `system` and `chassis` indicators, named by the resource's UUID.
    async fn leds(&self, c: &Conn) -> Result<Vec<(Indicator, String)>, DriverError> {
        let (path, sys) = self.system(c).await?;
        let bmc = c.bmc(&self.settings);
        let states: Vec<String> = ["blinking", "off", "on"].map(String::from).to_vec();
        let mut out = Vec::new();
        if sys.get("IndicatorLED").is_some_and(Value::is_string)
            && let Some(id) = resource_id(&sys)
        {
            let i = Indicator {
                component: "system".into(),
                name: id,
                readonly: false,
                states: states.clone(),
            };
            out.push((i, path));
        }
        let chassis: Vec<String> = sys
            .pointer("/Links/Chassis")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("@odata.id").and_then(Value::as_str))
            .map(str::to_owned)
            .take(16)
            .collect();
        for link in chassis {
            // A chassis the BMC cannot show has no indicator to offer.
            let Ok(ch) = bmc.get(&link).await else {
                continue;
            };
            if ch.get("IndicatorLED").is_some_and(Value::is_string)
                && let Some(id) = resource_id(&ch)
            {
                let i = Indicator {
                    component: "chassis".into(),
                    name: id,
                    readonly: false,
                    states: states.clone(),
                };
                out.push((i, link));
            }
        }
        Ok(out)
    }

    async fn led_path(&self, c: &Conn, indicator: &Indicator) -> Result<String, DriverError> {
        self.leds(c)
            .await?
            .into_iter()
            .find(|(i, _)| i.component == indicator.component && i.name == indicator.name)
            .map(|(_, p)| p)
            .ok_or_else(|| {
                DriverError::invalid(format!(
                    "Unknown indicator {}@{}",
                    indicator.name, indicator.component
                ))
            })
    }

    async fn led_state(
        &self,
        node: NodeInfo<'_>,
        indicator: &Indicator,
    ) -> Result<String, DriverError> {
        let c = self.conn(node)?;
        let path = self.led_path(&c, indicator).await?;
        let r = c.bmc(&self.settings).get(&path).await.map_err(rf)?;
        let led = r.get("IndicatorLED").and_then(Value::as_str).unwrap_or("");
        Ok(LED_STATES
            .iter()
            .find(|(l, _)| *l == led)
            .map_or("unknown", |(_, s)| *s)
            .to_string())
    }

    async fn set_led(
        &self,
        node: NodeInfo<'_>,
        indicator: &Indicator,
        state: &str,
    ) -> Result<(), DriverError> {
        let Some((led, _)) = LED_STATES.iter().find(|(_, s)| *s == state) else {
            return Err(DriverError::invalid(format!(
                "Invalid indicator state {state}: on, off or blinking"
            )));
        };
        let c = self.conn(node)?;
        let path = self.led_path(&c, indicator).await?;
        c.bmc(&self.settings)
            .call("PATCH", &path, Some(&json!({"IndicatorLED": led})))
            .await
            .map_err(|e| {
                let msg = format!(
                    "Failed to set indicator {}@{} of node {}: {e}",
                    indicator.name, indicator.component, node.uuid
                );
                rf(e).context(msg)
            })?;
        Ok(())
    }

    /// A diagnostic interrupt through the system's reset action.
    async fn nmi(&self, node: NodeInfo<'_>) -> Result<(), DriverError> {
        let c = self.conn(node)?;
        let (path, sys) = self.system(&c).await?;
        let action = action(&sys, "#ComputerSystem.Reset", &path);
        c.bmc(&self.settings)
            .call("POST", &action, Some(&json!({"ResetType": "Nmi"})))
            .await
            .map_err(|e| {
                let msg = format!("Failed to inject an NMI into node {}: {e}", node.uuid);
                rf(e).context(msg)
            })?;
        Ok(())
    }
}

/// A BIOS attribute's value as text (Redfish gives strings, numbers, booleans).
fn attribute_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

impl Core {
    /// The system's `Bios` resource: (path, body); a BMC without one is a clear error.
    async fn bios(&self, c: &Conn) -> Result<(String, Value), DriverError> {
        let (_, sys) = self.system(c).await?;
        let Some(link) = sys.pointer("/Bios/@odata.id").and_then(Value::as_str) else {
            return Err(DriverError::invalid(format!(
                "The Redfish BMC at {} offers no BIOS resource",
                c.info.origin.base()
            )));
        };
        let body = c.bmc(&self.settings).get(link).await.map_err(rf)?;
        Ok((link.to_string(), body))
    }

    async fn bios_attributes(
        &self,
        node: NodeInfo<'_>,
    ) -> Result<crate::interfaces::BiosSettings, DriverError> {
        let c = self.conn(node)?;
        let (_, bios) = self.bios(&c).await?;
        let mut out: Vec<(String, Option<String>)> = bios
            .get("Attributes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), attribute_text(v)))
            .collect();
        out.sort();
        Ok(out)
    }

    /// `bios.apply_configuration`: the settings go to the BIOS's pending settings
    /// object (`@Redfish.Settings`), or the BIOS itself when it has none; a node that
    /// is on is rebooted so that they apply.
    async fn apply_bios(&self, node: NodeInfo<'_>, args: &Value) -> Result<(), DriverError> {
        let bad = || {
            DriverError::invalid(
                "bios.apply_configuration needs settings: a list of {\"name\": ..., \"value\": ...}",
            )
        };
        let list = args
            .get("settings")
            .and_then(Value::as_array)
            .ok_or_else(bad)?;
        let mut attributes = serde_json::Map::new();
        for s in list {
            let name = s.get("name").and_then(Value::as_str).ok_or_else(bad)?;
            let value = s.get("value").cloned().ok_or_else(bad)?;
            attributes.insert(name.to_string(), value);
        }
        if attributes.is_empty() {
            return Err(bad());
        }
        let c = self.conn(node)?;
        let (path, bios) = self.bios(&c).await?;
        let target = bios
            .pointer("/@Redfish.Settings/SettingsObject/@odata.id")
            .and_then(Value::as_str)
            .map_or(path, str::to_owned);
        c.bmc(&self.settings)
            .call("PATCH", &target, Some(&json!({"Attributes": attributes})))
            .await
            .map_err(|e| {
                let msg = format!("Failed to apply BIOS settings to node {}: {e}", node.uuid);
                rf(e).context(msg)
            })?;
        self.reboot_if_on(node).await
    }

    /// `bios.factory_reset`: the BIOS's `#Bios.ResetBios` action, then a reboot of a
    /// node that is on.
    async fn reset_bios(&self, node: NodeInfo<'_>) -> Result<(), DriverError> {
        let c = self.conn(node)?;
        let (path, bios) = self.bios(&c).await?;
        let action = action(&bios, "#Bios.ResetBios", &path);
        c.bmc(&self.settings)
            .call("POST", &action, Some(&json!({})))
            .await
            .map_err(|e| {
                let msg = format!("Failed to reset the BIOS of node {}: {e}", node.uuid);
                rf(e).context(msg)
            })?;
        self.reboot_if_on(node).await
    }

    async fn reboot_if_on(&self, node: NodeInfo<'_>) -> Result<(), DriverError> {
        if self.power_state(node).await? == "power on" {
            self.set_power(node, "rebooting", None).await?;
        }
        Ok(())
    }
}

/// Redfish `InstructionSet` as upstream's architecture names.
fn architecture(instruction_set: &str) -> Option<&'static str> {
    match instruction_set {
        "x86-64" => Some("x86_64"),
        "x86" => Some("i686"),
        "ARM-A64" => Some("aarch64"),
        "ARM-A32" => Some("arm"),
        "IA-64" => Some("ia64"),
        "MIPS32" => Some("mips"),
        "MIPS64" => Some("mips64"),
        "PowerISA" => Some("ppc64le"),
        _ => None,
    }
}

impl Core {
    /// The members of the collection `link` points at, each read (a member that cannot be
    /// read is left out). `None` when the collection itself cannot be read: many BMCs
    /// (and the emulator) lack some of them.
    async fn members(&self, bmc: &Bmc<'_>, sys: &Value, link: &str) -> Option<Vec<Value>> {
        let path = sys.get(link)?.get("@odata.id")?.as_str()?;
        let coll = match bmc.get(path).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(bmc = %bmc.origin.base(), %link, "not read during inspection: {}", ironic_model::secrets::log_safe(&e.to_string()));
                return None;
            }
        };
        let mut out = Vec::new();
        // Bounded by what the BMC lists, at most 256 members.
        for m in coll
            .get("Members")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(256)
        {
            if let Some(p) = m.get("@odata.id").and_then(Value::as_str)
                && let Ok(v) = bmc.get(p).await
            {
                out.push(v);
            }
        }
        Some(out)
    }

    /// Out-of-band inspection: the system, its processors, memory, storage and NICs as
    /// upstream's inventory (what the BMC does not report is left out, not guessed).
    async fn inspect(
        &self,
        node: NodeInfo<'_>,
    ) -> Result<crate::interfaces::Inspection, DriverError> {
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let (_, sys) = self.system(&c).await.map_err(|e| {
            let msg = format!(
                "Failed to inspect node {} through its Redfish BMC: {e}",
                node.uuid
            );
            e.context(msg)
        })?;
        let mut inv = serde_json::Map::new();
        let mut cpu = serde_json::Map::new();
        if let Some(n) = sys
            .pointer("/ProcessorSummary/Count")
            .and_then(Value::as_u64)
        {
            cpu.insert("count".into(), json!(n));
        }
        if let Some(m) = sys
            .pointer("/ProcessorSummary/Model")
            .and_then(Value::as_str)
        {
            cpu.insert("model_name".into(), json!(m));
        }
        if let Some(procs) = self.members(&bmc, &sys, "Processors").await {
            let cpus: Vec<&Value> = procs
                .iter()
                .filter(|p| {
                    p.get("ProcessorType")
                        .and_then(Value::as_str)
                        .is_none_or(|t| t == "CPU")
                })
                .collect();
            if !cpu.contains_key("count") && !cpus.is_empty() {
                let threads: u64 = cpus
                    .iter()
                    .filter_map(|p| p.get("TotalThreads").and_then(Value::as_u64))
                    .fold(0u64, u64::saturating_add);
                cpu.insert(
                    "count".into(),
                    json!(if threads > 0 {
                        threads
                    } else {
                        cpus.len() as u64
                    }),
                );
            }
            if let Some(a) = cpus.iter().find_map(|p| {
                p.get("InstructionSet")
                    .and_then(Value::as_str)
                    .and_then(architecture)
            }) {
                cpu.insert("architecture".into(), json!(a));
            }
        }
        if !cpu.is_empty() {
            inv.insert("cpu".into(), Value::Object(cpu));
        }
        if let Some(gib) = sys
            .pointer("/MemorySummary/TotalSystemMemoryGiB")
            .and_then(Value::as_f64)
        {
            let mb = (gib.clamp(0.0, 1e12) * 1024.0).round() as u64;
            inv.insert(
                "memory".into(),
                json!({"physical_mb": mb, "total": mb.saturating_mul(1024 * 1024)}),
            );
        }
        let mut disks = Vec::new();
        if let Some(storages) = self.members(&bmc, &sys, "Storage").await {
            for st in &storages {
                for d in st
                    .get("Drives")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .take(256)
                {
                    if let Some(p) = d.get("@odata.id").and_then(Value::as_str)
                        && let Ok(drive) = bmc.get(p).await
                    {
                        disks.push(json!({"name": drive.get("Name").cloned().unwrap_or(Value::Null),
                                          "size": drive.get("CapacityBytes").cloned().unwrap_or(json!(0))}));
                    }
                }
            }
        }
        if disks.is_empty()
            && let Some(simple) = self.members(&bmc, &sys, "SimpleStorage").await
        {
            for st in &simple {
                for d in st
                    .get("Devices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    disks.push(
                        json!({"name": d.get("Name").cloned().unwrap_or(Value::Null),
                                      "size": d.get("CapacityBytes").cloned().unwrap_or(json!(0))}),
                    );
                }
            }
        }
        if !disks.is_empty() {
            inv.insert("disks".into(), Value::Array(disks));
        }
        let mut interfaces = Vec::new();
        for nic in self
            .members(&bmc, &sys, "EthernetInterfaces")
            .await
            .unwrap_or_default()
        {
            let mac = nic
                .get("MACAddress")
                .or_else(|| nic.get("PermanentMACAddress"))
                .and_then(Value::as_str);
            if let Some(mac) = mac {
                interfaces.push(
                    json!({"name": nic.get("Id").cloned().unwrap_or(Value::Null),
                                       "mac_address": mac.to_ascii_lowercase()}),
                );
            }
        }
        inv.insert("interfaces".into(), Value::Array(interfaces));
        let vendor: serde_json::Map<String, Value> = [
            ("manufacturer", "Manufacturer"),
            ("product_name", "Model"),
            ("serial_number", "SerialNumber"),
        ]
        .iter()
        .filter_map(|(k, r)| {
            sys.get(*r)
                .filter(|v| v.is_string())
                .map(|v| ((*k).to_string(), v.clone()))
        })
        .collect();
        if !vendor.is_empty() {
            inv.insert("system_vendor".into(), Value::Object(vendor));
        }
        match sys
            .pointer("/Boot/BootSourceOverrideMode")
            .and_then(Value::as_str)
        {
            Some("UEFI") => {
                inv.insert("boot".into(), json!({"current_boot_mode": "uefi"}));
            }
            Some("Legacy") => {
                inv.insert("boot".into(), json!({"current_boot_mode": "bios"}));
            }
            _ => {}
        }
        inv.insert("bmc_address".into(), json!(bmc.origin.host()));
        Ok(crate::interfaces::Inspection {
            inventory: inv,
            plugin_data: serde_json::Map::new(),
        })
    }
}

/// Ironic's virtual device types and the Redfish `MediaTypes` that serve them.
fn media_types_for(device_type: &str) -> &'static [&'static str] {
    match device_type {
        "cdrom" => &["CD", "DVD"],
        "floppy" => &["Floppy"],
        "disk" => &["USBStick"],
        _ => &[],
    }
}

impl Core {
    /// The system's virtual media devices: its own `VirtualMedia` collection, else its
    /// first manager's.
    async fn vmedia_devices(&self, bmc: &Bmc<'_>, sys: &Value) -> Result<Vec<Value>, DriverError> {
        if let Some(found) = self.members(bmc, sys, "VirtualMedia").await {
            return Ok(found);
        }
        let manager = sys
            .pointer("/Links/ManagedBy/0/@odata.id")
            .and_then(Value::as_str)
            .ok_or_else(|| DriverError::invalid("The Redfish BMC offers no virtual media"))?;
        let m = bmc.get(manager).await.map_err(rf)?;
        self.members(bmc, &m, "VirtualMedia")
            .await
            .ok_or_else(|| DriverError::invalid("The Redfish BMC offers no virtual media"))
    }

    /// Inserts `url` into the first device serving `device_type` (ejecting what it held).
    async fn insert(
        &self,
        node: NodeInfo<'_>,
        device_type: &str,
        url: &str,
    ) -> Result<(), DriverError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(DriverError::invalid(format!(
                "Invalid image URL {:?}: the BMC fetches it over http or https",
                shown_url(url)
            )));
        }
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let (_, sys) = self.system(&c).await?;
        let wanted = media_types_for(device_type);
        let devices = self.vmedia_devices(&bmc, &sys).await?;
        let dev = devices
            .iter()
            .find(|d| {
                d.get("MediaTypes")
                    .and_then(Value::as_array)
                    .is_some_and(|t| {
                        t.iter()
                            .any(|t| t.as_str().is_some_and(|t| wanted.contains(&t)))
                    })
            })
            .ok_or_else(|| {
                DriverError::invalid(format!(
                    "The Redfish BMC has no virtual media device for {device_type}"
                ))
            })?;
        let path = dev.get("@odata.id").and_then(Value::as_str).unwrap_or("");
        if dev.get("Inserted").and_then(Value::as_bool) == Some(true) {
            let eject = action(dev, "#VirtualMedia.EjectMedia", path);
            bmc.call("POST", &eject, Some(&json!({})))
                .await
                .map_err(rf)?;
        }
        let insert = action(dev, "#VirtualMedia.InsertMedia", path);
        bmc.call(
            "POST",
            &insert,
            Some(&json!({"Image": url, "Inserted": true, "WriteProtected": true})),
        )
        .await
        .map_err(|e| {
            let msg = format!(
                "Failed to insert {} as {device_type} into node {}: {e}",
                shown_url(url),
                node.uuid
            );
            rf(e).context(msg)
        })?;
        Ok(())
    }

    /// Ejects the devices serving `device_types` (all when `None`) that hold media.
    async fn eject(
        &self,
        node: NodeInfo<'_>,
        device_types: Option<&[String]>,
    ) -> Result<(), DriverError> {
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let (_, sys) = self.system(&c).await?;
        for dev in self.vmedia_devices(&bmc, &sys).await? {
            if dev.get("Inserted").and_then(Value::as_bool) != Some(true) {
                continue;
            }
            let serves = |t: &str| {
                dev.get("MediaTypes")
                    .and_then(Value::as_array)
                    .is_some_and(|m| {
                        m.iter()
                            .any(|x| x.as_str().is_some_and(|x| media_types_for(t).contains(&x)))
                    })
            };
            if let Some(types) = device_types
                && !types.iter().any(|t| serves(t))
            {
                continue;
            }
            let path = dev.get("@odata.id").and_then(Value::as_str).unwrap_or("");
            let eject = action(&dev, "#VirtualMedia.EjectMedia", path);
            bmc.call("POST", &eject, Some(&json!({})))
                .await
                .map_err(rf)?;
        }
        Ok(())
    }

    /// The devices in upstream's shape.
    async fn list_vmedia(&self, node: NodeInfo<'_>) -> Result<Value, DriverError> {
        let c = self.conn(node)?;
        let bmc = c.bmc(&self.settings);
        let (_, sys) = self.system(&c).await?;
        let devices = self.vmedia_devices(&bmc, &sys).await?;
        Ok(Value::Array(
            devices
                .iter()
                .map(|d| {
                    json!({"media_types": d.get("MediaTypes").cloned().unwrap_or(json!([])),
                           "inserted": d.get("Inserted").and_then(Value::as_bool).unwrap_or(false),
                           "image": d.get("Image").cloned().unwrap_or(Value::Null)})
                })
                .collect(),
        ))
    }
}

/// The target of a resource's action `name` (`#ComputerSystem.Reset`, …), else the
/// conventional `<path>/Actions/<name>`.
fn action(res: &Value, name: &str, path: &str) -> String {
    res.get("Actions")
        .and_then(|a| a.get(name))
        .and_then(|a| a.get("target"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{path}/Actions/{}", name.trim_start_matches('#')))
}

/// The longest an out-of-band inspection may take.
const INSPECTION_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The longest a power change is waited for, whatever the request asks.
const POWER_WAIT_LIMIT: u64 = 3600;

impl Interface for Iface {
    fn validate<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move { parse_info(node).map(|_| ()) })
    }

    /// `deploy.deploy` of the `ramdisk` deploy interface: the node is (re)started on
    /// what the boot interface prepared.
    fn execute_step<'a>(
        &'a self,
        node: NodeInfo<'a>,
        step: &'a crate::steps::Step,
    ) -> DriverFuture<'a, crate::interfaces::Outcome> {
        Box::pin(async move {
            match (step.interface.as_str(), step.step.as_str()) {
                ("deploy", "deploy") => {
                    self.0.set_power(node, "rebooting", None).await?;
                    Ok(crate::interfaces::Outcome::Done)
                }
                ("bios", "apply_configuration") => {
                    self.0
                        .apply_bios(node, &Value::Object(step.args.clone()))
                        .await?;
                    Ok(crate::interfaces::Outcome::Done)
                }
                ("bios", "factory_reset") => {
                    self.0.reset_bios(node).await?;
                    Ok(crate::interfaces::Outcome::Done)
                }
                _ => Err(DriverError::invalid(format!(
                    "the redfish driver has no step {}",
                    step.name()
                ))),
            }
        })
    }
}

impl PowerInterface for Iface {
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String> {
        Box::pin(self.0.power_state(node))
    }

    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String> {
        Box::pin(self.0.set_power(node, target, timeout_secs))
    }
}

impl ManagementInterface for Iface {
    fn supported_boot_devices(&self, _node: NodeInfo<'_>) -> Vec<&'static str> {
        BOOT_DEVICES.iter().map(|(d, _)| *d).collect()
    }

    fn get_boot_device<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<BootDevice>> {
        Box::pin(self.0.boot_device(node))
    }

    fn set_boot_device<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device: BootDevice,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.set_boot(node, &device).await?;
            Ok(NodeChanges::none())
        })
    }

    fn can_change_boot_mode(&self) -> bool {
        true
    }

    fn can_virtual_media(&self) -> bool {
        true
    }

    fn attach_virtual_media<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device_type: &'a str,
        image_url: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.insert(node, device_type, image_url).await?;
            Ok(NodeChanges::none())
        })
    }

    fn detach_virtual_media<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device_types: Option<&'a [String]>,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.eject(node, device_types).await?;
            Ok(NodeChanges::none())
        })
    }

    fn get_virtual_media<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Value> {
        Box::pin(self.0.list_vmedia(node))
    }

    fn get_boot_mode<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<String>> {
        Box::pin(self.0.boot_mode(node))
    }

    fn get_secure_boot<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<bool>> {
        Box::pin(self.0.secure_boot(node))
    }

    fn set_secure_boot<'a>(
        &'a self,
        node: NodeInfo<'a>,
        on: bool,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.set_secure(node, on).await?;
            Ok(NodeChanges::none())
        })
    }

    fn supported_indicators<'a>(
        &'a self,
        node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<Vec<Indicator>>> {
        Box::pin(async move {
            let c = self.0.conn(node)?;
            let leds = self.0.leds(&c).await?;
            Ok(Some(leds.into_iter().map(|(i, _)| i).collect()))
        })
    }

    fn get_indicator_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        indicator: &'a Indicator,
    ) -> DriverFuture<'a, String> {
        Box::pin(self.0.led_state(node, indicator))
    }

    fn can_set_indicators(&self) -> bool {
        true
    }

    fn set_indicator_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        indicator: &'a Indicator,
        state: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.set_led(node, indicator, state).await?;
            Ok(NodeChanges::none())
        })
    }

    fn can_inject_nmi(&self) -> bool {
        true
    }

    fn inject_nmi<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.0.nmi(node))
    }

    fn set_boot_mode<'a>(
        &'a self,
        node: NodeInfo<'a>,
        mode: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.set_mode(node, mode).await?;
            Ok(NodeChanges::none())
        })
    }
}

/// `ramdisk` deploy with `redfish-virtual-media` boot (upstream's ramdisk deploy):
/// nothing is written to a disk; `instance_info.boot_iso` is inserted as a virtual CD,
/// the node boots from it once, and `deploy.deploy` starts it. Tear-down ejects it and
/// powers the node off.
impl DeployInterface for Iface {
    fn prepare<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let Some(iso) = node.instance_info.get("boot_iso").and_then(Value::as_str) else {
                return Err(DriverError::invalid(format!(
                    "Node {} has no instance_info.boot_iso: the ramdisk deploy boots that image",
                    node.uuid
                )));
            };
            self.0.insert(node, "cdrom", iso).await?;
            self.0
                .set_boot(
                    node,
                    &BootDevice {
                        device: "cdrom".into(),
                        persistent: false,
                    },
                )
                .await?;
            Ok(NodeChanges::none())
        })
    }
    fn tear_down<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.eject(node, Some(&["cdrom".to_string()])).await?;
            let state = self.0.set_power(node, "power off", None).await?;
            Ok(NodeChanges {
                power_state: Some(state),
                ..NodeChanges::none()
            })
        })
    }
}

impl BootInterface for Iface {}

impl RaidInterface for Iface {}
impl BiosInterface for Iface {}

impl Driver for Redfish {
    fn hardware_type(&self) -> &'static HardwareType {
        &REDFISH
    }
    fn power(&self) -> &dyn PowerInterface {
        &self.iface
    }
    fn management(&self) -> &dyn ManagementInterface {
        &self.iface
    }
    fn deploy(&self) -> &dyn DeployInterface {
        &self.iface
    }
    fn boot(&self) -> &dyn BootInterface {
        &self.iface
    }
    fn raid(&self) -> &dyn RaidInterface {
        &self.iface
    }
    fn bios(&self) -> &dyn BiosInterface {
        &self.iface
    }
    /// The `noop` network and storage interfaces have nothing to do here.
    fn inspect_hardware<'a>(
        &'a self,
        node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<crate::interfaces::Inspection>> {
        Box::pin(async move {
            // The node is locked meanwhile: a slow or endless BMC is given up on.
            tokio::time::timeout(INSPECTION_LIMIT, self.iface.0.inspect(node))
                .await
                .map_err(|_| {
                    DriverError::failed(format!(
                        "The Redfish inspection of node {} took more than {INSPECTION_LIMIT:?}",
                        node.uuid
                    ))
                })?
                .map(Some)
        })
    }

    fn other(&self, interface_type: &str) -> Option<&dyn Interface> {
        match interface_type {
            "network" | "storage" | "inspect" => Some(&self.iface),
            _ => None,
        }
    }

    fn bios_settings<'a>(
        &'a self,
        node: NodeInfo<'a>,
        bios_interface: &'a str,
    ) -> DriverFuture<'a, Option<crate::interfaces::BiosSettings>> {
        Box::pin(async move {
            if bios_interface != "redfish" {
                return Ok(None);
            }
            self.iface.0.bios_attributes(node).await.map(Some)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironic_model::node::JsonObject;

    fn info(di: Value) -> Result<RedfishInfo, DriverError> {
        let Value::Object(di) = di else {
            return Err(DriverError::invalid("not an object"));
        };
        let empty = JsonObject::new();
        parse_info(NodeInfo {
            uuid: "n",
            driver_info: &di,
            driver_internal_info: &empty,
            properties: &empty,
            instance_info: &empty,
            power_state: None,
            provision_state: "enroll",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        })
    }

    /// Spellings of one CA bundle are one setting (one cached client, not one each).
    #[test]
    fn ca_paths_are_canonical() {
        let dir = std::env::temp_dir().join(format!("rf-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "x").unwrap_or_else(|e| panic!("{e}"));
        let verify = |path: String| {
            info(json!({"redfish_address": "https://192.0.2.1", "redfish_verify_ca": path}))
                .map(|i| i.verify)
                .map_err(|e| e.message)
        };
        let plain = verify(ca.display().to_string());
        let odd = verify(format!("{}//./ca.pem", dir.display()));
        assert_eq!(plain, odd);
        assert!(matches!(plain, Ok(Verify::CaFile(_))), "{plain:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn driver_info_is_checked_with_clear_messages() {
        let ok = info(
            json!({"redfish_address": "http://127.0.0.1:8000", "redfish_system_id": "abc",
                             "redfish_username": "u", "redfish_password": "p", "redfish_verify_ca": "false"}),
        );
        let ok = ok.map_err(|e| e.message).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.origin.base(), "http://127.0.0.1:8000");
        assert_eq!(ok.verify, Verify::No);
        let e = |di: Value| info(di).err().map(|e| e.message).unwrap_or_default();
        assert_eq!(
            e(json!({})),
            "Missing the following Redfish properties in node's driver_info: redfish_address"
        );
        assert!(e(json!({"redfish_address": "ftp://x"})).starts_with("Invalid Redfish address"));
        assert!(
            e(json!({"redfish_address": "x", "redfish_verify_ca": "/no/such/ca.pem"}))
                .contains("redfish_verify_ca")
        );
        assert!(
            e(json!({"redfish_address": "x", "redfish_system_id": "../../x"}))
                .contains("system id")
        );
        assert!(
            e(json!({"redfish_address": "x", "redfish_auth_type": "token"}))
                .contains("redfish_auth_type")
        );
        assert_eq!(
            info(json!({"redfish_address": "bmc.example.com"}))
                .map(|i| i.origin.base())
                .ok(),
            Some("https://bmc.example.com".to_string())
        );
    }

    #[test]
    fn power_states_and_resets_map_as_upstream() {
        assert_eq!(map_power("PoweringOn"), Some("power on"));
        assert_eq!(map_power("Off"), Some("power off"));
        assert_eq!(map_power("Unknown"), None);
        assert_eq!(
            reset_for("soft power off"),
            Some(("GracefulShutdown", "power off"))
        );
        assert_eq!(reset_for("rebooting"), Some(("ForceRestart", "power on")));
        assert_eq!(reset_for("fly"), None);
    }
}
