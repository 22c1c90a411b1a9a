//! The conductor: owns node writes. Every change to a node happens here, under the
//! node's exclusive lock (the `reservation` column), with the update rules of
//! `ironic_model::node`. The registry keeps this conductor visible to the API processes.
//!
//! Architecture invariant: the conductor serves no HTTP; it is reached through
//! `ironic_rpc::ConductorApi`.

use std::sync::Arc;
use std::time::Duration;

use ironic_config::Config;
use ironic_db::Db;
use ironic_drivers::interfaces::NodeInfo;
use ironic_drivers::{HardwareType, Registry};
use ironic_model::node::{INTERFACE_TYPES, Source, check_destroy, check_update};
use ironic_model::patch::{self, Op};
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node};
use ironic_rpc::{CleanStep, ConductorApi, Context, NodeRef, RpcFuture, UpdateNode};

mod allocations;
pub mod oneview;
mod provision;
pub mod registry;
pub mod service;

/// Most traits a node may carry (upstream `MAX_TRAITS_PER_NODE`).
pub const MAX_TRAITS_PER_NODE: usize = 50;

/// Settings the conductor needs from the configuration.
#[derive(Debug, Clone)]
pub struct ConductorSettings {
    pub host: String,
    pub conductor_group: String,
    pub allow_deleting_available_nodes: bool,
    pub automated_clean: bool,
    pub lock_attempts: u32,
    pub lock_retry_interval: Duration,
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout_secs: u64,
    /// 0: no take-over of dead conductors' allocations.
    pub check_allocations_interval: Duration,
    pub allocation_delay: Duration,
    /// The OneView periodic checks; zero disables them.
    pub oneview_check_interval: Duration,
}

impl ConductorSettings {
    pub fn from_config(cfg: &Config) -> Self {
        ConductorSettings {
            host: cfg.default.host.clone(),
            conductor_group: cfg.default.default_conductor_group.clone(),
            allow_deleting_available_nodes: cfg.conductor.allow_deleting_available_nodes,
            automated_clean: cfg.conductor.automated_clean,
            lock_attempts: cfg.conductor.node_locked_retry_attempts.max(1),
            lock_retry_interval: Duration::from_millis(cfg.conductor.node_locked_retry_interval_ms),
            heartbeat_interval: Duration::from_secs(cfg.conductor.heartbeat_interval),
            heartbeat_timeout_secs: cfg.conductor.heartbeat_timeout,
            check_allocations_interval: Duration::from_secs(
                cfg.conductor.check_allocations_interval,
            ),
            allocation_delay: Duration::from_millis(cfg.conductor.allocation_delay_ms),
            oneview_check_interval: if cfg.oneview.enable_periodic_tasks
                && cfg
                    .default
                    .enabled_hardware_types
                    .iter()
                    .any(|h| h == "oneview")
            {
                Duration::from_secs(cfg.oneview.periodic_check_interval)
            } else {
                Duration::ZERO
            },
        }
    }
}

/// Gives a node lock back if the work holding it panicked or was cancelled.
struct LockGuard {
    db: Db,
    node_id: i64,
    host: String,
    armed: bool,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (db, node_id, host) = (
            self.db.clone(),
            self.node_id,
            std::mem::take(&mut self.host),
        );
        tracing::warn!(
            node_id,
            "node lock holder stopped early; releasing the lock"
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = db.node_release(node_id, &host).await {
                    tracing::error!(node_id, error = %e, "could not release a node lock");
                }
            });
        }
    }
}

/// A node whose lock this conductor holds. Dropping it releases the lock (from a task
/// of its own); `save` keeps it, `release` and `save_and_release` give it back.
pub(crate) struct Held {
    pub node: Node,
    guard: LockGuard,
}

impl Held {
    pub(crate) fn new(node: Node, db: &Db, host: &str, node_id: i64) -> Held {
        Held {
            node,
            guard: LockGuard {
                db: db.clone(),
                node_id,
                host: host.to_string(),
                armed: true,
            },
        }
    }

    /// Writes the node and keeps the lock.
    pub async fn save(&mut self) -> Result<(), Error> {
        self.save_dropping(None).await
    }

