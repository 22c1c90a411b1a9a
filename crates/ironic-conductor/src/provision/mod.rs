//! Provisioning verbs and the background work they start: verification (`manage`),
//! automated cleaning (`provide`), manual cleaning (`clean`), deploying, servicing
//! (`service`), inspection (out of band, or in band through the ramdisk's
//! `continue_inspection`), `adopt`, `abort`, and the reserved steps (`hold` and
//! `unhold`, `wait`, power actions; [`Provisioner::run_step`]).
//!
//! A verb is checked and applied under the node lock (`fsm::process`); the RPC returns
//! once the node is in its new state, and a task of its own carries the lock on.
//! Cleaning, deploying and servicing run their steps through one step engine
//! (`engine.rs`): a step that takes time puts the node in its flow's wait state and
//! gives the lock back, and an event (its timer; the node's owner after a crash or a
//! take-over) continues it from the stored index. Work a crash interrupted while it
//! held the lock (a transient state, unlocked) is failed by the node's owner
//! (`fail_orphaned_work`).

use ironic_rpc::Context;
use ironic_rpc::calls::{
    ContinueInspection, DoNodeClean, DoNodeDeploy, DoNodeService, DoNodeTearDown,
    DoProvisioningAction, GetCleanSteps,
};
use std::sync::Arc;

use ironic_catalog::steps::{self, OfferedStep, Requested, Step};
use ironic_db::topology::Topology;
use ironic_drivers::interfaces::{Driver, DriverError, NodeChanges, NodeInfo, Outcome};
use ironic_model::agent;
use ironic_model::deploy_template::{TemplateStep, USER_DEPLOY_STEPS};
use ironic_model::fsm::{self, Event};
use ironic_model::node::{JsonObject, now};
use ironic_model::states::ProvisionState as P;
use ironic_model::{Error, Node};
use ironic_rpc::NodeRef;
use serde_json::{Value, json};

use crate::lock::{Held, Patience};
pub(crate) use engine::Flow;
pub use engine::WaitsChecked;

mod agent_deploy;
mod boot;
mod cleaning;
mod deploying;
pub(crate) use agent_deploy::check_deploy as check_direct_deploy;
pub(crate) use deploying::deploy_plan;
mod engine;
pub(crate) mod inspecting;
mod recovery;
mod servicing;
mod step_state;
mod verbs;

/// `driver_internal_info` keys of a cleaning in progress (its steps: `step_state.rs`).
/// Set once the deploy interface prepared the node for cleaning: whoever ends the
/// cleaning (done, failed, aborted, taken over) tears that down.
const CLEANING_PREPARED: &str = "cleaning_prepared";
/// The manual cleaning runs without the ramdisk (upstream's key).
const CLEANING_DISABLE_RAMDISK: &str = "cleaning_disable_ramdisk";
/// The servicing runs without the ramdisk (upstream's key).
const SERVICE_DISABLE_RAMDISK: &str = "service_disable_ramdisk";

fn set_state(node: &mut Node, t: fsm::Transition) {
    node.provision_state = t.state;
    node.target_provision_state = t.target;
    node.provision_updated_at = Some(now());
}

/// The deploy interface's calls that change the node.
#[derive(Debug, Clone, Copy)]
enum DeployCall {
    Prepare,
    TearDown,
    PrepareCleaning,
    TearDownCleaning,
}

impl DeployCall {
    fn name(self) -> &'static str {
        match self {
            DeployCall::Prepare => "deploy.prepare",
            DeployCall::TearDown => "deploy.tear_down",
            DeployCall::PrepareCleaning => "deploy.prepare_cleaning",
            DeployCall::TearDownCleaning => "deploy.tear_down_cleaning",
        }
    }
}

/// Records how long a step's execution took (`ironic_step_duration_seconds`): the whole
/// step for one that finishes at once, the part up to its wait otherwise.
fn step_timed<E>(
    kind: &'static str,
    step: &Step,
    started: std::time::Instant,
    outcome: &Result<Outcome, E>,
) {
    let label = match outcome {
        Ok(Outcome::Done) => "done",
        Ok(Outcome::Wait(_) | Outcome::Callback | Outcome::Recheck(_)) => "waiting",
        Err(_) => "failed",
    };
    metrics::histogram!(
        "ironic_step_duration_seconds",
        "kind" => kind,
        "step" => step.name(),
        "outcome" => label
    )
    .record(started.elapsed().as_secs_f64());
}

