//! What the conductor asks of a hardware type, one trait per interface type: power,
//! management, deploy, boot, RAID and BIOS (the others only validate and run steps,
//! [`Interface`]). Implementations see the node through [`NodeInfo`] and never touch
//! the database: what they change on the node they hand back as [`NodeChanges`], and the
//! conductor saves it under the node lock. Calls may take time (an HTTP appliance), so
//! they return futures.
//!
//! A clean or deploy step `<interface>.<step>` runs through the interface of that type
//! ([`Interface::execute_step`], reached by [`Driver::execute_step`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ironic_model::node::JsonObject;
use serde_json::Value;

use crate::HardwareType;
use crate::boot::BootContext;
use crate::fake;
use crate::steps::{Step, StepDecl};

/// The future of a driver call.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, DriverError>> + Send + 'a>>;

/// What kind of failure a driver reports; the conductor decides what each means for the
/// node and the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverErrorKind {
    /// The node's configuration (`driver_info`, `properties`, a step's arguments) is
    /// wrong or incomplete.
    Invalid,
    /// The hardware is not in a state to do this (used by someone else, no profile).
    Conflict,
    /// The hardware or its management controller refused or failed.
    Failed,
    /// The management controller or appliance could not be reached.
    Unreachable,
}

/// Why a driver call failed. `Display` is the message users see (in `last_error`, a
/// validation result, an API error); `source` is the cause, when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DriverError {
    pub kind: DriverErrorKind,
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Equal when kind and message are (the cause is not compared).
impl PartialEq for DriverError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl DriverError {
    pub fn new(kind: DriverErrorKind, message: impl Into<String>) -> DriverError {
        DriverError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> DriverError {
        DriverError::new(DriverErrorKind::Invalid, message)
    }

    pub fn conflict(message: impl Into<String>) -> DriverError {
        DriverError::new(DriverErrorKind::Conflict, message)
    }

    pub fn failed(message: impl Into<String>) -> DriverError {
        DriverError::new(DriverErrorKind::Failed, message)
    }

    /// Another message for the same failure (its kind and cause kept).
    pub fn context(self, message: impl Into<String>) -> DriverError {
        DriverError {
            message: message.into(),
            ..self
        }
    }
}

/// A text value of `driver_info`: absent, null or blank is `None`; anything but a
/// string is an error naming the key.
pub fn driver_info_text<'a>(di: &'a JsonObject, key: &str) -> Result<Option<&'a str>, DriverError> {
    match di.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(DriverError::invalid(format!(
            "Invalid driver_info: {key} must be a string"
        ))),
    }
}

/// What a driver sees of a node.
#[derive(Debug, Clone, Copy)]
pub struct NodeInfo<'a> {
    pub uuid: &'a str,
    pub driver_info: &'a JsonObject,
    pub driver_internal_info: &'a JsonObject,
    pub properties: &'a JsonObject,
    pub instance_info: &'a JsonObject,
    pub power_state: Option<&'a str>,
    pub provision_state: &'a str,
    pub target_provision_state: Option<&'a str>,
    pub instance_uuid: Option<&'a str>,
    /// The boot mode and secure boot state last recorded (1.75).
    pub boot_mode: Option<&'a str>,
    pub secure_boot: Option<bool>,
    /// Set by the conductor when it tears a node down: no automated cleaning follows,
    /// so whatever cleaning would undo must be undone now.
    pub skip_automated_cleaning: bool,
}

impl<'a> From<&'a ironic_model::Node> for NodeInfo<'a> {
    fn from(n: &'a ironic_model::Node) -> Self {
        NodeInfo {
            uuid: n.uuid.as_str(),
            driver_info: &n.driver_info,
            driver_internal_info: &n.driver_internal_info,
            properties: &n.properties,
            instance_info: &n.instance_info,
            power_state: n.power_state.as_deref(),
            provision_state: n.provision_state.as_str(),
            target_provision_state: n.target_provision_state.map(|s| s.as_str()),
            instance_uuid: n.instance_uuid.as_deref(),
            boot_mode: n.boot_mode.as_deref(),
            secure_boot: n.secure_boot,
            skip_automated_cleaning: false,
        }
    }
}

/// Changes a driver asks the conductor to make to the node: keys to set in
/// `driver_info` and `driver_internal_info` (`null` removes the key), and the power
/// state the hardware is now in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeChanges {
    pub driver_info: JsonObject,
    pub driver_internal_info: JsonObject,
    pub power_state: Option<String>,
}

impl NodeChanges {
    pub fn none() -> NodeChanges {
        NodeChanges::default()
    }

    pub fn is_empty(&self) -> bool {
        *self == NodeChanges::default()
    }

    /// Adds `later` to these changes (what it sets wins).
    pub fn merge(&mut self, later: NodeChanges) {
        self.driver_info.extend(later.driver_info);
        self.driver_internal_info.extend(later.driver_internal_info);
        if later.power_state.is_some() {
            self.power_state = later.power_state;
        }
    }