    /// [`Held::save`], deleting the allocation `drop_allocation` in the same
    /// transaction.
    pub async fn save_dropping(&mut self, drop_allocation: Option<i64>) -> Result<(), Error> {
        self.node.reservation = Some(self.guard.host.clone());
        let saved = self
            .guard
            .db
            .node_save_dropping(&self.node, &self.guard.host, drop_allocation)
            .await?;
        self.node = Node {
            traits: std::mem::take(&mut self.node.traits),
            ..saved
        };
        Ok(())
    }

    /// Writes the node and gives the lock back in the same statement.
    pub async fn save_and_release(mut self) -> Result<Node, Error> {
        self.node.reservation = None;
        let res = self.guard.db.node_save(&self.node, &self.guard.host).await;
        if res.is_ok() {
            self.guard.armed = false;
        }
        res
    }

    /// Gives the lock back and returns `e`: the way out of a refused request.
    pub async fn bail<T>(self, e: Error) -> Result<T, Error> {
        self.release().await;
        Err(e)
    }

    /// Gives the lock back without writing. If that fails, the guard tries again from
    /// a task of its own when it is dropped.
    pub async fn release(mut self) {
        match self
            .guard
            .db
            .node_release(self.guard.node_id, &self.guard.host)
            .await
        {
            Ok(()) => self.guard.armed = false,
            Err(e) => tracing::error!(
                node_id = self.guard.node_id,
                error = %e,
                "could not release a node lock; trying again"
            ),
        }
    }
}

/// One conductor's service.
pub struct Conductor {
    db: Db,
    drivers: Registry,
    settings: ConductorSettings,
    /// Names this process run: work a node records as running here (a step's timer)
    /// is orphaned once the process is gone, even if the host comes back.
    boot_id: String,
    /// Itself, for background work started from `&self` RPC handlers.
    me: std::sync::Weak<Conductor>,
    /// Nodes whose (simulated) agent is starting to report clean steps.
    agents_starting: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// This conductor's row id (`conductors.id`), the `conductor_affinity` of the
    /// allocations it works on; known once the service has started.
    conductor_id: std::sync::OnceLock<i64>,
}

impl Conductor {
    pub fn new(db: Db, drivers: Registry, settings: ConductorSettings) -> Arc<Self> {
        Arc::new_cyclic(|me| Conductor {
            db,
            drivers,
            settings,
            boot_id: uuid::Uuid::new_v4().simple().to_string(),
            me: me.clone(),
            agents_starting: std::sync::Mutex::new(std::collections::HashSet::new()),
            conductor_id: std::sync::OnceLock::new(),
        })
    }

    pub fn host(&self) -> &str {
        &self.settings.host
    }

    /// The implementation of the node's hardware type (400 `NoValidHost` if this
    /// conductor does not enable it).
    fn driver_for(&self, n: &Node) -> Result<&dyn ironic_drivers::interfaces::Driver, Error> {
        self.drivers
            .driver(&n.driver)
            .ok_or_else(|| Error::no_valid_host(&n.driver, &n.conductor_group))
    }

    /// Reads the node a reference names, without locking it (shared reads).
    async fn read(&self, r: &NodeRef) -> Result<Node, Error> {
        self.db
            .node_by_id(r.id)
            .await?
            .filter(|n| n.uuid.as_str() == r.uuid)
            .ok_or_else(|| Error::node_not_found(&r.uuid))
    }

