//! The step engine: one loop for cleaning, deploying and servicing (and, later,
//! rescue). What differs between them is data ([`Flow`]): the node field that shows the
//! running step, the `driver_internal_info` keys of the list and the index, the working,
//! waiting and holding states, and the fault a failed step leaves.
//!
//! A step ends in one of four ways (`Provisioner::run_step`): done (the next one runs),
//! failed (the flow fails), held (the reserved `hold` step) or waiting (for a time, for
//! an event, or to run again: `Outcome::Recheck`, a poll). A waiting step
//! puts the node in the flow's wait state and **gives the lock back**: the node is
//! served (read, updated, aborted, heartbeaten) while the step goes on. Its wait records,
//! under the node lock, who may continue it (`…_step_runner`, a token unique to this
//! wait) and, for a timed wait, when (`…_step_resume_at`). An event re-takes the lock
//! and continues from the stored index ([`Provisioner::resume`]) only if the node still
//! waits with that very token, so whatever wins (the timer of the process that started
//! the wait, the node's owner after a crash or a take-over, an abort) wins once.
//!
//! The owner of each waiting node checks it every `[conductor]
//! check_provision_state_interval` ([`Provisioner::check_waits`], reading only the
//! nodes in a wait state through the `provision_state` index): a timed wait whose time
//! is past (its process is gone, or restarted) is continued here; a wait for an event
//! (an agent heartbeat) that saw none for the flow's callback timeout
//! (`deploy_callback_timeout`, `clean_callback_timeout`, `service_callback_timeout`)
//! fails.

use super::step_state::{AgentWait, Steps, Wait};
use super::*;

/// A timed wait this much past its time is continued by the node's owner: the process
/// that started it did not (it is gone, restarted, or late).
const OVERDUE_AFTER_MS: i64 = 5_000;

/// A flow of steps: what differs between cleaning, deploying and servicing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Clean,
    Deploy,
    Service,
}

impl Flow {
    pub(crate) const ALL: [Flow; 3] = [Flow::Clean, Flow::Deploy, Flow::Service];