    /// Applies the changes to the node (in memory; the caller saves it).
    pub fn apply(self, node: &mut ironic_model::Node) {
        fn merge(into: &mut JsonObject, from: JsonObject) {
            for (k, v) in from {
                if v.is_null() {
                    into.remove(&k);
                } else {
                    into.insert(k, v);
                }
            }
        }
        merge(&mut node.driver_info, self.driver_info);
        merge(&mut node.driver_internal_info, self.driver_internal_info);
        if let Some(p) = self.power_state {
            node.power_state = Some(p);
        }
    }
}

/// BIOS settings as the hardware reports them: `(name, value)`.
pub type BiosSettings = Vec<(String, Option<String>)>;

/// How a step went.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished.
    Done,
    /// Runs on for this long; the node waits (`clean wait`) and the conductor
    /// continues with the next step afterwards.
    Wait(Duration),
    /// Runs on in the node's ramdisk agent: the node waits (`clean wait`, `wait
    /// call-back`) until the agent reports the step's end (its heartbeat, or the
    /// command it runs ending), or the flow's callback timeout.
    Callback,
    /// Not over, and nothing to do but look again: the node waits (its flow's wait
    /// state, unlocked) for this long, then the conductor runs the same step again,
    /// which finds in the node where it was (a poll of the hardware, never a sleep
    /// holding the node's lock).
    Recheck(Duration),
}

/// Power states a client may ask for, and the state each ends in.
pub fn power_result(target: &str) -> Option<&'static str> {
    match target {
        "power on" | "rebooting" | "soft rebooting" => Some("power on"),
        "power off" | "soft power off" => Some("power off"),
        _ => None,
    }
}

/// What every interface does: check it can work on a node, and run its steps.
pub trait Interface: Send + Sync {
    /// Checks the interface can work on the node: `Ok(())`, or the reason it cannot
    /// (it may ask the hardware, so it is a future).
    fn validate<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    /// Runs one of its clean or deploy steps.
    fn execute_step<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        step: &'a Step,
    ) -> DriverFuture<'a, Outcome> {
        let name = step.name();
        Box::pin(async move {
            Err(DriverError::invalid(format!(
                "this driver has no step {name}"
            )))
        })
    }
}

pub trait PowerInterface: Interface {
    /// The node's power state as the hardware reports it.
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String>;
    /// Applies `target` (a state of [`power_result`]); returns the state reached.
    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String>;
}

/// A boot device and whether it stays set across reboots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootDevice {
    pub device: String,
    pub persistent: bool,
}

/// What an inspection found (1.81's inventory): upstream's inventory document (`cpu`,
/// `memory`, `disks`, `interfaces`, `boot`, `system_vendor`, …) and the data its
/// processing added (`plugin_data`).
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub inventory: JsonObject,
    pub plugin_data: JsonObject,
}

/// An indicator (a LED, say) of one of the node's components, as its management
/// interface reports it (1.63): named `<name>@<component>` in the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indicator {
    /// `system`, `chassis` or `disk` (upstream's `components`).
    pub component: String,
    pub name: String,
    pub readonly: bool,
    /// Among `off`, `on`, `blinking`, `unknown` (upstream's `indicator_states`).
    pub states: Vec<String>,
}

