//! Power-state sync (upstream's `_sync_power_states` and power-failure recovery), once
//! per conductor every `[conductor] sync_power_state_interval`, on the nodes it owns:
//! the BMC's power state is read (at most `sync_power_state_workers` at a time) and
//!
//! - when it differs from the database: the hardware is set back to the recorded state
//!   (`force_power_state_during_sync`, upstream's default) or the database follows the
//!   hardware;
//! - when the BMC cannot be reached (or the forcing fails)
//!   `power_state_sync_max_retries` rounds in a row: the node goes into maintenance
//!   with `fault` `power failure` and no power state;
//! - a node in maintenance for `power failure` whose BMC answers again comes out of it
//!   (upstream runs this check as a separate periodic task; here it is part of the round).
//!
//! Skipped: locked nodes (never waited on: the lock is tried once), nodes being
//! enrolled, waiting in `deploy wait` or `clean wait`, with a power change in progress,
//! and nodes in maintenance for any other reason. The failure counts live in memory:
//! a conductor that takes a node over starts counting afresh (as upstream).

use crate::lock::Patience;
use crate::work::TaskError;
use std::collections::HashMap;
use std::sync::Arc;

use ironic_db::topology::Topology;
use ironic_drivers::interfaces::NodeInfo;
use ironic_model::states::ProvisionState as P;
use ironic_model::{Error, Node};
use ironic_rpc::NodeRef;

use crate::every_node::{EveryNode, Page};

/// Nodes read per page of a round (their [`ironic_db::NodeState`]s; the whole rows of this
/// conductor's share of them).
const SYNC_PAGE: i64 = 1000;

/// The `fault` of a node whose BMC could not be reached.
pub const POWER_FAILURE: &str = "power failure";

/// Failures in a row, per node uuid (this conductor's memory).
#[derive(Debug, Default)]
pub struct Failures(std::sync::Mutex<HashMap<String, u32>>);

impl Failures {
    fn bump(&self, uuid: &str) -> u32 {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(uuid.to_string()).or_insert(0);
        *n += 1;
        *n
    }

    fn clear(&self, uuid: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uuid);
    }
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub checked: usize,
    pub updated: usize,
    pub forced: usize,
    pub failed: usize,
    pub to_maintenance: usize,
    pub recovered: usize,
}

impl Round {
    /// Counts one node's outcome (a task that panicked or was aborted counts nothing).
    fn count(&mut self, r: Result<Outcome, tokio::task::JoinError>) {
        let Ok(o) = r else { return };
        if o != Outcome::Skipped {
            self.checked += 1;
        }
        match o {
            Outcome::Updated => self.updated += 1,
            Outcome::Forced => self.forced += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::ToMaintenance => self.to_maintenance += 1,
            Outcome::Recovered => self.recovered += 1,
            Outcome::InSync | Outcome::Skipped => {}
        }
    }
}

/// What happened to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    InSync,
    Updated,
    Forced,
    Failed,
    ToMaintenance,
    Recovered,
    Skipped,
}

/// Whether a sync leaves the node alone (on its whole row).
fn excluded(n: &Node) -> bool {
    excluded_locked(n) || n.reservation.is_some()
}

/// [`excluded`] on a node's light read: the same columns, the same answer.
fn excluded_state(n: &ironic_db::NodeState) -> bool {
    skipped(
        P::parse(&n.provision_state),
        n.target_power_state.is_some(),
        n.maintenance,
        n.fault.as_deref(),
    ) || n.reservation.is_some()
}

/// The periodic power-state sync of the nodes this conductor owns.
pub struct PowerSync {
    db: ironic_db::Db,
    drivers: ironic_drivers::Registry,
    settings: Arc<crate::ConductorSettings>,
    locks: crate::lock::Locks,
    work: crate::work::Runner,
    /// Sync failures in a row, per node.
    power_failures: Failures,
}

impl PowerSync {
    pub(crate) fn new(
        db: ironic_db::Db,
        drivers: ironic_drivers::Registry,
        settings: Arc<crate::ConductorSettings>,
        locks: crate::lock::Locks,
        work: crate::work::Runner,
    ) -> PowerSync {
        PowerSync {
            db,
            drivers,
            settings,
            locks,
            work,
            power_failures: Failures::default(),
        }
    }

