//! Cleaning: manual (`clean_steps`) and automated, the steps and their `clean wait`
//! continuations, abort, failure, and the clean steps a driver offers.

use super::step_state::Steps;
use super::*;

impl Provisioner {
    /// `do_node_clean`: manual cleaning of a `manageable` node.
    pub(crate) async fn manual_clean(
        self: &Arc<Self>,
        target: &NodeRef,
        requested: Vec<Requested>,
        disable_ramdisk: bool,
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.hold_for_call(target, ctx).await? else {
            return Ok(());
        };
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
    pub(super) async fn clean(self: Arc<Self>, mut held: Held, manual: Option<Manual>) {
        let uuid = held.node.uuid.to_string();
        let offered = ironic_catalog::offered_clean_steps(&held.node);
        self.wipe_but_running_agent(Flow::Clean, &mut held.node);
        let disable_ramdisk = manual.as_ref().is_some_and(|m| m.disable_ramdisk);
        // Through the agent, the steps are checked again once it booted and reported
        // its own (`engine.rs` `steps_after_boot`).
        let agent = ironic_catalog::agent_based(&held.node) && !disable_ramdisk;
        let list = match manual {
            Some(m) => {
                let checked = if agent {
                    steps::validate_requested_before_agent("clean", &m.requested, &offered)
                } else {
                    steps::validate_manual(&m.requested, &offered)
                };
                let checked = checked.and_then(|l| {
                    if m.disable_ramdisk {
                        steps::without_ramdisk(&l, &offered)?;
                    }
                    Ok(l)
                });
                match checked {
                    Ok(l) => l,
                    Err(e) => {
                        let msg = format!("Cannot clean node {uuid}: {e}");
                        self.fail(Flow::Clean, held, msg, false).await;
                        return;
                    }
                }
            }
            None if held
                .node
                .automated_clean
                .unwrap_or(self.settings.automated_clean) =>
            {
                // Through the agent, chosen once it reported its steps.
                if agent {
                    Vec::new()
                } else {
                    steps::automated(&offered)
                }
            }
            // Automated cleaning is off: nothing to prepare, nothing runs.
            None => {
                self.run_steps(Flow::Clean, held, Vec::new(), 0).await;
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
                self.fail(Flow::Clean, held, msg, false).await;
                return;
            }
            held.node
                .driver_internal_info
                .insert(CLEANING_PREPARED.into(), json!(true));
        }
        Steps::set_list(Flow::Clean, &mut held.node, &list);
        if agent {
            self.wait(Flow::Clean, held, None, engine::Until::Event)
                .await;
            return;
        }
        self.run_steps(Flow::Clean, held, list, 0).await;
    }

    /// The cleaning's steps are done: what `prepare_cleaning` set up is torn down, and
    /// the node goes back to `manageable` (manual, or a retired node) or `available`.
    /// With fast-track the ramdisk keeps running (its media ejected, the node on, the
    /// agent's token kept) for the next operation.
    pub(super) async fn finish_cleaning(&self, mut held: Held) {
        let uuid = held.node.uuid.to_string();
        let keep_agent = self.fast_track_now(&held.node);
        let prepared = held
            .node
            .driver_internal_info
            .remove(CLEANING_PREPARED)
            .is_some();
        if prepared && keep_agent {
            self.clean_up_ramdisk(&mut held.node).await;
            tracing::info!(node = %uuid, "fast-track: the ramdisk keeps running");
        } else if prepared
            && let Err(why) = self
                .deploy_call(&mut held.node, DeployCall::TearDownCleaning)
                .await
        {
            let msg = format!("Failed to tear down from cleaning for node {uuid}: {why}");
            self.fail(Flow::Clean, held, msg, false).await;
            return;
        }
        self.wipe_but_running_agent(Flow::Clean, &mut held.node);
        let manual = held.node.target_provision_state == Some(P::Manageable);
        let event = if manual || held.node.retired {
            Event::Manage
        } else {
            Event::Done
        };
        match fsm::process(held.node.provision_state, event, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail(Flow::Clean, held, e.to_string(), false).await;
                return;
            }
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "cleaning finished"),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }

    /// `abort`: in `clean wait` or `clean hold`, only when the running step allows it;
    /// in `inspect wait` (the ramdisk's data is no longer awaited); in `deploy hold`,
    /// `deploy wait` (1.110), `service hold` and `service wait`.
    pub(super) async fn abort(&self, mut held: Held) -> Result<(), Error> {
        let uuid = held.node.uuid.to_string();
        let state = held.node.provision_state;
        if fsm::next(state, Event::Abort).is_none() {
            return held
                .bail(fsm::invalid_state_requested("abort", &uuid, state))
                .await;
        }
        if matches!(
            state,
            P::DeployHold | P::DeployWait | P::ServiceHold | P::ServiceWait
        ) {
            let deploying = matches!(state, P::DeployHold | P::DeployWait);
            let step = if deploying {
                &held.node.deploy_step
            } else {
                &held.node.service_step
            };
            let mut msg = format!(
                "By request, the {} operation was aborted",
                if deploying { "deploy" } else { "service" }
            );
            if let Ok(s) = Step::from_json(&Value::Object(step.clone())) {
                msg.push_str(&format!(
                    " during or after the completion of step \"{}\"",
                    s.name()
                ));
            }
            let t = fsm::process(state, Event::Abort, true, held.node.target_provision_state)?;
            set_state(&mut held.node, t);
            held.node.last_error = Some(msg);
            let flow = if deploying {
                self.end_agent_deploy(&mut held.node).await;
                Flow::Deploy
            } else {
                Flow::Service
            };
            flow.wipe(&mut held.node);
            held.save_and_release().await?;
            tracing::info!(node = %uuid, state = %state, "aborted");
            return Ok(());
        }
        if state == P::InspectWait {
            let t = fsm::process(state, Event::Abort, false, None)?;
            set_state(&mut held.node, t);
            held.node.last_error = Some("Inspection was aborted by request.".into());
            self.end_inband_inspection(&mut held.node, false).await;
            held.save_and_release().await?;
            tracing::info!(node = %uuid, "inspection aborted");
            return Ok(());
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
            self.step_event(&mut held.node, s, "aborted");
        }
        held.node.last_error = Some(msg);
        self.tear_down_cleaning_if_prepared(&mut held.node).await;
        Flow::Clean.wipe(&mut held.node);
        held.save_and_release().await?;
        tracing::info!(node = %uuid, "cleaning aborted");
        Ok(())
    }

    /// Tears down what `prepare_cleaning` set up, if it did; a failure is logged and
    /// added to `last_error` (the cleaning already ended).
    pub(super) async fn tear_down_cleaning_if_prepared(&self, node: &mut Node) {
        if node
            .driver_internal_info
            .remove(CLEANING_PREPARED)
            .is_none()
        {
            return;
        }
        if let Err(why) = self.deploy_call(node, DeployCall::TearDownCleaning).await {
            tracing::warn!(node = %node.uuid, "tearing down cleaning failed: {}", ironic_model::secrets::log_safe(&why.to_string()));
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

    /// `get_clean_steps`: the steps the node's driver offers with at least
    /// `min_priority`, highest first; `None` while the driver cannot tell yet (a
    /// `fake-agent` node's simulated agent is starting).
    pub(crate) async fn clean_steps(
        self: &Arc<Self>,
        target: &NodeRef,
        min_priority: u32,
    ) -> Result<Option<Vec<OfferedStep>>, Error> {
        let node = crate::nodes::read(&self.db, target).await?;
        // Through the agent: known once the agent reported them.
        if ironic_catalog::agent_based(&node) {
            return Ok(ironic_catalog::agent_steps(
                &node,
                ironic_catalog::AGENT_CACHED_CLEAN_STEPS,
            )
            .map(|_| steps::listing(&ironic_catalog::offered_clean_steps(&node), min_priority)));
        }
        let driver = crate::nodes::driver(&self.drivers, &node)?;
        Ok(driver.clean_steps(NodeInfo::from(&node)).map(|offered| {
            steps::listing(offered, min_priority)
                .iter()
                .map(OfferedStep::from)
                .collect()
        }))
    }
}