pub trait ManagementInterface: Interface {
    /// The node's indicators; `None` when this interface has none to offer
    /// (upstream's "does not support get_supported_indicators").
    fn supported_indicators<'a>(
        &'a self,
        _node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<Vec<Indicator>>> {
        Box::pin(async { Ok(None) })
    }
    /// The state of one of [`ManagementInterface::supported_indicators`].
    fn get_indicator_state<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _indicator: &'a Indicator,
    ) -> DriverFuture<'a, String> {
        Box::pin(async { Err(DriverError::invalid("cannot read indicators")) })
    }
    /// Whether [`ManagementInterface::set_indicator_state`] does anything.
    fn can_set_indicators(&self) -> bool {
        false
    }
    /// Sets a writable indicator to one of its states (checked by the caller).
    fn set_indicator_state<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _indicator: &'a Indicator,
        _state: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async { Err(DriverError::invalid("cannot set indicators")) })
    }
    /// Whether this interface reads and sets the boot mode (`bios`, `uefi`) and the
    /// UEFI secure boot state (1.76).
    fn can_change_boot_mode(&self) -> bool {
        false
    }
    /// The boot mode the hardware reports; `None` when it cannot tell.
    fn get_boot_mode<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, Option<String>> {
        Box::pin(async { Ok(None) })
    }
    /// Sets the boot mode (`bios` or `uefi`, checked by the caller).
    fn set_boot_mode<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _mode: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async { Err(DriverError::invalid("cannot set the boot mode")) })
    }
    /// Whether UEFI secure boot is on; `None` when the hardware cannot tell.
    fn get_secure_boot<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, Option<bool>> {
        Box::pin(async { Ok(None) })
    }
    fn set_secure_boot<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _on: bool,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async { Err(DriverError::invalid("cannot set secure boot")) })
    }
    /// Whether [`ManagementInterface::inject_nmi`] does anything (1.29).
    fn can_inject_nmi(&self) -> bool {
        false
    }
    /// Sends a non-maskable interrupt to the node (a crash dump on most systems).
    fn inject_nmi<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async { Err(DriverError::invalid("cannot inject an NMI")) })
    }
    /// Whether this interface attaches and detaches virtual media (1.89) and reports
    /// them (1.93).
    fn can_virtual_media(&self) -> bool {
        false
    }
    /// Inserts `image_url` as a virtual device of `device_type` (`cdrom`, `floppy`,
    /// `disk`; checked by the caller).
    fn attach_virtual_media<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _device_type: &'a str,
        _image_url: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async { Err(DriverError::invalid("cannot attach virtual media")) })
    }
    /// Ejects the virtual devices of `device_types` (every one when `None`).
    fn detach_virtual_media<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _device_types: Option<&'a [String]>,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async { Err(DriverError::invalid("cannot detach virtual media")) })
    }
    /// The virtual devices as the hardware reports them: `[{"media_types": [...],
    /// "inserted": bool, "image": url}]` (upstream's Redfish shape).
    fn get_virtual_media<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, Value> {
        Box::pin(async { Err(DriverError::invalid("cannot read virtual media")) })
    }
    /// The boot devices `set_boot_device` accepts for this node.
    fn supported_boot_devices(&self, node: NodeInfo<'_>) -> Vec<&'static str>;
    /// The device the node boots from next; `None` when the hardware cannot tell.
    fn get_boot_device<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<BootDevice>>;
    fn set_boot_device<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device: BootDevice,
    ) -> DriverFuture<'a, NodeChanges>;
}

/// Getting a node ready for an instance, or for cleaning, and back. The core deploy
/// step `deploy.deploy` runs through [`Interface::execute_step`].
pub trait DeployInterface: Interface {
    /// Before the deploy steps (deploying or rebuilding).
    fn prepare<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges>;
    /// Undeploying, before automated cleaning: the instance goes away.
    fn tear_down<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges>;
    /// Before the clean steps (manual or automated cleaning). Default: nothing to do
    /// (the steps talk to the BMC; no ramdisk to boot).
    fn prepare_cleaning<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
    /// After cleaning, whether it succeeded or failed. Default: nothing to do.
    fn tear_down_cleaning<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
}

/// A call that had nothing to do.
pub fn no_changes<'a>() -> DriverFuture<'a, NodeChanges> {
    Box::pin(async { Ok(NodeChanges::none()) })
}

/// Booting the node into the agent's ramdisk (for an inspection, a cleaning, a
/// deploy) and then into its instance. Implementations: `crate::boot` (the shared
/// ones, [`crate::boot::named`]) and a hardware type's own. Defaults: nothing to do (a
/// boot interface whose boot the deploy interface arranges, as the ramdisk deploys do).
pub trait BootInterface: Interface {
    /// Whether the calls read [`BootContext::pxe_macs`] (the conductor reads the
    /// node's ports only then).
    fn boots_from_network(&self) -> bool {
        false
    }
    /// What booting the ramdisk needs of the node's `driver_info` is there (checked
    /// before a deploy through the agent, and by the node's validation).
    fn check_ramdisk(&self, _node: NodeInfo<'_>) -> Result<(), DriverError> {
        Ok(())
    }
    /// Makes the node boot the ramdisk at its next power-on (the caller powers it on).
    fn prepare_ramdisk<'a>(&'a self, _ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
    /// Undoes [`BootInterface::prepare_ramdisk`].
    fn clean_up_ramdisk<'a>(&'a self, _ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
    /// The instance was written: the node boots it from now on (the deploy sets the
    /// disk as the boot device).
    fn prepare_instance<'a>(&'a self, _ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
    /// The instance goes (undeploy).
    fn clean_up_instance<'a>(&'a self, _ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        no_changes()
    }
}

/// RAID configuration; its work is its steps (`raid.create_configuration`,
/// `raid.delete_configuration`).
pub trait RaidInterface: Interface {}

/// BIOS settings; its work is its steps (`bios.apply_configuration`,
/// `bios.factory_reset`).
pub trait BiosInterface: Interface {}

/// Interface types with a trait of their own; the others are plain [`Interface`]s.
pub const TYPED_INTERFACES: &[&str] = &["power", "management", "deploy", "boot", "raid", "bios"];

