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

use crate::lock::Patience;
use ironic_model::agent;
use ironic_model::{Error, Node, secrets};
use ironic_rpc::Context;
use ironic_rpc::calls::{GetNodeWithToken, Heartbeat};
use serde_json::{Value, json};

/// The ramdisk agent's calls: its token and its heartbeats.
pub(crate) struct Agent {
    db: ironic_db::Db,
    settings: std::sync::Arc<crate::ConductorSettings>,
    locks: crate::lock::Locks,
    /// Moves on a flow waiting for the agent (`provision/agent_deploy.rs`).
    provision: std::sync::Arc<crate::provision::Provisioner>,
}

impl Agent {
    pub(crate) fn new(
        db: ironic_db::Db,
        settings: std::sync::Arc<crate::ConductorSettings>,
        locks: crate::lock::Locks,
        provision: std::sync::Arc<crate::provision::Provisioner>,
    ) -> Agent {
        Agent {
            db,
            settings,
            locks,
            provision,
        }
    }
}

impl Agent {
    pub(crate) async fn get_node_with_token(
        &self,
        _ctx: &Context,
        req: GetNodeWithToken,
    ) -> Result<Node, Error> {
        let node = crate::nodes::read(&self.db, &req.node).await?;
        if node.driver_internal_info.contains_key(agent::TOKEN) {
            return Ok(masked_token(node));
        }
        // One attempt at the lock (upstream's): a lookup of a node another operation
        // holds fails at once with 409; waiting would let lookups stack up in the
        // conductor's request slots. The agent looks up again.
        self.locks
            .with_lock(&req.node, Patience::Now, async move |h| {
                // Another lookup may have won the lock first.
                if h.node.driver_internal_info.contains_key(agent::TOKEN) {
                    return Ok(masked_token(h.unlocked()));
                }
                h.node
                    .driver_internal_info
                    .insert(agent::TOKEN.into(), json!(agent::new_token()));
                h.node
                    .driver_internal_info
                    .remove(agent::TOKEN_PREGENERATED);
                h.save().await?;
                tracing::info!(node = %h.node.uuid, "agent token generated");
                Ok(h.unlocked())
            })
            .await
    }

    pub(crate) async fn heartbeat(&self, _ctx: &Context, req: Heartbeat) -> Result<(), Error> {
        agent::check_version(req.agent_version.as_deref(), req.agent_status.as_deref())?;
        let node = crate::nodes::read(&self.db, &req.node).await?;
        check_token(&node, req.agent_token.as_deref())?;
        let known_url = node.driver_internal_info.contains_key(agent::URL);
        if let (false, Some(host)) = (known_url, node.reservation.as_deref()) {
            // The agent retries a conflict within seconds: better than its next
            // heartbeat interval to get its URL recorded.
            return Err(Error::node_locked(node.uuid.as_str(), host));
        }
        if !takes_heartbeats(&node, self.settings.deploy.fast_track) {
            return Ok(());
        }
        // Nothing new since a heartbeat recorded moments ago (the one the agent forces
        // when a command ends follows its periodic one): not written again; a wait
        // goes on as for any heartbeat.
        if nothing_new(&node, &req) {
            self.continue_if_waiting(&node);
            return Ok(());
        }
        self.record_heartbeat(req).await
    }

    /// A heartbeat of a node that waits for its agent (not in maintenance) moves the
    /// wait on, in the background.
    fn continue_if_waiting(&self, node: &Node) {
        if !node.maintenance && crate::provision::Flow::waiting_in(node.provision_state).is_some() {
            self.provision
                .agent_heartbeat(ironic_rpc::NodeRef::from(node));
        }
    }

