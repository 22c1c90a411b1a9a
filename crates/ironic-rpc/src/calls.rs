//! The conductor calls: one request type per method of the proto's `Conductor`
//! service, with what the call needs (not whole rows), its reply type, its wire
//! message and its route. The list at the end generates [`crate::Handlers`] and the
//! dispatch tables.
//!
//! Adding a call: its request message and `rpc` line in `proto/`, its request type and
//! list entry here, its handler in the conductor (`docs/architecture.md`, "Adding a
//! conductor call").

use ironic_catalog::steps::{OfferedStep, Requested};
use ironic_model::node::JsonObject;
use ironic_model::patch::PatchOp;
use ironic_model::port::{Port, Portgroup};
use ironic_model::volume::{VolumeConnector, VolumeTarget};
use ironic_model::{Allocation, AllocationRef, Error, NewAllocation, Node, Version};

use crate::contract::{Call, Reply, Route, contract};
use crate::convert::{
    allocation_from_pb, allocation_ref_from_pb, allocation_ref_to_pb, bad, new_allocation_from_pb,
    new_allocation_to_pb, node_from_pb, node_ref_from_pb, node_ref_to_pb, node_to_pb,
    patch_from_pb, patch_to_pb, port_from_pb, port_to_pb, portgroup_from_pb, portgroup_to_pb,
    steps_from_pb, steps_to_pb, volume_connector_from_pb, volume_connector_to_pb,
    volume_target_from_pb, volume_target_to_pb,
};
use crate::pb::conductor_methods as m;
use crate::{NodeRef, pb};

// ---------------------------------------------------------------------------------------
// Replies

impl Reply for () {
    type Wire = pb::Empty;
    fn to_wire(self) -> pb::Empty {
        pb::Empty {}
    }
    fn from_wire(_: pb::Empty) -> Result<(), Error> {
        Ok(())
    }
}