/// One hardware type's implementation, as the conductor uses it.
pub trait Driver: Send + Sync {
    fn hardware_type(&self) -> &'static HardwareType;
    fn power(&self) -> &dyn PowerInterface;
    fn management(&self) -> &dyn ManagementInterface;
    /// Out-of-band inspection (the `inspect` verb): what the hardware reports, or
    /// `None` when this hardware type reports nothing (inspection then only reads the
    /// power state).
    fn inspect_hardware<'a>(&'a self, _node: NodeInfo<'a>) -> DriverFuture<'a, Option<Inspection>> {
        Box::pin(async { Ok(None) })
    }
    /// The firmware components the hardware reports (1.86), or `None` when this
    /// hardware type reports none. Asked after an inspection, when the node's
    /// firmware interface is not `no-firmware`.
    fn firmware_components<'a>(
        &'a self,
        _node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<Vec<ironic_model::firmware::Reported>>> {
        Box::pin(async { Ok(None) })
    }
    fn deploy(&self) -> &dyn DeployInterface;
    /// The hardware type's own boot interface (for a name [`crate::boot::named`] does
    /// not know).
    fn boot(&self) -> &dyn BootInterface;
    /// The boot interface the node names (`boot_interface`; `None`: the hardware
    /// type's default).
    fn boot_for(&self, name: Option<&str>) -> &dyn BootInterface {
        let name = name.or_else(|| self.hardware_type().default_interface("boot"));
        name.and_then(crate::boot::named)
            .unwrap_or_else(|| self.boot())
    }
    fn raid(&self) -> &dyn RaidInterface;
    fn bios(&self) -> &dyn BiosInterface;
    /// Interface types without a trait of their own (console, firmware, inspect,
    /// rescue, vendor …); `None` when the hardware type has none of that type.
    fn other(&self, interface_type: &str) -> Option<&dyn Interface>;

    /// The interface of a type, whatever its trait.
    fn interface(&self, interface_type: &str) -> Option<&dyn Interface> {
        match interface_type {
            "power" => Some(self.power()),
            "management" => Some(self.management()),
            "deploy" => Some(self.deploy()),
            "boot" => Some(self.boot()),
            "raid" => Some(self.raid()),
            "bios" => Some(self.bios()),
            other => self.other(other),
        }
    }

    /// Runs one clean or deploy step through the interface of its type.
    fn execute_step<'a>(&'a self, node: NodeInfo<'a>, step: &'a Step) -> DriverFuture<'a, Outcome> {
        match self.interface(&step.interface) {
            Some(i) => i.execute_step(node, step),
            None => {
                let why = DriverError::invalid(format!(
                    "{} has no {} interface",
                    self.hardware_type().name,
                    step.interface
                ));
                Box::pin(async move { Err(why) })
            }
        }
    }

    /// The BIOS settings the hardware reports now, as `(name, value)`, read through
    /// the node's `bios_interface`; `None` when that interface keeps none (`no-bios`,
    /// and `fake`, whose settings are fixed data). The conductor stores them.
    fn bios_settings<'a>(
        &'a self,
        _node: NodeInfo<'a>,
        _bios_interface: &'a str,
    ) -> DriverFuture<'a, Option<BiosSettings>> {
        Box::pin(async { Ok(None) })
    }

    /// A step of the node started, finished, failed or was aborted (`event`): what the
    /// driver records of it on the node. Default: nothing.
    fn step_event(&self, _node: NodeInfo<'_>, _step: &Step, _event: &str) -> NodeChanges {
        NodeChanges::none()
    }

    /// The clean steps the driver offers for the node; `None` while it cannot tell yet
    /// (an agent on the node has to report them first: ask again later).
    fn clean_steps(&self, _node: NodeInfo<'_>) -> Option<&'static [StepDecl]> {
        Some(self.hardware_type().clean_steps)
    }

    /// Checks the interface of a type can work on the node.
    fn validate_interface<'a>(
        &'a self,
        node: NodeInfo<'a>,
        interface_type: &'a str,
    ) -> DriverFuture<'a, ()> {
        match self.interface(interface_type) {
            Some(i) => i.validate(node),
            None => {
                let why = DriverError::invalid(format!(
                    "{} has no {interface_type} interface",
                    self.hardware_type().name
                ));
                Box::pin(async move { Err(why) })
            }
        }
    }
}

/// `fake-hardware` (and `fake-agent`): no hardware. Power follows what it is told (a
/// node never powered reads as off), the boot device is remembered in
/// `driver_internal_info`, steps behave as [`fake::execute`] says.
///
/// For tests, `driver_info.fake_fail` lists the calls that fail, by name:
/// `"deploy.prepare"`, `"deploy.tear_down"`, `"deploy.prepare_cleaning"`,
/// `"deploy.tear_down_cleaning"`, `"boot.prepare_instance"`, `"power.set_power_state"`,
/// `"management.set_boot_device"`, `"<interface>.validate"`, or a step such as
/// `"deploy.deploy"`.
pub struct Fake {
    pub hw: &'static HardwareType,
    /// `fake-agent`: when each node's simulated agent started (it reports the steps
    /// [`AGENT_BOOT`] later).
    agents: std::sync::Mutex<std::collections::BTreeMap<String, std::time::Instant>>,
}

