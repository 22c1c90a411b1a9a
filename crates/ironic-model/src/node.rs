//! The node: its fields, which microversion shows each one, how a client may write them
//! (create body and JSON Patch document), and the update rules a conductor enforces.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::{
    AllocationId, AllocationUuid, ChassisUuid, ConductorId, NodeId, NodeUuid, canonical_uuid,
};
use crate::names::{is_valid_conductor_group, is_valid_node_name, py_repr_str};
use crate::patch::py_repr;
use crate::states::ProvisionState;
use crate::version::Version;

/// A JSON object field (`driver_info`, `extra`, ...). Absent is `{}`.
pub type JsonObject = Map<String, Value>;

/// Driver interface types, in the order of the `*_interface` columns.
pub const INTERFACE_TYPES: [&str; 13] = [
    "bios",
    "boot",
    "console",
    "deploy",
    "firmware",
    "inspect",
    "management",
    "network",
    "power",
    "raid",
    "rescue",
    "storage",
    "vendor",
];

/// The implementation chosen for each interface type (`None`: not set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces(pub [Option<String>; 13]);

impl Interfaces {
    pub fn index(interface_type: &str) -> Option<usize> {
        INTERFACE_TYPES.iter().position(|t| *t == interface_type)
    }
    pub fn get(&self, interface_type: &str) -> Option<&str> {
        Self::index(interface_type).and_then(|i| self.0[i].as_deref())
    }
}

/// A bare metal node as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: NodeId,
    pub uuid: NodeUuid,
    pub name: Option<String>,
    pub driver: String,
    pub driver_info: JsonObject,
    pub driver_internal_info: JsonObject,
    pub properties: JsonObject,
    pub instance_info: JsonObject,
    pub extra: JsonObject,
    pub instance_uuid: Option<String>,
    pub chassis_uuid: Option<ChassisUuid>,
    pub provision_state: ProvisionState,
    pub target_provision_state: Option<ProvisionState>,
    pub provision_updated_at: Option<DateTime<Utc>>,
    pub power_state: Option<String>,
    pub target_power_state: Option<String>,
    pub console_enabled: bool,
    pub maintenance: bool,
    pub maintenance_reason: Option<String>,
    pub fault: Option<String>,
    pub last_error: Option<String>,
    /// Host name of the conductor holding the exclusive lock.
    pub reservation: Option<String>,
    pub clean_step: JsonObject,
    pub deploy_step: JsonObject,
    pub raid_config: JsonObject,
    pub target_raid_config: JsonObject,
    pub inspection_started_at: Option<DateTime<Utc>>,
    pub inspection_finished_at: Option<DateTime<Utc>>,
    pub resource_class: Option<String>,
    pub conductor_group: String,
    pub automated_clean: Option<bool>,
    pub protected: bool,
    pub protected_reason: Option<String>,
    pub owner: Option<String>,
    pub lessee: Option<String>,
    pub description: Option<String>,
    pub allocation_id: Option<AllocationId>,
    /// Read-only, from the allocations table: the uuid of `allocation_id`.
    pub allocation_uuid: Option<AllocationUuid>,
    pub retired: bool,
    pub retired_reason: Option<String>,
    /// Id of the conductor that last built local state for this node.
    pub conductor_affinity: Option<ConductorId>,
    /// Internal, never shown: the request id of the last RPC call that wrote the node,
    /// so that a call repeated after its conductor died recognises that its first
    /// attempt was applied.
    pub last_request_id: Option<String>,
    /// 1.66: the instance's network configuration (upstream's network-data schema).
    pub network_data: JsonObject,
    /// 1.75, read-only: `bios` or `uefi`, as the management interface last reported.
    pub boot_mode: Option<String>,
    /// 1.75, read-only: whether UEFI secure boot is on, as last reported.
    pub secure_boot: Option<bool>,
    /// 1.82: the shard the node belongs to (a free-form name).
    pub shard: Option<String>,
    /// 1.83: the uuid of the node this one is a child of.
    pub parent_node: Option<NodeUuid>,
    /// 1.87: the service step running.
    pub service_step: JsonObject,
    /// 1.95: power off (and soft power off) are refused.
    pub disable_power_off: bool,
    /// 1.104: the instance's name.
    pub instance_name: Option<String>,
    /// 1.109, read-only: what a driver reports of the node's health.
    pub health: Option<String>,
    pub interfaces: Interfaces,
    pub traits: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// `now()` at the microsecond precision both databases keep, so that what we return
/// equals what we read back.
pub fn now() -> DateTime<Utc> {
    let n = Utc::now();
    n - chrono::Duration::nanoseconds(i64::from(n.timestamp_subsec_nanos() % 1000))
}