impl Reply for Node {
    type Wire = pb::NodeReply;
    fn to_wire(self) -> pb::NodeReply {
        pb::NodeReply {
            node: Some(node_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::NodeReply) -> Result<Node, Error> {
        node_from_pb(w.node.ok_or_else(|| bad("node reply"))?)
    }
}

impl Reply for Vec<String> {
    type Wire = pb::TraitsReply;
    fn to_wire(self) -> pb::TraitsReply {
        pb::TraitsReply { traits: self }
    }
    fn from_wire(w: pb::TraitsReply) -> Result<Vec<String>, Error> {
        Ok(w.traits)
    }
}

impl Reply for Allocation {
    type Wire = pb::AllocationReply;
    fn to_wire(self) -> pb::AllocationReply {
        pb::AllocationReply {
            allocation: Some(crate::convert::allocation_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::AllocationReply) -> Result<Allocation, Error> {
        allocation_from_pb(w.allocation)
    }
}

impl Reply for Port {
    type Wire = pb::PortReply;
    fn to_wire(self) -> pb::PortReply {
        pb::PortReply {
            port: Some(port_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::PortReply) -> Result<Port, Error> {
        port_from_pb(w.port)
    }
}

impl Reply for Portgroup {
    type Wire = pb::PortgroupReply;
    fn to_wire(self) -> pb::PortgroupReply {
        pb::PortgroupReply {
            portgroup: Some(portgroup_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::PortgroupReply) -> Result<Portgroup, Error> {
        portgroup_from_pb(w.portgroup)
    }
}

impl Reply for VolumeConnector {
    type Wire = pb::VolumeConnectorReply;
    fn to_wire(self) -> pb::VolumeConnectorReply {
        pb::VolumeConnectorReply {
            connector: Some(volume_connector_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::VolumeConnectorReply) -> Result<Self, Error> {
        volume_connector_from_pb(w.connector)
    }
}

impl Reply for VolumeTarget {
    type Wire = pb::VolumeTargetReply;
    fn to_wire(self) -> pb::VolumeTargetReply {
        pb::VolumeTargetReply {
            target: Some(volume_target_to_pb(&self)),
        }
    }
    fn from_wire(w: pb::VolumeTargetReply) -> Result<Self, Error> {
        volume_target_from_pb(w.target)
    }
}

/// A JSON document a conductor answers with (management reads, vendor passthru).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonDoc(pub serde_json::Value);

impl Reply for JsonDoc {
    type Wire = pb::JsonReply;
    fn to_wire(self) -> pb::JsonReply {
        pb::JsonReply {
            json: self.0.to_string(),
        }
    }
    fn from_wire(w: pb::JsonReply) -> Result<JsonDoc, Error> {
        serde_json::from_str(&w.json)
            .map(JsonDoc)
            .map_err(|_| bad("json reply"))
    }
}

/// The VIFs attached to a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Vifs(pub Vec<String>);

impl Reply for Vifs {
    type Wire = pb::VifsReply;
    fn to_wire(self) -> pb::VifsReply {
        pb::VifsReply { vifs: self.0 }
    }
    fn from_wire(w: pb::VifsReply) -> Result<Vifs, Error> {
        Ok(Vifs(w.vifs))
    }
}

/// `None`: the driver cannot list its steps yet (its agent is starting).
impl Reply for Option<Vec<OfferedStep>> {
    type Wire = pb::StepsReply;
    fn to_wire(self) -> pb::StepsReply {
        pb::StepsReply {
            pending: self.is_none(),
            steps: self
                .unwrap_or_default()
                .into_iter()
                .map(|s| pb::StepSpec {
                    interface: s.interface,
                    step: s.step,
                    priority: i32::try_from(s.priority).unwrap_or(i32::MAX),
                    abortable: s.abortable,
                    argsinfo_json: s.argsinfo.to_string(),
                })
                .collect(),
        }
    }
    fn from_wire(w: pb::StepsReply) -> Result<Self, Error> {
        if w.pending {
            return Ok(None);
        }
        w.steps
            .into_iter()
            .map(|s| {
                Ok(OfferedStep {
                    interface: s.interface,
                    step: s.step,
                    priority: u32::try_from(s.priority).map_err(|_| bad("step priority"))?,
                    abortable: s.abortable,
                    argsinfo: serde_json::from_str(&s.argsinfo_json)
                        .map_err(|_| bad("step argsinfo"))?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()
            .map(Some)
    }
}

/// One interface's validation (`GET /v1/nodes/{node}/validate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCheck {
    pub interface: String,
    /// `None`: the implementation does not support the interface.
    pub result: Option<bool>,
    pub reason: Option<String>,
}

impl Reply for Vec<InterfaceCheck> {
    type Wire = pb::ValidateReply;
    fn to_wire(self) -> pb::ValidateReply {
        pb::ValidateReply {
            interfaces: self
                .into_iter()
                .map(|c| {
                    (
                        c.interface,
                        pb::InterfaceValidation {
                            result: c.result.unwrap_or(false),
                            supported: c.result.is_some(),
                            reason: c.reason,
                        },
                    )
                })
                .collect(),
        }
    }
    fn from_wire(w: pb::ValidateReply) -> Result<Self, Error> {
        Ok(w.interfaces
            .into_iter()
            .map(|(interface, v)| InterfaceCheck {
                interface,
                result: v.supported.then_some(v.result),
                reason: v.reason,
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------
// Requests

/// A round trip that touches nothing: liveness checks and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping;

impl Call for Ping {
    const METHOD: &'static str = m::PING;
    type Reply = ();
    type Wire = pb::PingRequest;
    fn route(&self) -> Route {
        Route::Any
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::PingRequest {
        pb::PingRequest {}
    }
    fn from_wire(_: pb::PingRequest) -> Result<Self, Error> {
        Ok(Ping)
    }
}

/// Stores a new node after filling in its hardware type's default interfaces.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateNode {
    pub node: Node,
}

impl Call for CreateNode {
    const METHOD: &'static str = m::CREATE_NODE;
    type Reply = Node;
    type Wire = pb::CreateNodeRequest;
    fn route(&self) -> Route {
        Route::Owner(NodeRef::from(&self.node))
    }
    /// The node has its uuid before it is sent: a repeat that finds it stored (same
    /// driver and name) answers with it.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {} to see whether it was created before trying again.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::CreateNodeRequest {
        pb::CreateNodeRequest {
            node: Some(node_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::CreateNodeRequest) -> Result<Self, Error> {
        Ok(CreateNode {
            node: node_from_pb(
                w.node
                    .ok_or_else(|| Error::invalid("create_node needs a node"))?,
            )?,
        })
    }
}

/// A JSON Patch the conductor applies to the node under its lock, so concurrent
/// updates never overwrite each other.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateNode {
    /// The node, with the driver and group it will have after the patch (the call goes
    /// to a conductor that serves them).
    pub node: NodeRef,
    /// How the client named the node (for messages).
    pub ident: String,
    pub patch: Vec<PatchOp>,
    pub version: Version,
    pub reset_interfaces: Option<bool>,
}

impl Call for UpdateNode {
    const METHOD: &'static str = m::UPDATE_NODE;
    type Reply = Node;
    type Wire = pb::UpdateNodeRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The node records the request id of the call that last wrote it: a repeat whose
    /// first attempt was applied answers without applying it again.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::UpdateNodeRequest {
        pb::UpdateNodeRequest {
            node: Some(node_ref_to_pb(&self.node)),
            ident: self.ident,
            patch: patch_to_pb(&self.patch),
            api_minor: u32::from(self.version.minor),
            reset_interfaces: self.reset_interfaces,
        }
    }
    fn from_wire(w: pb::UpdateNodeRequest) -> Result<Self, Error> {
        let minor =
            u16::try_from(w.api_minor).map_err(|_| Error::invalid("api_minor out of range"))?;
        Ok(UpdateNode {
            node: node_ref_from_pb(w.node)?,
            ident: w.ident,
            patch: patch_from_pb(w.patch)?,
            version: Version::new(minor),
            reset_interfaces: w.reset_interfaces,
        })
    }
}

/// Maintenance on (with a reason) or off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetMaintenance {
    pub node: NodeRef,
    pub on: bool,
    pub reason: Option<String>,
}

impl Call for SetMaintenance {
    const METHOD: &'static str = m::SET_MAINTENANCE;
    type Reply = Node;
    type Wire = pb::SetMaintenanceRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Sets the flag and reason to given values: the same outcome however often.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::SetMaintenanceRequest {
        pb::SetMaintenanceRequest {
            node: Some(node_ref_to_pb(&self.node)),
            on: self.on,
            reason: self.reason,
        }
    }
    fn from_wire(w: pb::SetMaintenanceRequest) -> Result<Self, Error> {
        Ok(SetMaintenance {
            node: node_ref_from_pb(w.node)?,
            on: w.on,
            reason: w.reason,
        })
    }
}

/// Deletes a node (under its lock, with the deletion rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyNode {
    pub node: NodeRef,
}

impl Call for DestroyNode {
    const METHOD: &'static str = m::DESTROY_NODE;
    type Reply = ();
    type Wire = pb::DestroyNodeRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the node gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {} to see whether it was deleted before trying again.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DestroyNodeRequest {
        pb::DestroyNodeRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::DestroyNodeRequest) -> Result<Self, Error> {
        Ok(DestroyNode {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Adds traits, or replaces them all; replies with the node's traits afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddNodeTraits {
    pub node: NodeRef,
    pub traits: Vec<String>,
    pub replace: bool,
}

impl Call for AddNodeTraits {
    const METHOD: &'static str = m::ADD_NODE_TRAITS;
    type Reply = Vec<String>;
    type Wire = pb::AddNodeTraitsRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A set union (or replacement): the same outcome however often.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::AddNodeTraitsRequest {
        pb::AddNodeTraitsRequest {
            node: Some(node_ref_to_pb(&self.node)),
            traits: self.traits,
            replace: self.replace,
        }
    }
    fn from_wire(w: pb::AddNodeTraitsRequest) -> Result<Self, Error> {
        Ok(AddNodeTraits {
            node: node_ref_from_pb(w.node)?,
            traits: w.traits,
            replace: w.replace,
        })
    }
}

/// Removes one trait (404 if absent) or, with `None`, all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveNodeTraits {
    pub node: NodeRef,
    pub one: Option<String>,
}

impl Call for RemoveNodeTraits {
    const METHOD: &'static str = m::REMOVE_NODE_TRAITS;
    type Reply = ();
    type Wire = pb::RemoveNodeTraitsRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the trait gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::RemoveNodeTraitsRequest {
        pb::RemoveNodeTraitsRequest {
            node: Some(node_ref_to_pb(&self.node)),
            r#trait: self.one,
        }
    }
    fn from_wire(w: pb::RemoveNodeTraitsRequest) -> Result<Self, Error> {
        Ok(RemoveNodeTraits {
            node: node_ref_from_pb(w.node)?,
            one: w.r#trait,
        })
    }
}

/// A provisioning verb (`manage`, `provide`, `abort`, …) applied under the node lock;
/// replies once accepted, long work continues in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoProvisioningAction {
    pub node: NodeRef,
    pub action: String,
}

impl Call for DoProvisioningAction {
    const METHOD: &'static str = m::DO_PROVISIONING_ACTION;
    type Reply = ();
    type Wire = pb::DoProvisioningActionRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The node records the request id of the call that last wrote it: a repeat whose
    /// first attempt was applied answers without applying it again.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {}: its provision_state and last_error tell whether the action started.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DoProvisioningActionRequest {
        pb::DoProvisioningActionRequest {
            node: Some(node_ref_to_pb(&self.node)),
            action: self.action,
        }
    }
    fn from_wire(w: pb::DoProvisioningActionRequest) -> Result<Self, Error> {
        Ok(DoProvisioningAction {
            node: node_ref_from_pb(w.node)?,
            action: w.action,
        })
    }
}

/// Manual cleaning of a `manageable` node; replies once accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct DoNodeClean {
    pub node: NodeRef,
    pub steps: Vec<Requested>,
    /// Clean without booting the ramdisk (only steps that do not need it).
    pub disable_ramdisk: Option<bool>,
}

impl Call for DoNodeClean {
    const METHOD: &'static str = m::DO_NODE_CLEAN;
    type Reply = ();
    type Wire = pb::DoNodeCleanRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The node records the request id of the call that last wrote it: a repeat whose
    /// first attempt was applied answers without applying it again.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {}: its provision_state and last_error tell whether the action started.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DoNodeCleanRequest {
        pb::DoNodeCleanRequest {
            node: Some(node_ref_to_pb(&self.node)),
            clean_steps: steps_to_pb(&self.steps),
            disable_ramdisk: self.disable_ramdisk,
        }
    }
    fn from_wire(w: pb::DoNodeCleanRequest) -> Result<Self, Error> {
        Ok(DoNodeClean {
            node: node_ref_from_pb(w.node)?,
            steps: steps_from_pb(w.clean_steps)?,
            disable_ramdisk: w.disable_ramdisk,
        })
    }
}

/// Service an active node (1.87): run `steps` and return to `active`; replies once
/// accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct DoNodeService {
    pub node: NodeRef,
    pub steps: Vec<Requested>,
    /// Service without booting the ramdisk (1.108; only steps that do not need it).
    pub disable_ramdisk: Option<bool>,
}

impl Call for DoNodeService {
    const METHOD: &'static str = m::DO_NODE_SERVICE;
    type Reply = ();
    type Wire = pb::DoNodeServiceRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// As `do_node_clean`: the node records the request id of the call that last wrote it.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {}: its provision_state and last_error tell whether the action started.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DoNodeServiceRequest {
        pb::DoNodeServiceRequest {
            node: Some(node_ref_to_pb(&self.node)),
            service_steps: steps_to_pb(&self.steps),
            disable_ramdisk: self.disable_ramdisk,
        }
    }
    fn from_wire(w: pb::DoNodeServiceRequest) -> Result<Self, Error> {
        Ok(DoNodeService {
            node: node_ref_from_pb(w.node)?,
            steps: steps_from_pb(w.service_steps)?,
            disable_ramdisk: w.disable_ramdisk,
        })
    }
}

/// Deploy (or, with `rebuild`, redeploy) the node; replies once accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct DoNodeDeploy {
    pub node: NodeRef,
    pub rebuild: bool,
    pub configdrive: Option<serde_json::Value>,
    /// The `deploy_steps` argument (1.69), schema-checked by the caller.
    pub deploy_steps: Vec<ironic_model::deploy_template::TemplateStep>,
}

impl Call for DoNodeDeploy {
    const METHOD: &'static str = m::DO_NODE_DEPLOY;
    type Reply = ();
    type Wire = pb::DoNodeDeployRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The node records the request id of the call that last wrote it: a repeat whose
    /// first attempt was applied answers without applying it again.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {}: its provision_state and last_error tell whether the action started.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DoNodeDeployRequest {
        pb::DoNodeDeployRequest {
            node: Some(node_ref_to_pb(&self.node)),
            rebuild: self.rebuild,
            configdrive_json: self.configdrive.map(|c| c.to_string()),
            deploy_steps: crate::convert::deploy_steps_to_pb(&self.deploy_steps),
        }
    }
    fn from_wire(w: pb::DoNodeDeployRequest) -> Result<Self, Error> {
        let configdrive = w
            .configdrive_json
            .map(|c| {
                serde_json::from_str(&c)
                    .map_err(|_| Error::invalid("Malformed RPC request: invalid configdrive."))
            })
            .transpose()?;
        Ok(DoNodeDeploy {
            node: node_ref_from_pb(w.node)?,
            rebuild: w.rebuild,
            configdrive,
            deploy_steps: crate::convert::deploy_steps_from_pb(w.deploy_steps)?,
        })
    }
}

/// Tear the node down, then clean it; replies once accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoNodeTearDown {
    pub node: NodeRef,
}

impl Call for DoNodeTearDown {
    const METHOD: &'static str = m::DO_NODE_TEAR_DOWN;
    type Reply = ();
    type Wire = pb::DoNodeTearDownRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The node records the request id of the call that last wrote it: a repeat whose
    /// first attempt was applied answers without applying it again.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read node {}: its provision_state and last_error tell whether the action started.",
            self.node.uuid
        )
    }
    fn to_wire(self) -> pb::DoNodeTearDownRequest {
        pb::DoNodeTearDownRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::DoNodeTearDownRequest) -> Result<Self, Error> {
        Ok(DoNodeTearDown {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Power on, off, reboot (soft variants too), under the node lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeNodePowerState {
    pub node: NodeRef,
    pub new_state: String,
    pub timeout_secs: Option<u32>,
}

impl Call for ChangeNodePowerState {
    const METHOD: &'static str = m::CHANGE_NODE_POWER_STATE;
    type Reply = ();
    type Wire = pb::ChangeNodePowerStateRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Power on and off reach the same state however often; a reboot is not repeated.
    fn retry_safe(&self) -> bool {
        matches!(
            self.new_state.as_str(),
            "power on" | "power off" | "soft power off"
        )
    }
    fn to_wire(self) -> pb::ChangeNodePowerStateRequest {
        pb::ChangeNodePowerStateRequest {
            node: Some(node_ref_to_pb(&self.node)),
            new_state: self.new_state,
            timeout_secs: self.timeout_secs,
        }
    }
    fn from_wire(w: pb::ChangeNodePowerStateRequest) -> Result<Self, Error> {
        Ok(ChangeNodePowerState {
            node: node_ref_from_pb(w.node)?,
            new_state: w.new_state,
            timeout_secs: w.timeout_secs,
        })
    }
}

/// Each interface of the node, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateDriverInterfaces {
    pub node: NodeRef,
}

impl Call for ValidateDriverInterfaces {
    const METHOD: &'static str = m::VALIDATE_DRIVER_INTERFACES;
    type Reply = Vec<InterfaceCheck>;
    type Wire = pb::ValidateDriverInterfacesRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Reads only.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::ValidateDriverInterfacesRequest {
        pb::ValidateDriverInterfacesRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::ValidateDriverInterfacesRequest) -> Result<Self, Error> {
        Ok(ValidateDriverInterfaces {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// The clean steps the node's driver offers with at least `min_priority`, highest
/// first; `None` when the driver cannot list them yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetCleanSteps {
    pub node: NodeRef,
    pub min_priority: u32,
}

impl Call for GetCleanSteps {
    const METHOD: &'static str = m::GET_CLEAN_STEPS;
    type Reply = Option<Vec<OfferedStep>>;
    type Wire = pb::GetCleanStepsRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Reads only.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetCleanStepsRequest {
        pb::GetCleanStepsRequest {
            node: Some(node_ref_to_pb(&self.node)),
            min_priority: self.min_priority,
        }
    }
    fn from_wire(w: pb::GetCleanStepsRequest) -> Result<Self, Error> {
        Ok(GetCleanSteps {
            node: node_ref_from_pb(w.node)?,
            min_priority: w.min_priority,
        })
    }
}

/// Stores a new allocation and reserves a node for it in the background (any live
/// conductor); with `backfill`, records it for that node at once (its owner). Replies
/// with the allocation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateAllocation {
    pub allocation: NewAllocation,
    pub backfill: Option<NodeRef>,
}

impl Call for CreateAllocation {
    const METHOD: &'static str = m::CREATE_ALLOCATION;
    type Reply = Allocation;
    type Wire = pb::CreateAllocationRequest;
    fn route(&self) -> Route {
        match &self.backfill {
            Some(n) => Route::Owner(n.clone()),
            None => Route::Any,
        }
    }
    /// The allocation has its uuid before it is sent: a repeat that finds it stored
    /// with the same fields answers with it.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::CreateAllocationRequest {
        pb::CreateAllocationRequest {
            allocation: Some(new_allocation_to_pb(self.allocation)),
            backfill_node: self.backfill.as_ref().map(node_ref_to_pb),
        }
    }
    fn from_wire(w: pb::CreateAllocationRequest) -> Result<Self, Error> {
        Ok(CreateAllocation {
            allocation: new_allocation_from_pb(w.allocation)?,
            backfill: w
                .backfill_node
                .map(|n| node_ref_from_pb(Some(n)))
                .transpose()?,
        })
    }
}

/// Deletes an allocation and frees its node (node lock; 409 where the node's state
/// forbids it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyAllocation {
    pub allocation: AllocationRef,
}

impl Call for DestroyAllocation {
    const METHOD: &'static str = m::DESTROY_ALLOCATION;
    type Reply = ();
    type Wire = pb::DestroyAllocationRequest;
    fn route(&self) -> Route {
        Route::Any
    }
    /// A repeat that finds the allocation gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DestroyAllocationRequest {
        pb::DestroyAllocationRequest {
            allocation: Some(allocation_ref_to_pb(&self.allocation)),
        }
    }
    fn from_wire(w: pb::DestroyAllocationRequest) -> Result<Self, Error> {
        Ok(DestroyAllocation {
            allocation: allocation_ref_from_pb(w.allocation)?,
        })
    }
}

fn api_minor(v: u32) -> Result<Version, Error> {
    u16::try_from(v)
        .map(Version::new)
        .map_err(|_| Error::invalid("api_minor out of range"))
}

/// Stores a new port of `node` (under its lock): the port group rules, then the
/// database's uniqueness of uuid, MAC address and name.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatePort {
    pub node: NodeRef,
    pub port: Port,
}

impl Call for CreatePort {
    const METHOD: &'static str = m::CREATE_PORT;
    type Reply = Port;
    type Wire = pb::CreatePortRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// The port has its uuid before it is sent: a repeat that finds it stored (same
    /// address and node) answers with it.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read port {} to see whether it was created before trying again.",
            self.port.uuid
        )
    }
    fn to_wire(self) -> pb::CreatePortRequest {
        pb::CreatePortRequest {
            node: Some(node_ref_to_pb(&self.node)),
            port: Some(port_to_pb(&self.port)),
        }
    }
    fn from_wire(w: pb::CreatePortRequest) -> Result<Self, Error> {
        Ok(CreatePort {
            node: node_ref_from_pb(w.node)?,
            port: port_from_pb(w.port)?,
        })
    }
}

/// A JSON Patch applied to a port under its node's lock.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdatePort {
    /// The port's node (before the patch).
    pub node: NodeRef,
    pub port_uuid: String,
    pub patch: Vec<PatchOp>,
    pub version: Version,
}

impl Call for UpdatePort {
    const METHOD: &'static str = m::UPDATE_PORT;
    type Reply = Port;
    type Wire = pb::UpdatePortRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read port {} to see whether the change was made before trying again.",
            self.port_uuid
        )
    }
    fn to_wire(self) -> pb::UpdatePortRequest {
        pb::UpdatePortRequest {
            node: Some(node_ref_to_pb(&self.node)),
            port_uuid: self.port_uuid,
            patch: patch_to_pb(&self.patch),
            api_minor: u32::from(self.version.minor),
        }
    }
    fn from_wire(w: pb::UpdatePortRequest) -> Result<Self, Error> {
        Ok(UpdatePort {
            node: node_ref_from_pb(w.node)?,
            port_uuid: w.port_uuid,
            patch: patch_from_pb(w.patch)?,
            version: api_minor(w.api_minor)?,
        })
    }
}

/// Deletes a port (under its node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyPort {
    pub node: NodeRef,
    pub port_uuid: String,
}

impl Call for DestroyPort {
    const METHOD: &'static str = m::DESTROY_PORT;
    type Reply = ();
    type Wire = pb::DestroyPortRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the port gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DestroyPortRequest {
        pb::DestroyPortRequest {
            node: Some(node_ref_to_pb(&self.node)),
            port_uuid: self.port_uuid,
        }
    }
    fn from_wire(w: pb::DestroyPortRequest) -> Result<Self, Error> {
        Ok(DestroyPort {
            node: node_ref_from_pb(w.node)?,
            port_uuid: w.port_uuid,
        })
    }
}

/// Stores a new port group of `node` (under its lock).
#[derive(Debug, Clone, PartialEq)]
pub struct CreatePortgroup {
    pub node: NodeRef,
    pub portgroup: Portgroup,
}

impl Call for CreatePortgroup {
    const METHOD: &'static str = m::CREATE_PORTGROUP;
    type Reply = Portgroup;
    type Wire = pb::CreatePortgroupRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// As for ports: the uuid is chosen before sending.
    fn retry_safe(&self) -> bool {
        true
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read port group {} to see whether it was created before trying again.",
            self.portgroup.uuid
        )
    }
    fn to_wire(self) -> pb::CreatePortgroupRequest {
        pb::CreatePortgroupRequest {
            node: Some(node_ref_to_pb(&self.node)),
            portgroup: Some(portgroup_to_pb(&self.portgroup)),
        }
    }
    fn from_wire(w: pb::CreatePortgroupRequest) -> Result<Self, Error> {
        Ok(CreatePortgroup {
            node: node_ref_from_pb(w.node)?,
            portgroup: portgroup_from_pb(w.portgroup)?,
        })
    }
}