/// How long a `fake-agent` node's simulated agent takes to report its clean steps after
/// they are first asked for.
pub const AGENT_BOOT: Duration = Duration::from_secs(1);

/// `driver_internal_info` key of the journal of the steps a fake node ran (newest
/// last, at most [`JOURNAL_MAX`]): tests read what ran, in which order, with which
/// arguments.
pub const FAKE_JOURNAL: &str = "fake_journal";
const JOURNAL_MAX: usize = 100;

/// One fake interface of a type.
struct FakeInterface {
    kind: &'static str,
}

/// `driver_info` key listing the fake calls that fail.
pub const FAKE_FAIL: &str = "fake_fail";
/// `driver_internal_info` key where the fake management interface keeps the boot device.
pub const FAKE_BOOT_DEVICE: &str = "fake_boot_device";
/// `driver_internal_info` of a fake node: its virtual media, by device type.
pub const FAKE_VMEDIA: &str = "fake_vmedia";
/// The virtual device types (upstream's `VMEDIA_DEVICES`, in its order) and the Redfish
/// media types of each.
pub const VMEDIA_DEVICES: &[(&str, &[&str])] = &[
    ("disk", &["USBStick"]),
    ("cdrom", &["CD", "DVD"]),
    ("floppy", &["Floppy"]),
];

impl FakeInterface {
    /// `Err` if the node's `driver_info.fake_fail` names this call.
    fn injected(&self, node: NodeInfo<'_>, call: &str) -> Result<(), DriverError> {
        let name = format!("{}.{call}", self.kind);
        let listed = node
            .driver_info
            .get(FAKE_FAIL)
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(name.as_str())));
        if listed {
            Err(DriverError::failed(format!(
                "fake failure of {name} (driver_info.{FAKE_FAIL})"
            )))
        } else {
            Ok(())
        }
    }

    fn call<'a>(&'a self, node: NodeInfo<'a>, call: &'a str) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, call)?;
            Ok(NodeChanges::none())
        })
    }
}

impl Interface for FakeInterface {
    fn validate<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move { self.injected(node, "validate") })
    }

    fn execute_step<'a>(&'a self, node: NodeInfo<'a>, step: &'a Step) -> DriverFuture<'a, Outcome> {
        Box::pin(async move {
            self.injected(node, &step.step)?;
            fake::execute(step)
        })
    }
}

impl PowerInterface for FakeInterface {
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move {
            self.injected(node, "get_power_state")?;
            Ok(node.power_state.unwrap_or("power off").to_string())
        })
    }

    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        _timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String> {
        Box::pin(async move {
            self.injected(node, "set_power_state")?;
            power_result(target)
                .map(str::to_owned)
                .ok_or_else(|| DriverError::invalid(format!("unknown power state {target:?}")))
        })
    }
}

const FAKE_BOOT_DEVICES: &[&str] = &["pxe", "disk", "cdrom", "bios", "safe"];

impl ManagementInterface for FakeInterface {
    /// Upstream's fake indicators: a read-only chassis LED and a system LED that reads
    /// `on` and cannot be set (upstream's fake has no `set_indicator_state`).
    fn supported_indicators<'a>(
        &'a self,
        _node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<Vec<Indicator>>> {
        let states = |s: &[&str]| s.iter().map(|s| (*s).to_string()).collect();
        let list = Some(vec![
            Indicator {
                component: "chassis".into(),
                name: "led-0".into(),
                readonly: true,
                states: states(&["off", "on"]),
            },
            Indicator {
                component: "system".into(),
                name: "led".into(),
                readonly: false,
                states: states(&["blinking", "off", "on"]),
            },
        ]);
        Box::pin(async move { Ok(list) })
    }