impl Node {
    /// A node with every field at its default, as a create request starts from.
    pub fn blank(uuid: NodeUuid, driver: String, version: Version) -> Self {
        Node {
            id: NodeId::default(),
            uuid,
            name: None,
            driver,
            driver_info: JsonObject::new(),
            driver_internal_info: JsonObject::new(),
            properties: JsonObject::new(),
            instance_info: JsonObject::new(),
            extra: JsonObject::new(),
            instance_uuid: None,
            chassis_uuid: None,
            provision_state: if version.at_least(11) {
                ProvisionState::Enroll
            } else {
                ProvisionState::Available
            },
            target_provision_state: None,
            provision_updated_at: None,
            power_state: None,
            target_power_state: None,
            console_enabled: false,
            maintenance: false,
            maintenance_reason: None,
            fault: None,
            last_error: None,
            reservation: None,
            clean_step: JsonObject::new(),
            deploy_step: JsonObject::new(),
            raid_config: JsonObject::new(),
            target_raid_config: JsonObject::new(),
            inspection_started_at: None,
            inspection_finished_at: None,
            resource_class: None,
            conductor_group: String::new(),
            automated_clean: None,
            protected: false,
            protected_reason: None,
            owner: None,
            lessee: None,
            description: None,
            allocation_id: None,
            allocation_uuid: None,
            retired: false,
            retired_reason: None,
            conductor_affinity: None,
            last_request_id: None,
            network_data: JsonObject::new(),
            boot_mode: None,
            secure_boot: None,
            shard: None,
            parent_node: None,
            service_step: JsonObject::new(),
            disable_power_off: false,
            instance_name: None,
            health: None,
            interfaces: Interfaces::default(),
            traits: Vec::new(),
            created_at: now(),
            updated_at: None,
        }
    }
}

/// Every node field the API knows, in the order Ironic renders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum F {
    Uuid,
    CreatedAt,
    UpdatedAt,
    AutomatedClean,
    Interface(usize),
    CleanStep,
    ConductorGroup,
    ConsoleEnabled,
    DeployStep,
    Description,
    Driver,
    DriverInfo,
    DriverInternalInfo,
    Extra,
    Fault,
    InspectionFinishedAt,
    InspectionStartedAt,
    InstanceInfo,
    InstanceUuid,
    LastError,
    Lessee,
    Maintenance,
    MaintenanceReason,
    Name,
    Owner,
    PowerState,
    Properties,
    Protected,
    ProtectedReason,
    ProvisionState,
    ProvisionUpdatedAt,
    RaidConfig,
    Reservation,
    ResourceClass,
    Retired,
    RetiredReason,
    TargetPowerState,
    TargetProvisionState,
    TargetRaidConfig,
    Traits,
    Conductor,
    AllocationUuid,
    ChassisUuid,
    NetworkData,
    BootMode,
    SecureBoot,
    Shard,
    ParentNode,
    ServiceStep,
    DisablePowerOff,
    InstanceName,
    Health,
}

/// How a client may write a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ReadOnly,
    /// Nullable free text of at most this many bytes.
    Text(usize),
    Name,
    Bool,
    OptBool,
    Object,
    Uuid,
    ConductorGroup,
    Driver,
    Interface,
    Chassis,
    /// An object checked as [`crate::network_data::check`].
    NetworkData,
    /// A node uuid (a name is resolved by the API first).
    ParentNode,
    /// Nullable text of 1 to this many characters.
    NonEmptyText(usize),
}

#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    pub name: &'static str,
    pub field: F,
    /// The microversion (`1.<min>`) that introduced the field.
    pub min: u16,
    pub kind: Kind,
}

const fn f(name: &'static str, field: F, min: u16, kind: Kind) -> FieldSpec {
    FieldSpec {
        name,
        field,
        min,
        kind,
    }
}

/// Index of each interface type in [`INTERFACE_TYPES`].
mod iface {
    pub const BIOS: usize = 0;
    pub const BOOT: usize = 1;
    pub const CONSOLE: usize = 2;
    pub const DEPLOY: usize = 3;
    pub const FIRMWARE: usize = 4;
    pub const INSPECT: usize = 5;
    pub const MANAGEMENT: usize = 6;
    pub const NETWORK: usize = 7;
    pub const POWER: usize = 8;
    pub const RAID: usize = 9;
    pub const RESCUE: usize = 10;
    pub const STORAGE: usize = 11;
    pub const VENDOR: usize = 12;
}

use Kind as K;

