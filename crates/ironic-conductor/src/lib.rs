//! The conductor: owns node writes. Every change to a node happens here, under the
//! node's exclusive lock (the `reservation` column), with the update rules of
//! `ironic_model::node`. The registry keeps this conductor visible to the API processes.
//!
//! Architecture invariant: the conductor serves no HTTP; it is reached through
//! `ironic_rpc::Handlers` (the conductor calls of `ironic_rpc::calls`).

use std::sync::Arc;
use std::time::Duration;

use ironic_config::Config;
use ironic_db::Db;
use ironic_db::topology::Topology;
use ironic_drivers::Registry;
use ironic_drivers::interfaces::NodeInfo;
use ironic_model::node::{INTERFACE_TYPES, Source, check_destroy, check_update};
use ironic_model::patch::{self, Op};
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node};

pub use crate::core::Core;
use ironic_catalog::steps::OfferedStep;
use ironic_model::Allocation;
use ironic_model::port::{Port, Portgroup};
use ironic_model::volume::{VolumeConnector, VolumeTarget};
use ironic_rpc::calls::{
    AddNodeTraits, ChangeNodePowerState, CreateAllocation, CreateNode, CreatePort, CreatePortgroup,
    DestroyAllocation, DestroyNode, DestroyPort, DestroyPortgroup, DoNodeClean, DoNodeDeploy,
    DoNodeTearDown, DoProvisioningAction, GetCleanSteps, Ping, RemoveNodeTraits, SetMaintenance,
    UpdateNode, UpdatePort, UpdatePortgroup, ValidateDriverInterfaces, VifAttach, VifDetach,
    VifList, Vifs,
};
use ironic_rpc::calls::{
    ChangeNodeBootMode, ChangeNodeSecureBoot, ContinueInspection, DoNodeService, GetNodeWithToken,
    Heartbeat,
};
use ironic_rpc::calls::{
    DestroyVolumeConnector, DestroyVolumeTarget, GetBootDevice, GetConsoleInformation,
    GetIndicatorState, GetSupportedBootDevices, GetSupportedIndicators, InjectNmi, JsonDoc,
    SetBootDevice, SetConsoleMode, SetIndicatorState, SetTargetRaidConfig, UpdateVolumeConnector,
    UpdateVolumeTarget, VendorPassthru,
};
use ironic_rpc::{Context, Handlers, InterfaceCheck};

mod agent;
mod allocations;
mod core;
mod every_node;
mod history;
mod inspection_rules;
mod lock;
mod management;
use management::BootModeChange;
mod nics;
pub mod oneview;
pub mod power_sync;
mod provision;
pub mod registry;
pub mod service;
mod volume;
pub mod work;

/// Most traits a node may carry (upstream `MAX_TRAITS_PER_NODE`).
pub const MAX_TRAITS_PER_NODE: usize = ironic_model::names::MAX_TRAITS_PER_NODE;

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
    /// When a conductor counts as dead (from `heartbeat_interval` and
    /// `heartbeat_timeout`).
    pub liveness: ironic_db::Liveness,
    /// 0: no take-over of dead conductors' allocations.
    pub check_allocations_interval: Duration,
    pub allocation_delay: Duration,
    /// The OneView periodic checks; zero disables them.
    pub oneview_check_interval: Duration,
    /// Node history (`history.rs`): recorded or not, and its pruning.
    pub node_history: bool,
    pub node_history_max_entries: u64,
    pub node_history_cleanup_interval: Duration,
    pub node_history_cleanup_batch_count: u64,
    pub node_history_minimum_days: u64,
    /// `[inspector] add_ports`: `all`, `pxe` or `disabled`.
    pub inspector_add_ports: String,
    /// `[conductor] inspect_wait_timeout`: how long an in-band inspection waits for
    /// the ramdisk's data; zero waits for ever.
    pub inspect_wait_timeout: Duration,
    /// `[conductor] max_conductor_wait_step_seconds`: the longest reserved `wait` step.
    pub max_conductor_wait_step_seconds: u64,
    /// `[conductor] sync_power_state_interval`; zero disables the sync.
    pub sync_power_state_interval: Duration,
    /// `[conductor] sync_power_state_workers`: BMCs read at the same time.
    pub sync_power_state_workers: usize,
    /// `[conductor] force_power_state_during_sync`: set the hardware back (true) or
    /// record what it reports (false).
    pub force_power_state_during_sync: bool,
    /// `[conductor] power_state_sync_max_retries`: failed rounds before maintenance.
    pub power_state_sync_max_retries: u32,
    /// `[inspection_rules] built_in_rules`: a YAML file of rules besides the API's.
    pub built_in_rules: Option<std::path::PathBuf>,
    /// `[inspection_rules] mask_secrets`: `always`, `never` or `sensitive`.
    pub mask_secrets: String,
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
            liveness: ironic_db::Liveness::new(
                cfg.conductor.heartbeat_interval,
                cfg.conductor.heartbeat_timeout,
            ),
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
            node_history: cfg.conductor.node_history,
            node_history_max_entries: cfg.conductor.node_history_max_entries,
            node_history_cleanup_interval: Duration::from_secs(
                cfg.conductor.node_history_cleanup_interval,
            ),
            node_history_cleanup_batch_count: cfg.conductor.node_history_cleanup_batch_count,
            node_history_minimum_days: cfg.conductor.node_history_minimum_days,
            inspector_add_ports: cfg.inspector.add_ports.clone(),
            inspect_wait_timeout: Duration::from_secs(cfg.conductor.inspect_wait_timeout),
            max_conductor_wait_step_seconds: cfg.conductor.max_conductor_wait_step_seconds,
            sync_power_state_interval: Duration::from_secs(cfg.conductor.sync_power_state_interval),
            sync_power_state_workers: cfg.conductor.sync_power_state_workers,
            force_power_state_during_sync: cfg.conductor.force_power_state_during_sync,
            power_state_sync_max_retries: cfg.conductor.power_state_sync_max_retries.max(1),
            built_in_rules: cfg
                .inspection_rules
                .built_in_rules
                .as_ref()
                .map(std::path::PathBuf::from),
            mask_secrets: cfg.inspection_rules.mask_secrets.clone(),
        }
    }
}