    fn get_indicator_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        _indicator: &'a Indicator,
    ) -> DriverFuture<'a, String> {
        Box::pin(async move {
            self.injected(node, "get_indicator_state")?;
            Ok("on".to_string())
        })
    }

    /// The fake hardware's boot mode and secure boot state are what was last set
    /// (recorded on the node); secure boot needs UEFI, as on real firmware.
    fn can_change_boot_mode(&self) -> bool {
        true
    }

    fn get_boot_mode<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<String>> {
        Box::pin(async move { Ok(node.boot_mode.map(str::to_owned)) })
    }

    fn set_boot_mode<'a>(
        &'a self,
        node: NodeInfo<'a>,
        mode: &'a str,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, "set_boot_mode")?;
            if mode == "bios" && node.secure_boot == Some(true) {
                return Err(DriverError::invalid(
                    "secure boot is on: turn it off before leaving UEFI",
                ));
            }
            Ok(NodeChanges::none())
        })
    }

    fn get_secure_boot<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<bool>> {
        Box::pin(async move { Ok(node.secure_boot) })
    }

    fn set_secure_boot<'a>(
        &'a self,
        node: NodeInfo<'a>,
        on: bool,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, "set_secure_boot")?;
            if on && node.boot_mode != Some("uefi") {
                return Err(DriverError::invalid("secure boot needs the uefi boot mode"));
            }
            Ok(NodeChanges::none())
        })
    }

    /// The fake machine has one virtual device of each type; what is inserted is kept
    /// on the node.
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
            self.injected(node, "attach_virtual_media")?;
            let mut media = match node.driver_internal_info.get(FAKE_VMEDIA) {
                Some(Value::Object(m)) => m.clone(),
                _ => JsonObject::new(),
            };
            media.insert(device_type.into(), Value::String(image_url.into()));
            let mut changes = NodeChanges::none();
            changes
                .driver_internal_info
                .insert(FAKE_VMEDIA.into(), Value::Object(media));
            Ok(changes)
        })
    }

    fn detach_virtual_media<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device_types: Option<&'a [String]>,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, "detach_virtual_media")?;
            let mut media = match node.driver_internal_info.get(FAKE_VMEDIA) {
                Some(Value::Object(m)) => m.clone(),
                _ => JsonObject::new(),
            };
            match device_types {
                None => media.clear(),
                Some(types) => {
                    for t in types {
                        media.remove(t);
                    }
                }
            }
            let mut changes = NodeChanges::none();
            // An empty map is removed (a null value deletes the key).
            let v = if media.is_empty() {
                Value::Null
            } else {
                Value::Object(media)
            };
            changes.driver_internal_info.insert(FAKE_VMEDIA.into(), v);
            Ok(changes)
        })
    }

    fn get_virtual_media<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Value> {
        Box::pin(async move {
            self.injected(node, "get_virtual_media")?;
            let media = node.driver_internal_info.get(FAKE_VMEDIA);
            Ok(Value::Array(
                VMEDIA_DEVICES
                    .iter()
                    .map(|(t, kinds)| {
                        let image = media.and_then(|m| m.get(*t)).cloned();
                        serde_json::json!({
                            "media_types": kinds,
                            "inserted": image.is_some(),
                            "image": image.unwrap_or_else(|| Value::String(String::new())),
                        })
                    })
                    .collect(),
            ))
        })
    }

    fn supported_boot_devices(&self, _node: NodeInfo<'_>) -> Vec<&'static str> {
        FAKE_BOOT_DEVICES.to_vec()
    }

    fn get_boot_device<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<BootDevice>> {
        Box::pin(async move {
            let d = node.driver_internal_info.get(FAKE_BOOT_DEVICE);
            Ok(d.and_then(|d| {
                Some(BootDevice {
                    device: d.get("boot_device")?.as_str()?.to_string(),
                    persistent: d.get("persistent")?.as_bool()?,
                })
            }))
        })
    }

    fn set_boot_device<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device: BootDevice,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, "set_boot_device")?;
            if !FAKE_BOOT_DEVICES.contains(&device.device.as_str()) {
                return Err(DriverError::invalid(format!(
                    "boot device {:?} is not one of {}",
                    device.device,
                    FAKE_BOOT_DEVICES.join(", ")
                )));
            }
            let mut changes = NodeChanges::none();
            changes.driver_internal_info.insert(
                FAKE_BOOT_DEVICE.into(),
                serde_json::json!({"boot_device": device.device, "persistent": device.persistent}),
            );
            Ok(changes)
        })
    }
}

impl DeployInterface for FakeInterface {
    fn prepare<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(node, "prepare")
    }

    fn tear_down<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.injected(node, "tear_down")?;
            Ok(NodeChanges {
                power_state: Some("power off".into()),
                ..NodeChanges::none()
            })
        })
    }

    fn prepare_cleaning<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(node, "prepare_cleaning")
    }

    fn tear_down_cleaning<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(node, "tear_down_cleaning")
    }
}

impl BootInterface for FakeInterface {
    fn prepare_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(ctx.node, "prepare_ramdisk")
    }

    fn clean_up_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(ctx.node, "clean_up_ramdisk")
    }

    fn prepare_instance<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(ctx.node, "prepare_instance")
    }

    fn clean_up_instance<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.call(ctx.node, "clean_up_instance")
    }
}

impl RaidInterface for FakeInterface {}
impl BiosInterface for FakeInterface {}

static FAKE_POWER: FakeInterface = FakeInterface { kind: "power" };
static FAKE_MANAGEMENT: FakeInterface = FakeInterface { kind: "management" };
static FAKE_DEPLOY: FakeInterface = FakeInterface { kind: "deploy" };
static FAKE_BOOT: FakeInterface = FakeInterface { kind: "boot" };
static FAKE_RAID: FakeInterface = FakeInterface { kind: "raid" };
static FAKE_BIOS: FakeInterface = FakeInterface { kind: "bios" };
static FAKE_OTHERS: &[FakeInterface] = &[
    FakeInterface { kind: "console" },
    FakeInterface { kind: "firmware" },
    FakeInterface { kind: "inspect" },
    FakeInterface { kind: "network" },
    FakeInterface { kind: "rescue" },
    FakeInterface { kind: "storage" },
    FakeInterface { kind: "vendor" },
];

