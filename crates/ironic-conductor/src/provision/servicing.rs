//! Servicing (1.87): steps run on an `active` node (`service` verb with
//! `service_steps`), which returns to `active`; `service wait` while a step takes time,
//! `service hold` at the reserved `hold` step, `service failed` (and maintenance, as
//! upstream's) when a step fails. The steps a driver offers for servicing are its clean
//! steps (the fake ones declare none apart), plus the reserved steps.

use super::*;

impl Provisioner {
    /// `do_node_service`: an `active` node → `servicing` → the steps → `active`.
    pub(crate) async fn service(
        self: &Arc<Self>,
        target: &NodeRef,
        requested: Vec<Requested>,
        disable_ramdisk: bool,
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.lock_for(target, ctx).await? else {
            return Ok(());
        };
        let uuid = held.node.uuid.to_string();
        let t = match Self::transition(&held.node, "service", Event::Service, true, Some(P::Active))
        {
            Ok(t) => t,
            Err(e) => return held.bail(e).await,
        };
        if let Err(why) = self.validate_power_and_deploy(&held.node).await {
            return held
                .bail(Error::invalid(format!(
                    "Validation of node {uuid} for servicing failed: {why}"
                )))
                .await;
        }
        set_state(&mut held.node, t);
        held.node.last_error = None;
        held.save().await?;
        tracing::info!(node = %uuid, steps = requested.len(), disable_ramdisk, "servicing accepted");
        let me = self.clone();
        self.work.spawn("servicing", async move {
            me.start_service(held, requested, disable_ramdisk).await
        });
        Ok(())
    }

    async fn start_service(
        self: Arc<Self>,
        mut held: Held,
        requested: Vec<Requested>,
        disable_ramdisk: bool,
    ) {
        let uuid = held.node.uuid.to_string();
        let offered = self
            .drivers
            .get(&held.node.driver)
            .map(|h| h.clean_steps)
            .unwrap_or(&[]);
        wipe_servicing(&mut held.node);
        // A step the driver does not have fails as it would when run (upstream's).
        if let Some(r) = requested.iter().find(|r| {
            !steps::is_reserved(&r.step)
                && !offered
                    .iter()
                    .any(|d| d.interface == r.interface && d.step == r.step)
        }) {
            let msg = format!(
                "Node {uuid} failed step {}: the {} interface has no step {}",
                r.repr(),
                r.interface,
                r.step
            );
            self.fail_servicing(held, msg, true).await;
            return;
        }
        let checked = steps::validate_requested("service", &requested, offered).and_then(|l| {
            if disable_ramdisk {
                steps::without_ramdisk(&l, offered)?;
            }
            Ok(l)
        });
        let list = match checked {
            Ok(l) => l,
            Err(e) => {
                let msg = format!("Cannot service node {uuid}: {e}");
                self.fail_servicing(held, msg, false).await;
                return;
            }
        };
        if disable_ramdisk {
            held.node
                .driver_internal_info
                .insert(SERVICE_DISABLE_RAMDISK.into(), json!(true));
        }
        held.node.driver_internal_info.insert(
            SERVICE_STEPS.into(),
            Value::Array(list.iter().map(Step::to_json).collect()),
        );
        self.run_service_steps(held, list, 0).await;
    }

    /// Runs `list` from `from` on; returns when the servicing ends or holds. A step
    /// that takes time runs to its end here, the node in `service wait` meanwhile (there
    /// is no ramdisk agent whose heartbeat would continue it).
    pub(super) async fn run_service_steps(
        self: Arc<Self>,
        mut held: Held,
        list: Vec<Step>,
        from: usize,
    ) {
        let uuid = held.node.uuid.to_string();
        for (i, step) in list.iter().enumerate().skip(from) {
            held.node.service_step = step_json(step);
            held.node
                .driver_internal_info
                .insert(SERVICE_STEP_INDEX.into(), json!(i));
            if let Err(e) = held.save().await {
                tracing::error!(node = %uuid, error = %e, "could not save the node");
                return;
            }
            tracing::info!(node = %uuid, step = %step.name(), index = i, "service step starts");
            let outcome = match self.run_step(&mut held.node, "service", step).await {
                Ran::Finished(o) => o,
                Ran::Hold => {
                    self.hold(held).await;
                    return;
                }
            };
            match outcome {
                Ok(Outcome::Done) => self.step_event(&mut held.node, step, "done"),
                Ok(Outcome::Wait(d)) => {
                    self.step_event(&mut held.node, step, "started");
                    let target = held.node.target_provision_state;
                    if let Ok(t) = fsm::process(P::Servicing, Event::Wait, true, target) {
                        set_state(&mut held.node, t);
                    }
                    if let Err(e) = held.save().await {
                        tracing::error!(node = %uuid, error = %e, "could not save the node");
                        return;
                    }
                    tokio::time::sleep(d).await;
                    if let Ok(t) = fsm::process(P::ServiceWait, Event::Resume, true, target) {
                        set_state(&mut held.node, t);
                    }
                    self.step_event(&mut held.node, step, "done");
                }
                Err(why) => {
                    self.step_event(&mut held.node, step, "failed");
                    let msg = format!("Node {uuid} failed step {}: {why}", step.name());
                    self.fail_servicing(held, msg, true).await;
                    return;
                }
            }
        }
        wipe_servicing(&mut held.node);
        match fsm::process(held.node.provision_state, Event::Done, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail_servicing(held, e.to_string(), false).await;
                return;
            }
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "servicing finished"),
            Err(e) => tracing::error!(node = %uuid, error = %e, "could not save the node"),
        }
    }

    /// Servicing failed: `service failed` keeping the target, `last_error`; with
    /// `step_failed`, maintenance too (`fault` `service failure`, as upstream's).
    pub(super) async fn fail_servicing(&self, mut held: Held, msg: String, step_failed: bool) {
        let uuid = held.node.uuid.to_string();
        tracing::warn!(node = %uuid, "servicing failed: {}", ironic_model::secrets::log_safe(&msg));
        let target = held.node.target_provision_state;
        wipe_servicing(&mut held.node);
        if let Ok(t) = fsm::process(held.node.provision_state, Event::Fail, true, target) {
            set_state(&mut held.node, t);
        }
        if step_failed {
            held.node.maintenance = true;
            held.node.fault = Some("service failure".into());
            if held.node.maintenance_reason.is_none() {
                held.node.maintenance_reason = Some(msg.clone());
            }
        }
        held.node.last_error = Some(msg);
        if let Err(e) = held.save_and_release().await {
            tracing::error!(node = %uuid, error = %e, "could not save the node");
        }
    }
}

/// What a servicing leaves in the node: its step, its list and index, the agent's token.
pub(super) fn wipe_servicing(node: &mut Node) {
    node.service_step = JsonObject::new();
    for k in [SERVICE_STEPS, SERVICE_STEP_INDEX, SERVICE_DISABLE_RAMDISK] {
        node.driver_internal_info.remove(k);
    }
    agent::wipe_token_and_url(&mut node.driver_internal_info);
}