    fn arc(&self) -> Result<Arc<Conductor>, Error> {
        self.me
            .upgrade()
            .ok_or_else(|| Error::Unavailable("The conductor is shutting down.".into()))
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn settings(&self) -> &ConductorSettings {
        &self.settings
    }

    /// Takes the node lock, retrying while another operation holds it.
    async fn acquire(&self, node_id: i64) -> Result<Node, Error> {
        let mut attempt = 1;
        loop {
            match self.db.node_reserve(node_id, &self.settings.host).await {
                Err(Error::Locked(m)) if attempt < self.settings.lock_attempts => {
                    tracing::debug!(node_id, attempt, "node locked, retrying: {m}");
                    attempt += 1;
                    tokio::time::sleep(self.settings.lock_retry_interval).await;
                }
                // The API found the node a moment ago: it was deleted in between. Do
                // not show our internal id.
                Err(Error::NotFound(_)) => {
                    return Err(Error::NotFound(
                        "Node could not be found: it was deleted while this request was in progress.".into(),
                    ));
                }
                other => return other,
            }
        }
    }

    /// Takes the lock of the node `target` names, for work that may outlive this call
    /// (the returned [`Held`] is handed to a background task).
    async fn lock(&self, target: &NodeRef) -> Result<Held, Error> {
        let mut node = self.acquire(target.id).await?;
        let guard = LockGuard {
            db: self.db.clone(),
            node_id: target.id,
            host: self.settings.host.clone(),
            armed: true,
        };
        if node.uuid.as_str() != target.uuid {
            drop(guard);
            return Err(Error::node_not_found(&target.uuid));
        }
        node.reservation = Some(self.settings.host.clone());
        Ok(Held { node, guard })
    }

    /// Runs `f` on the locked node and always gives the lock back.
    async fn with_lock<T, F, Fut>(&self, target: &NodeRef, f: F) -> Result<T, Error>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let node_id = target.id;
        let node = self.acquire(node_id).await?;
        if node.uuid.as_str() != target.uuid {
            // The caller's id and uuid disagree (a stale or forged reference): touch
            // nothing.
            if let Err(e) = self.db.node_release(node_id, &self.settings.host).await {
                tracing::error!(node_id, error = %e, "could not release a node lock");
            }
            return Err(Error::node_not_found(&target.uuid));
        }
        let mut guard = LockGuard {
            db: self.db.clone(),
            node_id,
            host: self.settings.host.clone(),
            armed: true,
        };
        let res = f(node).await;
        guard.armed = false;
        if let Err(e) = self.db.node_release(node_id, &self.settings.host).await {
            tracing::error!(node_id, error = %e, "could not release a node lock");
        }
        res
    }

    /// Whether a live conductor serves `driver` in `group`.
    async fn served(&self, driver: &str, group: &str) -> Result<bool, Error> {
        let now = ironic_model::node::now();
        Ok(self.db.conductor_list().await?.iter().any(|c| {
            c.is_alive(now, self.settings.heartbeat_timeout_secs)
                && c.conductor_group.eq_ignore_ascii_case(group)
                && c.drivers.iter().any(|d| d == driver)
        }))
    }

    fn hardware_type(&self, driver: &str, group: &str) -> Result<&HardwareType, Error> {
        self.drivers
            .get(driver)
            .ok_or_else(|| Error::no_valid_host(driver, group))
    }

