//! The ramdisk agent's calls: its token (`get_node_with_token`, from the API's lookup)
//! and its heartbeats. The token is generated and stored under the node lock; a
//! heartbeat is checked against it and recorded in `driver_internal_info` (agent URL,
//! version, time, status) in the states that allow it (`ironic_model::agent`).
//!
//! Upstream records heartbeats in its agent deploy interfaces only (`fake` logs and
//! drops them); here every deploy interface records them, so that an operator sees a
//! ramdisk check in whatever the driver. What a heartbeat continues (the next deploy or
//! clean step of an agent-driven deploy) belongs to the deploy interface; `fake` runs
//! its steps without an agent, so nothing continues.

use ironic_model::agent;
use ironic_model::{Error, Node, secrets};
use ironic_rpc::calls::{GetNodeWithToken, Heartbeat};
use serde_json::{Value, json};

use crate::Conductor;

impl Conductor {
    pub(crate) async fn get_node_with_token(&self, req: GetNodeWithToken) -> Result<Node, Error> {
        let node = self.read(&req.node).await?;
        if node.driver_internal_info.contains_key(agent::TOKEN) {
            return Ok(masked_token(node));
        }
        // One attempt at the lock (upstream's): a lookup of a node another operation
        // holds fails at once with 409; waiting would let lookups stack up in the
        // conductor's request slots. The agent looks up again.
        self.with_lock_now(&req.node, |mut n| async move {
            // Another lookup may have won the lock first.
            if n.driver_internal_info.contains_key(agent::TOKEN) {
                return Ok(masked_token(n));
            }
            n.driver_internal_info
                .insert(agent::TOKEN.into(), json!(agent::new_token()));
            n.driver_internal_info.remove(agent::TOKEN_PREGENERATED);
            n.reservation = Some(self.settings.host.clone());
            let mut saved = self.db.node_save(&n, &self.settings.host).await?;
            saved.reservation = None;
            tracing::info!(node = %n.uuid, "agent token generated");
            Ok(saved)
        })
        .await
    }

    pub(crate) async fn agent_heartbeat(&self, req: Heartbeat) -> Result<(), Error> {
        let Heartbeat {
            node: target,
            callback_url,
            agent_version,
            agent_token,
            agent_verify_ca,
            agent_status,
            agent_status_message,
        } = req;
        if agent_version.is_none() && agent_status.is_none() {
            return Err(Error::invalid(
                "Agent did not transmit a version, and a version is required. Please update the agent being used.",
            ));
        }
        let node = self.read(&target).await?;
        if !agent::token_valid(&node.driver_internal_info, agent_token.as_deref()) {
            tracing::warn!(node = %node.uuid, "heartbeat with an invalid or missing agent token");
            return Err(Error::invalid("Invalid or missing agent token received."));
        }
        let known_url = node.driver_internal_info.contains_key(agent::URL);
        if let (false, Some(host)) = (known_url, node.reservation.as_deref()) {
            // The agent retries a conflict within seconds: better than its next
            // heartbeat interval to get its URL recorded.
            return Err(Error::node_locked(node.uuid.as_str(), host));
        }
        if !agent::heartbeat_allowed(node.provision_state) {
            tracing::warn!(
                node = %node.uuid,
                state = %node.provision_state,
                "heartbeat in a state that takes none; not recorded"
            );
            return Ok(());
        }
        let recorded = self
            .with_lock_now(&target, |mut n| async move {
                let dii = &mut n.driver_internal_info;
                dii.insert(agent::URL.into(), json!(callback_url));
                dii.insert(
                    agent::VERSION.into(),
                    json!(agent_version.as_deref().unwrap_or(agent::ASSUMED_VERSION)),
                );
                dii.insert(
                    agent::LAST_HEARTBEAT.into(),
                    json!(
                        ironic_model::node::now()
                            .format("%Y-%m-%dT%H:%M:%S%.6f")
                            .to_string()
                    ),
                );
                for (k, v) in [
                    (agent::VERIFY_CA, agent_verify_ca),
                    (agent::STATUS, agent_status),
                    (agent::STATUS_MESSAGE, agent_status_message),
                ] {
                    if let Some(v) = v {
                        dii.insert(k.into(), Value::String(v));
                    }
                }
                n.reservation = Some(self.settings.host.clone());
                self.db.node_save(&n, &self.settings.host).await?;
                Ok(n)
            })
            .await;
        match recorded {
            Ok(n) => {
                let url = n
                    .driver_internal_info
                    .get(agent::URL)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if n.maintenance {
                    tracing::warn!(node = %n.uuid, "heartbeat from a node in maintenance; recorded, no action taken");
                } else if agent::heartbeat_record_only(n.provision_state) {
                    tracing::debug!(node = %n.uuid, "heartbeat recorded: the agent is on-line");
                } else {
                    tracing::info!(
                        node = %n.uuid,
                        state = %n.provision_state,
                        agent_url = %secrets::mask_text(url),
                        "heartbeat recorded"
                    );
                }
                Ok(())
            }
            // Upstream's: another operation holds the node; the next heartbeat is
            // recorded instead.
            Err(Error::Locked(m)) => {
                tracing::info!(node = %target.uuid, "heartbeat not recorded, node busy: {m}");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// The node of a lookup that finds a token already handed out: the token shows as the
/// mask, which the agent cannot use (it only ever gets one).
fn masked_token(mut n: Node) -> Node {
    n.driver_internal_info
        .insert(agent::TOKEN.into(), json!(secrets::MASK));
    n
}
