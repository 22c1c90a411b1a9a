//! Provisioning verbs and the background work they start: verification (`manage`),
//! automated cleaning (`provide`), manual cleaning (`clean`), `abort`, and the fake
//! `inspect` and `adopt`.
//!
//! A verb is checked and applied under the node lock (`fsm::process`); the RPC returns
//! once the node is in its new state, and a task of its own carries the lock on. A step
//! that takes time puts the node in `clean wait` and gives the lock back; a timer of this
//! process continues the cleaning afterwards (`continue_cleaning`), and only if the node
//! is still waiting for that very step, here (`clean_step_runner`): an abort or a
//! take-over in between wins. Whatever a crash interrupts is failed by the node's owner
//! (`fail_orphaned_work`).

use std::sync::Arc;

use ironic_catalog::steps::{self, OfferedStep, Requested, Step};
use ironic_db::topology::Topology;
use ironic_drivers::interfaces::{Driver, DriverError, NodeChanges, NodeInfo, Outcome};
use ironic_model::fsm::{self, Event};
use ironic_model::node::{JsonObject, now};
use ironic_model::states::ProvisionState as P;
use ironic_model::{Error, Node};
use ironic_rpc::NodeRef;
use serde_json::{Value, json};

use crate::{Conductor, Held};

/// `driver_internal_info` keys of a cleaning in progress.
const CLEAN_STEPS: &str = "clean_steps";
const CLEAN_STEP_INDEX: &str = "clean_step_index";
const CLEAN_STEP_RUNNER: &str = "clean_step_runner";
/// Set once the deploy interface prepared the node for cleaning: whoever ends the
/// cleaning (done, failed, aborted, taken over) tears that down.
const CLEANING_PREPARED: &str = "cleaning_prepared";
/// The manual cleaning runs without the ramdisk (upstream's key).
const CLEANING_DISABLE_RAMDISK: &str = "cleaning_disable_ramdisk";
/// When a waiting step should have finished (Unix ms, with a margin): past it, the
/// wait is failed whoever ran it (upstream's clean callback timeout).
const CLEAN_WAIT_DEADLINE: &str = "clean_wait_deadline";
/// The margin added to a waiting step's own duration.
const CLEAN_WAIT_GRACE: std::time::Duration = std::time::Duration::from_secs(60);
/// The deploy steps of the current (or last) deploy, in the order they run.
const DEPLOY_STEPS: &str = "deploy_steps";
/// Clean steps a node's agent reported (`steps_from_agent` drivers).
const AGENT_CACHED_STEPS: &str = "agent_cached_clean_steps";
/// How long the simulated agent of a `fake-agent` node takes to report its steps.
pub const AGENT_BOOT: std::time::Duration = std::time::Duration::from_secs(1);
/// The steps `fake-hardware` ran, oldest first (the last 100).
pub const FAKE_JOURNAL: &str = "fake_journal";
const JOURNAL_MAX: usize = 100;

fn set_state(node: &mut Node, t: fsm::Transition) {
    node.provision_state = t.state;
    node.target_provision_state = t.target;
    node.provision_updated_at = Some(now());
}

fn wipe_cleaning(node: &mut Node) {
    node.clean_step = JsonObject::new();
    for k in [
        CLEAN_STEPS,
        CLEAN_STEP_INDEX,
        CLEAN_STEP_RUNNER,
        CLEAN_WAIT_DEADLINE,
        CLEANING_PREPARED,
        CLEANING_DISABLE_RAMDISK,
    ] {
        node.driver_internal_info.remove(k);
    }
}

