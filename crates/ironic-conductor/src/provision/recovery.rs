//! What a crash left behind on the nodes this conductor owns.

use super::*;
use crate::provision::inspecting;

impl Provisioner {
    /// Fails what a crash left behind on the nodes this conductor owns: a transient
    /// state nobody works on (unlocked), or an `inspect wait` past `[conductor]
    /// inspect_wait_timeout`. (A step's wait is not failed: the step engine continues
    /// it, `engine.rs` `check_waits`.) Returns how many nodes were failed.
    pub async fn fail_orphaned_work(&self, topology: &Topology) -> Result<usize, Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let now_ms = now().timestamp_millis();
        let mut states: Vec<&str> = ironic_model::states::ProvisionState::ALL
            .iter()
            .filter(|s| fsm::stuck_on_crash(**s))
            .map(|s| s.as_str())
            .collect();
        states.push(P::InspectWait.as_str());
        let mut failed = 0;
        for (id, uuid, driver, group) in self.db.nodes_unlocked_in(&states).await? {
            // Look before locking: a healthy wait is left alone without touching its lock.
            let Some(node) = self.db.node_by_id(id).await? else {
                continue;
            };
            let owner = snap.owner(&group, &driver, &uuid) == Some(me);
            let msg = if node.provision_state == P::InspectWait {
                let overdue = node
                    .driver_internal_info
                    .get(inspecting::INSPECT_WAIT_DEADLINE)
                    .and_then(Value::as_i64)
                    .is_some_and(|d| d < now_ms);
                if !(owner && overdue) {
                    continue;
                }
                inspecting::INSPECT_TIMEOUT.to_string()
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
            let Ok(mut held) = self.locks.hold(&nref, Patience::Now).await else {
                continue;
            };
            let state = held.node.provision_state;
            if state != node.provision_state {
                held.release().await;
                continue;
            }
            if state == P::Cleaning {
                let step_running = !held.node.clean_step.is_empty();
                self.fail(Flow::Clean, held, msg, step_running).await;
            } else {
                if state == P::InspectWait {
                    self.end_inband_inspection(&mut held.node, false).await;
                }
                let target = held.node.target_provision_state;
                // No work follows: a stable state reached keeps no target.
                if let Ok(t) = fsm::process(state, Event::Fail, false, target) {
                    set_state(&mut held.node, t);
                }
                tracing::warn!(node = %uuid, "{}", ironic_model::secrets::log_safe(&msg));
                held.node.last_error = Some(msg);
                held.save_and_release().await?;
            }
            failed += 1;
        }
        Ok(failed)
    }
}
