//! The conductor RPC API: the [`ConductorApi`] contract, its protobuf wire form
//! (`proto/ironic/rpc/v1/conductor.proto`, generated into [`pb`]), the server-side
//! [`dispatch`], and two transports behind the one trait:
//!
//! - [`InProcess`]: the all-in-one binary calls its own conductor directly;
//! - [`amqp`]: the split deployment, RabbitMQ request/reply with protobuf payloads
//!   (`docs/rpc.md` describes exchange, queues, headers, timeouts and errors).
//!
//! Architecture invariant: no business logic here, only the contract, its encoding and
//! its routing.

use std::future::Future;
use std::pin::Pin;

use ironic_model::patch::PatchOp;
use ironic_model::{Allocation, Error, Node, Version};

pub mod amqp;
pub mod convert;
pub mod dispatch;
pub mod testing;
pub mod trace;

/// The generated protobuf types.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/ironic.rpc.v1.rs"));
}

/// The future every RPC returns.
pub type RpcFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Who asked, carried with every call for logs and traces.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub request_id: String,
}

/// A node as the caller routes on it: the hash ring key is (conductor_group, driver),
/// the position on the ring the uuid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub id: i64,
    pub uuid: String,
    pub driver: String,
    pub conductor_group: String,
}

impl From<&Node> for NodeRef {
    fn from(n: &Node) -> Self {
        NodeRef {
            id: n.id,
            uuid: n.uuid.as_str().to_string(),
            driver: n.driver.clone(),
            conductor_group: n.conductor_group.clone(),
        }
    }
}

/// `update_node`: a JSON Patch the conductor applies to the node under its lock, so
/// concurrent updates never overwrite each other.
#[derive(Debug, Clone)]
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

/// A step of a manual clean as the client asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanStep {
    pub interface: String,
    pub step: String,
    pub args: ironic_model::node::JsonObject,
}

/// One interface's validation (`GET /v1/nodes/{node}/validate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCheck {
    pub interface: String,
    /// `None`: the implementation does not support the interface.
    pub result: Option<bool>,
    pub reason: Option<String>,
}

/// The calls the API makes to the conductor that owns a node.
pub trait ConductorApi: Send + Sync {
    /// Stores a new node after filling in the hardware type's default interfaces.
    fn create_node(&self, ctx: &Context, node: Node) -> RpcFuture<'_, Node>;
    fn update_node(&self, ctx: &Context, req: UpdateNode) -> RpcFuture<'_, Node>;
    /// Maintenance on (with a reason) or off.
    fn set_maintenance(
        &self,
        ctx: &Context,
        node: NodeRef,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node>;
    fn destroy_node(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()>;
    /// Adds traits, or replaces them all; returns the node's traits afterwards.
    fn add_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>>;
    /// Removes one trait (404 if absent) or, with `None`, all of them.
    fn remove_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        one: Option<String>,
    ) -> RpcFuture<'_, ()>;
    /// A provisioning verb (`manage`, `provide`, `abort`, …) applied under the node
    /// lock; returns once accepted, long work continues in the background.
    fn do_provisioning_action(
        &self,
        ctx: &Context,
        node: NodeRef,
        action: String,
    ) -> RpcFuture<'_, ()>;
    /// Manual cleaning of a `manageable` node; returns once accepted.
    fn do_node_clean(
        &self,
        ctx: &Context,
        node: NodeRef,
        steps: Vec<CleanStep>,
        disable_ramdisk: Option<bool>,
    ) -> RpcFuture<'_, ()>;
    /// Deploy (or, with `rebuild`, redeploy) the node; returns once accepted.
    fn do_node_deploy(
        &self,
        ctx: &Context,
        node: NodeRef,
        rebuild: bool,
        configdrive: Option<serde_json::Value>,
    ) -> RpcFuture<'_, ()>;
    /// Tear the node down, then clean it; returns once accepted.
    fn do_node_tear_down(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()>;
    /// Power on, off, reboot (soft variants too), under the node lock.
    fn change_node_power_state(
        &self,
        ctx: &Context,
        node: NodeRef,
        new_state: String,
        timeout_secs: Option<u32>,
    ) -> RpcFuture<'_, ()>;
    /// The clean steps the node's driver offers with at least `min_priority`, highest
    /// first, as JSON documents; `None` when the driver cannot list them yet.
    fn get_clean_steps(
        &self,
        ctx: &Context,
        node: NodeRef,
        min_priority: u32,
    ) -> RpcFuture<'_, Option<Vec<serde_json::Value>>>;
    /// Each interface of the node, validated.
    fn validate_driver_interfaces(
        &self,
        ctx: &Context,
        node: NodeRef,
    ) -> RpcFuture<'_, Vec<InterfaceCheck>>;
    /// Stores a new allocation and reserves a node for it in the background (any live
    /// conductor); with `backfill`, records it for that node at once (its owner).
    /// Returns the allocation as stored.
    fn create_allocation(
        &self,
        ctx: &Context,
        allocation: Allocation,
        backfill: Option<NodeRef>,
    ) -> RpcFuture<'_, Allocation>;
    /// Deletes an allocation and frees its node (node lock; 409 where the node's state
    /// forbids it).
    fn destroy_allocation(&self, ctx: &Context, allocation: Allocation) -> RpcFuture<'_, ()>;
}

/// The in-process transport of the all-in-one binary. Each call runs on a task of its
/// own, so an HTTP client that goes away mid-call cannot cancel conductor work half-way
/// (between taking a node lock and giving it back): as over a real bus, the conductor
/// finishes what it accepted.
pub struct InProcess(pub std::sync::Arc<dyn ConductorApi>);

fn detached<T: Send + 'static>(
    fut: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> RpcFuture<'static, T> {
    use tracing::Instrument;
    let span = tracing::Span::current();
    Box::pin(async move {
        tokio::spawn(fut.instrument(span))
            .await
            .map_err(|e| Error::Internal(format!("conductor task failed: {e}")))?
    })
}

impl ConductorApi for InProcess {
    fn create_node(&self, ctx: &Context, node: Node) -> RpcFuture<'_, Node> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.create_node(&ctx, node).await })
    }