fn journal(node: &mut Node, step: &Step, what: &str) {
    let entry =
        json!({"step": step.name(), "args": step.args, "event": what, "at": now().to_rfc3339()});
    let list = node
        .driver_internal_info
        .entry(FAKE_JOURNAL)
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(l) = list {
        l.push(entry);
        if l.len() > JOURNAL_MAX {
            let extra = l.len() - JOURNAL_MAX;
            l.drain(..extra);
        }
    } else {
        *list = Value::Array(vec![entry]);
    }
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

fn step_json(s: &Step) -> JsonObject {
    match s.to_json() {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// A manual cleaning as asked for.
struct Manual {
    requested: Vec<Requested>,
    /// Run without booting the ramdisk: only steps that do not need it.
    disable_ramdisk: bool,
}

impl Conductor {
    fn runner_id(&self) -> String {
        format!("{}/{}", self.settings.host, self.boot_id)
    }

    /// Takes the node lock in one attempt (no retry).
    async fn lock_once(&self, nref: &NodeRef) -> Result<Held, Error> {
        let mut node = self.db.node_reserve(nref.id, &self.settings.host).await?;
        node.reservation = Some(self.settings.host.clone());
        let held = Held::new(node, &self.db, &self.work, &self.settings.host, nref.id);
        if held.node.uuid.as_str() != nref.uuid {
            return held.bail(Error::node_not_found(&nref.uuid)).await;
        }
        Ok(held)
    }

    /// Takes the node lock for background work, waiting (bounded: 300 retries) while
    /// another operation holds it; `None` if the node is gone or stays locked.
    async fn lock_patiently(&self, nref: &NodeRef) -> Option<Held> {
        for _ in 0..300 {
            match self.lock(nref).await {
                Ok(h) => return Some(h),
                Err(Error::Locked(_)) => {
                    tokio::time::sleep(self.settings.lock_retry_interval).await;
                }
                Err(e) => {
                    tracing::warn!(node = %nref.uuid, error = %e, "cannot lock the node for background work");
                    return None;
                }
            }
        }
        tracing::error!(node = %nref.uuid, "the node stayed locked; background work abandoned");
        None
    }

    /// The node's driver, for work in progress (`Err` names the hardware type this
    /// conductor does not enable).
    fn driver_of(&self, node: &Node) -> Result<&dyn Driver, DriverError> {
        self.driver_for(node).map_err(|_| {
            DriverError::invalid(format!("hardware type {} is not enabled here", node.driver))
        })
    }

    /// Validates the node's power and deploy interfaces before work starts on it; `Err`
    /// is the driver's reason (callers word the 400).
    async fn validate_power_and_deploy(&self, node: &Node) -> Result<(), DriverError> {
        let driver = self
            .driver_for(node)
            .map_err(|e| DriverError::invalid(e.to_string()))?;
        for t in ["power", "deploy"] {
            driver.validate_interface(NodeInfo::from(node), t).await?;
        }
        Ok(())
    }

    /// Calls the node's deploy interface and applies the changes it reports to the
    /// node in memory; `Err` is the driver's reason.
    async fn deploy_call(&self, node: &mut Node, call: DeployCall) -> Result<(), DriverError> {
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

    /// Tears down what `prepare_cleaning` set up, if it did; a failure is logged and
    /// added to `last_error` (the cleaning already ended).
    async fn tear_down_cleaning_if_prepared(&self, node: &mut Node) {
        if node
            .driver_internal_info
            .remove(CLEANING_PREPARED)
            .is_none()
        {
            return;
        }
        if let Err(why) = self.deploy_call(node, DeployCall::TearDownCleaning).await {
            tracing::warn!(node = %node.uuid, "tearing down cleaning failed: {why}");
            let msg = format!(
                "Failed to tear down from cleaning for node {}: {why}",
                node.uuid
            );
            node.last_error = Some(match node.last_error.take() {
                Some(e) => format!("{e}; {msg}"),
                None => msg,
            });
        }
    }

    /// `fsm::process`, with upstream's 400 `InvalidStateRequested` when the event may
    /// not happen in the node's state.
    fn transition(
        node: &Node,
        action: &str,
        event: Event,
        background: bool,
        target: Option<P>,
    ) -> Result<fsm::Transition, Error> {
        fsm::process(node.provision_state, event, background, target).map_err(|_| {
            fsm::invalid_state_requested(action, node.uuid.as_str(), node.provision_state)
        })
    }

    /// Where `action` takes the node, and whether background work follows.
    fn plan(node: &Node, action: &str) -> Result<(fsm::Transition, bool), Error> {
        let uuid = node.uuid.as_str();
        let event = match action {
            "manage" if node.provision_state == P::Enroll => {
                return Ok((
                    Self::transition(node, action, Event::Manage, true, None)?,
                    true,
                ));
            }
            "provide" => {
                if node.maintenance {
                    return Err(Error::invalid(format!(
                        "The providing operation can't be performed on node {uuid} because it's in maintenance mode."
                    )));
                }
                if node.retired {
                    return Err(Error::invalid(format!(
                        "The providing operation can't be performed on node {uuid} because it is retired."
                    )));
                }
                return Ok((
                    Self::transition(node, action, Event::Provide, true, None)?,
                    true,
                ));
            }
            "inspect" | "adopt" => {
                let e = if action == "inspect" {
                    Event::Inspect
                } else {
                    Event::Adopt
                };
                return Ok((Self::transition(node, action, e, true, None)?, true));
            }
            "manage" => Event::Manage,
            other => {
                return Err(Error::invalid(format!(
                    "The requested action \"{other}\" is not a provisioning action of this conductor."
                )));
            }
        };
        Ok((Self::transition(node, action, event, false, None)?, false))
    }

    /// `do_provisioning_action`.
    pub(crate) async fn provisioning_action(
        self: &Arc<Self>,
        target: &NodeRef,
        action: &str,
    ) -> Result<(), Error> {
        let mut held = self.lock(target).await?;
        if action == "abort" {
            return self.abort(held).await;
        }
        let uuid = held.node.uuid.to_string();
        let (t, background) = match Self::plan(&held.node, action) {
            Ok(p) => p,
            Err(e) => return held.bail(e).await,
        };
        set_state(&mut held.node, t);
        if background {
            // Starting work clears the last error.
            held.node.last_error = None;
        }
        tracing::info!(node = %uuid, action, state = %held.node.provision_state, "provisioning action accepted");
        match held.node.provision_state {
            P::Verifying | P::Inspecting | P::Adopting => {
                held.save().await?;
                let me = self.clone();
                self.work.spawn(
                    "quick work",
                    async move { me.finish_quick_work(held).await },
                );
            }
            P::Cleaning => {
                held.save().await?;
                let me = self.clone();
                self.work.spawn(
                    "automated cleaning",
                    async move { me.clean(held, None).await },
                );
            }
            _ => {
                held.save_and_release().await?;
            }
        }
        Ok(())
    }

    /// Verification, inspection and adoption: the power state is read through the
    /// driver, then `done` (or `fail` with the driver's reason).
    async fn finish_quick_work(self: Arc<Self>, mut held: Held) {
        let read = match self.driver_of(&held.node) {
            Ok(d) => d.power().get_power_state(NodeInfo::from(&held.node)).await,
            Err(e) => Err(e),
        };
        let event = match read {
            Ok(p) => {
                held.node.power_state = Some(p);
                Event::Done
            }
            Err(why) => {
                held.node.last_error = Some(format!(
                    "Failed to read the power state of node {}: {why}",
                    held.node.uuid
                ));
                Event::Fail
            }
        };
        let target = held.node.target_provision_state;
        match fsm::process(held.node.provision_state, event, false, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => tracing::error!(error = %e, "cannot finish"),
        }
        let uuid = held.node.uuid.clone();
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "done"),
            Err(e) => tracing::error!(node = %uuid, error = %e, "could not save the node"),
        }
    }

    /// `do_node_clean`: manual cleaning of a `manageable` node.
    pub(crate) async fn manual_clean(
        self: &Arc<Self>,
        target: &NodeRef,
        requested: Vec<Requested>,
        disable_ramdisk: bool,
    ) -> Result<(), Error> {
        let mut held = self.lock(target).await?;
        let uuid = held.node.uuid.to_string();
        if held.node.maintenance {
            return held.bail(Error::invalid(format!(
                "The cleaning operation can't be performed on node {uuid} because it's in maintenance mode."
            ))).await;
        }
        let t = match Self::transition(
            &held.node,
            "manual clean",
            Event::Clean,
            true,
            Some(P::Manageable),
        ) {
            Ok(t) => t,
            Err(e) => return held.bail(e).await,
        };
        if let Err(why) = self.validate_power_and_deploy(&held.node).await {
            return held
                .bail(Error::invalid(format!(
                    "Validation of node {uuid} for cleaning failed: {why}"
                )))
                .await;
        }
        set_state(&mut held.node, t);
        held.node.last_error = None;
        held.save().await?;
        tracing::info!(node = %uuid, steps = requested.len(), disable_ramdisk, "manual cleaning accepted");
        let me = self.clone();
        let manual = Manual {
            requested,
            disable_ramdisk,
        };
        self.work.spawn("manual cleaning", async move {
            me.clean(held, Some(manual)).await
        });
        Ok(())
    }

    /// The cleaning worker: validates the steps (manual) or picks the automated ones,
    /// then runs them.
    async fn clean(self: Arc<Self>, mut held: Held, manual: Option<Manual>) {
        let uuid = held.node.uuid.to_string();
        let offered = self
            .drivers
            .get(&held.node.driver)
            .map(|h| h.clean_steps)
            .unwrap_or(&[]);
        wipe_cleaning(&mut held.node);
        let disable_ramdisk = manual.as_ref().is_some_and(|m| m.disable_ramdisk);
        let list = match manual {
            Some(m) => {
                let checked = steps::validate_manual(&m.requested, offered).and_then(|l| {
                    if m.disable_ramdisk {
                        steps::without_ramdisk(&l, offered)?;
                    }
                    Ok(l)
                });
                match checked {
                    Ok(l) => l,
                    Err(e) => {
                        let msg = format!("Cannot clean node {uuid}: {e}");
                        self.fail_cleaning(held, msg, false).await;
                        return;
                    }
                }
            }
            None if held
                .node
                .automated_clean
                .unwrap_or(self.settings.automated_clean) =>
            {
                steps::automated(offered)
            }
            // Automated cleaning is off: nothing to prepare, nothing runs.
            None => {
                self.run_clean_steps(held, Vec::new(), 0).await;
                return;
            }
        };
        // Without the ramdisk nothing is prepared (so nothing is torn down after).
        if disable_ramdisk {
            held.node
                .driver_internal_info
                .insert(CLEANING_DISABLE_RAMDISK.into(), json!(true));
        } else {
            if let Err(why) = self
                .deploy_call(&mut held.node, DeployCall::PrepareCleaning)
                .await
            {
                let msg = format!("Failed to prepare node {uuid} for cleaning: {why}");
                self.fail_cleaning(held, msg, false).await;
                return;
            }
            held.node
                .driver_internal_info
                .insert(CLEANING_PREPARED.into(), json!(true));
        }
        held.node.driver_internal_info.insert(
            CLEAN_STEPS.into(),
            Value::Array(list.iter().map(Step::to_json).collect()),
        );
        self.run_clean_steps(held, list, 0).await;
    }

    /// Runs `list` from `from` on; returns when the cleaning ends or waits.
    async fn run_clean_steps(self: Arc<Self>, mut held: Held, list: Vec<Step>, from: usize) {
        let uuid = held.node.uuid.to_string();
        for (i, step) in list.iter().enumerate().skip(from) {
            held.node.clean_step = step_json(step);
            held.node
                .driver_internal_info
                .insert(CLEAN_STEP_INDEX.into(), json!(i));
            tracing::info!(node = %uuid, step = %step.name(), index = i, "clean step starts");
            let driver = match self.driver_of(&held.node) {
                Ok(d) => d,
                Err(e) => {
                    let msg = format!("Node {uuid}: {e}");
                    self.fail_cleaning(held, msg, true).await;
                    return;
                }
            };
            let outcome = driver.execute_step(NodeInfo::from(&held.node), step).await;
            match outcome {
                Ok(Outcome::Done) => {
                    journal(&mut held.node, step, "done");
                    if let Err(e) = held.save().await {
                        tracing::error!(node = %uuid, error = %e, "could not save the node");
                        return;
                    }
                }
                Ok(Outcome::Wait(d)) => {
                    journal(&mut held.node, step, "started");
                    let target = held.node.target_provision_state;
                    match fsm::process(held.node.provision_state, Event::Wait, true, target) {
                        Ok(t) => set_state(&mut held.node, t),
                        Err(e) => {
                            self.fail_cleaning(held, e.to_string(), true).await;
                            return;
                        }
                    }
                    // `<host>/<process run>/<this wait>`: the timer continues only this
                    // very wait, never a later cleaning that reached the same index.
                    let token = format!("{}/{}", self.runner_id(), uuid::Uuid::new_v4().simple());
                    held.node
                        .driver_internal_info
                        .insert(CLEAN_STEP_RUNNER.into(), json!(token));
                    let deadline = now()
                        + chrono::Duration::from_std(d + CLEAN_WAIT_GRACE).unwrap_or_default();
                    held.node.driver_internal_info.insert(
                        CLEAN_WAIT_DEADLINE.into(),
                        json!(deadline.timestamp_millis()),
                    );
                    let nref = NodeRef::from(&held.node);
                    if let Err(e) = held.save_and_release().await {
                        tracing::error!(node = %uuid, error = %e, "could not save the node");
                        return;
                    }
                    let me = self.clone();
                    self.work.after("clean step timer", d, async move {
                        me.continue_cleaning(nref, i, token).await;
                    });
                    return;
                }
                Err(why) => {
                    journal(&mut held.node, step, "failed");
                    let msg = format!("Node {uuid} failed step {}: {why}", step.name());
                    self.fail_cleaning(held, msg, true).await;
                    return;
                }
            }
        }
        // All done: back to manageable (manual, or a retired node) or available.
        if held
            .node
            .driver_internal_info
            .remove(CLEANING_PREPARED)
            .is_some()
            && let Err(why) = self
                .deploy_call(&mut held.node, DeployCall::TearDownCleaning)
                .await
        {
            let msg = format!("Failed to tear down from cleaning for node {uuid}: {why}");
            self.fail_cleaning(held, msg, false).await;
            return;
        }
        wipe_cleaning(&mut held.node);
        let manual = held.node.target_provision_state == Some(P::Manageable);
        let event = if manual || held.node.retired {
            Event::Manage
        } else {
            Event::Done
        };
        match fsm::process(held.node.provision_state, event, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail_cleaning(held, e.to_string(), false).await;
                return;
            }
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "cleaning finished"),
            Err(e) => tracing::error!(node = %uuid, error = %e, "could not save the node"),
        }
    }

    /// After a waiting step's time: continues with the next step, if the node is still
    /// waiting for that step here.
    fn continue_cleaning(
        self: Arc<Self>,
        nref: NodeRef,
        index: usize,
        token: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        // Boxed: cleaning and its continuation call each other.
        Box::pin(async move { self.continue_cleaning_now(nref, index, token).await })
    }

    async fn continue_cleaning_now(self: Arc<Self>, nref: NodeRef, index: usize, token: String) {
        // Patient: another operation (an abort, a read-modify-write) may hold the lock.
        let Some(mut held) = self.lock_patiently(&nref).await else {
            return;
        };
        let dii = &held.node.driver_internal_info;
        let ours = held.node.provision_state == P::CleanWait
            && dii.get(CLEAN_STEP_INDEX).and_then(Value::as_u64) == Some(index as u64)
            && dii.get(CLEAN_STEP_RUNNER).and_then(Value::as_str) == Some(token.as_str());
        if !ours {
            tracing::info!(node = %nref.uuid, "cleaning was aborted or taken over meanwhile");
            held.release().await;
            return;
        }
        let list = match Step::list_from_json(dii.get(CLEAN_STEPS)) {
            Ok(l) => l,
            Err(why) => {
                let msg = format!(
                    "Cannot continue cleaning node {}: its stored clean steps cannot be read ({why}).",
                    nref.uuid
                );
                self.fail_cleaning(held, msg, false).await;
                return;
            }
        };
        if let Some(step) = list.get(index) {
            journal(&mut held.node, step, "done");
        }
        held.node.driver_internal_info.remove(CLEAN_STEP_RUNNER);
        held.node.driver_internal_info.remove(CLEAN_WAIT_DEADLINE);
        let target = held.node.target_provision_state;
        match fsm::process(P::CleanWait, Event::Resume, true, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail_cleaning(held, e.to_string(), true).await;
                return;
            }
        }
        if let Err(e) = held.save().await {
            tracing::error!(node = %nref.uuid, error = %e, "could not save the node");
            return;
        }
        self.run_clean_steps(held, list, index + 1).await;
    }

    /// Cleaning failed: `clean failed` keeping the target, `last_error`; with
    /// `step_running`, maintenance too (a step was interrupted: someone should look).
    async fn fail_cleaning(&self, mut held: Held, msg: String, step_running: bool) {
        let uuid = held.node.uuid.to_string();
        tracing::warn!(node = %uuid, "cleaning failed: {msg}");
        let target = held.node.target_provision_state;
        held.node.last_error = Some(msg.clone());
        self.tear_down_cleaning_if_prepared(&mut held.node).await;
        wipe_cleaning(&mut held.node);
        if let Ok(t) = fsm::process(held.node.provision_state, Event::Fail, true, target) {
            set_state(&mut held.node, t);
        }
        if step_running {
            held.node.maintenance = true;
            held.node.fault = Some("clean failure".into());
            if held.node.maintenance_reason.is_none() {
                held.node.maintenance_reason = Some(msg);
            }
        }
        if let Err(e) = held.save_and_release().await {
            tracing::error!(node = %uuid, error = %e, "could not save the node");
        }
    }

    /// `abort`: in `clean wait` or `clean hold`, only when the running step allows it.
    async fn abort(&self, mut held: Held) -> Result<(), Error> {
        let uuid = held.node.uuid.to_string();
        let state = held.node.provision_state;
        if fsm::next(state, Event::Abort).is_none() {
            return held
                .bail(fsm::invalid_state_requested("abort", &uuid, state))
                .await;
        }
        if !matches!(state, P::CleanWait | P::CleanHold) {
            return held
                .bail(Error::invalid(format!(
                    "Aborting in state \"{state}\" is not supported by this conductor."
                )))
                .await;
        }
        // Empty in `clean hold`; a step that cannot be read does not block the abort.
        let step = Step::from_json(&Value::Object(held.node.clean_step.clone())).ok();
        if let Some(s) = &step
            && !s.abortable
        {
            return held.bail(Error::Conflict(format!(
                "Node {uuid} is running the clean step {}, which cannot be aborted; retry once it has finished.",
                s.name()
            ))).await;
        }
        let target = held.node.target_provision_state;
        let t = fsm::process(state, Event::Abort, true, target)?;
        set_state(&mut held.node, t);
        let mut msg = "By request, the clean operation was aborted".to_string();
        if let Some(s) = &step {
            msg.push_str(&format!(
                " during or after the completion of step \"{}\"",
                s.name()
            ));
            journal(&mut held.node, s, "aborted");
        }
        held.node.last_error = Some(msg);
        self.tear_down_cleaning_if_prepared(&mut held.node).await;
        wipe_cleaning(&mut held.node);
        held.save_and_release().await?;
        tracing::info!(node = %uuid, "cleaning aborted");
        Ok(())
    }

    /// `do_node_deploy`: `available` or `deploy failed` (or, rebuilding, `active`,
    /// `deploy failed`, `error`) → `deploying` → the deploy steps → `active`.
    pub(crate) async fn deploy(
        self: &Arc<Self>,
        target: &NodeRef,
        rebuild: bool,
        configdrive: Option<Value>,
    ) -> Result<(), Error> {
        let mut held = self.lock(target).await?;
        let uuid = held.node.uuid.to_string();
        let (action, event) = if rebuild {
            ("rebuild", Event::Rebuild)
        } else {
            ("deploy", Event::Deploy)
        };
        let check = (|| {
            if held.node.maintenance {
                return Err(Error::invalid(format!(
                    "The deploying operation can't be performed on node {uuid} because it's in maintenance mode."
                )));
            }
            if rebuild && held.node.protected {
                return Err(Error::Forbidden(format!(
                    "Node {uuid} is protected and cannot be undeployed, rebuilt or deleted"
                )));
            }
            Self::transition(&held.node, action, event, true, None)
        })();
        let t = match check {
            Ok(t) => t,
            Err(e) => return held.bail(e).await,
        };
        // The interfaces, then the steps: both before anything moves.
        let checked = match self.validate_power_and_deploy(&held.node).await {
            Ok(()) => self.deploy_plan(&held.node).await,
            Err(why) => Err(why.to_string()),
        };
        let plan = match checked {
            Ok(p) => p,
            Err(why) => {
                return held
                    .bail(Error::invalid(format!(
                        "Failed to validate deploy or power info for node {uuid}: {why}"
                    )))
                    .await;
            }
        };
        held.node.driver_internal_info.insert(
            DEPLOY_STEPS.into(),
            Value::Array(plan.iter().map(Step::to_json).collect()),
        );
        set_state(&mut held.node, t);
        held.node.last_error = None;
        match configdrive {
            Some(c) => {
                held.node.instance_info.insert("configdrive".into(), c);
            }
            None => {
                held.node.instance_info.remove("configdrive");
            }
        }
        held.save().await?;
        tracing::info!(node = %uuid, rebuild, "deploy accepted");
        let me = self.clone();
        self.work
            .spawn("deploy", async move { me.run_deploy(held, plan).await });
        Ok(())
    }

    /// The deploy steps the node runs: the driver's, merged with the deploy templates
    /// its instance traits select (`steps::deploy_plan`). `Err` is the reason the steps
    /// are invalid.
    pub(crate) async fn deploy_plan(&self, node: &Node) -> Result<Vec<Step>, String> {
        let traits = ironic_model::deploy_template::instance_traits(node)?;
        let templates = self
            .db
            .deploy_templates_by_names(&traits)
            .await
            .map_err(|e| e.to_string())?;
        ironic_catalog::deploy_plan_for(node, templates)
    }

    /// The deploy failed: `deploy failed` (keeping the target), `last_error`.
    async fn fail_deploy(&self, mut held: Held, msg: String) {
        let uuid = held.node.uuid.to_string();
        tracing::warn!(node = %uuid, "deploy failed: {msg}");
        let target = held.node.target_provision_state;
        if let Ok(t) = fsm::process(held.node.provision_state, Event::Fail, true, target) {
            set_state(&mut held.node, t);
        }
        held.node.deploy_step = JsonObject::new();
        held.node.last_error = Some(msg);
        if let Err(e) = held.save_and_release().await {
            tracing::error!(node = %uuid, error = %e, "could not save the node");
        }
    }

    async fn run_deploy(self: Arc<Self>, mut held: Held, plan: Vec<Step>) {
        let uuid = held.node.uuid.to_string();
        if let Err(why) = self.deploy_call(&mut held.node, DeployCall::Prepare).await {
            let msg = format!("Failed to prepare to deploy node {uuid}: {why}");
            self.fail_deploy(held, msg).await;
            return;
        }
        for step in plan {
            held.node.deploy_step = step_json(&step);
            if let Err(e) = held.save().await {
                tracing::error!(node = %uuid, error = %e, "could not save the node");
                return;
            }
            tracing::info!(node = %uuid, step = %step.name(), "deploy step starts");
            let outcome = match self.driver_of(&held.node) {
                Ok(d) => d.execute_step(NodeInfo::from(&held.node), &step).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(Outcome::Done) => journal(&mut held.node, &step, "done"),
                Ok(Outcome::Wait(d)) => {
                    // Deploy steps run to completion here (no deploy ramdisk to wait for).
                    tokio::time::sleep(d).await;
                    journal(&mut held.node, &step, "done");
                }
                Err(why) => {
                    journal(&mut held.node, &step, "failed");
                    let msg = format!("Deploy step {} failed on node {uuid}: {why}", step.name());
                    self.fail_deploy(held, msg).await;
                    return;
                }
            }
        }
        held.node.deploy_step = JsonObject::new();
        held.node.power_state = Some("power on".into());
        match fsm::process(held.node.provision_state, Event::Done, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => tracing::error!(node = %uuid, error = %e, "cannot finish the deploy"),
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "deployed"),
            Err(e) => tracing::error!(node = %uuid, error = %e, "could not save the node"),
        }
    }

    /// `do_node_tear_down`: `deleting` → power off, instance data removed → automated
    /// cleaning → `available` (`manageable` for a retired node).
    pub(crate) async fn tear_down(self: &Arc<Self>, target: &NodeRef) -> Result<(), Error> {
        let mut held = self.lock(target).await?;
        let uuid = held.node.uuid.to_string();
        if held.node.protected {
            return held
                .bail(Error::Forbidden(format!(
                    "Node {uuid} is protected and cannot be undeployed, rebuilt or deleted"
                )))
                .await;
        }
        let t = match Self::transition(&held.node, "deleted", Event::Delete, true, None) {
            Ok(t) => t,
            Err(e) => return held.bail(e).await,
        };
        set_state(&mut held.node, t);
        held.node.last_error = None;
        held.save().await?;
        tracing::info!(node = %uuid, "tear-down accepted");
        let me = self.clone();
        self.work.spawn("tear-down", async move {
            // The deploy interface takes the instance away (and powers the node off).
            if let Err(why) = me.deploy_call(&mut held.node, DeployCall::TearDown).await {
                let msg = format!("Failed to tear down node {uuid}: {why}");
                tracing::warn!(node = %uuid, "{msg}");
                if let Ok(t) = fsm::process(P::Deleting, Event::Fail, false, None) {
                    set_state(&mut held.node, t);
                }
                held.node.last_error = Some(msg);
                if let Err(e) = held.save_and_release().await {
                    tracing::error!(node = %uuid, error = %e, "could not save the node");
                }
                return;
            }
            held.node.instance_info = JsonObject::new();
            held.node.instance_uuid = None;
            held.node.deploy_step = JsonObject::new();
            // The node's allocation ends with its instance (same transaction).
            let allocation = held.node.allocation_id.take();
            held.node.allocation_uuid = None;
            match fsm::process(P::Deleting, Event::Clean, true, None) {
                Ok(t) => set_state(&mut held.node, t),
                Err(e) => tracing::error!(node = %uuid, error = %e, "cannot start cleaning"),
            }
            if let Err(e) = held.save_dropping(allocation).await {
                tracing::error!(node = %uuid, error = %e, "could not save the node");
                return;
            }
            me.clean(held, None).await;
        });
        Ok(())
    }

    /// `get_clean_steps`: the steps the node's driver offers with at least
    /// `min_priority`, highest first; `None` while a `steps_from_agent` driver's agent
    /// has not reported them yet (the first call starts it; it reports after
    /// `AGENT_BOOT`).
    pub(crate) async fn clean_steps(
        self: &Arc<Self>,
        target: &NodeRef,
        min_priority: u32,
    ) -> Result<Option<Vec<OfferedStep>>, Error> {
        let node = self.read(target).await?;
        let hw = self.hardware_type(&node.driver, &node.conductor_group)?;
        if hw.steps_from_agent && !node.driver_internal_info.contains_key(AGENT_CACHED_STEPS) {
            let first = self
                .agents_starting
                .lock()
                .map(|mut s| s.insert(node.id))
                .unwrap_or(false);
            if first {
                let (me, nref) = (self.clone(), target.clone());
                self.work.spawn(
                    "agent start",
                    async move { me.agent_reports_steps(nref).await },
                );
            }
            return Ok(None);
        }
        Ok(Some(
            steps::listing(hw.clean_steps, min_priority)
                .iter()
                .map(OfferedStep::from)
                .collect(),
        ))
    }

    /// The simulated agent of a `fake-agent` node boots and reports its steps.
    async fn agent_reports_steps(self: Arc<Self>, nref: NodeRef) {
        tokio::time::sleep(AGENT_BOOT).await;
        if let Some(mut held) = self.lock_patiently(&nref).await {
            let hw = self.drivers.get(&held.node.driver);
            let listed: Vec<Value> = hw
                .map(|h| h.clean_steps.iter().map(|d| d.to_json()).collect())
                .unwrap_or_default();
            held.node
                .driver_internal_info
                .insert(AGENT_CACHED_STEPS.into(), Value::Array(listed));
            if let Err(e) = held.save_and_release().await {
                tracing::error!(node = %nref.uuid, error = %e, "could not cache clean steps");
            }
        }
        if let Ok(mut s) = self.agents_starting.lock() {
            s.remove(&nref.id);
        }
    }

    /// Fails what a crash left behind on the nodes this conductor owns: a transient
    /// state nobody works on (unlocked), or `clean wait` whose step ran in a process
    /// that is gone. Returns how many nodes were failed.
    pub async fn fail_orphaned_work(&self, topology: &Topology) -> Result<usize, Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let now_ms = now().timestamp_millis();
        let mut states: Vec<&str> = ironic_model::states::ProvisionState::ALL
            .iter()
            .filter(|s| fsm::stuck_on_crash(**s))
            .map(|s| s.as_str())
            .collect();
        states.push(P::CleanWait.as_str());
        let host_alive = |host: &str| {
            // Alive = heartbeating, even if offline: a conductor that is stopping still
            // runs its timers until it has finished.
            snap.conductors.iter().any(|(c, _)| {
                c.hostname == host && !c.is_dead(chrono::Utc::now(), topology.timeout_secs())
            })
        };
        let mut failed = 0;
        for (id, uuid, driver, group) in self.db.nodes_unlocked_in(&states).await? {
            // Look before locking: a healthy wait is left alone without touching its lock.
            let Some(node) = self.db.node_by_id(id).await? else {
                continue;
            };
            let owner = snap.owner(&group, &driver, &uuid) == Some(me);
            let msg = if node.provision_state == P::CleanWait {
                let dii = &node.driver_internal_info;
                let runner = dii
                    .get(CLEAN_STEP_RUNNER)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let host = runner.split('/').next().unwrap_or("").to_string();
                let mine = runner.starts_with(&format!("{}/", self.runner_id()));
                let overdue = dii
                    .get(CLEAN_WAIT_DEADLINE)
                    .and_then(Value::as_i64)
                    .is_some_and(|d| d < now_ms);
                let step = node
                    .clean_step
                    .get("step")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                if overdue && (mine || owner) {
                    format!(
                        "Timeout reached while cleaning the node: the clean step {step} did not finish in time. Moving to fail state."
                    )
                } else if !mine && host == me {
                    // An earlier run of this very conductor: its timer is gone. Failed
                    // here whoever owns the node now.
                    format!(
                        "The clean step {step} was running on conductor {host}, which stopped. Moving to fail state."
                    )
                } else if owner && !mine && !host_alive(&host) {
                    format!(
                        "The clean step {step} was running on conductor {host}, which stopped. Moving to fail state."
                    )
                } else {
                    continue;
                }
            } else if owner && fsm::stuck_on_crash(node.provision_state) {
                format!(
                    "The {} state can't be resumed by conductor {me}. Moving to fail state.",
                    node.provision_state
                )
            } else {
                continue;
            };
            // One attempt: a busy node is someone's live work.
            let nref = NodeRef {
                id,
                uuid: uuid.clone(),
                driver,
                conductor_group: group,
            };
            let Ok(mut held) = self.lock_once(&nref).await else {
                continue;
            };
            let state = held.node.provision_state;
            if state != node.provision_state {
                held.release().await;
                continue;
            }
            if matches!(state, P::Cleaning | P::CleanWait) {
                let step_running = !held.node.clean_step.is_empty();
                self.fail_cleaning(held, msg, step_running).await;
            } else {
                let target = held.node.target_provision_state;
                // No work follows: a stable state reached keeps no target.
                if let Ok(t) = fsm::process(state, Event::Fail, false, target) {
                    set_state(&mut held.node, t);
                }
                tracing::warn!(node = %uuid, "{msg}");
                held.node.last_error = Some(msg);
                held.save_and_release().await?;
            }
            failed += 1;
        }
        Ok(failed)
    }
}