/// A JSON Patch applied to a port group under its node's lock.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdatePortgroup {
    pub node: NodeRef,
    pub portgroup_uuid: String,
    pub patch: Vec<PatchOp>,
}

impl Call for UpdatePortgroup {
    const METHOD: &'static str = m::UPDATE_PORTGROUP;
    type Reply = Portgroup;
    type Wire = pb::UpdatePortgroupRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn lost_hint(&self) -> String {
        format!(
            "Read port group {} to see whether the change was made before trying again.",
            self.portgroup_uuid
        )
    }
    fn to_wire(self) -> pb::UpdatePortgroupRequest {
        pb::UpdatePortgroupRequest {
            node: Some(node_ref_to_pb(&self.node)),
            portgroup_uuid: self.portgroup_uuid,
            patch: patch_to_pb(&self.patch),
        }
    }
    fn from_wire(w: pb::UpdatePortgroupRequest) -> Result<Self, Error> {
        Ok(UpdatePortgroup {
            node: node_ref_from_pb(w.node)?,
            portgroup_uuid: w.portgroup_uuid,
            patch: patch_from_pb(w.patch)?,
        })
    }
}

/// Deletes a port group without ports (under its node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyPortgroup {
    pub node: NodeRef,
    pub portgroup_uuid: String,
}

