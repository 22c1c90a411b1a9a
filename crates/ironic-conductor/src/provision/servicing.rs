//! Servicing (1.87): steps run on an `active` node (`service` verb with
//! `service_steps`), which returns to `active`; `service wait` while a step takes time
//! (unlocked, as every wait of the step engine, `engine.rs`),
//! `service hold` at the reserved `hold` step, `service failed` (and maintenance, as
//! upstream's) when a step fails. The steps a driver offers for servicing are its clean
//! steps (the fake ones declare none apart), plus the reserved steps.

use super::step_state::Steps;
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
        let Some(mut held) = self.hold_for_call(target, ctx).await? else {
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
        Flow::Service.wipe(&mut held.node);
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
            self.fail(Flow::Service, held, msg, true).await;
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
                self.fail(Flow::Service, held, msg, false).await;
                return;
            }
        };
        if disable_ramdisk {
            held.node
                .driver_internal_info
                .insert(SERVICE_DISABLE_RAMDISK.into(), json!(true));
        }
        Steps::set_list(Flow::Service, &mut held.node, &list);
        self.run_steps(Flow::Service, held, list, 0).await;
    }

    /// The service steps are done: back to `active`.
    pub(super) async fn finish_servicing(&self, mut held: Held) {
        let uuid = held.node.uuid.to_string();
        Flow::Service.wipe(&mut held.node);
        match fsm::process(held.node.provision_state, Event::Done, false, None) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                self.fail(Flow::Service, held, e.to_string(), false).await;
                return;
            }
        }
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "servicing finished"),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }
}