    fn update_node(&self, ctx: &Context, req: UpdateNode) -> RpcFuture<'_, Node> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.update_node(&ctx, req).await })
    }

    fn set_maintenance(
        &self,
        ctx: &Context,
        node: NodeRef,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.set_maintenance(&ctx, node, on, reason).await })
    }

    fn destroy_node(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.destroy_node(&ctx, node).await })
    }

    fn add_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.add_node_traits(&ctx, node, traits, replace).await })
    }

    fn remove_node_traits(
        &self,
        ctx: &Context,
        node: NodeRef,
        one: Option<String>,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.remove_node_traits(&ctx, node, one).await })
    }

    fn do_provisioning_action(
        &self,
        ctx: &Context,
        node: NodeRef,
        action: String,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.do_provisioning_action(&ctx, node, action).await })
    }

    fn do_node_clean(
        &self,
        ctx: &Context,
        node: NodeRef,
        steps: Vec<CleanStep>,
        disable_ramdisk: Option<bool>,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.do_node_clean(&ctx, node, steps, disable_ramdisk).await })
    }

    fn do_node_deploy(
        &self,
        ctx: &Context,
        node: NodeRef,
        rebuild: bool,
        configdrive: Option<serde_json::Value>,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.do_node_deploy(&ctx, node, rebuild, configdrive).await })
    }

    fn do_node_tear_down(&self, ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.do_node_tear_down(&ctx, node).await })
    }

    fn change_node_power_state(
        &self,
        ctx: &Context,
        node: NodeRef,
        new_state: String,
        timeout_secs: Option<u32>,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move {
            c.change_node_power_state(&ctx, node, new_state, timeout_secs)
                .await
        })
    }

    fn get_clean_steps(
        &self,
        ctx: &Context,
        node: NodeRef,
        min_priority: u32,
    ) -> RpcFuture<'_, Option<Vec<serde_json::Value>>> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.get_clean_steps(&ctx, node, min_priority).await })
    }

    fn validate_driver_interfaces(
        &self,
        ctx: &Context,
        node: NodeRef,
    ) -> RpcFuture<'_, Vec<InterfaceCheck>> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.validate_driver_interfaces(&ctx, node).await })
    }

    fn create_allocation(
        &self,
        ctx: &Context,
        allocation: Allocation,
        backfill: Option<NodeRef>,
    ) -> RpcFuture<'_, Allocation> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.create_allocation(&ctx, allocation, backfill).await })
    }

    fn destroy_allocation(&self, ctx: &Context, allocation: Allocation) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.destroy_allocation(&ctx, allocation).await })
    }
}