/// One conductor: the node calls of the contract (this file), provisioning
/// ([`provision::Provisioner`]), allocations ([`allocations::Allocator`]), the registry
/// and heartbeat (`registry.rs`) and the OneView checks (`oneview.rs`), over one shared
/// [`Core`].
pub struct Conductor {
    core: Arc<Core>,
    provision: Arc<provision::Provisioner>,
    allocations: Arc<allocations::Allocator>,
    /// Power-state sync failures in a row, per node (`power_sync.rs`).
    power_failures: power_sync::Failures,
}

impl std::ops::Deref for Conductor {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Conductor {
    pub fn new(db: Db, drivers: Registry, settings: ConductorSettings) -> Arc<Self> {
        let core = Arc::new(Core::new(db, drivers, settings));
        Arc::new(Conductor {
            provision: Arc::new(provision::Provisioner::new(core.clone())),
            allocations: Arc::new(allocations::Allocator::new(core.clone())),
            core,
            power_failures: power_sync::Failures::default(),
        })
    }

    /// Fails what a crash left behind on the nodes this conductor owns (see
    /// [`provision::Provisioner::fail_orphaned_work`]).
    pub async fn fail_orphaned_work(&self, topology: &Topology) -> Result<usize, Error> {
        self.provision.fail_orphaned_work(topology).await
    }

    /// At start-up: continues this conductor's own `allocating` allocations.
    pub async fn resume_allocations(&self) -> Result<usize, Error> {
        self.allocations.resume_allocations().await
    }

    /// One round of node history pruning (`[conductor] node_history_*`).
    pub async fn prune_history(&self) {
        let s = &self.settings;
        history::prune(
            &self.db,
            s.node_history_max_entries,
            s.node_history_minimum_days,
            s.node_history_cleanup_batch_count,
        )
        .await;
    }