impl Driver for Fake {
    fn hardware_type(&self) -> &'static HardwareType {
        self.hw
    }

    fn step_event(&self, node: NodeInfo<'_>, step: &Step, event: &str) -> NodeChanges {
        let entry = serde_json::json!({
            "step": step.name(),
            "args": step.args,
            "event": event,
            "at": ironic_model::node::now().to_rfc3339(),
        });
        let mut list = match node.driver_internal_info.get(FAKE_JOURNAL) {
            Some(Value::Array(l)) => l.clone(),
            _ => Vec::new(),
        };
        list.push(entry);
        if list.len() > JOURNAL_MAX {
            let extra = list.len() - JOURNAL_MAX;
            list.drain(..extra);
        }
        let mut changes = NodeChanges::none();
        changes
            .driver_internal_info
            .insert(FAKE_JOURNAL.into(), Value::Array(list));
        changes
    }

    fn clean_steps(&self, node: NodeInfo<'_>) -> Option<&'static [StepDecl]> {
        if !self.hw.steps_from_agent {
            return Some(self.hw.clean_steps);
        }
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let started = *agents
            .entry(node.uuid.to_string())
            .or_insert_with(std::time::Instant::now);
        (started.elapsed() >= AGENT_BOOT).then_some(self.hw.clean_steps)
    }

    fn power(&self) -> &dyn PowerInterface {
        &FAKE_POWER
    }

    fn management(&self) -> &dyn ManagementInterface {
        &FAKE_MANAGEMENT
    }

    /// A fixed machine: 8 x86_64 CPUs, 16 GiB, one 100 GiB disk, two NICs whose MACs
    /// come from the node's uuid (so that every node's differ), booting by PXE from
    /// the first.
    fn inspect_hardware<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<Inspection>> {
        Box::pin(async move {
            // `driver_info.fake_fail` may name `inspect.inspect_hardware`.
            FAKE_OTHERS[2].injected(node, "inspect_hardware")?;
            Ok(Some(fake::inventory(node.uuid)))
        })
    }

    /// A BIOS and a BMC with fixed versions (upstream's fake reports none; ours does,
    /// so that `GET …/firmware` can be driven end to end).
    fn firmware_components<'a>(
        &'a self,
        node: NodeInfo<'a>,
    ) -> DriverFuture<'a, Option<Vec<ironic_model::firmware::Reported>>> {
        Box::pin(async move {
            FAKE_OTHERS[1].injected(node, "firmware_components")?;
            Ok(Some(fake::firmware_components(node.uuid)))
        })
    }

    fn deploy(&self) -> &dyn DeployInterface {
        &FAKE_DEPLOY
    }

    fn boot(&self) -> &dyn BootInterface {
        &FAKE_BOOT
    }

    fn raid(&self) -> &dyn RaidInterface {
        &FAKE_RAID
    }

    fn bios(&self) -> &dyn BiosInterface {
        &FAKE_BIOS
    }

    fn other(&self, interface_type: &str) -> Option<&dyn Interface> {
        FAKE_OTHERS
            .iter()
            .find(|i| i.kind == interface_type && self.hw.default_interface(i.kind).is_some())
            .map(|i| i as &dyn Interface)
    }
}

pub static FAKE_HARDWARE_DRIVER: Fake = Fake {
    hw: &crate::FAKE_HARDWARE,
    agents: std::sync::Mutex::new(std::collections::BTreeMap::new()),
};
pub static FAKE_AGENT_DRIVER: Fake = Fake {
    hw: &crate::FAKE_AGENT,
    agents: std::sync::Mutex::new(std::collections::BTreeMap::new()),
};