impl Call for DestroyPortgroup {
    const METHOD: &'static str = m::DESTROY_PORTGROUP;
    type Reply = ();
    type Wire = pb::DestroyPortgroupRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the port group gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DestroyPortgroupRequest {
        pb::DestroyPortgroupRequest {
            node: Some(node_ref_to_pb(&self.node)),
            portgroup_uuid: self.portgroup_uuid,
        }
    }
    fn from_wire(w: pb::DestroyPortgroupRequest) -> Result<Self, Error> {
        Ok(DestroyPortgroup {
            node: node_ref_from_pb(w.node)?,
            portgroup_uuid: w.portgroup_uuid,
        })
    }
}

/// The VIFs of a node, as its network interface records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VifList {
    pub node: NodeRef,
}

impl Call for VifList {
    const METHOD: &'static str = m::VIF_LIST;
    type Reply = Vifs;
    type Wire = pb::VifListRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::VifListRequest {
        pb::VifListRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::VifListRequest) -> Result<Self, Error> {
        Ok(VifList {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Attaches a VIF to a free port or port group of the node (under its lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VifAttach {
    pub node: NodeRef,
    pub vif_id: String,
    pub port_uuid: Option<String>,
    pub portgroup_uuid: Option<String>,
}

impl Call for VifAttach {
    const METHOD: &'static str = m::VIF_ATTACH;
    type Reply = ();
    type Wire = pb::VifAttachRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the VIF attached succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::VifAttachRequest {
        pb::VifAttachRequest {
            node: Some(node_ref_to_pb(&self.node)),
            vif_id: self.vif_id,
            port_uuid: self.port_uuid,
            portgroup_uuid: self.portgroup_uuid,
        }
    }
    fn from_wire(w: pb::VifAttachRequest) -> Result<Self, Error> {
        Ok(VifAttach {
            node: node_ref_from_pb(w.node)?,
            vif_id: w.vif_id,
            port_uuid: w.port_uuid,
            portgroup_uuid: w.portgroup_uuid,
        })
    }
}

/// Detaches a VIF from the node (under its lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VifDetach {
    pub node: NodeRef,
    pub vif_id: String,
}

impl Call for VifDetach {
    const METHOD: &'static str = m::VIF_DETACH;
    type Reply = ();
    type Wire = pb::VifDetachRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds the VIF gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::VifDetachRequest {
        pb::VifDetachRequest {
            node: Some(node_ref_to_pb(&self.node)),
            vif_id: self.vif_id,
        }
    }
    fn from_wire(w: pb::VifDetachRequest) -> Result<Self, Error> {
        Ok(VifDetach {
            node: node_ref_from_pb(w.node)?,
            vif_id: w.vif_id,
        })
    }
}

/// A JSON Patch applied to a volume connector under its node's lock (powered off only).
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateVolumeConnector {
    pub node: NodeRef,
    pub uuid: String,
    pub patch: Vec<PatchOp>,
}

impl Call for UpdateVolumeConnector {
    const METHOD: &'static str = m::UPDATE_VOLUME_CONNECTOR;
    type Reply = VolumeConnector;
    type Wire = pb::UpdateVolumeConnectorRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn to_wire(self) -> pb::UpdateVolumeConnectorRequest {
        pb::UpdateVolumeConnectorRequest {
            node: Some(node_ref_to_pb(&self.node)),
            connector_uuid: self.uuid,
            patch: patch_to_pb(&self.patch),
        }
    }
    fn from_wire(w: pb::UpdateVolumeConnectorRequest) -> Result<Self, Error> {
        Ok(UpdateVolumeConnector {
            node: node_ref_from_pb(w.node)?,
            uuid: w.connector_uuid,
            patch: patch_from_pb(w.patch)?,
        })
    }
}

/// Deletes a volume connector (under its node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyVolumeConnector {
    pub node: NodeRef,
    pub uuid: String,
}

impl Call for DestroyVolumeConnector {
    const METHOD: &'static str = m::DESTROY_VOLUME_CONNECTOR;
    type Reply = ();
    type Wire = pb::DestroyVolumeConnectorRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds it gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DestroyVolumeConnectorRequest {
        pb::DestroyVolumeConnectorRequest {
            node: Some(node_ref_to_pb(&self.node)),
            connector_uuid: self.uuid,
        }
    }
    fn from_wire(w: pb::DestroyVolumeConnectorRequest) -> Result<Self, Error> {
        Ok(DestroyVolumeConnector {
            node: node_ref_from_pb(w.node)?,
            uuid: w.connector_uuid,
        })
    }
}

/// A JSON Patch applied to a volume target under its node's lock (powered off only).
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateVolumeTarget {
    pub node: NodeRef,
    pub uuid: String,
    pub patch: Vec<PatchOp>,
}

impl Call for UpdateVolumeTarget {
    const METHOD: &'static str = m::UPDATE_VOLUME_TARGET;
    type Reply = VolumeTarget;
    type Wire = pb::UpdateVolumeTargetRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn to_wire(self) -> pb::UpdateVolumeTargetRequest {
        pb::UpdateVolumeTargetRequest {
            node: Some(node_ref_to_pb(&self.node)),
            target_uuid: self.uuid,
            patch: patch_to_pb(&self.patch),
        }
    }
    fn from_wire(w: pb::UpdateVolumeTargetRequest) -> Result<Self, Error> {
        Ok(UpdateVolumeTarget {
            node: node_ref_from_pb(w.node)?,
            uuid: w.target_uuid,
            patch: patch_from_pb(w.patch)?,
        })
    }
}

/// Deletes a volume target (under its node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyVolumeTarget {
    pub node: NodeRef,
    pub uuid: String,
}

impl Call for DestroyVolumeTarget {
    const METHOD: &'static str = m::DESTROY_VOLUME_TARGET;
    type Reply = ();
    type Wire = pb::DestroyVolumeTargetRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// A repeat that finds it gone succeeds.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DestroyVolumeTargetRequest {
        pb::DestroyVolumeTargetRequest {
            node: Some(node_ref_to_pb(&self.node)),
            target_uuid: self.uuid,
        }
    }
    fn from_wire(w: pb::DestroyVolumeTargetRequest) -> Result<Self, Error> {
        Ok(DestroyVolumeTarget {
            node: node_ref_from_pb(w.node)?,
            uuid: w.target_uuid,
        })
    }
}

/// How to reach the node's console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetConsoleInformation {
    pub node: NodeRef,
}