/// The field table (reference §2.1 "Node field gating").
pub const FIELDS: &[FieldSpec] = &[
    f("uuid", F::Uuid, 1, K::ReadOnly),
    f("created_at", F::CreatedAt, 1, K::ReadOnly),
    f("updated_at", F::UpdatedAt, 1, K::ReadOnly),
    f("automated_clean", F::AutomatedClean, 47, K::OptBool),
    f(
        "bios_interface",
        F::Interface(iface::BIOS),
        40,
        K::Interface,
    ),
    f(
        "boot_interface",
        F::Interface(iface::BOOT),
        31,
        K::Interface,
    ),
    f("clean_step", F::CleanStep, 7, K::ReadOnly),
    f("conductor_group", F::ConductorGroup, 46, K::ConductorGroup),
    f("console_enabled", F::ConsoleEnabled, 1, K::ReadOnly),
    f(
        "console_interface",
        F::Interface(iface::CONSOLE),
        31,
        K::Interface,
    ),
    f(
        "deploy_interface",
        F::Interface(iface::DEPLOY),
        31,
        K::Interface,
    ),
    f("deploy_step", F::DeployStep, 44, K::ReadOnly),
    f("description", F::Description, 51, K::Text(4096)),
    f("driver", F::Driver, 1, K::Driver),
    f("driver_info", F::DriverInfo, 1, K::Object),
    f(
        "driver_internal_info",
        F::DriverInternalInfo,
        3,
        K::ReadOnly,
    ),
    f("extra", F::Extra, 1, K::Object),
    f("fault", F::Fault, 42, K::ReadOnly),
    f(
        "inspection_finished_at",
        F::InspectionFinishedAt,
        6,
        K::ReadOnly,
    ),
    f(
        "inspection_started_at",
        F::InspectionStartedAt,
        6,
        K::ReadOnly,
    ),
    f(
        "inspect_interface",
        F::Interface(iface::INSPECT),
        31,
        K::Interface,
    ),
    f("instance_info", F::InstanceInfo, 1, K::Object),
    f("instance_uuid", F::InstanceUuid, 1, K::Uuid),
    f("last_error", F::LastError, 1, K::ReadOnly),
    f("lessee", F::Lessee, 65, K::Text(255)),
    f("maintenance", F::Maintenance, 1, K::Bool),
    f("maintenance_reason", F::MaintenanceReason, 1, K::ReadOnly),
    f(
        "management_interface",
        F::Interface(iface::MANAGEMENT),
        31,
        K::Interface,
    ),
    f("name", F::Name, 5, K::Name),
    f(
        "network_interface",
        F::Interface(iface::NETWORK),
        20,
        K::Interface,
    ),
    f("owner", F::Owner, 50, K::Text(255)),
    f(
        "power_interface",
        F::Interface(iface::POWER),
        31,
        K::Interface,
    ),
    f("power_state", F::PowerState, 1, K::ReadOnly),
    f("properties", F::Properties, 1, K::Object),
    f("protected", F::Protected, 48, K::Bool),
    f("protected_reason", F::ProtectedReason, 48, K::Text(255)),
    f("provision_state", F::ProvisionState, 1, K::ReadOnly),
    f(
        "provision_updated_at",
        F::ProvisionUpdatedAt,
        1,
        K::ReadOnly,
    ),
    f("raid_config", F::RaidConfig, 12, K::ReadOnly),
    f(
        "raid_interface",
        F::Interface(iface::RAID),
        31,
        K::Interface,
    ),
    f(
        "rescue_interface",
        F::Interface(iface::RESCUE),
        38,
        K::Interface,
    ),
    f("reservation", F::Reservation, 1, K::ReadOnly),
    f("resource_class", F::ResourceClass, 21, K::Text(80)),
    f("retired", F::Retired, 61, K::Bool),
    f("retired_reason", F::RetiredReason, 61, K::Text(4096)),
    f(
        "storage_interface",
        F::Interface(iface::STORAGE),
        33,
        K::Interface,
    ),
    f("target_power_state", F::TargetPowerState, 1, K::ReadOnly),
    f(
        "target_provision_state",
        F::TargetProvisionState,
        1,
        K::ReadOnly,
    ),
    f("target_raid_config", F::TargetRaidConfig, 12, K::ReadOnly),
    f("traits", F::Traits, 37, K::ReadOnly),
    f(
        "vendor_interface",
        F::Interface(iface::VENDOR),
        31,
        K::Interface,
    ),
    f("conductor", F::Conductor, 49, K::ReadOnly),
    f("allocation_uuid", F::AllocationUuid, 52, K::ReadOnly),
    f("chassis_uuid", F::ChassisUuid, 1, K::Chassis),
    // Fields of microversions above 1.62 (a request above the maximum we advertise
    // is refused before any of them is looked at).
    f(
        "firmware_interface",
        F::Interface(iface::FIRMWARE),
        86,
        K::Interface,
    ),
    f("network_data", F::NetworkData, 66, K::NetworkData),
    f("boot_mode", F::BootMode, 75, K::ReadOnly),
    f("secure_boot", F::SecureBoot, 75, K::ReadOnly),
    f("shard", F::Shard, 82, K::Text(255)),
    f("parent_node", F::ParentNode, 83, K::ParentNode),
    f("service_step", F::ServiceStep, 87, K::ReadOnly),
    f("disable_power_off", F::DisablePowerOff, 95, K::Bool),
    f("instance_name", F::InstanceName, 104, K::NonEmptyText(255)),
    f("health", F::Health, 109, K::ReadOnly),
];