/// The implementation of a hardware type of this build.
pub fn driver(name: &str) -> Option<&'static dyn Driver> {
    match name {
        "fake-hardware" => Some(&FAKE_HARDWARE_DRIVER),
        "fake-agent" => Some(&FAKE_AGENT_DRIVER),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node<'a>(driver_info: &'a JsonObject, other: &'a JsonObject) -> NodeInfo<'a> {
        NodeInfo {
            uuid: "u",
            driver_info,
            driver_internal_info: other,
            properties: other,
            instance_info: other,
            power_state: None,
            provision_state: "manageable",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        }
    }

    #[test]
    fn every_known_hardware_type_has_a_driver() {
        let names: Vec<String> = crate::KNOWN.iter().map(|h| h.name.to_string()).collect();
        let registry = crate::Registry::new(&names).unwrap();
        for hw in crate::KNOWN {
            let d = registry
                .driver(hw.name)
                .unwrap_or_else(|| panic!("{}", hw.name));
            assert_eq!(d.hardware_type().name, hw.name);
            // Every interface type the hardware type implements (its default is not a
            // `no-*` one) has an implementation.
            for (t, default, _) in hw.interfaces {
                if !default.starts_with("no-") {
                    assert!(d.interface(t).is_some(), "{} {t}", hw.name);
                }
            }
            assert!(d.interface("teleport").is_none());
        }
        assert!(driver("ipmi").is_none());
    }

    #[tokio::test]
    async fn fake_power_follows_orders() {
        let info = JsonObject::new();
        let n = node(&info, &info);
        let p = FAKE_HARDWARE_DRIVER.power();
        assert_eq!(p.get_power_state(n).await.unwrap(), "power off");
        assert_eq!(
            p.set_power_state(n, "rebooting", None).await.unwrap(),
            "power on"
        );
        assert!(p.set_power_state(n, "explode", None).await.is_err());
    }

    #[tokio::test]
    async fn steps_run_through_the_interface_of_their_type() {
        let info = JsonObject::new();
        let step = |interface: &str, name: &str| Step {
            interface: interface.into(),
            step: name.into(),
            args: JsonObject::new(),
            priority: 0,
            abortable: false,
        };
        let d = &FAKE_HARDWARE_DRIVER;
        let n = node(&info, &info);
        assert_eq!(
            d.execute_step(n, &step("raid", "delete_configuration"))
                .await,
            Ok(Outcome::Done)
        );
        let err = d
            .execute_step(n, &step("teleport", "go"))
            .await
            .unwrap_err();
        assert!(err.message.contains("no teleport interface"), "{err}");
    }

    #[tokio::test]
    async fn fake_failures_are_injected_by_name() {
        let other = JsonObject::new();
        let fail =
            json!({FAKE_FAIL: ["deploy.prepare_cleaning", "deploy.deploy", "bios.validate"]});
        let fail = fail.as_object().unwrap();
        let d = &FAKE_HARDWARE_DRIVER;
        let n = node(fail, &other);
        let err = d.deploy().prepare_cleaning(n).await.unwrap_err();
        assert!(err.message.contains("deploy.prepare_cleaning"), "{err}");
        assert_eq!(d.deploy().prepare(n).await, Ok(NodeChanges::none()));
        let deploy = Step {
            interface: "deploy".into(),
            step: "deploy".into(),
            args: JsonObject::new(),
            priority: 100,
            abortable: false,
        };
        assert!(d.execute_step(n, &deploy).await.is_err());
        assert!(d.validate_interface(n, "bios").await.is_err());
        assert!(d.validate_interface(n, "raid").await.is_ok());
        // Without the list, everything works.
        let clean = node(&other, &other);
        assert!(d.execute_step(clean, &deploy).await.is_ok());
        assert!(d.deploy().prepare_cleaning(clean).await.is_ok());
    }

    #[tokio::test]
    async fn fake_boot_device_is_remembered_through_node_changes() {
        let mut n = ironic_model::Node::blank(
            ironic_model::NodeUuid::new_v4(),
            "fake-hardware".into(),
            ironic_model::Version::MAX,
        );
        let d = &FAKE_HARDWARE_DRIVER;
        assert_eq!(
            d.management().get_boot_device(NodeInfo::from(&n)).await,
            Ok(None)
        );
        let pxe = BootDevice {
            device: "pxe".into(),
            persistent: true,
        };
        let changes = d
            .management()
            .set_boot_device(NodeInfo::from(&n), pxe.clone())
            .await
            .unwrap();
        changes.apply(&mut n);
        assert_eq!(
            d.management().get_boot_device(NodeInfo::from(&n)).await,
            Ok(Some(pxe))
        );
        let floppy = BootDevice {
            device: "floppy".into(),
            persistent: false,
        };
        assert!(
            d.management()
                .set_boot_device(NodeInfo::from(&n), floppy)
                .await
                .is_err()
        );
    }

    #[test]
    fn node_changes_set_and_remove_keys() {
        let mut n = ironic_model::Node::blank(
            ironic_model::NodeUuid::new_v4(),
            "fake-hardware".into(),
            ironic_model::Version::MAX,
        );
        n.driver_info.insert("keep".into(), json!(1));
        n.driver_info.insert("gone".into(), json!(2));
        let mut c = NodeChanges::none();
        assert!(c.is_empty());
        c.driver_info.insert("gone".into(), Value::Null);
        c.driver_info.insert("new".into(), json!("x"));
        c.power_state = Some("power on".into());
        c.apply(&mut n);
        assert_eq!(n.driver_info.get("keep"), Some(&json!(1)));
        assert_eq!(n.driver_info.get("gone"), None);
        assert_eq!(n.driver_info.get("new"), Some(&json!("x")));
        assert_eq!(n.power_state.as_deref(), Some("power on"));
    }
}
