//! Provisioning verbs: each is checked against the state machine and applied under the
//! node lock; verification and adoption finish here, inspection in `inspecting.rs`.

use super::step_state::Steps;
use super::*;

impl Provisioner {
    /// `fsm::process`, with upstream's 400 `InvalidStateRequested` when the event may
    /// not happen in the node's state.
    pub(super) fn transition(
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
    pub(super) fn plan(node: &Node, action: &str) -> Result<(fsm::Transition, bool), Error> {
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
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.hold_for_call(target, ctx).await? else {
            return Ok(());
        };
        if action == "abort" {
            return self.abort(held).await;
        }
        if action == "unhold" {
            return self.unhold(held).await;
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
    pub(super) async fn finish_quick_work(self: Arc<Self>, mut held: Held) {
        let read = match self.driver_of(&held.node) {
            Ok(d) => d.power().get_power_state(NodeInfo::from(&held.node)).await,
            Err(e) => Err(e),
        };
        let event = match read {
            Ok(p) => {
                held.node.power_state = Some(p);
                if held.node.provision_state == P::Inspecting {
                    match self.inspect(&mut held.node).await {
                        Ok(e) => e,
                        Err(why) => {
                            held.node.last_error =
                                Some(format!("Failed to inspect hardware. Reason: {why}"));
                            Event::Fail
                        }
                    }
                } else {
                    if held.node.provision_state == P::Verifying {
                        self.cache_bios(&held.node).await;
                    }
                    Event::Done
                }
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
            Err(e) => tracing::error!(error = %ironic_model::error::chain(&e), "cannot finish"),
        }
        let uuid = held.node.uuid.clone();
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "done"),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }

    /// The reserved `hold` step ran: `… hold`, the step's index kept, the lock given
    /// back. `unhold` continues after it; `abort` ends it.
    pub(super) async fn hold(&self, mut held: Held) {
        let target = held.node.target_provision_state;
        match fsm::process(held.node.provision_state, Event::Hold, true, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                tracing::error!(node = %held.node.uuid, error = %ironic_model::error::chain(&e), "cannot hold")
            }
        }
        let uuid = held.node.uuid.clone();
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "held until unhold"),
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }

    /// `unhold` (1.85): from `clean hold`, `deploy hold` or `service hold`, through the
    /// matching wait state, on with the step after the hold.
    async fn unhold(self: &Arc<Self>, mut held: Held) -> Result<(), Error> {
        let uuid = held.node.uuid.to_string();
        let state = held.node.provision_state;
        let Some(flow) = Flow::held_in(state) else {
            return held
                .bail(fsm::invalid_state_requested("unhold", &uuid, state))
                .await;
        };
        let (list, index) = match Steps::of(flow, &held.node) {
            Ok(Steps {
                list,
                index: Some(i),
            }) => (list, i),
            _ => {
                return held
                    .bail(Error::invalid(format!(
                        "Cannot continue node {uuid}: the steps it holds at cannot be read."
                    )))
                    .await;
            }
        };
        let target = held.node.target_provision_state;
        for event in [Event::Unhold, Event::Resume] {
            let t = fsm::process(held.node.provision_state, event, true, target)?;
            set_state(&mut held.node, t);
        }
        held.save().await?;
        tracing::info!(node = %uuid, state = %held.node.provision_state, "unhold: continuing");
        let me = self.clone();
        self.work.spawn("steps after unhold", async move {
            me.run_steps(flow, held, list, index + 1).await
        });
        Ok(())
    }
}