/// The top-level paths a node PATCH may touch, worded as Ironic's error lists them.
pub const PATCH_ALLOWED: &[&str] = &[
    "automated_clean",
    "bios_interface",
    "boot_interface",
    "chassis_uuid",
    "conductor_group",
    "console_interface",
    "deploy_interface",
    "description",
    "disable_power_off",
    "driver",
    "driver_info",
    "extra",
    "inspect_interface",
    "instance_info",
    "instance_name",
    "instance_uuid",
    "lessee",
    "maintenance",
    "management_interface",
    "name",
    "network_data",
    "network_interface",
    "owner",
    "power_interface",
    "properties",
    "protected",
    "protected_reason",
    "raid_interface",
    "rescue_interface",
    "resource_class",
    "retired",
    "retired_reason",
    "shard",
    "storage_interface",
    "vendor_interface",
    "parent_node",
    "firmware_interface",
];

/// Looks a field up by its wire name.
pub fn field(name: &str) -> Option<&'static FieldSpec> {
    FIELDS.iter().find(|s| s.name == name)
}

/// The default fields of `GET /v1/nodes` without `detail`.
pub const DEFAULT_LIST_FIELDS: &[&str] = &[
    "uuid",
    "instance_uuid",
    "maintenance",
    "power_state",
    "provision_state",
    "name",
];

/// A field set, one bit per entry of [`FIELDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FieldMask(pub u128);

impl FieldMask {
    pub fn all() -> Self {
        FieldMask(u128::MAX)
    }
    pub fn contains(self, idx: usize) -> bool {
        self.0 & (1u128 << idx) != 0
    }
    pub fn insert(&mut self, idx: usize) {
        self.0 |= 1u128 << idx;
    }
    pub fn has(self, name: &str) -> bool {
        FIELDS
            .iter()
            .position(|s| s.name == name)
            .is_some_and(|i| self.contains(i))
    }
}

/// Parses `?fields=` for nodes: unknown field → 400, too new → 406.
pub fn parse_fields(list: &str, version: Version) -> Result<FieldMask> {
    let mut mask = FieldMask::default();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(i) = FIELDS.iter().position(|s| s.name == name) else {
            return Err(Error::invalid(format!(
                "Field {name} is not a valid field."
            )));
        };
        if !version.at_least(FIELDS[i].min) {
            return Err(Error::not_acceptable());
        }
        mask.insert(i);
    }
    Ok(mask)
}

/// Where a written document came from: it changes the wording of errors.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    Create,
    /// A PATCH of the node the client called `ident`.
    Patch {
        ident: &'a str,
    },
}

impl Source<'_> {
    fn label(&self) -> &'static str {
        match self {
            Source::Create => "node",
            Source::Patch { .. } => "patch",
        }
    }
    fn schema(&self, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(format!("Schema error for {}: {msg}", self.label()))
    }
}

const BOOL_WORDS: &[(&str, bool)] = &[
    ("0", false),
    ("1", true),
    ("f", false),
    ("false", false),
    ("n", false),
    ("no", false),
    ("off", false),
    ("on", true),
    ("t", true),
    ("true", true),
    ("y", true),
    ("yes", true),
];

/// Ironic's strict boolean words (`true/false/yes/no/1/0/on/off/t/f/y/n`).
pub fn parse_bool_word(s: &str) -> Option<bool> {
    let l = s.to_ascii_lowercase();
    BOOL_WORDS.iter().find(|(w, _)| *w == l).map(|(_, b)| *b)
}

/// The message for a value that is not one of the boolean words.
pub fn bool_word_error(name: &str, value: &str) -> Error {
    let words: Vec<String> = BOOL_WORDS.iter().map(|(w, _)| format!("'{w}'")).collect();
    Error::invalid(format!(
        "Invalid {name}: Unrecognized value {}, acceptable values are: {}",
        py_repr_str(value),
        words.join(", ")
    ))
}

fn get_bool(spec: &FieldSpec, v: &Value, src: Source<'_>, nullable: bool) -> Result<Option<bool>> {
    match v {
        Value::Bool(b) => Ok(Some(*b)),
        Value::Null if nullable => Ok(None),
        Value::String(s) => parse_bool_word(s)
            .map(Some)
            .ok_or_else(|| bool_word_error(spec.name, s)),
        other => Err(src.schema(format_args!(
            "{} is not of type 'string', 'boolean'{}",
            py_repr(other),
            if nullable { ", 'null'" } else { "" }
        ))),
    }
}

fn get_text(v: &Value, max: usize, src: Source<'_>) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.chars().count() <= max => Ok(Some(s.clone())),
        Value::String(s) => Err(src.schema(format_args!("{} is too long", py_repr_str(s)))),
        other => Err(src.schema(format_args!(
            "{} is not of type 'string', 'null'",
            py_repr(other)
        ))),
    }
}

fn get_object(v: &Value, src: Source<'_>) -> Result<JsonObject> {
    match v {
        Value::Null => Ok(JsonObject::new()),
        Value::Object(o) => Ok(o.clone()),
        other => Err(src.schema(format_args!(
            "{} is not of type 'object', 'null'",
            py_repr(other)
        ))),
    }
}

fn show_obj(o: &JsonObject) -> Value {
    Value::Object(o.clone())
}

fn show_opt(s: &Option<impl AsRef<str>>) -> Value {
    s.as_ref()
        .map_or(Value::Null, |s| Value::String(s.as_ref().to_string()))
}