    /// Fills unset interfaces with the hardware type's defaults and refuses
    /// implementations the hardware type does not enable.
    fn complete_interfaces(&self, node: &mut Node) -> Result<(), Error> {
        let hw = self.hardware_type(&node.driver, &node.conductor_group)?;
        for (i, t) in INTERFACE_TYPES.iter().enumerate() {
            match &node.interfaces.0[i] {
                None => node.interfaces.0[i] = hw.default_interface(t).map(str::to_owned),
                Some(x) if !hw.enabled_interfaces(t).contains(&x.as_str()) => {
                    return Err(Error::invalid(format!(
                        "{t} interface implementation '{x}' is not supported by hardware type {}. Enabled implementations: {}",
                        hw.name,
                        hw.enabled_interfaces(t).join(", ")
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    async fn do_update(&self, node: Node, req: UpdateNode) -> Result<Node, Error> {
        let only_removes_instance = node.maintenance
            && req.patch.len() == 1
            && req.patch[0].op == Op::Remove
            && req.patch[0].path == "/instance_uuid";
        if node.target_provision_state.is_some()
            && !node.provision_state.update_allowed()
            && !only_removes_instance
        {
            return Err(Error::InvalidState(format!(
                "Node {} can not be updated while a state transition is in progress.",
                req.ident
            )));
        }
        if node.provision_state == ProvisionState::Inspecting && req.version.at_least(39) {
            return Err(Error::InvalidState(format!(
                "Node {} can not be updated while a state transition is in progress.",
                req.ident
            )));
        }
        let mut doc = node.patch_doc(req.version);
        for op in &req.patch {
            patch::apply(&mut doc, op)?;
        }
        let mut new = node.clone();
        new.apply_doc(&doc, req.version, Source::Patch { ident: &req.ident })?;
        let driver_changed = new.driver != node.driver;
        match req.reset_interfaces {
            Some(true) if !driver_changed => {
                return Err(Error::invalid(
                    "The reset_interfaces parameter can only be used when changing the node's driver.",
                ));
            }
            Some(false) => {}
            _ if driver_changed => {
                // Interfaces not named in this patch go back to the new type's defaults.
                for (i, t) in INTERFACE_TYPES.iter().enumerate() {
                    let path = format!("/{t}_interface");
                    if !req.patch.iter().any(|op| op.path == path) {
                        new.interfaces.0[i] = None;
                    }
                }
            }
            _ => {}
        }
        self.complete_interfaces(&mut new)?;
        if (new.driver != node.driver || new.conductor_group != node.conductor_group)
            && !self.served(&new.driver, &new.conductor_group).await?
        {
            // Checked again under the lock: the API's check saw the node before it.
            return Err(Error::no_valid_host(&new.driver, &new.conductor_group));
        }
        check_update(&node, &mut new)?;
        if new == node {
            return Ok(Node {
                reservation: None,
                ..node
            });
        }
        // Removing the instance of an allocated node deletes the allocation with it.
        let dropped = node.allocation_id.filter(|_| new.allocation_id.is_none());
        if dropped.is_some() {
            new.allocation_uuid = None;
        }
        let saved = self
            .db
            .node_save_dropping(&new, &self.settings.host, dropped)
            .await?;
        tracing::info!(node = %saved.uuid, allocation_deleted = dropped.is_some(), "node updated");
        Ok(Node {
            reservation: None,
            ..saved
        })
    }
}

impl ConductorApi for Conductor {
    fn create_node(&self, ctx: &Context, node: Node) -> RpcFuture<'_, Node> {
        let request_id = ctx.request_id.clone();
        Box::pin(async move {
            let mut node = node;
            self.complete_interfaces(&mut node)?;
            let created = self.db.node_create(&node).await?;
            tracing::info!(node = %created.uuid, request_id, "node created");
            Ok(created)
        })
    }

    fn update_node(&self, _ctx: &Context, req: UpdateNode) -> RpcFuture<'_, Node> {
        Box::pin(async move {
            self.with_lock(&req.node.clone(), |node| self.do_update(node, req))
                .await
        })
    }

    fn set_maintenance(
        &self,
        _ctx: &Context,
        node: NodeRef,
        on: bool,
        reason: Option<String>,
    ) -> RpcFuture<'_, Node> {
        Box::pin(async move {
            self.with_lock(&node, |mut node| async move {
                node.maintenance = on;
                node.maintenance_reason = if on { reason } else { None };
                if !on {
                    node.fault = None;
                }
                let saved = self.db.node_save(&node, &self.settings.host).await?;
                tracing::info!(node = %saved.uuid, maintenance = on, "maintenance changed");
                Ok(Node {
                    reservation: None,
                    ..saved
                })
            })
            .await
        })
    }

    fn destroy_node(&self, _ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            self.with_lock(&node, |node| async move {
                check_destroy(&node, self.settings.allow_deleting_available_nodes)?;
                self.db.node_destroy(node.id, &self.settings.host).await?;
                tracing::info!(node = %node.uuid, "node deleted");
                Ok(())
            })
            .await
        })
    }

    fn add_node_traits(
        &self,
        _ctx: &Context,
        node: NodeRef,
        traits: Vec<String>,
        replace: bool,
    ) -> RpcFuture<'_, Vec<String>> {
        Box::pin(async move {
            self.with_lock(&node, |node| async move {
                let mut after: Vec<&String> = traits.iter().collect();
                if !replace {
                    after.extend(node.traits.iter());
                }
                after.sort();
                after.dedup();
                if after.len() > MAX_TRAITS_PER_NODE {
                    return Err(Error::invalid(format!(
                        "Could not modify traits for node {} as it would exceed the maximum number of traits per node ({} vs. {MAX_TRAITS_PER_NODE})",
                        node.uuid,
                        after.len()
                    )));
                }
                self.db.node_add_traits(node.id, &traits, replace, MAX_TRAITS_PER_NODE).await
            })
            .await
        })
    }

    fn remove_node_traits(
        &self,
        _ctx: &Context,
        node: NodeRef,
        one: Option<String>,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            self.with_lock(&node, |node| async move {
                let found = self.db.node_remove_traits(node.id, one.as_deref()).await?;
                if !found {
                    return Err(Error::NotFound(format!(
                        "Node {} doesn't have a trait '{}'",
                        node.uuid,
                        one.unwrap_or_default()
                    )));
                }
                Ok(())
            })
            .await
        })
    }

    fn do_provisioning_action(
        &self,
        _ctx: &Context,
        node: NodeRef,
        action: String,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            let me = self.arc()?;
            me.provisioning_action(&node, &action).await
        })
    }

    fn do_node_clean(
        &self,
        _ctx: &Context,
        node: NodeRef,
        steps: Vec<CleanStep>,
        _disable_ramdisk: Option<bool>,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            let me = self.arc()?;
            me.manual_clean(&node, steps).await
        })
    }

    fn do_node_deploy(
        &self,
        _ctx: &Context,
        node: NodeRef,
        rebuild: bool,
        configdrive: Option<serde_json::Value>,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            let me = self.arc()?;
            me.deploy(&node, rebuild, configdrive).await
        })
    }

    fn do_node_tear_down(&self, _ctx: &Context, node: NodeRef) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            let me = self.arc()?;
            me.tear_down(&node).await
        })
    }

    fn change_node_power_state(
        &self,
        _ctx: &Context,
        node: NodeRef,
        new_state: String,
        timeout_secs: Option<u32>,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move {
            self.with_lock(&node, |mut n| async move {
                if ironic_drivers::interfaces::power_result(&new_state).is_none() {
                    return Err(Error::invalid(format!(
                        "The requested action \"{new_state}\" can not be performed on node \"{}\" while it is in state \"{}\".",
                        n.uuid,
                        n.power_state.as_deref().unwrap_or("None")
                    )));
                }
                let after = self
                    .driver_for(&n)?
                    .power()
                    .set_power_state(NodeInfo::from(&n), &new_state, timeout_secs)
                    .await
                    .map_err(|why| {
                        Error::invalid(format!(
                            "Failed to change the power state of node {} to {new_state}: {why}",
                            n.uuid
                        ))
                    })?;
                n.power_state = Some(after.clone());
                n.target_power_state = None;
                n.last_error = None;
                n.reservation = Some(self.settings.host.clone());
                self.db.node_save(&n, &self.settings.host).await?;
                tracing::info!(node = %n.uuid, action = %new_state, power_state = after, "power changed");
                Ok(())
            })
            .await
        })
    }

    fn validate_driver_interfaces(
        &self,
        _ctx: &Context,
        node: NodeRef,
    ) -> RpcFuture<'_, Vec<ironic_rpc::InterfaceCheck>> {
        Box::pin(async move {
            let n = self.read(&node).await?;
            let hw = self.hardware_type(&n.driver, &n.conductor_group)?;
            let driver = self.driver_for(&n)?;
            let info = NodeInfo::from(&n);
            // The deploy interface is valid only if the deploy steps are.
            let plan = self.deploy_plan(&n).await;
            let mut checks = Vec::new();
            for t in INTERFACE_TYPES.iter().filter(|t| **t != "vendor") {
                let imp = n.interfaces.get(t).or_else(|| hw.default_interface(t));
                let (result, reason) = match imp {
                    Some(i) if !i.starts_with("no-") => {
                        let checked = match (driver.validate_interface(info, t).await, &plan, *t) {
                            (Err(why), _, _) => Err(why),
                            (Ok(()), Err(why), "deploy") => Err(why.clone()),
                            _ => Ok(()),
                        };
                        match checked {
                            Ok(()) => (Some(true), None),
                            Err(why) => (Some(false), Some(why)),
                        }
                    }
                    _ => (None, Some("not supported".to_string())),
                };
                checks.push(ironic_rpc::InterfaceCheck {
                    interface: t.to_string(),
                    result,
                    reason,
                });
            }
            Ok(checks)
        })
    }

    fn get_clean_steps(
        &self,
        _ctx: &Context,
        node: NodeRef,
        min_priority: u32,
    ) -> RpcFuture<'_, Option<Vec<serde_json::Value>>> {
        Box::pin(async move {
            let me = self.arc()?;
            me.clean_steps(&node, min_priority).await
        })
    }

    fn create_allocation(
        &self,
        _ctx: &Context,
        allocation: ironic_model::Allocation,
        backfill: Option<NodeRef>,
    ) -> RpcFuture<'_, ironic_model::Allocation> {
        Box::pin(async move {
            let me = self.arc()?;
            me.create_allocation(allocation, backfill).await
        })
    }

    fn destroy_allocation(
        &self,
        _ctx: &Context,
        allocation: ironic_model::Allocation,
    ) -> RpcFuture<'_, ()> {
        Box::pin(async move { Conductor::destroy_allocation(self, allocation).await })
    }
}
