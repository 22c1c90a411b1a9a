//! Domain types ↔ protobuf messages. Decoding checks what it reads: a malformed message
//! from a third-party client is an `Invalid` error, never a panic.

use chrono::{DateTime, Utc};
use ironic_model::node::{INTERFACE_TYPES, Interfaces, JsonObject};
use ironic_model::patch::{Op, PatchOp};
use ironic_model::port::{Port, Portgroup};
use ironic_model::states::ProvisionState;
use ironic_model::volume::{VolumeConnector, VolumeTarget};
use ironic_model::{
    AllocationUuid, ChassisUuid, ConnectorUuid, Error, Node, NodeUuid, PortUuid, PortgroupUuid,
    TargetUuid, Version,
};

use ironic_catalog::steps::Requested;
use ironic_model::deploy_template::TemplateStep;
use ironic_model::{
    Allocation, AllocationId, AllocationRef, AllocationState, ConductorId, NewAllocation, NodeId,
};

use crate::{NodeRef, pb};

fn us(t: &DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn from_us(v: i64, field: &str) -> Result<DateTime<Utc>, Error> {
    DateTime::from_timestamp_micros(v).ok_or_else(|| bad(field))
}

fn opt_from_us(v: Option<i64>, field: &str) -> Result<Option<DateTime<Utc>>, Error> {
    v.map(|v| from_us(v, field)).transpose()
}

pub(crate) fn bad(field: &str) -> Error {
    Error::Invalid(format!("Malformed RPC message: invalid {field}."))
}

/// A resource's uuid as the message carries it (a string), parsed into its type.
fn id<T>(s: String, parse: fn(&str) -> Option<T>, field: &str) -> Result<T, Error> {
    parse(&s).ok_or_else(|| bad(field))
}

fn opt_id<T>(
    s: Option<String>,
    parse: fn(&str) -> Option<T>,
    field: &str,
) -> Result<Option<T>, Error> {
    s.map(|s| id(s, parse, field)).transpose()
}

fn ids<T>(v: Vec<String>, parse: fn(&str) -> Option<T>, field: &str) -> Result<Vec<T>, Error> {
    v.into_iter().map(|s| id(s, parse, field)).collect()
}

fn json_text(o: &JsonObject) -> String {
    serde_json::to_string(o).unwrap_or_else(|_| "{}".into())
}

fn json_obj(s: &str, field: &str) -> Result<JsonObject, Error> {
    if s.is_empty() {
        return Ok(JsonObject::new());
    }
    serde_json::from_str(s).map_err(|_| bad(field))
}

pub fn node_to_pb(n: &Node) -> pb::Node {
    pb::Node {
        id: n.id.0,
        uuid: n.uuid.as_str().to_string(),
        name: n.name.clone(),
        driver: n.driver.clone(),
        driver_info_json: json_text(&n.driver_info),
        driver_internal_info_json: json_text(&n.driver_internal_info),
        properties_json: json_text(&n.properties),
        instance_info_json: json_text(&n.instance_info),
        extra_json: json_text(&n.extra),
        instance_uuid: n.instance_uuid.clone(),
        chassis_uuid: n.chassis_uuid.as_deref().map(str::to_string),
        provision_state: n.provision_state.as_str().to_string(),
        target_provision_state: n.target_provision_state.map(|s| s.as_str().to_string()),
        provision_updated_at_us: n.provision_updated_at.as_ref().map(us),
        power_state: n.power_state.clone(),
        target_power_state: n.target_power_state.clone(),
        console_enabled: n.console_enabled,
        maintenance: n.maintenance,
        maintenance_reason: n.maintenance_reason.clone(),
        fault: n.fault.clone(),
        last_error: n.last_error.clone(),
        reservation: n.reservation.clone(),
        clean_step_json: json_text(&n.clean_step),
        deploy_step_json: json_text(&n.deploy_step),
        raid_config_json: json_text(&n.raid_config),
        target_raid_config_json: json_text(&n.target_raid_config),
        inspection_started_at_us: n.inspection_started_at.as_ref().map(us),
        inspection_finished_at_us: n.inspection_finished_at.as_ref().map(us),
        resource_class: n.resource_class.clone(),
        conductor_group: n.conductor_group.clone(),
        automated_clean: n.automated_clean,
        protected: n.protected,
        protected_reason: n.protected_reason.clone(),
        owner: n.owner.clone(),
        lessee: n.lessee.clone(),
        description: n.description.clone(),
        allocation_id: n.allocation_id.map(|i| i.0),
        allocation_uuid: n.allocation_uuid.as_deref().map(str::to_string),
        retired: n.retired,
        retired_reason: n.retired_reason.clone(),
        conductor_affinity: n.conductor_affinity.map(|i| i.0),
        network_data_json: json_text(&n.network_data),
        boot_mode: n.boot_mode.clone(),
        secure_boot: n.secure_boot,
        shard: n.shard.clone(),
        parent_node: n.parent_node.as_deref().map(str::to_string),
        service_step_json: json_text(&n.service_step),
        disable_power_off: n.disable_power_off,
        instance_name: n.instance_name.clone(),
        health: n.health.clone(),
        interfaces: INTERFACE_TYPES
            .iter()
            .zip(n.interfaces.0.iter())
            .filter_map(|(t, v)| v.as_ref().map(|v| (t.to_string(), v.clone())))
            .collect(),
        traits: n.traits.clone(),
        created_at_us: us(&n.created_at),
        updated_at_us: n.updated_at.as_ref().map(us),
    }
}

fn state(s: &str, field: &str) -> Result<ProvisionState, Error> {
    ProvisionState::parse(s).ok_or_else(|| bad(field))
}

pub fn node_from_pb(p: pb::Node) -> Result<Node, Error> {
    let mut interfaces = Interfaces::default();
    for (t, v) in p.interfaces {
        let i = Interfaces::index(&t).ok_or_else(|| bad("interface type"))?;
        interfaces.0[i] = Some(v);
    }
    Ok(Node {
        id: NodeId(p.id),
        uuid: NodeUuid::parse(&p.uuid).ok_or_else(|| bad("node uuid"))?,
        name: p.name,
        driver: p.driver,
        driver_info: json_obj(&p.driver_info_json, "driver_info")?,
        driver_internal_info: json_obj(&p.driver_internal_info_json, "driver_internal_info")?,
        properties: json_obj(&p.properties_json, "properties")?,
        instance_info: json_obj(&p.instance_info_json, "instance_info")?,
        extra: json_obj(&p.extra_json, "extra")?,
        instance_uuid: p.instance_uuid,
        chassis_uuid: opt_id(p.chassis_uuid, ChassisUuid::parse, "chassis_uuid")?,
        provision_state: state(&p.provision_state, "provision_state")?,
        target_provision_state: p
            .target_provision_state
            .as_deref()
            .map(|s| state(s, "target_provision_state"))
            .transpose()?,
        provision_updated_at: opt_from_us(p.provision_updated_at_us, "provision_updated_at")?,
        power_state: p.power_state,
        target_power_state: p.target_power_state,
        console_enabled: p.console_enabled,
        maintenance: p.maintenance,
        maintenance_reason: p.maintenance_reason,
        fault: p.fault,
        last_error: p.last_error,
        reservation: p.reservation,
        clean_step: json_obj(&p.clean_step_json, "clean_step")?,
        deploy_step: json_obj(&p.deploy_step_json, "deploy_step")?,
        raid_config: json_obj(&p.raid_config_json, "raid_config")?,
        target_raid_config: json_obj(&p.target_raid_config_json, "target_raid_config")?,
        inspection_started_at: opt_from_us(p.inspection_started_at_us, "inspection_started_at")?,
        inspection_finished_at: opt_from_us(p.inspection_finished_at_us, "inspection_finished_at")?,
        resource_class: p.resource_class,
        conductor_group: p.conductor_group,
        automated_clean: p.automated_clean,
        protected: p.protected,
        protected_reason: p.protected_reason,
        owner: p.owner,
        lessee: p.lessee,
        description: p.description,
        allocation_id: p.allocation_id.map(AllocationId),
        allocation_uuid: opt_id(p.allocation_uuid, AllocationUuid::parse, "allocation_uuid")?,
        retired: p.retired,
        retired_reason: p.retired_reason,
        conductor_affinity: p.conductor_affinity.map(ConductorId),
        last_request_id: None,
        network_data: json_obj(&p.network_data_json, "network_data")?,
        boot_mode: p.boot_mode,
        secure_boot: p.secure_boot,
        shard: p.shard,
        parent_node: opt_id(p.parent_node, NodeUuid::parse, "parent_node")?,
        service_step: json_obj(&p.service_step_json, "service_step")?,
        disable_power_off: p.disable_power_off,
        instance_name: p.instance_name,
        health: p.health,
        interfaces,
        traits: p.traits,
        created_at: from_us(p.created_at_us, "created_at")?,
        updated_at: opt_from_us(p.updated_at_us, "updated_at")?,
    })
}

pub fn allocation_to_pb(a: &Allocation) -> pb::Allocation {
    pb::Allocation {
        id: a.id.0,
        uuid: a.uuid.to_string(),
        name: a.name.clone(),
        node_id: a.node_id.map(|i| i.0),
        node_uuid: a.node_uuid.as_deref().map(str::to_string),
        resource_class: a.resource_class.clone(),
        candidate_nodes: a.candidate_nodes.iter().map(ToString::to_string).collect(),
        traits: a.traits.clone(),
        state: a.state.as_str().to_string(),
        last_error: a.last_error.clone(),
        conductor_affinity: a.conductor_affinity.map(|i| i.0),
        owner: a.owner.clone(),
        extra_json: json_text(&a.extra),
        created_at_us: us(&a.created_at),
        updated_at_us: a.updated_at.as_ref().map(us),
    }
}

pub fn allocation_from_pb(p: Option<pb::Allocation>) -> Result<Allocation, Error> {
    let p = p.ok_or_else(|| bad("allocation"))?;
    Ok(Allocation {
        id: AllocationId(p.id),
        uuid: id(p.uuid, AllocationUuid::parse, "uuid")?,
        name: p.name,
        node_id: p.node_id.map(NodeId),
        node_uuid: opt_id(p.node_uuid, NodeUuid::parse, "node_uuid")?,
        resource_class: p.resource_class,
        candidate_nodes: ids(p.candidate_nodes, NodeUuid::parse, "candidate_nodes")?,
        traits: p.traits,
        state: AllocationState::parse(&p.state).ok_or_else(|| bad("allocation state"))?,
        last_error: p.last_error,
        conductor_affinity: p.conductor_affinity.map(ConductorId),
        owner: p.owner,
        extra: json_obj(&p.extra_json, "allocation extra")?,
        created_at: from_us(p.created_at_us, "created_at")?,
        updated_at: opt_from_us(p.updated_at_us, "updated_at")?,
    })
}

pub fn new_allocation_to_pb(a: NewAllocation) -> pb::NewAllocation {
    pb::NewAllocation {
        extra_json: json_text(&a.extra),
        uuid: a.uuid.into(),
        name: a.name,
        resource_class: a.resource_class,
        candidate_nodes: a.candidate_nodes.into_iter().map(String::from).collect(),
        traits: a.traits,
        owner: a.owner,
    }
}

pub fn new_allocation_from_pb(p: Option<pb::NewAllocation>) -> Result<NewAllocation, Error> {
    let p = p.ok_or_else(|| bad("allocation"))?;
    if p.uuid.is_empty() {
        return Err(bad("allocation uuid"));
    }
    Ok(NewAllocation {
        extra: json_obj(&p.extra_json, "allocation extra")?,
        uuid: id(p.uuid, AllocationUuid::parse, "uuid")?,
        name: p.name,
        resource_class: p.resource_class,
        candidate_nodes: ids(p.candidate_nodes, NodeUuid::parse, "candidate_nodes")?,
        traits: p.traits,
        owner: p.owner,
    })
}

pub fn allocation_ref_to_pb(a: &AllocationRef) -> pb::AllocationRef {
    pb::AllocationRef {
        id: a.id.0,
        uuid: a.uuid.to_string(),
    }
}

pub fn allocation_ref_from_pb(p: Option<pb::AllocationRef>) -> Result<AllocationRef, Error> {
    let p = p.ok_or_else(|| bad("allocation reference"))?;
    Ok(AllocationRef {
        id: AllocationId(p.id),
        uuid: id(p.uuid, AllocationUuid::parse, "uuid")?,
    })
}

pub fn node_ref_to_pb(n: &NodeRef) -> pb::NodeRef {
    pb::NodeRef {
        id: n.id.0,
        uuid: n.uuid.to_string(),
        driver: n.driver.clone(),
        conductor_group: n.conductor_group.clone(),
    }
}

pub fn node_ref_from_pb(n: Option<pb::NodeRef>) -> Result<NodeRef, Error> {
    let n = n.ok_or_else(|| bad("node reference"))?;
    Ok(NodeRef {
        id: NodeId(n.id),
        uuid: id(n.uuid, NodeUuid::parse, "uuid")?,
        driver: n.driver,
        conductor_group: n.conductor_group,
    })
}

pub fn patch_to_pb(ops: &[PatchOp]) -> Vec<pb::PatchOp> {
    ops.iter()
        .map(|o| pb::PatchOp {
            op: o.op.as_str().to_string(),
            path: o.path.clone(),
            value_json: o.value.as_ref().map(|v| v.to_string()),
        })
        .collect()
}

/// Decodes operations a caller validated. The conductor re-validates what it applies
/// (paths, values), so this only checks the shape.
pub fn patch_from_pb(ops: Vec<pb::PatchOp>) -> Result<Vec<PatchOp>, Error> {
    ops.into_iter()
        .map(|o| {
            let op = match o.op.as_str() {
                "add" => Op::Add,
                "replace" => Op::Replace,
                "remove" => Op::Remove,
                _ => return Err(bad("patch operation")),
            };
            if !o.path.starts_with('/') || o.path.len() < 2 {
                return Err(bad("patch path"));
            }
            let value = o
                .value_json
                .map(|v| serde_json::from_str(&v).map_err(|_| bad("patch value")))
                .transpose()?;
            Ok(PatchOp {
                op,
                path: o.path,
                value,
            })
        })
        .collect()
}

pub fn steps_to_pb(steps: &[Requested]) -> Vec<pb::Step> {
    steps
        .iter()
        .map(|s| pb::Step {
            interface: s.interface.clone(),
            step: s.step.clone(),
            args_json: json_text(&s.args),
            priority: None,
        })
        .collect()
}

pub fn steps_from_pb(steps: Vec<pb::Step>) -> Result<Vec<Requested>, Error> {
    steps
        .into_iter()
        .map(|s| {
            Ok(Requested {
                interface: s.interface,
                step: s.step,
                args: json_obj(&s.args_json, "step args")?,
            })
        })
        .collect()
}

/// Deploy steps (the `deploy_steps` argument) with their priorities.
pub fn deploy_steps_to_pb(steps: &[TemplateStep]) -> Vec<pb::Step> {
    steps
        .iter()
        .map(|s| pb::Step {
            interface: s.interface.clone(),
            step: s.step.clone(),
            args_json: json_text(&s.args),
            priority: Some(i32::try_from(s.priority).unwrap_or(i32::MAX)),
        })
        .collect()
}

pub fn deploy_steps_from_pb(steps: Vec<pb::Step>) -> Result<Vec<TemplateStep>, Error> {
    steps
        .into_iter()
        .map(|s| {
            Ok(TemplateStep {
                interface: s.interface,
                step: s.step,
                args: json_obj(&s.args_json, "step args")?,
                priority: s
                    .priority
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(|| bad("deploy step priority"))?,
            })
        })
        .collect()
}

pub fn error_to_pb(e: &Error) -> pb::RpcError {
    use pb::ErrorKind as K;
    let kind = match e {
        Error::NotFound(_) => K::NotFound,
        Error::Invalid(_) => K::Invalid,
        Error::NotAcceptable(_) => K::NotAcceptable,
        Error::Conflict(_) => K::Conflict,
        Error::Locked(_) => K::NodeLocked,
        Error::InvalidState(_) => K::InvalidState,
        Error::Forbidden(_) => K::Forbidden,
        Error::Unavailable(_) => K::NoFreeConductor,
        Error::Internal(_) => K::Internal,
    };
    pb::RpcError {
        kind: kind as i32,
        message: e.message().to_string(),
    }
}

pub fn error_from_pb(e: pb::RpcError) -> Error {
    use pb::ErrorKind as K;
    let m = e.message;
    match K::try_from(e.kind).unwrap_or(K::Internal) {
        K::NotFound => Error::NotFound(m),
        K::Invalid => Error::Invalid(m),
        K::NotAcceptable => Error::NotAcceptable(m),
        K::Conflict => Error::Conflict(m),
        K::NodeLocked => Error::Locked(m),
        K::InvalidState => Error::InvalidState(m),
        K::Forbidden => Error::Forbidden(m),
        K::NoFreeConductor => Error::Unavailable(m),
        K::Unimplemented => Error::internal(format!("conductor does not implement: {m}")),
        K::Internal | K::Unspecified => Error::internal(m),
    }
}

pub fn port_to_pb(p: &Port) -> pb::Port {
    pb::Port {
        id: p.id,
        uuid: p.uuid.to_string(),
        address: p.address.clone(),
        node_id: p.node_id.0,
        node_uuid: p.node_uuid.to_string(),
        portgroup_id: p.portgroup_id,
        portgroup_uuid: p.portgroup_uuid.as_deref().map(str::to_string),
        extra_json: json_text(&p.extra),
        internal_info_json: json_text(&p.internal_info),
        local_link_connection_json: json_text(&p.local_link_connection),
        pxe_enabled: p.pxe_enabled,
        physical_network: p.physical_network.clone(),
        is_smartnic: p.is_smartnic,
        name: p.name.clone(),
        description: p.description.clone(),
        vendor: p.vendor.clone(),
        category: p.category.clone(),
        available_for_dynamic_portgroup: p.available_for_dynamic_portgroup,
        created_at_us: us(&p.created_at),
        updated_at_us: p.updated_at.as_ref().map(us),
    }
}

pub fn port_from_pb(p: Option<pb::Port>) -> Result<Port, Error> {
    let p = p.ok_or_else(|| bad("port"))?;
    Ok(Port {
        id: p.id,
        uuid: id(p.uuid, PortUuid::parse, "uuid")?,
        address: p.address,
        node_id: NodeId(p.node_id),
        node_uuid: id(p.node_uuid, NodeUuid::parse, "node_uuid")?,
        portgroup_id: p.portgroup_id,
        portgroup_uuid: opt_id(p.portgroup_uuid, PortgroupUuid::parse, "portgroup_uuid")?,
        extra: json_obj(&p.extra_json, "port extra")?,
        internal_info: json_obj(&p.internal_info_json, "port internal_info")?,
        local_link_connection: json_obj(
            &p.local_link_connection_json,
            "port local_link_connection",
        )?,
        pxe_enabled: p.pxe_enabled,
        physical_network: p.physical_network,
        is_smartnic: p.is_smartnic,
        name: p.name,
        description: p.description,
        vendor: p.vendor,
        category: p.category,
        available_for_dynamic_portgroup: p.available_for_dynamic_portgroup,
        created_at: from_us(p.created_at_us, "created_at")?,
        updated_at: opt_from_us(p.updated_at_us, "updated_at")?,
    })
}

pub fn portgroup_to_pb(g: &Portgroup) -> pb::Portgroup {
    pb::Portgroup {
        id: g.id,
        uuid: g.uuid.to_string(),
        name: g.name.clone(),
        address: g.address.clone(),
        node_id: g.node_id.0,
        node_uuid: g.node_uuid.to_string(),
        extra_json: json_text(&g.extra),
        internal_info_json: json_text(&g.internal_info),
        mode: g.mode.clone(),
        properties_json: json_text(&g.properties),
        standalone_ports_supported: g.standalone_ports_supported,
        physical_network: g.physical_network.clone(),
        category: g.category.clone(),
        dynamic_portgroup: g.dynamic_portgroup,
        created_at_us: us(&g.created_at),
        updated_at_us: g.updated_at.as_ref().map(us),
    }
}

pub fn portgroup_from_pb(g: Option<pb::Portgroup>) -> Result<Portgroup, Error> {
    let g = g.ok_or_else(|| bad("portgroup"))?;
    Ok(Portgroup {
        id: g.id,
        uuid: id(g.uuid, PortgroupUuid::parse, "uuid")?,
        name: g.name,
        address: g.address,
        node_id: NodeId(g.node_id),
        node_uuid: id(g.node_uuid, NodeUuid::parse, "node_uuid")?,
        extra: json_obj(&g.extra_json, "portgroup extra")?,
        internal_info: json_obj(&g.internal_info_json, "portgroup internal_info")?,
        mode: g.mode,
        properties: json_obj(&g.properties_json, "portgroup properties")?,
        standalone_ports_supported: g.standalone_ports_supported,
        physical_network: g.physical_network,
        category: g.category,
        dynamic_portgroup: g.dynamic_portgroup,
        created_at: from_us(g.created_at_us, "created_at")?,
        updated_at: opt_from_us(g.updated_at_us, "updated_at")?,
    })
}

pub fn volume_connector_to_pb(c: &VolumeConnector) -> pb::VolumeConnector {
    pb::VolumeConnector {
        id: c.id,
        uuid: c.uuid.to_string(),
        node_id: c.node_id.0,
        node_uuid: c.node_uuid.to_string(),
        connector_type: c.connector_type.clone(),
        connector_id: c.connector_id.clone(),
        extra_json: json_text(&c.extra),
        created_at_us: us(&c.created_at),
        updated_at_us: c.updated_at.as_ref().map(us),
    }
}

pub fn volume_connector_from_pb(c: Option<pb::VolumeConnector>) -> Result<VolumeConnector, Error> {
    let c = c.ok_or_else(|| bad("volume connector"))?;
    Ok(VolumeConnector {
        id: c.id,
        uuid: id(c.uuid, ConnectorUuid::parse, "uuid")?,
        node_id: NodeId(c.node_id),
        node_uuid: id(c.node_uuid, NodeUuid::parse, "node_uuid")?,
        connector_type: c.connector_type,
        connector_id: c.connector_id,
        extra: json_obj(&c.extra_json, "volume connector extra")?,
        created_at: from_us(c.created_at_us, "created_at")?,
        updated_at: opt_from_us(c.updated_at_us, "updated_at")?,
    })
}

pub fn volume_target_to_pb(t: &VolumeTarget) -> pb::VolumeTarget {
    pb::VolumeTarget {
        id: t.id,
        uuid: t.uuid.to_string(),
        node_id: t.node_id.0,
        node_uuid: t.node_uuid.to_string(),
        volume_type: t.volume_type.clone(),
        volume_id: t.volume_id.clone(),
        boot_index: t.boot_index,
        properties_json: json_text(&t.properties),
        extra_json: json_text(&t.extra),
        created_at_us: us(&t.created_at),
        updated_at_us: t.updated_at.as_ref().map(us),
    }
}

pub fn volume_target_from_pb(t: Option<pb::VolumeTarget>) -> Result<VolumeTarget, Error> {
    let t = t.ok_or_else(|| bad("volume target"))?;
    Ok(VolumeTarget {
        id: t.id,
        uuid: id(t.uuid, TargetUuid::parse, "uuid")?,
        node_id: NodeId(t.node_id),
        node_uuid: id(t.node_uuid, NodeUuid::parse, "node_uuid")?,
        volume_type: t.volume_type,
        volume_id: t.volume_id,
        boot_index: t.boot_index,
        properties: json_obj(&t.properties_json, "volume target properties")?,
        extra: json_obj(&t.extra_json, "volume target extra")?,
        created_at: from_us(t.created_at_us, "created_at")?,
        updated_at: opt_from_us(t.updated_at_us, "updated_at")?,
    })
}

// ---------------------------------------------------------------------------------------
// Request fields

/// One field of a request: its Rust type ↔ its prost type. The calls generated from
/// the proto (`build.rs`) convert every field through this, so each conversion is
/// written once per type, here. A field whose Rust type is its prost type (strings,
/// flags, numbers) passes unchanged.
pub trait Field<W>: Sized {
    fn to_wire(self) -> W;
    /// Checks what it reads; `what` names the field in the error.
    fn from_wire(w: W, what: &str) -> Result<Self, Error>;
}

impl<T> Field<T> for T {
    fn to_wire(self) -> T {
        self
    }
    fn from_wire(w: T, _: &str) -> Result<T, Error> {
        Ok(w)
    }
}

impl Field<Option<pb::NodeRef>> for NodeRef {
    fn to_wire(self) -> Option<pb::NodeRef> {
        Some(node_ref_to_pb(&self))
    }
    fn from_wire(w: Option<pb::NodeRef>, _: &str) -> Result<Self, Error> {
        node_ref_from_pb(w)
    }
}

impl Field<Option<pb::NodeRef>> for Option<NodeRef> {
    fn to_wire(self) -> Option<pb::NodeRef> {
        self.as_ref().map(node_ref_to_pb)
    }
    fn from_wire(w: Option<pb::NodeRef>, _: &str) -> Result<Self, Error> {
        w.map(|n| node_ref_from_pb(Some(n))).transpose()
    }
}

impl Field<Option<pb::Node>> for Node {
    fn to_wire(self) -> Option<pb::Node> {
        Some(node_to_pb(&self))
    }
    fn from_wire(w: Option<pb::Node>, what: &str) -> Result<Self, Error> {
        node_from_pb(w.ok_or_else(|| bad(what))?)
    }
}

impl Field<Option<pb::Port>> for Port {
    fn to_wire(self) -> Option<pb::Port> {
        Some(port_to_pb(&self))
    }
    fn from_wire(w: Option<pb::Port>, _: &str) -> Result<Self, Error> {
        port_from_pb(w)
    }
}

impl Field<Option<pb::Portgroup>> for Portgroup {
    fn to_wire(self) -> Option<pb::Portgroup> {
        Some(portgroup_to_pb(&self))
    }
    fn from_wire(w: Option<pb::Portgroup>, _: &str) -> Result<Self, Error> {
        portgroup_from_pb(w)
    }
}

impl Field<Option<pb::VolumeConnector>> for VolumeConnector {
    fn to_wire(self) -> Option<pb::VolumeConnector> {
        Some(volume_connector_to_pb(&self))
    }
    fn from_wire(w: Option<pb::VolumeConnector>, _: &str) -> Result<Self, Error> {
        volume_connector_from_pb(w)
    }
}

impl Field<Option<pb::VolumeTarget>> for VolumeTarget {
    fn to_wire(self) -> Option<pb::VolumeTarget> {
        Some(volume_target_to_pb(&self))
    }
    fn from_wire(w: Option<pb::VolumeTarget>, _: &str) -> Result<Self, Error> {
        volume_target_from_pb(w)
    }
}

impl Field<Option<pb::NewAllocation>> for NewAllocation {
    fn to_wire(self) -> Option<pb::NewAllocation> {
        Some(new_allocation_to_pb(self))
    }
    fn from_wire(w: Option<pb::NewAllocation>, _: &str) -> Result<Self, Error> {
        new_allocation_from_pb(w)
    }
}

impl Field<Option<pb::AllocationRef>> for AllocationRef {
    fn to_wire(self) -> Option<pb::AllocationRef> {
        Some(allocation_ref_to_pb(&self))
    }
    fn from_wire(w: Option<pb::AllocationRef>, _: &str) -> Result<Self, Error> {
        allocation_ref_from_pb(w)
    }
}

impl Field<Vec<pb::PatchOp>> for Vec<PatchOp> {
    fn to_wire(self) -> Vec<pb::PatchOp> {
        patch_to_pb(&self)
    }
    fn from_wire(w: Vec<pb::PatchOp>, _: &str) -> Result<Self, Error> {
        patch_from_pb(w)
    }
}

/// Steps as a user asks for them (clean and service steps).
impl Field<Vec<pb::Step>> for Vec<Requested> {
    fn to_wire(self) -> Vec<pb::Step> {
        steps_to_pb(&self)
    }
    fn from_wire(w: Vec<pb::Step>, _: &str) -> Result<Self, Error> {
        steps_from_pb(w)
    }
}

/// Deploy steps, each with its priority.
impl Field<Vec<pb::Step>> for Vec<TemplateStep> {
    fn to_wire(self) -> Vec<pb::Step> {
        deploy_steps_to_pb(&self)
    }
    fn from_wire(w: Vec<pb::Step>, _: &str) -> Result<Self, Error> {
        deploy_steps_from_pb(w)
    }
}

/// A resource's uuid as its text; decoding parses it.
macro_rules! uuid_field {
    ($($t:ident),*) => {$(
        impl Field<String> for $t {
            fn to_wire(self) -> String {
                self.into()
            }
            fn from_wire(w: String, what: &str) -> Result<Self, Error> {
                id(w, $t::parse, what)
            }
        }

        impl Field<Option<String>> for Option<$t> {
            fn to_wire(self) -> Option<String> {
                self.map(String::from)
            }
            fn from_wire(w: Option<String>, what: &str) -> Result<Self, Error> {
                opt_id(w, $t::parse, what)
            }
        }
    )*};
}

uuid_field!(PortUuid, PortgroupUuid, ConnectorUuid, TargetUuid);

/// The API microversion as its minor number (`api_minor`).
impl Field<u32> for Version {
    fn to_wire(self) -> u32 {
        u32::from(self.minor)
    }
    fn from_wire(w: u32, _: &str) -> Result<Self, Error> {
        u16::try_from(w)
            .map(Version::new)
            .map_err(|_| Error::invalid("api_minor out of range"))
    }
}

/// Any JSON value as JSON text (`*_json`).
impl Field<String> for serde_json::Value {
    fn to_wire(self) -> String {
        self.to_string()
    }
    fn from_wire(w: String, what: &str) -> Result<Self, Error> {
        serde_json::from_str(&w).map_err(|_| bad(what))
    }
}

impl Field<Option<String>> for Option<serde_json::Value> {
    fn to_wire(self) -> Option<String> {
        self.map(|v| v.to_string())
    }
    fn from_wire(w: Option<String>, what: &str) -> Result<Self, Error> {
        w.map(|v| Field::from_wire(v, what)).transpose()
    }
}

/// A JSON object as JSON text; unlike the stored objects' fields, an empty text is not
/// an empty object here (the request's data is required).
impl Field<String> for JsonObject {
    fn to_wire(self) -> String {
        serde_json::Value::Object(self).to_string()
    }
    fn from_wire(w: String, what: &str) -> Result<Self, Error> {
        serde_json::from_str(&w).map_err(|_| bad(what))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ironic_model::Version;

    #[test]
    fn node_round_trips() {
        let mut n = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::new(51));
        n.id = NodeId(7);
        n.name = Some("n1".into());
        n.extra.insert("k".into(), serde_json::json!({"a": [1, 2]}));
        n.interfaces.0[3] = Some("fake".into());
        n.traits = vec!["CUSTOM_A".into()];
        n.target_provision_state = Some(ProvisionState::Active);
        n.provision_updated_at = Some(ironic_model::node::now());
        n.updated_at = Some(ironic_model::node::now());
        n.network_data
            .insert("links".into(), serde_json::json!([{"id": "l0"}]));
        n.boot_mode = Some("uefi".into());
        n.secure_boot = Some(false);
        n.shard = Some("s1".into());
        n.parent_node = Some(NodeUuid::new_v4());
        n.service_step.insert("step".into(), "x".into());
        n.disable_power_off = true;
        n.instance_name = Some("vm".into());
        n.health = Some("OK".into());
        let back = node_from_pb(node_to_pb(&n)).unwrap();
        assert_eq!(back, n);
    }

    #[test]
    fn malformed_messages_are_invalid_not_panics() {
        let mut p = node_to_pb(&Node::blank(
            NodeUuid::new_v4(),
            "x".into(),
            Version::new(1),
        ));
        p.extra_json = "[1".into();
        assert!(matches!(node_from_pb(p.clone()), Err(Error::Invalid(_))));
        p.extra_json = "{}".into();
        p.provision_state = "nope".into();
        assert!(matches!(node_from_pb(p), Err(Error::Invalid(_))));
        let ops = vec![pb::PatchOp {
            op: "move".into(),
            path: "/extra".into(),
            value_json: None,
        }];
        assert!(patch_from_pb(ops).is_err());
    }

    #[test]
    fn errors_keep_kind_and_message() {
        for e in [
            Error::NotFound("a".into()),
            Error::Invalid("b".into()),
            Error::NotAcceptable("c".into()),
            Error::Conflict("d".into()),
            Error::Locked("e".into()),
            Error::InvalidState("f".into()),
            Error::Forbidden("g".into()),
            Error::Unavailable("h".into()),
            Error::internal("i"),
        ] {
            assert_eq!(error_from_pb(error_to_pb(&e)), e);
        }
    }
}