    /// The step kind (`clean`, `deploy`, `service`): metrics' label, log field.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Flow::Clean => "clean",
            Flow::Deploy => "deploy",
            Flow::Service => "service",
        }
    }

    /// What the flow does, in messages (`Cannot continue cleaning node …`).
    fn gerund(self) -> &'static str {
        match self {
            Flow::Clean => "cleaning",
            Flow::Deploy => "deploying",
            Flow::Service => "servicing",
        }
    }

    /// What the flow is called in logs (`cleaning failed`, `deploy failed`, …).
    fn noun(self) -> &'static str {
        match self {
            Flow::Clean => "cleaning",
            Flow::Deploy => "deploy",
            Flow::Service => "servicing",
        }
    }

    pub(crate) fn waiting(self) -> P {
        match self {
            Flow::Clean => P::CleanWait,
            Flow::Deploy => P::DeployWait,
            Flow::Service => P::ServiceWait,
        }
    }

    /// The flow a node in `state` waits in.
    pub(crate) fn waiting_in(state: P) -> Option<Flow> {
        Flow::ALL.into_iter().find(|f| f.waiting() == state)
    }

    /// The flow a node in `state` is held in (the reserved `hold` step).
    pub(crate) fn held_in(state: P) -> Option<Flow> {
        match state {
            P::CleanHold => Some(Flow::Clean),
            P::DeployHold => Some(Flow::Deploy),
            P::ServiceHold => Some(Flow::Service),
            _ => None,
        }
    }

    /// The node field that shows the running step.
    pub(crate) fn step(self, node: &Node) -> &JsonObject {
        match self {
            Flow::Clean => &node.clean_step,
            Flow::Deploy => &node.deploy_step,
            Flow::Service => &node.service_step,
        }
    }

    fn step_mut(self, node: &mut Node) -> &mut JsonObject {
        match self {
            Flow::Clean => &mut node.clean_step,
            Flow::Deploy => &mut node.deploy_step,
            Flow::Service => &mut node.service_step,
        }
    }

    /// The fault (and maintenance) a failure leaves when a step was running: someone
    /// should look at the machine (upstream's). A failed deploy leaves none.
    fn fault(self) -> Option<&'static str> {
        match self {
            Flow::Clean => Some("clean failure"),
            Flow::Deploy => None,
            Flow::Service => Some("service failure"),
        }
    }

    /// How long a wait for an event may see none.
    pub(super) fn callback_timeout(self, s: &crate::ConductorSettings) -> std::time::Duration {
        match self {
            Flow::Clean => s.clean_callback_timeout,
            Flow::Deploy => s.deploy_callback_timeout,
            Flow::Service => s.service_callback_timeout,
        }
    }

    /// `last_error` of a wait that saw no event in time (upstream's wording).
    fn timeout_message(self, node: &Node) -> String {
        let step = self
            .step(node)
            .get("step")
            .and_then(Value::as_str)
            .unwrap_or("?");
        match self {
            Flow::Clean => format!(
                "Timeout reached while cleaning the node. Please check if the ramdisk responsible for the cleaning is running on the node. Failed on step {step}."
            ),
            Flow::Deploy => format!(
                "Timeout reached while waiting for callback for node {}",
                node.uuid
            ),
            Flow::Service => format!(
                "Timeout reached while servicing the node. Please check if the ramdisk responsible for the servicing is running on the node. Failed on step {step}."
            ),
        }
    }

    /// `last_error` of a step that failed.
    pub(super) fn step_failed_message(self, node: &Node, step: &Step, why: &str) -> String {
        match self {
            Flow::Deploy => format!(
                "Deploy step {} failed on node {}: {why}",
                step.name(),
                node.uuid
            ),
            Flow::Clean | Flow::Service => {
                format!("Node {} failed step {}: {why}", node.uuid, step.name())
            }
        }
    }

    /// Forgets the wait (the step it continues is done, or the flow ended).
    pub(crate) fn forget_wait(self, node: &mut Node) {
        Wait::forget(self, node);
    }

    /// What the flow leaves in the node while it runs: its step, index, wait, the
    /// agent's token, and its own extras. The deploy keeps its step list (the steps
    /// of the last deploy show in `driver_internal_info`, as upstream's).
    pub(crate) fn wipe(self, node: &mut Node) {
        self.wipe_keeping_agent(node);
        agent::wipe_token_and_url(&mut node.driver_internal_info);
    }

    /// [`Flow::wipe`], the agent's token and URL kept (fast-track: its ramdisk keeps
    /// running for the next flow).
    pub(crate) fn wipe_keeping_agent(self, node: &mut Node) {
        self.step_mut(node).clear();
        self.forget_wait(node);
        // The deploy's list stays (upstream shows the last deploy's steps).
        match self {
            Flow::Deploy => Steps::set_index(self, node, None),
            Flow::Clean | Flow::Service => Steps::forget(self, node),
        }
        let dii = &mut node.driver_internal_info;
        match self {
            Flow::Clean => {
                for k in [
                    CLEANING_PREPARED,
                    CLEANING_DISABLE_RAMDISK,
                    // Written by versions before the step engine.
                    "clean_wait_deadline",
                ] {
                    dii.remove(k);
                }
            }
            Flow::Deploy => {
                dii.remove(USER_DEPLOY_STEPS);
                dii.remove(agent_deploy::POWER_OFF_CHECKS);
            }
            Flow::Service => {
                dii.remove(SERVICE_DISABLE_RAMDISK);
            }
        }
    }
}

/// What a waiting step waits for.
pub(super) enum Until {
    /// An event: the agent's news, or the callback timeout.
    Event,
    /// A time, then the next step.
    Time(std::time::Duration),
    /// A time, then the same step again (`Outcome::Recheck`).
    Recheck(std::time::Duration),
}