    /// One round of the take-over of dead conductors' allocations.
    pub async fn take_over(&self, topology: &Topology) -> Result<(), String> {
        self.allocations.take_over(topology).await
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

impl Handlers for Conductor {
    async fn ping(&self, _ctx: &Context, _req: Ping) -> Result<(), Error> {
        Ok(())
    }

    async fn create_node(&self, ctx: &Context, req: CreateNode) -> Result<Node, Error> {
        let mut node = req.node;
        self.complete_interfaces(&mut node)?;
        let created = match self.db.node_create(&node).await {
            // A repeat after the conductor of the first attempt died: if that attempt
            // stored the node, this is it.
            Err(Error::Conflict(m)) if ctx.attempt > 0 => {
                return match self.db.node_by_uuid(node.uuid.as_str()).await? {
                    Some(n) if n.driver == node.driver && n.name == node.name => {
                        tracing::info!(node = %n.uuid, "node already created by an earlier attempt of this call");
                        Ok(n)
                    }
                    _ => Err(Error::Conflict(m)),
                };
            }
            r => r?,
        };
        tracing::info!(node = %created.uuid, request_id = %ctx.request_id, "node created");
        Ok(created)
    }

    async fn update_node(&self, ctx: &Context, req: UpdateNode) -> Result<Node, Error> {
        self.with_lock(&req.node.clone(), |mut node| async move {
            // A repeat whose first attempt was applied: the node as it is.
            if lock::applied_before(&node, ctx) {
                tracing::info!(node = %node.uuid, request_id = %ctx.request_id, "update already applied by an earlier attempt of this call");
                return Ok(Node {
                    reservation: None,
                    ..node
                });
            }
            lock::stamp(&mut node, ctx);
            self.do_update(node, req).await
        })
        .await
    }

    async fn set_maintenance(&self, _ctx: &Context, req: SetMaintenance) -> Result<Node, Error> {
        let SetMaintenance { node, on, reason } = req;
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
    }

    async fn destroy_node(&self, ctx: &Context, req: DestroyNode) -> Result<(), Error> {
        let r = self
            .with_lock(&req.node, |node| async move {
                check_destroy(&node, self.settings.allow_deleting_available_nodes)?;
                self.db.node_destroy(node.id, &self.settings.host).await?;
                tracing::info!(node = %node.uuid, "node deleted");
                Ok(())
            })
            .await;
        match r {
            // A repeat: the first attempt deleted it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }

    async fn add_node_traits(
        &self,
        _ctx: &Context,
        req: AddNodeTraits,
    ) -> Result<Vec<String>, Error> {
        let AddNodeTraits {
            node,
            traits,
            replace,
        } = req;
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
            self.db
                .node_add_traits(node.id, &traits, replace, MAX_TRAITS_PER_NODE, &self.settings.host)
                .await
        })
        .await
    }

    async fn remove_node_traits(&self, ctx: &Context, req: RemoveNodeTraits) -> Result<(), Error> {
        let RemoveNodeTraits { node, one } = req;
        let r = self
            .with_lock(&node, |node| async move {
                let found = self
                    .db
                    .node_remove_traits(node.id, one.as_deref(), &self.settings.host)
                    .await?;
                if !found {
                    return Err(Error::NotFound(format!(
                        "Node {} doesn't have a trait '{}'",
                        node.uuid,
                        one.unwrap_or_default()
                    )));
                }
                Ok(())
            })
            .await;
        match r {
            // A repeat: the first attempt removed it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }

    async fn do_provisioning_action(
        &self,
        ctx: &Context,
        req: DoProvisioningAction,
    ) -> Result<(), Error> {
        self.provision
            .provisioning_action(&req.node, &req.action, ctx)
            .await
    }

    async fn do_node_clean(&self, ctx: &Context, req: DoNodeClean) -> Result<(), Error> {
        self.provision
            .manual_clean(
                &req.node,
                req.steps,
                req.disable_ramdisk.unwrap_or(false),
                ctx,
            )
            .await
    }

    async fn do_node_service(&self, ctx: &Context, req: DoNodeService) -> Result<(), Error> {
        self.provision
            .service(
                &req.node,
                req.steps,
                req.disable_ramdisk.unwrap_or(false),
                ctx,
            )
            .await
    }

    async fn do_node_deploy(&self, ctx: &Context, req: DoNodeDeploy) -> Result<(), Error> {
        self.provision
            .deploy(
                &req.node,
                req.rebuild,
                req.configdrive,
                req.deploy_steps,
                ctx,
            )
            .await
    }

    async fn do_node_tear_down(&self, ctx: &Context, req: DoNodeTearDown) -> Result<(), Error> {
        self.provision.tear_down(&req.node, ctx).await
    }

    async fn change_node_power_state(
        &self,
        _ctx: &Context,
        req: ChangeNodePowerState,
    ) -> Result<(), Error> {
        let ChangeNodePowerState {
            node,
            new_state,
            timeout_secs,
        } = req;
        self.with_lock(&node, |mut n| async move {
            if n.disable_power_off && matches!(new_state.as_str(), "power off" | "soft power off") {
                tracing::error!(node = %n.uuid, "refusing to power off a node with disable_power_off");
                return Err(Error::Conflict(format!(
                    "Failed to set node power state to {new_state}."
                )));
            }
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
    }

    async fn validate_driver_interfaces(
        &self,
        _ctx: &Context,
        req: ValidateDriverInterfaces,
    ) -> Result<Vec<InterfaceCheck>, Error> {
        let n = self.read(&req.node).await?;
        let hw = self.hardware_type(&n.driver, &n.conductor_group)?;
        let driver = self.driver_for(&n)?;
        let info = NodeInfo::from(&n);
        // The deploy interface is valid only if the deploy steps are.
        let plan = self.provision.deploy_plan(&n).await;
        let mut checks = Vec::new();
        for t in INTERFACE_TYPES.iter().filter(|t| **t != "vendor") {
            let imp = n.interfaces.get(t).or_else(|| hw.default_interface(t));
            let (result, reason) = match imp {
                Some(i) if !i.starts_with("no-") => {
                    let checked = match (driver.validate_interface(info, t).await, &plan, *t) {
                        (Err(why), _, _) => Err(why.to_string()),
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
            checks.push(InterfaceCheck {
                interface: t.to_string(),
                result,
                reason,
            });
        }
        Ok(checks)
    }

    async fn get_clean_steps(
        &self,
        _ctx: &Context,
        req: GetCleanSteps,
    ) -> Result<Option<Vec<OfferedStep>>, Error> {
        self.provision
            .clean_steps(&req.node, req.min_priority)
            .await
    }

    async fn create_allocation(
        &self,
        ctx: &Context,
        req: CreateAllocation,
    ) -> Result<Allocation, Error> {
        let repeat = (ctx.attempt > 0).then(|| req.allocation.clone());
        match self
            .allocations
            .new_allocation(req.allocation, req.backfill)
            .await
        {
            // A repeat after the conductor of the first attempt died: if that attempt
            // stored the allocation, this is it.
            Err(Error::Conflict(m)) => match repeat {
                Some(new) => self
                    .allocations
                    .stored_by_earlier_attempt(&new)
                    .await?
                    .ok_or(Error::Conflict(m)),
                None => Err(Error::Conflict(m)),
            },
            r => r,
        }
    }

    async fn destroy_allocation(&self, ctx: &Context, req: DestroyAllocation) -> Result<(), Error> {
        match self.allocations.delete_allocation(&req.allocation).await {
            // A repeat: the first attempt deleted it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => {
                tracing::info!(allocation = %req.allocation.uuid, "allocation already deleted by an earlier attempt");
                Ok(())
            }
            r => r,
        }
    }

    async fn create_port(&self, ctx: &Context, req: CreatePort) -> Result<Port, Error> {
        Conductor::create_port(self, ctx, req).await
    }

    async fn update_port(&self, _ctx: &Context, req: UpdatePort) -> Result<Port, Error> {
        Conductor::update_port(self, req).await
    }

    async fn destroy_port(&self, ctx: &Context, req: DestroyPort) -> Result<(), Error> {
        Conductor::destroy_port(self, ctx, req).await
    }

    async fn create_portgroup(
        &self,
        ctx: &Context,
        req: CreatePortgroup,
    ) -> Result<Portgroup, Error> {
        Conductor::create_portgroup(self, ctx, req).await
    }

    async fn update_portgroup(
        &self,
        _ctx: &Context,
        req: UpdatePortgroup,
    ) -> Result<Portgroup, Error> {
        Conductor::update_portgroup(self, req).await
    }

    async fn destroy_portgroup(&self, ctx: &Context, req: DestroyPortgroup) -> Result<(), Error> {
        Conductor::destroy_portgroup(self, ctx, req).await
    }

    async fn vif_list(&self, _ctx: &Context, req: VifList) -> Result<Vifs, Error> {
        Conductor::vif_list(self, req).await
    }

    async fn vif_attach(&self, ctx: &Context, req: VifAttach) -> Result<(), Error> {
        Conductor::vif_attach(self, ctx, req).await
    }

    async fn vif_detach(&self, ctx: &Context, req: VifDetach) -> Result<(), Error> {
        Conductor::vif_detach(self, ctx, req).await
    }

    async fn update_volume_connector(
        &self,
        _ctx: &Context,
        req: UpdateVolumeConnector,
    ) -> Result<VolumeConnector, Error> {
        Conductor::update_volume_connector(self, req).await
    }

    async fn destroy_volume_connector(
        &self,
        ctx: &Context,
        req: DestroyVolumeConnector,
    ) -> Result<(), Error> {
        Conductor::destroy_volume_connector(self, ctx, req).await
    }

    async fn update_volume_target(
        &self,
        _ctx: &Context,
        req: UpdateVolumeTarget,
    ) -> Result<VolumeTarget, Error> {
        Conductor::update_volume_target(self, req).await
    }

    async fn destroy_volume_target(
        &self,
        ctx: &Context,
        req: DestroyVolumeTarget,
    ) -> Result<(), Error> {
        Conductor::destroy_volume_target(self, ctx, req).await
    }

    async fn get_console_information(
        &self,
        _ctx: &Context,
        req: GetConsoleInformation,
    ) -> Result<JsonDoc, Error> {
        Conductor::get_console_information(self, req).await
    }

    async fn set_console_mode(&self, _ctx: &Context, req: SetConsoleMode) -> Result<(), Error> {
        Conductor::set_console_mode(self, req).await
    }

    async fn get_boot_device(&self, _ctx: &Context, req: GetBootDevice) -> Result<JsonDoc, Error> {
        Conductor::get_boot_device(self, req).await
    }

    async fn set_boot_device(&self, _ctx: &Context, req: SetBootDevice) -> Result<(), Error> {
        Conductor::set_boot_device(self, req).await
    }

    async fn get_supported_boot_devices(
        &self,
        _ctx: &Context,
        req: GetSupportedBootDevices,
    ) -> Result<JsonDoc, Error> {
        Conductor::get_supported_boot_devices(self, req).await
    }

    async fn inject_nmi(&self, _ctx: &Context, req: InjectNmi) -> Result<(), Error> {
        Conductor::inject_nmi(self, req).await
    }

    async fn set_target_raid_config(
        &self,
        _ctx: &Context,
        req: SetTargetRaidConfig,
    ) -> Result<(), Error> {
        Conductor::set_target_raid_config(self, req).await
    }

    async fn get_supported_indicators(
        &self,
        _ctx: &Context,
        req: GetSupportedIndicators,
    ) -> Result<JsonDoc, Error> {
        Conductor::get_supported_indicators(self, req).await
    }

    async fn get_indicator_state(
        &self,
        _ctx: &Context,
        req: GetIndicatorState,
    ) -> Result<JsonDoc, Error> {
        Conductor::get_indicator_state(self, req).await
    }

    async fn set_indicator_state(
        &self,
        _ctx: &Context,
        req: SetIndicatorState,
    ) -> Result<(), Error> {
        Conductor::set_indicator_state(self, req).await
    }

    async fn change_node_boot_mode(
        &self,
        _ctx: &Context,
        req: ChangeNodeBootMode,
    ) -> Result<(), Error> {
        Conductor::change_boot_mode(self, req.node, BootModeChange::Mode(req.target)).await
    }

    async fn change_node_secure_boot(
        &self,
        _ctx: &Context,
        req: ChangeNodeSecureBoot,
    ) -> Result<(), Error> {
        Conductor::change_boot_mode(self, req.node, BootModeChange::SecureBoot(req.target)).await
    }

    async fn vendor_passthru(&self, _ctx: &Context, req: VendorPassthru) -> Result<JsonDoc, Error> {
        Conductor::vendor_passthru(self, req).await
    }

    async fn get_node_with_token(
        &self,
        _ctx: &Context,
        req: GetNodeWithToken,
    ) -> Result<Node, Error> {
        Conductor::get_node_with_token(self, req).await
    }

    async fn heartbeat(&self, _ctx: &Context, req: Heartbeat) -> Result<(), Error> {
        Conductor::agent_heartbeat(self, req).await
    }

    async fn attach_virtual_media(
        &self,
        _ctx: &Context,
        req: ironic_rpc::calls::AttachVirtualMedia,
    ) -> Result<(), Error> {
        Conductor::attach_virtual_media(self, req).await
    }

    async fn detach_virtual_media(
        &self,
        _ctx: &Context,
        req: ironic_rpc::calls::DetachVirtualMedia,
    ) -> Result<(), Error> {
        Conductor::detach_virtual_media(self, req).await
    }

    async fn get_virtual_media(
        &self,
        _ctx: &Context,
        req: ironic_rpc::calls::GetVirtualMedia,
    ) -> Result<JsonDoc, Error> {
        Conductor::get_virtual_media(self, req).await
    }

    async fn continue_inspection(
        &self,
        _ctx: &Context,
        req: ContinueInspection,
    ) -> Result<(), Error> {
        self.provision
            .continue_inspection(&req.node, req.inventory, req.plugin_data)
            .await
    }
}