    /// The nodes of one page of [`EveryNode`] that this conductor owns and a sync looks
    /// at, as whole rows. Every node is read, but only its [`ironic_db::NodeState`]
    /// (owner and whether it is skipped, as the node metrics read it); the whole rows
    /// (the BMC's address and credentials) are read for this conductor's share only. At
    /// 100,000 nodes and 3 conductors that is 100,000 light rows and 33,000 whole ones
    /// per conductor and round, not 100,000 whole ones.
    async fn mine_to_sync(
        &self,
        topology: &Topology,
        page: &[ironic_db::NodeState],
    ) -> Result<Vec<Node>, Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let mine: Vec<_> = page
            .iter()
            .filter(|n| {
                snap.owner(&n.conductor_group, &n.driver, &n.uuid) == Some(me)
                    && self.drivers.driver(&n.driver).is_some()
                    && !excluded_state(n)
            })
            .map(|n| n.id)
            .collect();
        // Re-checked on the whole rows: a node may have changed in between.
        Ok(self
            .db
            .nodes_by_ids(&mine)
            .await?
            .into_iter()
            .filter(|n| !excluded(n))
            .collect())
    }

    /// One node: read the BMC without the lock; change the node only under it, taken
    /// once (a busy node is left to the next round).
    async fn sync_one(self: &Arc<Self>, seen: Node) -> Outcome {
        let uuid = seen.uuid.to_string();
        let Ok(driver) = crate::nodes::driver(&self.drivers, &seen) else {
            return Outcome::Skipped;
        };
        let read = driver.power().get_power_state(NodeInfo::from(&seen)).await;
        let nref = NodeRef::from(&seen);
        let max = self.settings.power_state_sync_max_retries;
        let actual = match read {
            Ok(p) => p,
            Err(e) => {
                let n = self.power_failures.bump(&uuid);
                tracing::warn!(node = %uuid, failures = n, "power-state sync could not read the BMC: {}", ironic_model::secrets::log_safe(&e.to_string()));
                if n < max || seen.maintenance {
                    return Outcome::Failed;
                }
                return self.power_failure(&nref, &e.to_string()).await;
            }
        };
        // A read that worked ends a run of read failures; failures to restore a state
        // keep counting until one works.
        if !self.settings.force_power_state_during_sync
            || seen.power_state.as_deref() == Some(actual.as_str())
        {
            self.power_failures.clear(&uuid);
        }
        // In step (the common case): nothing to write, so no lock either. Taking and
        // releasing it are two writes of the node row and of its every index; at 10,000
        // nodes they kept PostgreSQL busy for most of each round (bench/scale.sh). A
        // change since the listing is seen by the next round.
        if seen.power_state.as_deref() == Some(actual.as_str())
            && !(seen.maintenance && seen.fault.as_deref() == Some(POWER_FAILURE))
        {
            return Outcome::InSync;
        }
        let Ok(mut held) = self.locks.hold(&nref, Patience::Now).await else {
            return Outcome::Skipped;
        };
        // The reading belongs to the node as listed: if the node changed since (a user's
        // power change, a deploy), the reading may be stale; the next round looks again.
        if excluded_locked(&held.node)
            || held.node.updated_at != seen.updated_at
            || held.node.power_state != seen.power_state
        {
            held.release().await;
            return Outcome::Skipped;
        }
        if held.node.maintenance && held.node.fault.as_deref() == Some(POWER_FAILURE) {
            held.node.maintenance = false;
            held.node.maintenance_reason = None;
            held.node.fault = None;
            held.node.power_state = Some(actual.clone());
            self.power_failures.clear(&uuid);
            return match held.save_and_release().await {
                Ok(_) => {
                    tracing::info!(node = %uuid, power_state = %actual, "the BMC answers again: out of maintenance");
                    Outcome::Recovered
                }
                Err(e) => {
                    tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
                    Outcome::Failed
                }
            };
        }
        let recorded = held.node.power_state.clone();
        if recorded.as_deref() == Some(actual.as_str()) {
            self.power_failures.clear(&uuid);
            held.release().await;
            return Outcome::InSync;
        }
        let force = self.settings.force_power_state_during_sync
            && matches!(recorded.as_deref(), Some("power on" | "power off"));
        if force {
            let target = recorded.unwrap_or_default();
            let r = driver
                .power()
                .set_power_state(NodeInfo::from(&held.node), &target, None)
                .await;
            match r {
                Ok(now) => {
                    tracing::warn!(node = %uuid, found = %actual, restored = %now, "power state changed behind our back; set back to the recorded one");
                    self.power_failures.clear(&uuid);
                    held.node.power_state = Some(now);
                    let _ = held.save_and_release().await;
                    Outcome::Forced
                }
                Err(e) => {
                    held.release().await;
                    let n = self.power_failures.bump(&uuid);
                    tracing::warn!(node = %uuid, failures = n, "power-state sync could not restore {target}: {}", ironic_model::secrets::log_safe(&e.to_string()));
                    if n < max {
                        Outcome::Failed
                    } else {
                        self.power_failure(&nref, &e.to_string()).await
                    }
                }
            }
        } else {
            tracing::warn!(node = %uuid, recorded = ?recorded, found = %actual, "power state changed behind our back; recorded what the BMC reports");
            self.power_failures.clear(&uuid);
            held.node.power_state = Some(actual);
            match held.save_and_release().await {
                Ok(_) => Outcome::Updated,
                Err(_) => Outcome::Failed,
            }
        }
    }

    /// Too many failures: maintenance with `power failure` (upstream's reason).
    async fn power_failure(&self, nref: &NodeRef, why: &str) -> Outcome {
        let Ok(mut held) = self.locks.hold(nref, Patience::Now).await else {
            return Outcome::Failed;
        };
        if held.node.maintenance || excluded_locked(&held.node) {
            held.release().await;
            return Outcome::Failed;
        }
        let uuid = held.node.uuid.to_string();
        let expected = held
            .node
            .power_state
            .clone()
            .unwrap_or_else(|| "None".into());
        held.node.maintenance = true;
        held.node.fault = Some(POWER_FAILURE.into());
        held.node.maintenance_reason = Some(format!(
            "During sync_power_state, max retries exceeded for node {uuid}, node state None does not match expected state '{expected}'. Updating DB state to 'None' Switching node to maintenance mode. Error: {why}"
        ));
        held.node.power_state = None;
        match held.save_and_release().await {
            Ok(_) => {
                tracing::error!(node = %uuid, "power-state sync: the BMC does not answer; maintenance ({POWER_FAILURE})");
                self.power_failures.clear(&uuid);
                Outcome::ToMaintenance
            }
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node");
                Outcome::Failed
            }
        }
    }

    /// One round over this conductor's nodes, `sync_power_state_workers` at a time,
    /// page by page (1,000 nodes listed per page): a page's nodes go to the workers as
    /// soon as it is read, and the next page is read after a pause of 1/400 of the
    /// interval (150 ms of the default 60 s; the pauses of a round add up to half the
    /// interval at most, `EveryNode`). At 100,000 nodes the reading of the table
    /// is spread over ~15 s instead of one burst that every conductor makes at once
    /// (bench/scale.sh saw lists dip to a fifth of their rate during it), and no more
    /// than about a page of nodes waits for a worker at a time.
    pub async fn power_sync_round(self: &Arc<Self>, topology: &Topology) -> Result<Round, Error> {
        let workers = Arc::new(tokio::sync::Semaphore::new(
            self.settings.sync_power_state_workers.max(1),
        ));
        let interval = self.settings.sync_power_state_interval;
        // Pages of SYNC_PAGE nodes, a pause of 1/400 of the interval after each (a
        // quarter of it at 100,000 nodes), the pauses half of it at most.
        let mut pages = EveryNode::new(
            self.db.clone(),
            SYNC_PAGE,
            interval / 400,
            interval / 2,
            self.work.stop_signal(),
        );
        // One node may take its BMC's retries and a forced power change, no more.
        let per_node = std::time::Duration::from_secs(300);
        let mut tasks = tokio::task::JoinSet::new();
        let mut round = Round::default();
        let mut failed: Option<Error> = None;
        // Bounded: EveryNode reads at most a bounded number of pages.
        loop {
            let page = match pages.next().await {
                Ok(Page::Nodes(page)) => page,
                Ok(Page::End) => break,
                Ok(Page::Bounded) => {
                    tracing::warn!(
                        "power-state sync: looked at the first nodes only; the rest wait for a later round"
                    );
                    break;
                }
                Ok(Page::Stopped) => {
                    tasks.abort_all();
                    return Ok(round);
                }
                // The syncs already started finish (one may be restoring a power
                // state); then the round reports the error.
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let nodes = match self.mine_to_sync(topology, &page).await {
                Ok(nodes) => nodes,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            for n in nodes {
                let (me, workers) = (self.clone(), workers.clone());
                tasks.spawn(async move {
                    let _permit = workers.acquire_owned().await;
                    let uuid = n.uuid.to_string();
                    match tokio::time::timeout(per_node, me.sync_one(n)).await {
                        Ok(o) => o,
                        Err(_) => {
                            tracing::warn!(node = %uuid, "power-state sync of the node took too long; given up for this round");
                            Outcome::Failed
                        }
                    }
                });
            }
            while let Some(r) = tasks.try_join_next() {
                round.count(r);
            }
            // Slow BMCs: no more than a page of nodes waits for a worker.
            while tasks.len() > 1000 {
                tokio::select! {
                    r = tasks.join_next() => match r {
                        Some(r) => round.count(r),
                        None => break,
                    },
                    () = pages.stop_signal().stopped() => {
                        tasks.abort_all();
                        return Ok(round);
                    }
                }
            }
        }
        loop {
            // A stopping conductor does not wait for the round: the rest is dropped.
            let r = tokio::select! {
                r = tasks.join_next() => r,
                () = pages.stop_signal().stopped() => {
                    tasks.abort_all();
                    break;
                }
            };
            let Some(r) = r else { break };
            round.count(r);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(round),
        }
    }

    /// The periodic task: one round, logged when it found something.
    pub async fn power_sync(self: &Arc<Self>, topology: &Topology) -> Result<(), TaskError> {
        let start = std::time::Instant::now();
        let r = self
            .power_sync_round(topology)
            .await
            .map_err(|e| TaskError::failed("syncing power states", e))?;
        metrics::histogram!("ironic_power_sync_round_seconds")
            .record(start.elapsed().as_secs_f64());
        metrics::counter!("ironic_power_sync_nodes_total").increment(r.checked as u64);
        if r != Round::default()
            && (r.updated + r.forced + r.failed + r.to_maintenance + r.recovered) > 0
        {
            tracing::info!(
                checked = r.checked,
                updated = r.updated,
                forced = r.forced,
                failed = r.failed,
                to_maintenance = r.to_maintenance,
                recovered = r.recovered,
                ms = start.elapsed().as_millis() as u64,
                "power-state sync"
            );
        }
        Ok(())
    }
}

/// [`excluded`] for a node this conductor now holds (its own reservation aside).
fn excluded_locked(n: &Node) -> bool {
    skipped(
        Some(n.provision_state),
        n.target_power_state.is_some(),
        n.maintenance,
        n.fault.as_deref(),
    )
}

/// Whether a sync leaves a node alone: being enrolled, waiting in `deploy wait` or
/// `clean wait`, a power change in progress, in maintenance for another reason than a
/// power failure.
fn skipped(state: Option<P>, power_change: bool, maintenance: bool, fault: Option<&str>) -> bool {
    matches!(state, Some(P::Enroll | P::DeployWait | P::CleanWait))
        || power_change
        || (maintenance && fault != Some(POWER_FAILURE))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The light read's filter skips exactly the nodes the whole rows' filter skips, for
    /// every combination of the columns they look at.
    #[test]
    fn light_and_whole_row_filters_agree() {
        let mut checked = 0;
        for state in [
            P::Available,
            P::Enroll,
            P::DeployWait,
            P::CleanWait,
            P::Active,
        ] {
            for target in [None, Some("power on")] {
                for maintenance in [false, true] {
                    for fault in [None, Some(POWER_FAILURE), Some("clean failure")] {
                        for reservation in [None, Some("c1")] {
                            let mut n = Node::blank(
                                ironic_model::NodeUuid::new_v4(),
                                "fake-hardware".into(),
                                ironic_model::Version::MAX,
                            );
                            n.provision_state = state;
                            n.target_power_state = target.map(str::to_string);
                            n.maintenance = maintenance;
                            n.fault = fault.map(str::to_string);
                            n.reservation = reservation.map(str::to_string);
                            let light = ironic_db::NodeState {
                                id: n.id,
                                uuid: n.uuid.clone(),
                                driver: n.driver.clone(),
                                conductor_group: n.conductor_group.clone(),
                                provision_state: state.as_str().to_string(),
                                maintenance,
                                power_state: None,
                                target_power_state: n.target_power_state.clone(),
                                fault: n.fault.clone(),
                                reservation: n.reservation.clone(),
                            };
                            assert_eq!(excluded_state(&light), excluded(&n), "{light:?}");
                            checked += usize::from(excluded(&n));
                        }
                    }
                }
            }
        }
        // 120 combinations; synced: available or active (2), no power change, not
        // reserved, out of maintenance with any fault or in it for a power failure (4).
        assert_eq!(checked, 120 - 2 * 4);
    }
}
