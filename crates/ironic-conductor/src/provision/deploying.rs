//! Deploying (the deploy plan, its steps) and tearing down.

use super::step_state::Steps;
use super::*;

impl Provisioner {
    /// `do_node_deploy`: `available` or `deploy failed` (or, rebuilding, `active`,
    /// `deploy failed`, `error`) → `deploying` → the deploy steps → `active`.
    pub(crate) async fn deploy(
        self: &Arc<Self>,
        target: &NodeRef,
        rebuild: bool,
        configdrive: Option<Value>,
        deploy_steps: Vec<TemplateStep>,
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.hold_for_call(target, ctx).await? else {
            return Ok(());
        };
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
        // The user's steps join the plan; they are forgotten when the deploy ends.
        if deploy_steps.is_empty() {
            held.node.driver_internal_info.remove(USER_DEPLOY_STEPS);
        } else {
            held.node.driver_internal_info.insert(
                USER_DEPLOY_STEPS.into(),
                Value::Array(deploy_steps.iter().map(TemplateStep::to_json).collect()),
            );
        }
        // The interfaces, then the steps: both before anything moves.
        let checked = match self.validate_power_and_deploy(&held.node).await {
            Ok(()) if ironic_catalog::agent_based(&held.node) => {
                match agent_deploy::check_deploy(
                    &held.node,
                    &self.settings.local_files,
                    self.settings.agent.allow_md5_checksum,
                ) {
                    Ok(()) => self.deploy_plan(&held.node).await,
                    Err(why) => Err(WorkFailed::Domain(why)),
                }
            }
            Ok(()) => self.deploy_plan(&held.node).await,
            Err(why) => Err(WorkFailed::Driver(why)),
        };
        let plan = match checked {
            Ok(p) => p,
            Err(why) => {
                // Nothing was saved: the stored steps are those of before.
                return held
                    .bail(Error::invalid(format!(
                        "Failed to validate deploy or power info for node {uuid}: {why}"
                    )))
                    .await;
            }
        };
        Steps::set_list(Flow::Deploy, &mut held.node, &plan);
        set_state(&mut held.node, t);
        held.node.last_error = None;
        // Fast-track keeps a running agent for the deploy's first step.
        if !self.fast_track_now(&held.node) {
            agent::wipe_token_and_url(&mut held.node.driver_internal_info);
        }
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

    /// The deploy steps the node runs (see [`deploy_plan`]).
    pub(crate) async fn deploy_plan(&self, node: &Node) -> Result<Vec<Step>, WorkFailed> {
        deploy_plan(&self.db, node).await
    }

    pub(super) async fn run_deploy(self: Arc<Self>, mut held: Held, plan: Vec<Step>) {
        let uuid = held.node.uuid.to_string();
        if let Err(why) = self.deploy_call(&mut held.node, DeployCall::Prepare).await {
            let msg = format!("Failed to prepare to deploy node {uuid}: {why}");
            self.fail(Flow::Deploy, held, msg, false).await;
            return;
        }
        self.run_steps(Flow::Deploy, held, plan, 0).await;
    }

    /// The deploy steps are done: `active`, powered on.
    pub(super) async fn finish_deploy(&self, mut held: Held) {
        let uuid = held.node.uuid.to_string();
        self.end_agent_deploy(&mut held.node).await;
        Flow::Deploy.wipe(&mut held.node);
        held.node.power_state = Some("power on".into());
        match fsm::process(held.node.provision_state, Event::Done, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "cannot finish the deploy")
            }
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "deployed"),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }

    /// `do_node_tear_down`: `deleting` → power off, instance data removed → automated
    /// cleaning → `available` (`manageable` for a retired node).
    pub(crate) async fn tear_down(
        self: &Arc<Self>,
        target: &NodeRef,
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.hold_for_call(target, ctx).await? else {
            return Ok(());
        };
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
                tracing::warn!(node = %uuid, "{}", ironic_model::secrets::log_safe(&msg));
                if let Ok(t) = fsm::process(P::Deleting, Event::Fail, false, None) {
                    set_state(&mut held.node, t);
                }
                held.node.last_error = Some(msg);
                if let Err(e) = held.save_and_release().await {
                    tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
                }
                return;
            }
            held.node.instance_info = JsonObject::new();
            held.node.instance_uuid = None;
            // A deploy that was waiting (or held) ends here.
            Flow::Deploy.wipe(&mut held.node);
            // The node's allocation ends with its instance (same transaction).
            let allocation = held.node.allocation_id.take();
            held.node.allocation_uuid = None;
            match fsm::process(P::Deleting, Event::Clean, true, None) {
                Ok(t) => set_state(&mut held.node, t),
                Err(e) => tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "cannot start cleaning"),
            }
            if let Err(e) = held.save_dropping(allocation).await {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
                return;
            }
            me.clean(held, None).await;
        });
        Ok(())
    }
}

/// The deploy steps a node runs: its driver's, merged with the deploy templates its
/// instance traits select and the user's steps (`steps::deploy_plan`). `Err` is the
/// reason the steps are invalid.
pub(crate) async fn deploy_plan(db: &ironic_db::Db, node: &Node) -> Result<Vec<Step>, WorkFailed> {
    let refused = |e: &dyn std::fmt::Display| WorkFailed::Refused(e.to_string());
    let traits = ironic_model::deploy_template::instance_traits(node).map_err(|e| refused(&e))?;
    let templates = db.deploy_templates_by_names(&traits).await?;
    let user = ironic_model::deploy_template::user_deploy_steps(node);
    ironic_catalog::deploy_plan_for(node, templates, &user).map_err(|e| refused(&e))
}