/// What the periodic check of the waiting nodes did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WaitsChecked {
    /// Timed waits continued here (their process did not).
    pub resumed: usize,
    /// Waits failed for seeing no event within the callback timeout.
    pub timed_out: usize,
}

impl Provisioner {
    /// Runs the flow's steps from `from` on, the node locked; returns when the flow
    /// ends, fails, holds or waits (the lock given back in every case).
    pub(super) async fn run_steps(
        self: Arc<Self>,
        flow: Flow,
        held: Held,
        list: Vec<Step>,
        from: usize,
    ) {
        self.run_from(flow, held, list, from, false).await;
    }

    /// [`Provisioner::run_steps`]; `again`: the step at `from` runs again (a recheck,
    /// a step sent to the agent again), so it does not start again in its events.
    async fn run_from(
        self: Arc<Self>,
        flow: Flow,
        mut held: Held,
        list: Vec<Step>,
        from: usize,
        again: bool,
    ) {
        let uuid = held.node.uuid.to_string();
        for (i, step) in list.iter().enumerate().skip(from) {
            let started = !(again && i == from);
            *flow.step_mut(&mut held.node) = step_json(step);
            Steps::set_index(flow, &mut held.node, Some(i));
            // Saved before it runs: whoever looks (or takes over) sees the step running.
            if let Err(e) = held.save().await {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
                return;
            }
            tracing::info!(node = %uuid, flow = flow.kind(), step = %step.name(), index = i, "step starts");
            let outcome = match self.run_step(&mut held.node, flow, step).await {
                Ran::Finished(o) => o,
                Ran::Hold => {
                    self.hold(held).await;
                    return;
                }
            };
            match outcome {
                Ok(Outcome::Done) => self.step_event(&mut held.node, step, "done"),
                Ok(Outcome::Wait(d)) => {
                    self.wait_in(flow, held, Some(step), Until::Time(d), started)
                        .await;
                    return;
                }
                Ok(Outcome::Callback) => {
                    self.wait_in(flow, held, Some(step), Until::Event, started)
                        .await;
                    return;
                }
                Ok(Outcome::Recheck(d)) => {
                    self.wait_in(flow, held, Some(step), Until::Recheck(d), started)
                        .await;
                    return;
                }
                Err(why) => {
                    self.step_event(&mut held.node, step, "failed");
                    let msg = flow.step_failed_message(&held.node, step, &why.to_string());
                    self.fail(flow, held, msg, true).await;
                    return;
                }
            }
        }
        match flow {
            Flow::Clean => self.finish_cleaning(held).await,
            Flow::Deploy => self.finish_deploy(held).await,
            Flow::Service => self.finish_servicing(held).await,
        }
    }

    /// The running step goes on outside this task (or, with no step, the flow waits
    /// for the node's agent to boot before its first step: in-band cleaning): the node
    /// waits in the flow's wait state, unlocked, for `timer` (or, without one, for an
    /// event). The wait's token lets exactly one continuation through.
    pub(super) async fn wait(
        self: &Arc<Self>,
        flow: Flow,
        held: Held,
        step: Option<&Step>,
        until: Until,
    ) {
        self.wait_in(flow, held, step, until, true).await;
    }