impl Node {
    /// The writable fields visible at `version`, as a JSON document a patch applies to.
    pub fn patch_doc(&self, version: Version) -> JsonObject {
        let mut doc = JsonObject::new();
        for spec in FIELDS {
            if spec.kind == K::ReadOnly || !version.at_least(spec.min) {
                continue;
            }
            let v = match spec.field {
                F::AutomatedClean => self.automated_clean.map_or(Value::Null, Value::Bool),
                F::Interface(i) => show_opt(&self.interfaces.0[i]),
                F::ConductorGroup => Value::String(self.conductor_group.clone()),
                F::Description => show_opt(&self.description),
                F::Driver => Value::String(self.driver.clone()),
                F::DriverInfo => show_obj(&self.driver_info),
                F::Extra => show_obj(&self.extra),
                F::InstanceInfo => show_obj(&self.instance_info),
                F::InstanceUuid => show_opt(&self.instance_uuid),
                F::Lessee => show_opt(&self.lessee),
                F::Maintenance => Value::Bool(self.maintenance),
                F::Name => show_opt(&self.name),
                F::Owner => show_opt(&self.owner),
                F::Properties => show_obj(&self.properties),
                F::Protected => Value::Bool(self.protected),
                F::ProtectedReason => show_opt(&self.protected_reason),
                F::ResourceClass => show_opt(&self.resource_class),
                F::Retired => Value::Bool(self.retired),
                F::RetiredReason => show_opt(&self.retired_reason),
                F::ChassisUuid => show_opt(&self.chassis_uuid),
                F::NetworkData => show_obj(&self.network_data),
                F::Shard => show_opt(&self.shard),
                F::ParentNode => show_opt(&self.parent_node),
                F::DisablePowerOff => Value::Bool(self.disable_power_off),
                F::InstanceName => show_opt(&self.instance_name),
                _ => continue,
            };
            doc.insert(spec.name.to_string(), v);
        }
        doc
    }

    /// Writes every writable field visible at `version` from `doc`; a field missing from
    /// `doc` is reset to its default (that is what `remove` of a top-level field means).
    pub fn apply_doc(&mut self, doc: &JsonObject, version: Version, src: Source<'_>) -> Result<()> {
        for spec in FIELDS {
            if spec.kind == K::ReadOnly || !version.at_least(spec.min) {
                continue;
            }
            // A removed flag goes back to false (`openstack baremetal node unset
            // --retired` removes it); an explicit null stays an error.
            let v = match doc.get(spec.name) {
                Some(v) => v,
                None if matches!(
                    spec.field,
                    F::Maintenance | F::Protected | F::Retired | F::DisablePowerOff
                ) =>
                {
                    &Value::Bool(false)
                }
                None => &Value::Null,
            };
            self.set_field(spec, v, version, src)?;
        }
        Ok(())
    }