    /// The locked part of a heartbeat: the token and the state are checked again on
    /// the node as it is under the lock (the step may have ended and the token been
    /// cleared since the unlocked read), with the same answers; then the heartbeat is
    /// recorded.
    async fn record_heartbeat(&self, req: Heartbeat) -> Result<(), Error> {
        let Heartbeat {
            node: target,
            callback_url,
            agent_version,
            agent_token,
            agent_verify_ca,
            agent_status,
            agent_status_message,
        } = req;
        let token = agent_token.as_deref();
        let recorded = self
            .locks
            .with_lock(&target, Patience::Now, async move |h| {
                check_token(&h.node, token)?;
                if let Err(e) = agent::check_verify_ca(&h.node.driver_internal_info, agent_verify_ca.as_deref()) {
                    metrics::counter!("ironic_conductor_agent_certificate_changes_refused_total").increment(1);
                    tracing::error!(node = %h.node.uuid, "heartbeat with a certificate other than the one pinned for this boot; refused");
                    return Err(e);
                }
                if !takes_heartbeats(&h.node, self.settings.deploy.fast_track) {
                    return Ok(None);
                }
                let dii = &mut h.node.driver_internal_info;
                dii.insert(agent::URL.into(), json!(callback_url));
                dii.insert(
                    agent::VERSION.into(),
                    json!(agent_version.as_deref().unwrap_or(agent::ASSUMED_VERSION)),
                );
                dii.insert(
                    agent::LAST_HEARTBEAT.into(),
                    json!(agent::heartbeat_stamp(ironic_model::node::now())),
                );
                // A wait for the agent counts its callback timeout from the last
                // heartbeat (upstream's `touch_provisioning`).
                if crate::provision::Flow::waiting_in(h.node.provision_state).is_some() {
                    h.node.provision_updated_at = Some(ironic_model::node::now());
                }
                for (k, v) in [
                    (agent::VERIFY_CA, agent_verify_ca),
                    (agent::STATUS, agent_status),
                    (agent::STATUS_MESSAGE, agent_status_message),
                ] {
                    if let Some(v) = v {
                        dii.insert(k.into(), Value::String(v));
                    }
                }
                h.save().await?;
                Ok(Some(h.unlocked()))
            })
            .await;
        match recorded {
            Ok(Some(n)) => {
                let url = n
                    .driver_internal_info
                    .get(agent::URL)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.continue_if_waiting(&n);
                if n.maintenance {
                    tracing::warn!(node = %n.uuid, "heartbeat from a node in maintenance; recorded, no action taken");
                } else if agent::heartbeat_record_only(n.provision_state) {
                    tracing::debug!(node = %n.uuid, "heartbeat recorded: the agent is on-line");
                } else {
                    tracing::info!(
                        node = %n.uuid,
                        state = %n.provision_state,
                        agent_url = %secrets::log_safe(url),
                        "heartbeat recorded"
                    );
                }
                Ok(())
            }
            Ok(None) => Ok(()),
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

/// How recent a recorded heartbeat makes the next one, with nothing new, not worth
/// writing (the callback timeout counts from the recorded one: minutes).
const HEARTBEAT_WRITE_INTERVAL: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

/// Whether `req` says what the node's last heartbeat, recorded within
/// [`HEARTBEAT_WRITE_INTERVAL`], already said.
fn nothing_new(node: &Node, req: &Heartbeat) -> bool {
    let dii = &node.driver_internal_info;
    let same =
        |k: &str, v: Option<&str>| v.is_none_or(|v| dii.get(k).and_then(Value::as_str) == Some(v));
    dii.get(agent::URL).and_then(Value::as_str) == Some(req.callback_url.as_str())
        && same(
            agent::VERSION,
            Some(
                req.agent_version
                    .as_deref()
                    .unwrap_or(agent::ASSUMED_VERSION),
            ),
        )
        && same(agent::VERIFY_CA, req.agent_verify_ca.as_deref())
        && same(agent::STATUS, req.agent_status.as_deref())
        && same(agent::STATUS_MESSAGE, req.agent_status_message.as_deref())
        && agent::since_heartbeat(dii, ironic_model::node::now())
            .is_some_and(|t| t >= chrono::TimeDelta::zero() && t < HEARTBEAT_WRITE_INTERVAL)
}

/// A heartbeat's token against the node's: refused (400) unless it matches.
fn check_token(node: &Node, given: Option<&str>) -> Result<(), Error> {
    agent::check_token(&node.driver_internal_info, given).inspect_err(|_| {
        tracing::warn!(node = %node.uuid, "heartbeat with an invalid or missing agent token");
    })
}

/// Whether the node's state takes heartbeats (more of them with fast-track); one that does not is answered as a
/// success and not recorded (upstream's).
fn takes_heartbeats(node: &Node, fast_track: bool) -> bool {
    let fast_track = agent::fast_track(&node.driver_info, fast_track);
    if agent::heartbeat_allowed_with(node.provision_state, fast_track) {
        return true;
    }
    tracing::warn!(
        node = %node.uuid,
        state = %node.provision_state,
        "heartbeat in a state that takes none; not recorded"
    );
    false
}

/// The node of a lookup that finds a token already handed out: the token shows as the
/// mask, which the agent cannot use (it only ever gets one).
fn masked_token(mut n: Node) -> Node {
    n.driver_internal_info
        .insert(agent::TOKEN.into(), json!(secrets::MASK));
    n
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ironic_model::states::ProvisionState as P;
    use ironic_model::{NodeUuid, Version};
    use ironic_rpc::NodeRef;

    fn beat(node: &Node, token: &str) -> Heartbeat {
        Heartbeat {
            node: NodeRef::from(node),
            callback_url: "http://192.0.2.9:9999".into(),
            agent_version: Some("10.0.0".into()),
            agent_token: Some(token.into()),
            agent_verify_ca: None,
            agent_status: None,
            agent_status_message: None,
        }
    }

    /// The race of review L7: the unlocked read saw a valid token in a state that takes
    /// heartbeats, and the node changed before the lock was taken. Under the lock the
    /// heartbeat gets the answer the unlocked check would give now, and records nothing.
    #[tokio::test]
    async fn the_locked_step_checks_token_and_state_again() {
        let t = ironic_db::testing::TestDb::sqlite().await.unwrap();
        // The room alone: its database, settings and locks.
        let settings = std::sync::Arc::new(crate::ConductorSettings::from_config(
            &ironic_config::Config::default(),
        ));
        let locks = crate::lock::Locks::new(t.db.clone(), crate::work::Runner::new(), &settings);
        let provision = std::sync::Arc::new(crate::provision::Provisioner::new(
            t.db.clone(),
            ironic_drivers::Registry::new(&[]).unwrap(),
            settings.clone(),
            locks.clone(),
            crate::work::Runner::new(),
        ));
        let c = Agent::new(t.db.clone(), settings, locks, provision);
        let mut node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
        node.provision_state = P::DeployWait;
        node.driver_internal_info
            .insert(agent::TOKEN.into(), json!("new-token"));
        let node = t.db.node_create(&node).await.unwrap();
        let stored = || async { t.db.node_by_id(node.id).await.unwrap().unwrap() };

        // The token the unlocked read accepted was replaced meanwhile.
        let r = c.record_heartbeat(beat(&node, "old-token")).await;
        assert_eq!(
            r.unwrap_err(),
            Error::invalid("Invalid or missing agent token received.")
        );
        let n = stored().await;
        assert!(!n.driver_internal_info.contains_key(agent::URL), "{n:?}");
        assert_eq!(n.reservation, None);

        // The step ended meanwhile: a success, nothing recorded.
        let mut ended = n.clone();
        ended.provision_state = P::Active;
        t.db.node_reserve(node.id, "x").await.unwrap();
        ended.reservation = None;
        t.db.node_save(&ended, "x").await.unwrap();
        c.record_heartbeat(beat(&node, "new-token")).await.unwrap();
        let n = stored().await;
        assert!(!n.driver_internal_info.contains_key(agent::URL), "{n:?}");
        assert_eq!(n.reservation, None);

        // Unchanged: recorded.
        let mut waiting = n.clone();
        waiting.provision_state = P::DeployWait;
        t.db.node_reserve(node.id, "x").await.unwrap();
        t.db.node_save(&waiting, "x").await.unwrap();
        c.record_heartbeat(beat(&node, "new-token")).await.unwrap();
        let n = stored().await;
        assert_eq!(
            n.driver_internal_info[agent::URL],
            json!("http://192.0.2.9:9999")
        );
        assert_eq!(n.reservation, None);
        t.cleanup().await;
    }
}