    /// [`Provisioner::wait`]; `started`: the step starts now (its event is recorded),
    /// rather than waits again.
    async fn wait_in(
        self: &Arc<Self>,
        flow: Flow,
        mut held: Held,
        step: Option<&Step>,
        until: Until,
        started: bool,
    ) {
        let uuid = held.node.uuid.to_string();
        match step {
            Some(s) if started => self.step_event(&mut held.node, s, "started"),
            Some(_) => {}
            None => {
                flow.step_mut(&mut held.node).clear();
                Steps::set_index(flow, &mut held.node, None);
            }
        }
        let target = held.node.target_provision_state;
        match fsm::process(held.node.provision_state, Event::Wait, true, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail(flow, held, e.to_string(), step.is_some()).await;
                return;
            }
        }
        let token = format!("{}/{}", self.runner_id(), uuid::Uuid::new_v4().simple());
        let agent = AgentWait::of(&held.node);
        let follows_command = matches!(agent, Some(AgentWait::Command(_)));
        // Waiting for a boot with the agent's URL kept: fast-track, it is running.
        let agent_running = agent == Some(AgentWait::Boot)
            && held.node.driver_internal_info.contains_key(agent::URL);
        let (timer, recheck) = match until {
            Until::Event => (None, false),
            Until::Time(d) => (Some(d), false),
            Until::Recheck(d) => (Some(d), true),
        };
        Wait {
            token: token.clone(),
            resume_at: timer.map(|d| {
                (now() + chrono::Duration::from_std(d).unwrap_or_default()).timestamp_millis()
            }),
            recheck,
            agent,
        }
        .store(flow, &mut held.node);
        let nref = NodeRef::from(&held.node);
        if let Err(e) = held.save_and_release().await {
            tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
            return;
        }
        let step_name = step.map_or_else(|| "(agent boot)".to_string(), Step::name);
        tracing::info!(node = %uuid, flow = flow.kind(), step = %step_name, timer_ms = timer.map(|d| d.as_millis() as u64), "step waits; node lock given back");
        if let Some(d) = timer {
            let me = self.clone();
            self.work.after("step timer", d, async move {
                me.resume(flow, nref, token).await;
            });
        } else if follows_command && self.settings.agent.follow_commands {
            let me = self.clone();
            self.work.spawn("agent command", async move {
                me.follow_command(flow, nref, token).await;
            });
        } else if agent_running {
            let me = self.clone();
            self.work.spawn("fast-track", async move {
                me.agent_continue(nref, agent_deploy::FAST_TRACK).await;
            });
        }
    }

    /// An event for the wait `token` (its timer, or the node's owner finding it
    /// overdue): re-takes the lock and continues with the step after the waiting one,
    /// if the node still waits with that token; otherwise (aborted, continued by
    /// someone else, a later wait) nothing. Boxed: the steps it runs may wait again.
    pub(crate) fn resume(
        self: Arc<Self>,
        flow: Flow,
        nref: NodeRef,
        token: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.resume_with(flow, nref, token, None)
    }

    /// [`Provisioner::resume`] for what the node's agent reported (`agent_deploy.rs`):
    /// its step ended well (the next one runs), failed (the flow fails), or the agent
    /// booted or changed (its steps cached, the plan made again).
    pub(super) fn resume_after_agent(
        self: Arc<Self>,
        flow: Flow,
        nref: NodeRef,
        token: String,
        news: agent_deploy::AgentNews,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.resume_with(flow, nref, token, Some(news))
    }

    fn resume_with(
        self: Arc<Self>,
        flow: Flow,
        nref: NodeRef,
        token: String,
        news: Option<agent_deploy::AgentNews>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        use agent_deploy::AgentNews;
        Box::pin(async move {
            // Patient: another operation (a read-modify-write, a heartbeat) may hold
            // the lock for a moment.
            let mut held = match self.locks.hold(&nref, Patience::Background).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(node = %nref.uuid, error = %ironic_model::error::chain(&e), "cannot lock the node to continue its wait; the node's owner continues it once overdue");
                    return;
                }
            };
            let wait = Wait::of(flow, &held.node)
                .filter(|w| held.node.provision_state == flow.waiting() && w.token == token);
            let Some(wait) = wait else {
                tracing::info!(node = %nref.uuid, flow = flow.kind(), "the wait ended meanwhile (aborted, or continued elsewhere)");
                held.release().await;
                return;
            };
            let recheck = wait.recheck;
            let (list, index) = match Steps::of(flow, &held.node) {
                Ok(Steps { list, index }) => (list, index),
                Err(why) => {
                    let msg = format!(
                        "Cannot continue {} node {}: its stored {} steps cannot be read ({why}).",
                        flow.gerund(),
                        nref.uuid,
                        flow.kind()
                    );
                    self.fail(flow, held, msg, false).await;
                    return;
                }
            };
            let step = index.and_then(|i| list.get(i)).cloned();
            if let Some(AgentNews::Unreachable(why)) = &news {
                // Fast-track's agent is gone: its ramdisk is booted after all.
                tracing::warn!(node = %nref.uuid, "fast-track: the agent does not answer ({}); booting the ramdisk", ironic_model::secrets::log_safe(why));
                flow.forget_wait(&mut held.node);
                agent::wipe_token_and_url(&mut held.node.driver_internal_info);
                let purpose = match flow {
                    Flow::Deploy => ironic_drivers::boot::Purpose::Deploy,
                    Flow::Clean | Flow::Service => ironic_drivers::boot::Purpose::Cleaning,
                };
                let target = held.node.target_provision_state;
                let booted = match fsm::process(flow.waiting(), Event::Resume, true, target) {
                    Ok(t) => {
                        set_state(&mut held.node, t);
                        self.boot_agent(&mut held.node, purpose).await
                    }
                    Err(e) => Err(WorkFailed::Refused(e.to_string())),
                };
                match booted {
                    Ok(_) => self.wait(flow, held, step.as_ref(), Until::Event).await,
                    Err(why) => {
                        let msg =
                            format!("Failed to boot the ramdisk of node {}: {why}", nref.uuid);
                        self.fail(flow, held, msg, step.is_some()).await;
                    }
                }
                return;
            }
            if let Some(AgentNews::Failed(why)) = &news {
                if let Some(s) = &step {
                    self.step_event(&mut held.node, s, "failed");
                }
                if self.settings.agent.deploy_logs_collect != "never" {
                    self.collect_logs(&held.node, flow.kind()).await;
                }
                let msg = match &step {
                    Some(s) => flow.step_failed_message(&held.node, s, why),
                    None => format!("Node {} failed {}: {why}", nref.uuid, flow.gerund()),
                };
                self.fail(flow, held, msg, true).await;
                return;
            }
            // The step runs again: it asked to look again (`Outcome::Recheck`), or the
            // agent changed, or was busy (the step is sent again).
            let rerun = matches!(
                news,
                Some(AgentNews::VersionMismatch { .. } | AgentNews::Retry)
            ) || recheck;
            // What the agent reported now is what the plan is checked against.
            if let Some(
                AgentNews::Booted { steps, versions }
                | AgentNews::VersionMismatch { steps, versions },
            ) = &news
            {
                let dii = &mut held.node.driver_internal_info;
                dii.insert(agent_deploy::cache_key(flow).into(), steps.clone());
                dii.insert(
                    agent_deploy::HARDWARE_MANAGER_VERSION.into(),
                    versions.clone(),
                );
            }
            let booted = matches!(news, Some(AgentNews::Booted { .. }));
            let (list, from) = match (index, booted) {
                // The ramdisk booted before the first step (in-band cleaning): the
                // steps are chosen now.
                (None, true) => match Self::steps_after_boot(flow, &held.node, &list) {
                    Ok(l) => {
                        Steps::set_list(flow, &mut held.node, &l);
                        (l, 0)
                    }
                    Err(msg) => {
                        self.fail(flow, held, msg.to_string(), false).await;
                        return;
                    }
                },
                (None, false) => {
                    let msg = format!(
                        "Cannot continue {} node {}: the index of its waiting {} step is missing.",
                        flow.gerund(),
                        nref.uuid,
                        flow.kind()
                    );
                    self.fail(flow, held, msg, false).await;
                    return;
                }
                // The deploy's ramdisk booted: the plan again, with the agent's steps.
                (Some(i), true) if flow == Flow::Deploy => {
                    match self.deploy_plan(&held.node).await {
                        Ok(plan) => {
                            let at = step
                                .as_ref()
                                .and_then(|s| {
                                    plan.iter().position(|p| {
                                        p.interface == s.interface && p.step == s.step
                                    })
                                })
                                .unwrap_or(i);
                            Steps::set_list(flow, &mut held.node, &plan);
                            Steps::set_index(flow, &mut held.node, Some(at));
                            (plan, at + 1)
                        }
                        Err(why) => {
                            let msg = format!(
                                "Deploy steps of node {} are invalid once the agent reported its own: {why}",
                                nref.uuid
                            );
                            self.fail(flow, held, msg, false).await;
                            return;
                        }
                    }
                }
                (Some(i), _) if rerun => (list, i),
                (Some(i), _) => (list, i + 1),
            };
            if let (Some(s), false) = (&step, rerun) {
                self.step_event(&mut held.node, s, "done");
            }
            flow.forget_wait(&mut held.node);
            let target = held.node.target_provision_state;
            match fsm::process(flow.waiting(), Event::Resume, true, target) {
                Ok(t) => set_state(&mut held.node, t),
                Err(e) => {
                    self.fail(flow, held, e.to_string(), true).await;
                    return;
                }
            }
            tracing::info!(node = %nref.uuid, flow = flow.kind(), from, "wait over; continuing");
            self.run_from(flow, held, list, from, rerun).await;
        })
    }

    /// The steps of a flow whose ramdisk just booted before any step ran, now that
    /// the agent's are known (in the node): a manual list as asked (`stored`), checked
    /// against what is offered now; else every offered step with a priority.
    fn steps_after_boot(flow: Flow, node: &Node, stored: &[Step]) -> Result<Vec<Step>, WorkFailed> {
        let offered = ironic_catalog::offered_clean_steps(node);
        let manual = node.target_provision_state == Some(P::Manageable) || flow == Flow::Service;
        if !manual {
            return Ok(steps::automated(&offered));
        }
        let requested: Vec<Requested> = stored
            .iter()
            .map(|s| Requested {
                interface: s.interface.clone(),
                step: s.step.clone(),
                args: s.args.clone(),
            })
            .collect();
        steps::validate_requested(flow.kind(), &requested, &offered).map_err(|e| {
            WorkFailed::Refused(format!("Cannot {} node {}: {e}", flow.kind(), node.uuid))
        })
    }

    /// The flow failed: its failed state keeping the target, `last_error`; with
    /// `step_running`, the flow's fault and maintenance too (cleaning, servicing).
    pub(super) async fn fail(&self, flow: Flow, mut held: Held, msg: String, step_running: bool) {
        let uuid = held.node.uuid.to_string();
        tracing::warn!(node = %uuid, "{} failed: {}", flow.noun(), ironic_model::secrets::log_safe(&msg));
        let target = held.node.target_provision_state;
        held.node.last_error = Some(msg.clone());
        if flow == Flow::Clean {
            self.tear_down_cleaning_if_prepared(&mut held.node).await;
        }
        if flow == Flow::Deploy {
            self.end_agent_deploy(&mut held.node).await;
        }
        flow.wipe(&mut held.node);
        if let Ok(t) = fsm::process(held.node.provision_state, Event::Fail, true, target) {
            set_state(&mut held.node, t);
        }
        if let (true, Some(fault)) = (step_running, flow.fault()) {
            held.node.maintenance = true;
            held.node.fault = Some(fault.into());
            if held.node.maintenance_reason.is_none() {
                held.node.maintenance_reason = Some(msg);
            }
        }
        if let Err(e) = held.save_and_release().await {
            tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
        }
    }

    /// The periodic check of the waiting nodes this conductor owns (see the module's
    /// doc): continues timed waits whose time is past, fails waits for an event that
    /// saw none within the flow's callback timeout.
    pub async fn check_waits(self: &Arc<Self>, topology: &Topology) -> Result<WaitsChecked, Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let states: Vec<&str> = Flow::ALL.iter().map(|f| f.waiting().as_str()).collect();
        let mine: Vec<ironic_model::NodeId> = self
            .db
            .nodes_unlocked_in(&states)
            .await?
            .into_iter()
            .filter(|(_, uuid, driver, group)| snap.owner(group, driver, uuid) == Some(me))
            .map(|(id, ..)| id)
            .collect();
        let now_ms = now().timestamp_millis();
        let mut done = WaitsChecked::default();
        for node in self.db.nodes_by_ids(&mine).await? {
            let Some(flow) = Flow::waiting_in(node.provision_state) else {
                continue;
            };
            let wait = Wait::of(flow, &node);
            match wait
                .as_ref()
                .and_then(|w| Some((w.resume_at?, w.token.as_str())))
            {
                Some((at, token)) => {
                    if now_ms < at.saturating_add(OVERDUE_AFTER_MS) {
                        continue;
                    }
                    let Some(mark) = Continuing::mark(&self.continuing, node.id) else {
                        continue; // already being continued (waiting for the lock)
                    };
                    tracing::info!(node = %node.uuid, flow = flow.kind(), runner = %token, "a timed wait is overdue; continuing it here");
                    let resumed =
                        self.clone()
                            .resume(flow, NodeRef::from(&node), token.to_string());
                    self.work.spawn("overdue wait", async move {
                        resumed.await;
                        drop(mark);
                    });
                    done.resumed += 1;
                }
                None => {
                    let timeout = flow.callback_timeout(&self.settings);
                    if timeout.is_zero() {
                        continue;
                    }
                    let Some(since) = node.provision_updated_at.or(node.updated_at) else {
                        continue;
                    };
                    let limit = since + chrono::Duration::from_std(timeout).unwrap_or_default();
                    if now() < limit {
                        continue;
                    }
                    // One attempt: a busy node is being worked on.
                    let Ok(held) = self.locks.hold(&NodeRef::from(&node), Patience::Now).await
                    else {
                        continue;
                    };
                    let still = held.node.provision_state == node.provision_state
                        && Wait::of(flow, &held.node).map(|w| w.token)
                            == wait.as_ref().map(|w| w.token.clone())
                        && held.node.provision_updated_at == node.provision_updated_at;
                    if !still {
                        held.release().await;
                        continue;
                    }
                    let msg = flow.timeout_message(&held.node);
                    let step_running = !flow.step(&held.node).is_empty();
                    self.fail(flow, held, msg, step_running).await;
                    done.timed_out += 1;
                }
            }
        }
        Ok(done)
    }
}

/// A node noted as being continued by [`Provisioner::check_waits`]; forgotten when
/// the continuation ends, however it ends (dropped on panic or cancellation too).
struct Continuing {
    set: Arc<std::sync::Mutex<std::collections::HashSet<ironic_model::NodeId>>>,
    id: ironic_model::NodeId,
}

impl Continuing {
    /// `None` if the node is already being continued.
    fn mark(
        set: &Arc<std::sync::Mutex<std::collections::HashSet<ironic_model::NodeId>>>,
        id: ironic_model::NodeId,
    ) -> Option<Continuing> {
        let fresh = set.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
        fresh.then(|| Continuing {
            set: set.clone(),
            id,
        })
    }
}

impl Drop for Continuing {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_continued_once_at_a_time() {
        let set = Arc::default();
        let id = ironic_model::NodeId(7);
        let first = Continuing::mark(&set, id);
        assert!(first.is_some());
        assert!(
            Continuing::mark(&set, id).is_none(),
            "a second continuation"
        );
        assert!(Continuing::mark(&set, ironic_model::NodeId(8)).is_some());
        drop(first);
        assert!(
            Continuing::mark(&set, id).is_some(),
            "forgotten when it ends"
        );
    }
}