    fn set_field(
        &mut self,
        spec: &FieldSpec,
        v: &Value,
        version: Version,
        src: Source<'_>,
    ) -> Result<()> {
        match (spec.field, spec.kind) {
            (F::AutomatedClean, _) => self.automated_clean = get_bool(spec, v, src, true)?,
            (F::Maintenance, _) => {
                self.maintenance = get_bool(spec, v, src, false)?.unwrap_or(false)
            }
            (F::Protected, _) => self.protected = get_bool(spec, v, src, false)?.unwrap_or(false),
            (F::Retired, _) => self.retired = get_bool(spec, v, src, false)?.unwrap_or(false),
            (F::Interface(i), _) => self.interfaces.0[i] = get_text(v, 255, src)?,
            (F::ConductorGroup, _) => {
                let g = get_text(v, 255, src)?.unwrap_or_default();
                if !is_valid_conductor_group(&g) {
                    return Err(Error::invalid(format!(
                        "Invalid conductor group {}: must contain only letters, digits, '_', '-' and '.'",
                        py_repr_str(&g)
                    )));
                }
                self.conductor_group = g.to_ascii_lowercase();
            }
            (F::Driver, _) => match v {
                Value::String(s) if !s.is_empty() && s.len() <= 255 => self.driver = s.clone(),
                Value::Null => return Err(src.schema("'driver' is a required property")),
                other => {
                    return Err(src.schema(format_args!(
                        "{} is not a valid driver name",
                        py_repr(other)
                    )));
                }
            },
            (F::DriverInfo, _) => self.driver_info = get_object(v, src)?,
            (F::Extra, _) => self.extra = get_object(v, src)?,
            (F::InstanceInfo, _) => self.instance_info = get_object(v, src)?,
            (F::Properties, _) => self.properties = get_object(v, src)?,
            (F::InstanceUuid, _) => {
                self.instance_uuid = match get_text(v, 36, src)? {
                    None => None,
                    Some(s) => Some(canonical_uuid(&s).ok_or_else(|| {
                        src.schema(format_args!("{} is not a 'uuid'", py_repr_str(&s)))
                    })?),
                }
            }
            // That the chassis exists is checked where the database is at hand (the API).
            (F::ChassisUuid, _) => {
                self.chassis_uuid = match get_text(v, 36, src)? {
                    None => None,
                    Some(c) => Some(ChassisUuid::parse(&c).ok_or_else(|| {
                        Error::invalid(format!("Chassis {c} could not be found."))
                    })?),
                };
            }
            (F::Name, _) => {
                let name = get_text(v, 255, src).map_err(|_| invalid_name(src, &value_text(v)))?; // An unchanged name is not judged again by the request's (older) rules.
                if let Some(n) = &name
                    && name != self.name
                    && !is_valid_node_name(n, version)
                {
                    return Err(invalid_name(src, n));
                }
                self.name = name;
            }
            (F::Description, _) => self.description = get_text(v, 4096, src)?,
            (F::Lessee, _) => self.lessee = get_text(v, 255, src)?,
            (F::Owner, _) => self.owner = get_text(v, 255, src)?,
            (F::ProtectedReason, _) => self.protected_reason = get_text(v, 255, src)?,
            (F::RetiredReason, _) => self.retired_reason = get_text(v, 4096, src)?,
            (F::ResourceClass, _) => self.resource_class = get_text(v, 80, src)?,
            (F::NetworkData, _) => {
                let data = get_object(v, src)?;
                crate::network_data::check(&Value::Object(data.clone())).map_err(
                    |e| match src {
                        Source::Create => src.schema(e),
                        Source::Patch { .. } => {
                            Error::invalid(format!("Invalid network_data: {e}"))
                        }
                    },
                )?;
                self.network_data = data;
            }
            (F::Shard, _) => self.shard = get_text(v, 255, src)?,
            // A name was resolved to a uuid by the API, which also checked the node exists.
            (F::ParentNode, _) => {
                self.parent_node = match get_text(v, 36, src)? {
                    None => None,
                    Some(s) => Some(NodeUuid::parse(&s).ok_or_else(|| {
                        src.schema(format_args!("{} is not a 'uuid'", py_repr_str(&s)))
                    })?),
                }
            }
            (F::DisablePowerOff, _) => {
                self.disable_power_off = get_bool(spec, v, src, false)?.unwrap_or(false)
            }
            (F::InstanceName, _) => {
                self.instance_name = get_text(v, 255, src)?;
                if self.instance_name.as_deref() == Some("") {
                    return Err(src.schema("'' should be non-empty"));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn invalid_name(src: Source<'_>, name: &str) -> Error {
    match src {
        Source::Create => Error::invalid(format!(
            "Cannot create node with invalid name {}",
            py_repr_str(name)
        )),
        Source::Patch { ident } => Error::invalid(format!(
            "Node {ident}: Cannot change name to invalid name {}",
            py_repr_str(name)
        )),
    }
}

/// Site defaults a new node takes when the body does not say otherwise.
#[derive(Debug, Clone, Default)]
pub struct NodeDefaults {
    pub conductor_group: String,
    pub resource_class: Option<String>,
}

/// Builds a node from a `POST /v1/nodes` body (reference §4.2, "POST rules").
pub fn from_create_body(body: &Value, version: Version, defaults: &NodeDefaults) -> Result<Node> {
    let src = Source::Create;
    let Value::Object(obj) = body else {
        return Err(src.schema(format_args!("{} is not of type 'object'", py_repr(body))));
    };
    for key in obj.keys() {
        if key == "uuid" {
            continue;
        }
        match field(key) {
            // Writable fields, and those upstream accepts at versions above ours (406).
            // `boot_mode` is read-only, but may be given at creation (1.75).
            Some(spec)
                if spec.kind != K::ReadOnly
                    || PATCH_ALLOWED.contains(&spec.name)
                    || spec.field == F::BootMode =>
            {
                if !version.at_least(spec.min) {
                    return Err(Error::not_acceptable());
                }
            }
            _ => {
                return Err(src.schema(format_args!(
                    "Additional properties are not allowed ({} was unexpected)",
                    py_repr_str(key)
                )));
            }
        }
    }
    if !obj.contains_key("driver") {
        return Err(src.schema("'driver' is a required property"));
    }
    let uuid = match obj.get("uuid") {
        None | Some(Value::Null) => NodeUuid::new_v4(),
        Some(Value::String(s)) => NodeUuid::parse(s)
            .ok_or_else(|| src.schema(format_args!("{} is not a 'uuid'", py_repr_str(s))))?,
        Some(other) => return Err(src.schema(format_args!("{} is not a 'uuid'", py_repr(other)))),
    };
    let mut node = Node::blank(uuid, String::new(), version);
    // Start from the defaults, then let the body override them.
    let mut doc = node.patch_doc(Version::MAX);
    doc.insert(
        "conductor_group".into(),
        Value::String(defaults.conductor_group.clone()),
    );
    if let Some(rc) = &defaults.resource_class {
        doc.insert("resource_class".into(), Value::String(rc.clone()));
    }
    for (k, v) in obj {
        doc.insert(k.clone(), v.clone());
    }
    node.apply_doc(&doc, Version::MAX, src)?;
    node.boot_mode = match obj.get("boot_mode") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if m == "bios" || m == "uefi" => Some(m.clone()),
        Some(other) => {
            return Err(src.schema(format_args!(
                "{} is not one of ['bios', 'uefi']",
                py_repr(other)
            )));
        }
    };
    // Fields above the request version were refused above; the name rule depends on it.
    if let Some(n) = &node.name
        && !is_valid_node_name(n, version)
    {
        return Err(invalid_name(src, n));
    }
    Ok(node)
}

/// The rules a conductor applies to an update of `old` into `new` under the node lock
/// (reference §4.2 "PATCH rules" step 7 and §11). Interface validity against the
/// hardware type is checked by the caller, which knows the drivers.
pub fn check_update(old: &Node, new: &mut Node) -> Result<()> {
    let uuid = old.uuid.as_str();
    let state = old.provision_state;
    // A change of `instance_info` carrying a `display_name` names an unnamed instance
    // (upstream's forward compatibility for 1.104's `instance_name`; S229).
    if new.instance_info != old.instance_info
        && new.instance_name.is_none()
        && let Some(Value::String(d)) = new.instance_info.get("display_name")
        && !d.is_empty()
    {
        new.instance_name = Some(d.chars().take(255).collect());
    }
    if old.maintenance && !new.maintenance {
        new.maintenance_reason = None;
        new.fault = None;
    }
    if new.protected != old.protected || new.protected_reason != old.protected_reason {
        if new.protected
            && !old.protected
            && !matches!(state, ProvisionState::Active | ProvisionState::Rescue)
        {
            return Err(Error::InvalidState(format!(
                "Node {uuid} can only be made protected in provision states 'active' or 'rescue', the current state is '{state}'"
            )));
        }
        if !new.protected {
            if new.protected_reason.is_some() && new.protected_reason != old.protected_reason {
                return Err(Error::invalid(
                    "The protected_reason field can only be set when protected is True",
                ));
            }
            new.protected_reason = None;
        }
    }
    if new.retired != old.retired || new.retired_reason != old.retired_reason {
        if new.retired && !old.retired && state == ProvisionState::Available {
            return Err(Error::InvalidState(format!(
                "Node {uuid} can not have 'retired' set in provision state 'available', the current state is 'available'"
            )));
        }
        if !new.retired {
            if new.retired_reason.is_some() && new.retired_reason != old.retired_reason {
                return Err(Error::invalid(
                    "The retired_reason field can only be set when retired is True",
                ));
            }
            new.retired_reason = None;
        }
    }
    let changes_allowed = state.interface_change_allowed() || old.maintenance;
    if new.interfaces != old.interfaces && !changes_allowed {
        let changed: Vec<String> = INTERFACE_TYPES
            .iter()
            .enumerate()
            .filter(|(i, _)| new.interfaces.0[*i] != old.interfaces.0[*i])
            .map(|(_, t)| format!("{t}_interface"))
            .collect();
        return Err(Error::InvalidState(format!(
            "Node {uuid} can not update the interfaces {} in its current state '{state}'; \
             move it to enroll, manageable or available, or set maintenance mode first",
            changed.join(", ")
        )));
    }
    if new.resource_class != old.resource_class && old.resource_class.is_some() && !changes_allowed
    {
        return Err(Error::InvalidState(format!(
            "Node {uuid} can not have resource_class updated unless it is in one of allowed ({}) states or in maintenance mode.",
            "enroll, inspecting, inspect wait, manageable, available"
        )));
    }
    // Removing the instance of an allocated node gives the allocation up (the store
    // deletes it with the save); only where the node is not in use, or in maintenance.
    if old.instance_uuid.is_some() && new.instance_uuid.is_none() && old.allocation_id.is_some() {
        if !changes_allowed {
            return Err(Error::InvalidState(format!(
                "Node {uuid} with an allocation can not have instance_uuid removed unless it is in one of allowed ({}) states or in maintenance mode. Current state is '{state}'.",
                "enroll, inspecting, inspect wait, manageable, available"
            )));
        }
        new.allocation_id = None;
    }
    if let (Some(a), Some(b)) = (&old.instance_uuid, &new.instance_uuid)
        && a != b
    {
        return Err(Error::Conflict(format!(
            "Node {uuid} is associated with instance {a}."
        )));
    }
    Ok(())
}

/// The rules of `destroy_node` (reference §4.2 "DELETE rules").
pub fn check_destroy(node: &Node, allow_deleting_available: bool) -> Result<()> {
    let uuid = node.uuid.as_str();
    if !node.maintenance
        && let Some(i) = &node.instance_uuid
    {
        return Err(Error::Conflict(format!(
            "Node {uuid} is associated with instance {i}."
        )));
    }
    if node.protected {
        return Err(Error::Forbidden(format!(
            "Node {uuid} is protected and cannot be undeployed, rebuilt or deleted"
        )));
    }
    if !node.maintenance
        && !node
            .provision_state
            .delete_allowed(allow_deleting_available)
    {
        let mut valid = vec!["'manageable'", "'enroll'", "'adopt failed'"];
        if allow_deleting_available {
            valid.push("'available'");
        }
        return Err(Error::InvalidState(format!(
            "Can not delete node \"{uuid}\" while it is in provision state \"{}\". Valid provision states to perform deletion are: \"({})\", or set the node into maintenance mode",
            node.provision_state,
            valid.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn create(body: Value, v: u16) -> Result<Node> {
        from_create_body(&body, Version::new(v), &NodeDefaults::default())
    }

    #[test]
    fn create_defaults_follow_the_version() {
        let n = create(json!({"driver": "fake-hardware"}), 1).unwrap();
        assert_eq!(n.provision_state, ProvisionState::Available);
        let n = create(
            json!({"driver": "fake-hardware", "conductor_group": "RACK1"}),
            51,
        )
        .unwrap();
        assert_eq!(n.provision_state, ProvisionState::Enroll);
        assert_eq!(n.conductor_group, "rack1");
    }

    #[test]
    fn create_errors_have_ironic_wording() {
        let m = |b: Value, v| create(b, v).unwrap_err();
        assert_eq!(
            m(json!({"driver": "x", "foo": 1}), 51).message(),
            "Schema error for node: Additional properties are not allowed ('foo' was unexpected)"
        );
        assert_eq!(
            m(json!({"driver": "x", "extra": "not-an-object"}), 51).message(),
            "Schema error for node: 'not-an-object' is not of type 'object', 'null'"
        );
        assert_eq!(
            m(json!({}), 51).message(),
            "Schema error for node: 'driver' is a required property"
        );
        assert_eq!(
            m(json!({"driver": "x", "resource_class": "r"}), 20),
            Error::not_acceptable()
        );
        assert_eq!(
            m(json!({"driver": "x", "name": "n"}), 4),
            Error::not_acceptable()
        );
        assert_eq!(
            m(json!({"driver": "x", "name": "bad name!"}), 51).message(),
            "Cannot create node with invalid name 'bad name!'"
        );
        assert!(m(json!({"driver": "x", "maintenance": "yes-please"}), 51)
            .message()
            .starts_with("Invalid maintenance: Unrecognized value 'yes-please', acceptable values are: '0', '1'"));
        assert!(matches!(
            m(json!({"driver": "x", "provision_state": "active"}), 51),
            Error::Invalid(_)
        ));
        assert!(matches!(
            m(json!({"driver": "x", "resource_class": "r".repeat(81)}), 51),
            Error::Invalid(_)
        ));
    }

    #[test]
    fn update_rules() {
        let old = create(json!({"driver": "x"}), 51).unwrap();
        let mut new = old.clone();
        new.protected = true;
        assert!(matches!(
            check_update(&old, &mut new),
            Err(Error::InvalidState(_))
        ));

        let mut avail = old.clone();
        avail.provision_state = ProvisionState::Available;
        let mut new = avail.clone();
        new.retired = true;
        assert!(matches!(
            check_update(&avail, &mut new),
            Err(Error::InvalidState(_))
        ));

        let mut new = old.clone();
        new.retired_reason = Some("why".into());
        assert!(matches!(
            check_update(&old, &mut new),
            Err(Error::Invalid(_))
        ));

        let mut retired = old.clone();
        retired.retired = true;
        retired.retired_reason = Some("old".into());
        let mut new = retired.clone();
        new.retired = false;
        check_update(&retired, &mut new).unwrap();
        assert_eq!(new.retired_reason, None);

        let mut active = old.clone();
        active.provision_state = ProvisionState::Active;
        let mut new = active.clone();
        new.interfaces.0[0] = Some("no-bios".into());
        assert!(matches!(
            check_update(&active, &mut new),
            Err(Error::InvalidState(_))
        ));
    }

    #[test]
    fn destroy_rules() {
        let mut n = create(json!({"driver": "x"}), 51).unwrap();
        check_destroy(&n, true).unwrap();
        n.provision_state = ProvisionState::Active;
        let e = check_destroy(&n, true).unwrap_err();
        assert!(
            e.message()
                .contains("('manageable', 'enroll', 'adopt failed', 'available')")
        );
        n.maintenance = true;
        check_destroy(&n, true).unwrap();
        n.protected = true;
        assert!(matches!(check_destroy(&n, true), Err(Error::Forbidden(_))));
    }

    #[test]
    fn fields_parse() {
        assert!(parse_fields("uuid,name", Version::MAX).is_ok());
        assert_eq!(
            parse_fields("owner", Version::new(49)),
            Err(Error::not_acceptable())
        );
        assert_eq!(
            parse_fields("retired", Version::new(60)),
            Err(Error::not_acceptable())
        );
        assert!(parse_fields("retired,retired_reason", Version::new(61)).is_ok());
        assert!(matches!(
            parse_fields("nope", Version::MAX),
            Err(Error::Invalid(_))
        ));
        assert!(FIELDS.len() <= 128);
    }
}
