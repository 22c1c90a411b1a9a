//! The conductor RPC API as the API process sees it: [`ConductorApi`]. The all-in-one
//! binary plugs the conductor itself in (in-process transport); the AMQP transport with
//! protobuf payloads arrives with the split deployment behind the same trait.
//!
//! Architecture invariant: no business logic here, only the contract.

use std::future::Future;
use std::pin::Pin;

use ironic_model::patch::PatchOp;
use ironic_model::{Error, Node, Version};

/// The future every RPC returns.
pub type RpcFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Who asked, carried with every call for logs and traces.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub request_id: String,
}

/// `update_node`: a JSON Patch the conductor applies to the node under its lock, so
/// concurrent updates never overwrite each other.
#[derive(Debug, Clone)]
pub struct UpdateNode {
    pub node_id: i64,
    /// How the client named the node (for messages).
    pub ident: String,
    pub patch: Vec<PatchOp>,
    pub version: Version,
    pub reset_interfaces: Option<bool>,
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
        node_id: i64,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node>;
    fn destroy_node(&self, ctx: &Context, node_id: i64) -> RpcFuture<'_, ()>;
    /// Adds traits, or replaces them all; returns the node's traits afterwards.
    fn add_node_traits(
        &self,
        ctx: &Context,
        node_id: i64,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>>;
    /// Removes one trait (404 if absent) or, with `None`, all of them.
    fn remove_node_traits(
        &self,
        ctx: &Context,
        node_id: i64,
        one: Option<String>,
    ) -> RpcFuture<'_, ()>;
}

/// The in-process transport of the all-in-one binary. Each call runs on a task of its
/// own, so an HTTP client that goes away mid-call cannot cancel conductor work half-way
/// (between taking a node lock and giving it back): as over a real bus, the conductor
/// finishes what it accepted.
pub struct InProcess(pub std::sync::Arc<dyn ConductorApi>);

fn detached<T: Send + 'static>(
    fut: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> RpcFuture<'static, T> {
    Box::pin(async move {
        tokio::spawn(fut)
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
        node_id: i64,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.set_maintenance(&ctx, node_id, on, reason).await })
    }

    fn destroy_node(&self, ctx: &Context, node_id: i64) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.destroy_node(&ctx, node_id).await })
    }

    fn add_node_traits(
        &self,
        ctx: &Context,
        node_id: i64,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.add_node_traits(&ctx, node_id, traits, replace).await })
    }

    fn remove_node_traits(
        &self,
        ctx: &Context,
        node_id: i64,
        one: Option<String>,
    ) -> RpcFuture<'_, ()> {
        let (c, ctx) = (self.0.clone(), ctx.clone());
        detached(async move { c.remove_node_traits(&ctx, node_id, one).await })
    }
}