fn step_json(s: &Step) -> JsonObject {
    match s.to_json() {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// Why background work on a node (a step, an inspection, a deploy plan) failed; its
/// text is what `last_error` shows.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkFailed {
    /// The driver's reason.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The database, or a rule of the domain.
    #[error(transparent)]
    Domain(#[from] Error),
    /// The conductor's own reason.
    #[error("{0}")]
    Refused(String),
}

/// What running a step did.
enum Ran {
    /// The driver's (or a power action's) outcome, or why it failed (timed).
    Finished(Result<Outcome, WorkFailed>),
    /// The reserved `hold` step: the node waits in `… hold` for `unhold`.
    Hold,
}

/// A manual cleaning as asked for.
struct Manual {
    requested: Vec<Requested>,
    /// Run without booting the ramdisk: only steps that do not need it.
    disable_ramdisk: bool,
}

/// Provisioning: the verbs and the background work they start (cleaning, deploying,
/// tear-down), and the recovery of what a crash interrupted.
pub struct Provisioner {
    db: ironic_db::Db,
    drivers: ironic_drivers::Registry,
    settings: Arc<crate::ConductorSettings>,
    locks: crate::lock::Locks,
    work: crate::work::Runner,
    /// Names this process run: a wait records it in its token (`engine.rs`).
    boot_id: String,
    /// Nodes whose overdue wait this process is continuing (waiting for the lock,
    /// perhaps for minutes): the periodic check starts one continuation per node.
    continuing: Arc<std::sync::Mutex<std::collections::HashSet<ironic_model::NodeId>>>,
    /// Deploy kernels and ramdisks, boot ISOs, the image server's files.
    images: crate::images::Images,
    /// The same, as the boot interfaces see them.
    boot_files: crate::boot_files::ConductorFiles,
    /// Talks to the nodes' ramdisk agents.
    agent: ironic_drivers::agent_client::AgentClient,
}

impl Provisioner {
    /// At start: what an earlier process left half-written in the image cache and on
    /// the image server, and published ramdisk ISOs and instance images older than the
    /// longest callback wait plus an hour (their node's wait ended without them).
    pub(crate) async fn sweep_images(&self) {
        let s = &self.settings;
        let waits = [
            s.deploy_callback_timeout,
            s.clean_callback_timeout,
            s.service_callback_timeout,
            s.inspect_wait_timeout,
        ];
        let stale = match waits.iter().any(|w| w.is_zero()) {
            true => None,
            false => waits
                .iter()
                .max()
                .map(|w| *w + std::time::Duration::from_secs(3600)),
        };
        self.images.sweep(stale).await;
    }

    pub(crate) fn new(
        db: ironic_db::Db,
        drivers: ironic_drivers::Registry,
        settings: Arc<crate::ConductorSettings>,
        locks: crate::lock::Locks,
        work: crate::work::Runner,
    ) -> Provisioner {
        let images = crate::images::Images::new(&settings.deploy, settings.local_files.clone());
        Provisioner {
            db,
            drivers,
            locks,
            work,
            boot_id: uuid::Uuid::new_v4().simple().to_string(),
            continuing: Arc::default(),
            images: images.clone(),
            boot_files: crate::boot_files::ConductorFiles::new(
                images,
                settings.deploy.http_root.clone(),
                settings.pxe.tftp_root.clone(),
            ),
            agent: agent_deploy::client(&settings),
            settings,
        }
    }

    /// Tells the node's driver that a step started, finished, failed or was aborted,
    /// and applies what it records (the fake drivers' journal).
    fn step_event(&self, node: &mut Node, step: &Step, event: &str) {
        if let Ok(d) = self.driver_of(node) {
            d.step_event(NodeInfo::from(&*node), step, event)
                .apply(node);
        }
    }

    fn runner_id(&self) -> String {
        format!("{}/{}", self.settings.host, self.boot_id)
    }

    /// The node lock for a call that writes the node ([`Held::for_call`]); `None`: a
    /// repeat whose first attempt was applied (nothing to do).
    async fn hold_for_call(&self, target: &NodeRef, ctx: &Context) -> Result<Option<Held>, Error> {
        let held = self.locks.hold(target, Patience::Retry).await?;
        Ok(held.for_call(ctx).await)
    }

    /// The node's driver, for work in progress (`Err` names the hardware type this
    /// conductor does not enable).
    fn driver_of(&self, node: &Node) -> Result<&dyn Driver, DriverError> {
        crate::nodes::driver(&self.drivers, node).map_err(|_| {
            DriverError::invalid(format!("hardware type {} is not enabled here", node.driver))
        })
    }

    /// The node's ports.
    async fn node_ports(&self, node: &Node) -> Result<Vec<ironic_model::port::Port>, Error> {
        self.db
            .port_list(&ironic_db::ports::NicListQuery {
                node_id: Some(node.id),
                ..ironic_db::ports::NicListQuery::every()
            })
            .await
    }

    /// Reads the node's BIOS settings through its bios interface and stores them
    /// (`GET /v1/nodes/{node}/bios`); nothing for an interface that keeps none. A
    /// failure is logged: the cache is refreshed at the next verification or BIOS step.
    pub(super) async fn cache_bios(&self, node: &Node) {
        let Ok(driver) = self.driver_of(node) else {
            return;
        };
        let iface = node.interfaces.get("bios").unwrap_or("no-bios");
        match driver.bios_settings(NodeInfo::from(node), iface).await {
            Ok(None) => {}
            Ok(Some(settings)) => match self.db.bios_cache(node.id.0, &settings).await {
                Ok(()) => {
                    tracing::info!(node = %node.uuid, settings = settings.len(), "BIOS settings cached")
                }
                Err(e) => {
                    tracing::warn!(node = %node.uuid, error = %ironic_model::error::chain(&e), "could not store the BIOS settings")
                }
            },
            Err(e) => {
                tracing::warn!(node = %node.uuid, error = %ironic_model::secrets::log_safe(&e.to_string()), "could not read the BIOS settings")
            }
        }
    }

    /// Validates the node's power and deploy interfaces before work starts on it; `Err`
    /// is the driver's reason (callers word the 400).
    async fn validate_power_and_deploy(&self, node: &Node) -> Result<(), DriverError> {
        let driver = crate::nodes::driver(&self.drivers, node)
            .map_err(|e| DriverError::invalid(e.to_string()))?;
        for t in ["power", "deploy"] {
            driver.validate_interface(NodeInfo::from(node), t).await?;
        }
        Ok(())
    }

    /// Runs `step` through the node's driver, or here when it is a reserved step
    /// (`steps::RESERVED_STEPS`): a power action through the power interface, a `wait`
    /// as a pause of its `seconds` (at most `[conductor] max_conductor_wait_step_seconds`,
    /// which is also the pause when none is given: there is no agent whose heartbeat
    /// would end it), a `hold` as [`Ran::Hold`]. A step that finished (or failed) is
    /// timed as a step of `kind` (`clean`, `deploy`, `service`).
    async fn run_step(&self, node: &mut Node, flow: Flow, step: &Step) -> Ran {
        let kind = flow.kind();
        let started = std::time::Instant::now();
        let outcome = match self.step_outcome(node, flow, step).await {
            Ok(None) => return Ran::Hold,
            Ok(Some(o)) => Ok(o),
            Err(why) => Err(why),
        };
        step_timed(kind, step, started, &outcome);
        Ran::Finished(outcome)
    }

    /// [`Provisioner::run_step`] untimed: `None` for `hold`.
    async fn step_outcome(
        &self,
        node: &mut Node,
        flow: Flow,
        step: &Step,
    ) -> Result<Option<Outcome>, WorkFailed> {
        let driver = self.driver_of(node)?;
        let power = match step.step.as_str() {
            "hold" => return Ok(None),
            "wait" => {
                let most = self.settings.max_conductor_wait_step_seconds;
                let secs = match step.args.get("seconds") {
                    None => most,
                    Some(v) => v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                        .ok_or_else(|| {
                            WorkFailed::Refused(format!(
                                "the wait step's seconds must be a number, not {v}"
                            ))
                        })?,
                };
                if secs > most {
                    tracing::warn!(node = %node.uuid, asked = secs, most, "a wait step longer than the maximum; waiting the maximum");
                }
                return Ok(Some(Outcome::Wait(std::time::Duration::from_secs(
                    secs.min(most),
                ))));
            }
            "power_on" => "power on",
            "power_off" if node.disable_power_off => {
                return Err(WorkFailed::Refused(
                    "Failed to set node power state to power off: disable_power_off is set.".into(),
                ));
            }
            "power_off" => "power off",
            "reboot" => "rebooting",
            _ => {
                // An interface the node has turned off (`no-bios`, …) runs no steps,
                // though its hardware type offers them.
                if let Some(off) = node
                    .interfaces
                    .get(&step.interface)
                    .filter(|i| i.starts_with("no-"))
                {
                    return Err(WorkFailed::Refused(format!(
                        "the node's {} interface is {off}: it has no step {}",
                        step.interface,
                        step.name()
                    )));
                }
                // The `direct` deploy's own steps, and the agent's.
                if let Some(outcome) = self.agent_step(node, flow, step).await {
                    return outcome.map(Some);
                }
                let outcome = driver.execute_step(NodeInfo::from(&*node), step).await?;
                // What a BIOS step changed shows in the cached settings.
                if step.interface == "bios" && outcome == Outcome::Done {
                    self.cache_bios(node).await;
                }
                return Ok(Some(outcome));
            }
        };
        let after = driver
            .power()
            .set_power_state(NodeInfo::from(&*node), power, None)
            .await?;
        node.power_state = Some(after);
        Ok(Some(Outcome::Done))
    }

    /// Calls the node's deploy interface and applies the changes it reports to the
    /// node in memory; `Err` is the driver's reason. The `direct` deploy is the
    /// conductor's own (`agent_deploy.rs`).
    async fn deploy_call(&self, node: &mut Node, call: DeployCall) -> Result<(), WorkFailed> {
        if ironic_catalog::agent_based(node) {
            tracing::debug!(node = %node.uuid, call = call.name(), "direct deploy call");
            return match call {
                DeployCall::Prepare => self.prepare_direct(node).await,
                DeployCall::TearDown => self.tear_down_direct(node).await,
                DeployCall::PrepareCleaning => self.prepare_cleaning_direct(node).await,
                DeployCall::TearDownCleaning => self.tear_down_cleaning_direct(node).await,
            };
        }
        let driver = self.driver_of(node)?;
        let mut info = NodeInfo::from(&*node);
        info.skip_automated_cleaning = !node
            .automated_clean
            .unwrap_or(self.settings.automated_clean);
        let d = driver.deploy();
        tracing::debug!(node = %node.uuid, call = call.name(), "deploy interface call");
        let changes: NodeChanges = match call {
            DeployCall::Prepare => d.prepare(info).await,
            DeployCall::TearDown => d.tear_down(info).await,
            DeployCall::PrepareCleaning => d.prepare_cleaning(info).await,
            DeployCall::TearDownCleaning => d.tear_down_cleaning(info).await,
        }?;
        changes.apply(node);
        Ok(())
    }

    // ---- The contract's provisioning calls (routed here by `lib.rs`).

    pub(crate) async fn do_provisioning_action(
        self: &Arc<Self>,
        ctx: &Context,
        req: DoProvisioningAction,
    ) -> Result<(), Error> {
        self.provisioning_action(&req.node, &req.action, ctx).await
    }
    pub(crate) async fn do_node_clean(
        self: &Arc<Self>,
        ctx: &Context,
        req: DoNodeClean,
    ) -> Result<(), Error> {
        self.manual_clean(
            &req.node,
            req.steps,
            req.disable_ramdisk.unwrap_or(false),
            ctx,
        )
        .await
    }
    pub(crate) async fn do_node_service(
        self: &Arc<Self>,
        ctx: &Context,
        req: DoNodeService,
    ) -> Result<(), Error> {
        self.service(
            &req.node,
            req.steps,
            req.disable_ramdisk.unwrap_or(false),
            ctx,
        )
        .await
    }
    pub(crate) async fn do_node_deploy(
        self: &Arc<Self>,
        ctx: &Context,
        req: DoNodeDeploy,
    ) -> Result<(), Error> {
        self.deploy(
            &req.node,
            req.rebuild,
            req.configdrive,
            req.deploy_steps,
            ctx,
        )
        .await
    }
    pub(crate) async fn do_node_tear_down(
        self: &Arc<Self>,
        ctx: &Context,
        req: DoNodeTearDown,
    ) -> Result<(), Error> {
        self.tear_down(&req.node, ctx).await
    }
    pub(crate) async fn get_clean_steps(
        self: &Arc<Self>,
        _ctx: &Context,
        req: GetCleanSteps,
    ) -> Result<Option<Vec<OfferedStep>>, Error> {
        self.clean_steps(&req.node, req.min_priority).await
    }
    pub(crate) async fn continue_inspection(
        self: &Arc<Self>,
        _ctx: &Context,
        req: ContinueInspection,
    ) -> Result<(), Error> {
        self.continue_inband_inspection(&req.node, req.inventory, req.plugin_data)
            .await
    }
}