impl Call for GetConsoleInformation {
    const METHOD: &'static str = m::GET_CONSOLE_INFORMATION;
    type Reply = JsonDoc;
    type Wire = pb::GetConsoleInformationRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetConsoleInformationRequest {
        pb::GetConsoleInformationRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetConsoleInformationRequest) -> Result<Self, Error> {
        Ok(GetConsoleInformation {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Enables or disables the node's console (under its lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetConsoleMode {
    pub node: NodeRef,
    pub enabled: bool,
}

impl Call for SetConsoleMode {
    const METHOD: &'static str = m::SET_CONSOLE_MODE;
    type Reply = ();
    type Wire = pb::SetConsoleModeRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::SetConsoleModeRequest {
        pb::SetConsoleModeRequest {
            node: Some(node_ref_to_pb(&self.node)),
            enabled: self.enabled,
        }
    }
    fn from_wire(w: pb::SetConsoleModeRequest) -> Result<Self, Error> {
        Ok(SetConsoleMode {
            node: node_ref_from_pb(w.node)?,
            enabled: w.enabled,
        })
    }
}

/// The device the node boots from next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetBootDevice {
    pub node: NodeRef,
}

impl Call for GetBootDevice {
    const METHOD: &'static str = m::GET_BOOT_DEVICE;
    type Reply = JsonDoc;
    type Wire = pb::GetBootDeviceRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetBootDeviceRequest {
        pb::GetBootDeviceRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetBootDeviceRequest) -> Result<Self, Error> {
        Ok(GetBootDevice {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Sets the next boot device (under the node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetBootDevice {
    pub node: NodeRef,
    pub device: String,
    pub persistent: bool,
}

impl Call for SetBootDevice {
    const METHOD: &'static str = m::SET_BOOT_DEVICE;
    type Reply = ();
    type Wire = pb::SetBootDeviceRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::SetBootDeviceRequest {
        pb::SetBootDeviceRequest {
            node: Some(node_ref_to_pb(&self.node)),
            device: self.device,
            persistent: self.persistent,
        }
    }
    fn from_wire(w: pb::SetBootDeviceRequest) -> Result<Self, Error> {
        Ok(SetBootDevice {
            node: node_ref_from_pb(w.node)?,
            device: w.device,
            persistent: w.persistent,
        })
    }
}

/// The boot devices the node's management interface accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSupportedBootDevices {
    pub node: NodeRef,
}

impl Call for GetSupportedBootDevices {
    const METHOD: &'static str = m::GET_SUPPORTED_BOOT_DEVICES;
    type Reply = JsonDoc;
    type Wire = pb::GetSupportedBootDevicesRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetSupportedBootDevicesRequest {
        pb::GetSupportedBootDevicesRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetSupportedBootDevicesRequest) -> Result<Self, Error> {
        Ok(GetSupportedBootDevices {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// Injects a non-maskable interrupt (under the node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectNmi {
    pub node: NodeRef,
}

impl Call for InjectNmi {
    const METHOD: &'static str = m::INJECT_NMI;
    type Reply = ();
    type Wire = pb::InjectNmiRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn to_wire(self) -> pb::InjectNmiRequest {
        pb::InjectNmiRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::InjectNmiRequest) -> Result<Self, Error> {
        Ok(InjectNmi {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// The node's indicators (1.63).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSupportedIndicators {
    pub node: NodeRef,
}

impl Call for GetSupportedIndicators {
    const METHOD: &'static str = m::GET_SUPPORTED_INDICATORS;
    type Reply = JsonDoc;
    type Wire = pb::GetSupportedIndicatorsRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetSupportedIndicatorsRequest {
        pb::GetSupportedIndicatorsRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetSupportedIndicatorsRequest) -> Result<Self, Error> {
        Ok(GetSupportedIndicators {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// The state of one indicator, `<name>@<component>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetIndicatorState {
    pub node: NodeRef,
    pub indicator: String,
}

impl Call for GetIndicatorState {
    const METHOD: &'static str = m::GET_INDICATOR_STATE;
    type Reply = JsonDoc;
    type Wire = pb::GetIndicatorStateRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetIndicatorStateRequest {
        pb::GetIndicatorStateRequest {
            node: Some(node_ref_to_pb(&self.node)),
            indicator: self.indicator,
        }
    }
    fn from_wire(w: pb::GetIndicatorStateRequest) -> Result<Self, Error> {
        Ok(GetIndicatorState {
            node: node_ref_from_pb(w.node)?,
            indicator: w.indicator,
        })
    }
}

/// Sets one indicator to a state (under the node's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetIndicatorState {
    pub node: NodeRef,
    pub indicator: String,
    pub state: String,
}

impl Call for SetIndicatorState {
    const METHOD: &'static str = m::SET_INDICATOR_STATE;
    type Reply = ();
    type Wire = pb::SetIndicatorStateRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Setting a light to the same state twice is setting it once.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::SetIndicatorStateRequest {
        pb::SetIndicatorStateRequest {
            node: Some(node_ref_to_pb(&self.node)),
            indicator: self.indicator,
            state: self.state,
        }
    }
    fn from_wire(w: pb::SetIndicatorStateRequest) -> Result<Self, Error> {
        Ok(SetIndicatorState {
            node: node_ref_from_pb(w.node)?,
            indicator: w.indicator,
            state: w.state,
        })
    }
}

/// Sets the node's boot mode, `bios` or `uefi` (under the node's lock; 1.76).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeNodeBootMode {
    pub node: NodeRef,
    pub target: String,
}

impl Call for ChangeNodeBootMode {
    const METHOD: &'static str = m::CHANGE_NODE_BOOT_MODE;
    type Reply = ();
    type Wire = pb::ChangeNodeBootModeRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Setting a mode twice is setting it once.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::ChangeNodeBootModeRequest {
        pb::ChangeNodeBootModeRequest {
            node: Some(node_ref_to_pb(&self.node)),
            target: self.target,
        }
    }
    fn from_wire(w: pb::ChangeNodeBootModeRequest) -> Result<Self, Error> {
        Ok(ChangeNodeBootMode {
            node: node_ref_from_pb(w.node)?,
            target: w.target,
        })
    }
}

/// Turns UEFI secure boot on or off (under the node's lock; 1.76).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeNodeSecureBoot {
    pub node: NodeRef,
    pub target: bool,
}

impl Call for ChangeNodeSecureBoot {
    const METHOD: &'static str = m::CHANGE_NODE_SECURE_BOOT;
    type Reply = ();
    type Wire = pb::ChangeNodeSecureBootRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::ChangeNodeSecureBootRequest {
        pb::ChangeNodeSecureBootRequest {
            node: Some(node_ref_to_pb(&self.node)),
            target: self.target,
        }
    }
    fn from_wire(w: pb::ChangeNodeSecureBootRequest) -> Result<Self, Error> {
        Ok(ChangeNodeSecureBoot {
            node: node_ref_from_pb(w.node)?,
            target: w.target,
        })
    }
}

/// Stores the node's target RAID configuration (checked by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct SetTargetRaidConfig {
    pub node: NodeRef,
    pub target_raid_config: serde_json::Value,
}

impl Call for SetTargetRaidConfig {
    const METHOD: &'static str = m::SET_TARGET_RAID_CONFIG;
    type Reply = ();
    type Wire = pb::SetTargetRaidConfigRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::SetTargetRaidConfigRequest {
        pb::SetTargetRaidConfigRequest {
            node: Some(node_ref_to_pb(&self.node)),
            target_raid_config_json: self.target_raid_config.to_string(),
        }
    }
    fn from_wire(w: pb::SetTargetRaidConfigRequest) -> Result<Self, Error> {
        Ok(SetTargetRaidConfig {
            node: node_ref_from_pb(w.node)?,
            target_raid_config: serde_json::from_str(&w.target_raid_config_json)
                .map_err(|_| bad("target_raid_config"))?,
        })
    }
}

/// A vendor method of a node (its owner, under its lock) or of a driver (any
/// conductor that serves it).
#[derive(Debug, Clone, PartialEq)]
pub struct VendorPassthru {
    pub node: Option<NodeRef>,
    pub driver: String,
    pub method: String,
    pub http_method: String,
    pub info: serde_json::Value,
}

impl Call for VendorPassthru {
    const METHOD: &'static str = m::VENDOR_PASSTHRU;
    type Reply = JsonDoc;
    type Wire = pb::VendorPassthruRequest;
    fn route(&self) -> Route {
        match &self.node {
            Some(n) => Route::Owner(n.clone()),
            None => Route::Any,
        }
    }
    fn to_wire(self) -> pb::VendorPassthruRequest {
        pb::VendorPassthruRequest {
            node: self.node.as_ref().map(node_ref_to_pb),
            driver: self.driver,
            method: self.method,
            http_method: self.http_method,
            info_json: self.info.to_string(),
        }
    }
    fn from_wire(w: pb::VendorPassthruRequest) -> Result<Self, Error> {
        Ok(VendorPassthru {
            node: w.node.map(|n| node_ref_from_pb(Some(n))).transpose()?,
            driver: w.driver,
            method: w.method,
            http_method: w.http_method,
            info: serde_json::from_str(&w.info_json).map_err(|_| bad("vendor passthru info"))?,
        })
    }
}

/// Gives the node an agent token for its ramdisk (`lookup` from 1.62), under its lock.
/// Not repeated after a conductor's death: a repeat would find the first attempt's
/// token and answer it masked, which the agent cannot use; it looks up again instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetNodeWithToken {
    pub node: NodeRef,
}

impl Call for GetNodeWithToken {
    const METHOD: &'static str = m::GET_NODE_WITH_TOKEN;
    type Reply = Node;
    type Wire = pb::GetNodeWithTokenRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn lost_hint(&self) -> String {
        "Look the node up again.".into()
    }
    fn to_wire(self) -> pb::GetNodeWithTokenRequest {
        pb::GetNodeWithTokenRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetNodeWithTokenRequest) -> Result<Self, Error> {
        Ok(GetNodeWithToken {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

/// A heartbeat of the node's ramdisk agent (`POST /v1/heartbeat/{node}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub node: NodeRef,
    /// Where the agent listens; empty from a one-way agent (anaconda).
    pub callback_url: String,
    pub agent_version: Option<String>,
    pub agent_token: Option<String>,
    pub agent_verify_ca: Option<String>,
    pub agent_status: Option<String>,
    pub agent_status_message: Option<String>,
}

impl Call for Heartbeat {
    const METHOD: &'static str = m::HEARTBEAT;
    type Reply = ();
    type Wire = pb::HeartbeatRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Recording the same heartbeat twice changes nothing that matters.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::HeartbeatRequest {
        pb::HeartbeatRequest {
            node: Some(node_ref_to_pb(&self.node)),
            callback_url: self.callback_url,
            agent_version: self.agent_version,
            agent_token: self.agent_token,
            agent_verify_ca: self.agent_verify_ca,
            agent_status: self.agent_status,
            agent_status_message: self.agent_status_message,
        }
    }
    fn from_wire(w: pb::HeartbeatRequest) -> Result<Self, Error> {
        Ok(Heartbeat {
            node: node_ref_from_pb(w.node)?,
            callback_url: w.callback_url,
            agent_version: w.agent_version,
            agent_token: w.agent_token,
            agent_verify_ca: w.agent_verify_ca,
            agent_status: w.agent_status,
            agent_status_message: w.agent_status_message,
        })
    }
}

/// The ramdisk's inspection data for a node in `inspect wait`
/// (`POST /v1/continue_inspection`, 1.84).
#[derive(Debug, Clone, PartialEq)]
pub struct ContinueInspection {
    pub node: NodeRef,
    pub inventory: JsonObject,
    pub plugin_data: JsonObject,
}

impl Call for ContinueInspection {
    const METHOD: &'static str = m::CONTINUE_INSPECTION;
    type Reply = ();
    type Wire = pb::ContinueInspectionRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn lost_hint(&self) -> String {
        "Look at the node's provision state: the data was taken if it left inspect wait.".into()
    }
    fn to_wire(self) -> pb::ContinueInspectionRequest {
        pb::ContinueInspectionRequest {
            node: Some(node_ref_to_pb(&self.node)),
            inventory_json: serde_json::Value::Object(self.inventory).to_string(),
            plugin_data_json: serde_json::Value::Object(self.plugin_data).to_string(),
        }
    }
    fn from_wire(w: pb::ContinueInspectionRequest) -> Result<Self, Error> {
        Ok(ContinueInspection {
            node: node_ref_from_pb(w.node)?,
            inventory: serde_json::from_str(&w.inventory_json).map_err(|_| bad("inventory"))?,
            plugin_data: serde_json::from_str(&w.plugin_data_json)
                .map_err(|_| bad("plugin_data"))?,
        })
    }
}

/// Inserts a virtual medium (1.89): accepted under the node's lock, done in the
/// background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachVirtualMedia {
    pub node: NodeRef,
    pub device_type: String,
    pub image_url: String,
    pub image_download_source: String,
}

impl Call for AttachVirtualMedia {
    const METHOD: &'static str = m::ATTACH_VIRTUAL_MEDIA;
    type Reply = ();
    type Wire = pb::AttachVirtualMediaRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    /// Inserting the same image again leaves the node as one insert does.
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::AttachVirtualMediaRequest {
        pb::AttachVirtualMediaRequest {
            node: Some(node_ref_to_pb(&self.node)),
            device_type: self.device_type,
            image_url: self.image_url,
            image_download_source: self.image_download_source,
        }
    }
    fn from_wire(w: pb::AttachVirtualMediaRequest) -> Result<Self, Error> {
        Ok(AttachVirtualMedia {
            node: node_ref_from_pb(w.node)?,
            device_type: w.device_type,
            image_url: w.image_url,
            image_download_source: w.image_download_source,
        })
    }
}

/// Ejects virtual media (1.89), those of `device_types` or (`None`) every one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachVirtualMedia {
    pub node: NodeRef,
    pub device_types: Option<Vec<String>>,
}

impl Call for DetachVirtualMedia {
    const METHOD: &'static str = m::DETACH_VIRTUAL_MEDIA;
    type Reply = ();
    type Wire = pb::DetachVirtualMediaRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::DetachVirtualMediaRequest {
        pb::DetachVirtualMediaRequest {
            node: Some(node_ref_to_pb(&self.node)),
            all: self.device_types.is_none(),
            device_types: self.device_types.unwrap_or_default(),
        }
    }
    fn from_wire(w: pb::DetachVirtualMediaRequest) -> Result<Self, Error> {
        Ok(DetachVirtualMedia {
            node: node_ref_from_pb(w.node)?,
            device_types: (!w.all).then_some(w.device_types),
        })
    }
}

/// The node's virtual media as the hardware reports them (1.93).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetVirtualMedia {
    pub node: NodeRef,
}

impl Call for GetVirtualMedia {
    const METHOD: &'static str = m::GET_VIRTUAL_MEDIA;
    type Reply = JsonDoc;
    type Wire = pb::GetVirtualMediaRequest;
    fn route(&self) -> Route {
        Route::Owner(self.node.clone())
    }
    fn retry_safe(&self) -> bool {
        true
    }
    fn to_wire(self) -> pb::GetVirtualMediaRequest {
        pb::GetVirtualMediaRequest {
            node: Some(node_ref_to_pb(&self.node)),
        }
    }
    fn from_wire(w: pb::GetVirtualMediaRequest) -> Result<Self, Error> {
        Ok(GetVirtualMedia {
            node: node_ref_from_pb(w.node)?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// The list

contract! {
    /// Answers at once: the conductor is there.
    Ping => ping { Ok(()) },
    CreateNode => create_node,
    UpdateNode => update_node,
    SetMaintenance => set_maintenance,
    DestroyNode => destroy_node,
    AddNodeTraits => add_node_traits,
    RemoveNodeTraits => remove_node_traits,
    DoProvisioningAction => do_provisioning_action,
    DoNodeClean => do_node_clean,
    DoNodeService => do_node_service,
    DoNodeDeploy => do_node_deploy,
    DoNodeTearDown => do_node_tear_down,
    ChangeNodePowerState => change_node_power_state,
    ValidateDriverInterfaces => validate_driver_interfaces,
    GetCleanSteps => get_clean_steps,
    CreateAllocation => create_allocation,
    DestroyAllocation => destroy_allocation,
    CreatePort => create_port,
    UpdatePort => update_port,
    DestroyPort => destroy_port,
    CreatePortgroup => create_portgroup,
    UpdatePortgroup => update_portgroup,
    DestroyPortgroup => destroy_portgroup,
    VifList => vif_list,
    VifAttach => vif_attach,
    VifDetach => vif_detach,
    UpdateVolumeConnector => update_volume_connector,
    DestroyVolumeConnector => destroy_volume_connector,
    UpdateVolumeTarget => update_volume_target,
    DestroyVolumeTarget => destroy_volume_target,
    GetConsoleInformation => get_console_information,
    SetConsoleMode => set_console_mode,
    GetBootDevice => get_boot_device,
    SetBootDevice => set_boot_device,
    GetSupportedBootDevices => get_supported_boot_devices,
    InjectNmi => inject_nmi,
    SetTargetRaidConfig => set_target_raid_config,
    GetSupportedIndicators => get_supported_indicators,
    GetIndicatorState => get_indicator_state,
    SetIndicatorState => set_indicator_state,
    ChangeNodeBootMode => change_node_boot_mode,
    ChangeNodeSecureBoot => change_node_secure_boot,
    VendorPassthru => vendor_passthru,
    GetNodeWithToken => get_node_with_token,
    Heartbeat => heartbeat,
    ContinueInspection => continue_inspection,
    AttachVirtualMedia => attach_virtual_media,
    DetachVirtualMedia => detach_virtual_media,
    GetVirtualMedia => get_virtual_media,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The Rust calls and the proto's `Conductor` service name the same methods with
    /// the same request and reply messages.
    #[test]
    fn calls_match_the_proto_service() {
        let mut rust = signatures();
        let mut proto: Vec<_> = m::ALL.to_vec();
        rust.sort_unstable();
        proto.sort_unstable();
        assert_eq!(rust, proto);
        assert_eq!(METHODS.len(), m::ALL.len());
    }

    /// Metric labels name only methods of the contract.
    #[test]
    fn metric_labels_come_from_the_contract() {
        use crate::contract::method_label;
        for m in METHODS {
            assert_eq!(method_label(m), *m);
        }
        for other in [
            "",
            "fly",
            "create_node ",
            "CREATE_NODE",
            &"x".repeat(10_000),
        ] {
            assert_eq!(method_label(other), "unknown");
        }
    }

    /// Which calls may be sent again after their conductor died.
    #[test]
    fn only_calls_with_one_outcome_are_repeated() {
        let node = NodeRef {
            id: ironic_model::NodeId(1),
            uuid: "6f2b1c4e-0d55-4d1c-9a3b-1f0e2d3c4b5a".into(),
            driver: "fake-hardware".into(),
            conductor_group: String::new(),
        };
        let power = |s: &str| ChangeNodePowerState {
            node: node.clone(),
            new_state: s.into(),
            timeout_secs: None,
        };
        assert!(power("power off").retry_safe());
        assert!(power("power on").retry_safe());
        assert!(!power("rebooting").retry_safe());
        assert!(!power("soft rebooting").retry_safe());
        assert!(Ping.retry_safe());
        assert!(DestroyNode { node: node.clone() }.retry_safe());
        let verb = DoProvisioningAction {
            node: node.clone(),
            action: "provide".into(),
        };
        assert!(verb.retry_safe());
        assert!(verb.lost_hint().contains("provision_state"));
        assert!(!GetNodeWithToken { node: node.clone() }.retry_safe());
    }

    fn round_trip<C: Call + Clone + PartialEq + std::fmt::Debug>(c: C) {
        let back = C::from_wire(c.clone().to_wire()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn requests_round_trip() {
        let node = NodeRef {
            id: ironic_model::NodeId(3),
            uuid: "1be26c0b-03f2-4d2e-ae87-c02d7f33c123".into(),
            driver: "fake-hardware".into(),
            conductor_group: "g".into(),
        };
        round_trip(DetachVirtualMedia {
            node: node.clone(),
            device_types: None,
        });
        round_trip(DetachVirtualMedia {
            node: node.clone(),
            device_types: Some(vec![]),
        });
        round_trip(AttachVirtualMedia {
            node: node.clone(),
            device_type: "cdrom".into(),
            image_url: "http://192.0.2.1/boot.iso".into(),
            image_download_source: "local".into(),
        });
        round_trip(DoNodeService {
            node: node.clone(),
            steps: vec![Requested {
                interface: "vendor".into(),
                step: "log_passthrough".into(),
                args: Default::default(),
            }],
            disable_ramdisk: None,
        });
        round_trip(DoNodeClean {
            node: node.clone(),
            steps: vec![Requested {
                interface: "deploy".into(),
                step: "sleep".into(),
                args: serde_json::json!({"seconds": 1})
                    .as_object()
                    .unwrap()
                    .clone(),
            }],
            disable_ramdisk: Some(true),
        });
        let mut extra = ironic_model::node::JsonObject::new();
        extra.insert("k".into(), serde_json::json!([1]));
        round_trip(CreateAllocation {
            allocation: NewAllocation {
                uuid: "u".into(),
                name: Some("a".into()),
                resource_class: Some("rc".into()),
                candidate_nodes: vec!["n".into()],
                traits: vec!["CUSTOM_X".into()],
                owner: None,
                extra,
            },
            backfill: Some(node.clone()),
        });
        round_trip(DestroyAllocation {
            allocation: AllocationRef {
                id: ironic_model::AllocationId(9),
                uuid: "u".into(),
            },
        });
        round_trip(VifAttach {
            node: node.clone(),
            vif_id: "v".into(),
            port_uuid: None,
            portgroup_uuid: Some("g".into()),
        });
        round_trip(Heartbeat {
            node: node.clone(),
            callback_url: "https://192.0.2.1:9999".into(),
            agent_version: Some("10.1.0".into()),
            agent_token: Some("t".into()),
            agent_verify_ca: None,
            agent_status: Some("start".into()),
            agent_status_message: None,
        });
        round_trip(DestroyPort {
            node: node.clone(),
            port_uuid: "p".into(),
        });
        let mut inventory = JsonObject::new();
        inventory.insert(
            "interfaces".into(),
            serde_json::json!([{"mac_address": "52:54:00:00:00:01"}]),
        );
        round_trip(ContinueInspection {
            node: node.clone(),
            inventory,
            plugin_data: JsonObject::new(),
        });
        round_trip(DoNodeDeploy {
            node,
            rebuild: true,
            configdrive: Some(serde_json::json!({"meta_data": {}})),
            deploy_steps: vec![ironic_model::deploy_template::TemplateStep {
                interface: "deploy".into(),
                step: "deploy".into(),
                args: serde_json::Map::new(),
                priority: 0,
            }],
        });
    }

    #[test]
    fn replies_round_trip() {
        let steps = Some(vec![OfferedStep {
            interface: "deploy".into(),
            step: "sleep".into(),
            priority: 0,
            abortable: true,
            argsinfo: serde_json::json!({"seconds": {"description": "d", "required": true}}),
        }]);
        assert_eq!(Reply::from_wire(steps.clone().to_wire()).ok(), Some(steps));
        let none: Option<Vec<OfferedStep>> = None;
        assert_eq!(
            <Option<Vec<OfferedStep>> as Reply>::from_wire(none.to_wire()).ok(),
            Some(None)
        );
    }

    #[test]
    fn malformed_requests_are_invalid() {
        assert!(matches!(
            CreateAllocation::from_wire(pb::CreateAllocationRequest::default()),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            UpdateNode::from_wire(pb::UpdateNodeRequest::default()),
            Err(Error::Invalid(_))
        ));
    }
}
