//! Registration in the `conductors` table, heartbeats, the clean-up a conductor owes
//! after a crash (its own stale node locks), and the periodic release of locks that
//! dead conductors left on the nodes this conductor now owns.

use crate::work::TaskError;
use std::sync::Arc;

use ironic_db::topology::Topology;

use crate::every_node::{self, EveryNode, Page};

/// This conductor's presence in the cluster: its row in `conductors` (registration,
/// heartbeats on a database session of its own, unregistration), its id (the
/// `conductor_affinity` of its allocations), the locks an earlier run or a dead peer
/// left behind, and who it has seen die.
pub struct Presence {
    db: ironic_db::Db,
    driver_names: Vec<String>,
    settings: Arc<crate::ConductorSettings>,
    work: crate::work::Runner,
    /// This conductor's row id (`conductors.id`), the `conductor_affinity` of the
    /// allocations it works on; known once the service has started.
    conductor_id: std::sync::OnceLock<ironic_model::ConductorId>,
    /// The heartbeat and its database session (this conductor's presence), opened at
    /// the first heartbeat; held until the process ends, even while stopping.
    heartbeat: tokio::sync::Mutex<Option<ironic_db::heartbeat::Heartbeat>>,
    /// The conductors this one has seen declared dead; a new one triggers the
    /// allocation take-over at once.
    known_dead: std::sync::Mutex<std::collections::BTreeSet<ironic_model::ConductorId>>,
    /// Runs the allocation take-over now (set by the service).
    pub(crate) takeover: std::sync::OnceLock<crate::work::Trigger>,
    /// When the last heartbeat was recorded.
    last_beat: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Presence {
    pub(crate) fn new(
        db: ironic_db::Db,
        driver_names: Vec<String>,
        settings: Arc<crate::ConductorSettings>,
        work: crate::work::Runner,
    ) -> Presence {
        Presence {
            db,
            driver_names,
            settings,
            work,
            conductor_id: Default::default(),
            heartbeat: Default::default(),
            known_dead: Default::default(),
            takeover: Default::default(),
            last_beat: Default::default(),
        }
    }

    /// How long ago this conductor last recorded a heartbeat (`None`: not yet).
    pub fn since_last_heartbeat(&self) -> Option<std::time::Duration> {
        self.last_beat
            .lock()
            .ok()
            .and_then(|t| t.map(|t| t.elapsed()))
    }

    /// This conductor's `conductors.id`, creating its row on a first start. Called by
    /// the service before it serves.
    pub async fn init_conductor_id(
        &self,
    ) -> Result<ironic_model::ConductorId, ironic_model::Error> {
        if let Some(id) = self.conductor_id.get() {
            return Ok(*id);
        }
        let id = self
            .db
            .conductor_ensure(
                &self.settings.host,
                &self.settings.conductor_group,
                &self.driver_names,
            )
            .await?;
        Ok(*self.conductor_id.get_or_init(|| id))
    }

    pub(crate) fn my_id(&self) -> Result<ironic_model::ConductorId, ironic_model::Error> {
        self.conductor_id.get().copied().ok_or_else(|| {
            ironic_model::Error::Unavailable("The conductor is starting; retry.".into())
        })
    }

    /// At process start: releases node locks an earlier run of this conductor left
    /// behind (a crash), then registers as online.
    pub async fn start(&self) -> Result<(), ironic_model::Error> {
        self.release_own_locks().await?;
        self.register().await
    }

    /// Releases the locks an earlier run of this host left behind. Call before serving.
    pub async fn release_own_locks(&self) -> Result<(), ironic_model::Error> {
        let host = &self.settings.host;
        let released = self.db.node_release_all(host).await?;
        if released > 0 {
            tracing::warn!(
                host,
                released,
                "released node locks left by an earlier run of this conductor"
            );
        }
        Ok(())
    }

    /// Registers (again) as online. Never touches locks: operations of this process may
    /// hold some right now.
    pub async fn register(&self) -> Result<(), ironic_model::Error> {
        let host = &self.settings.host;
        let c = self
            .db
            .conductor_register(host, &self.settings.conductor_group, &self.driver_names)
            .await?;
        tracing::info!(host, conductor_id = %c.id, drivers = ?c.drivers, group = %c.conductor_group, "conductor registered");
        Ok(())
    }

    /// Releases the locks held by dead conductors (heartbeat older than the timeout) on
    /// nodes this conductor owns (each node has one owner, so exactly one live
    /// conductor releases each lock). A conductor that is stopping gracefully is offline
    /// but still heartbeats, so its locks stay until it has finished. Returns how many
    /// were released.
    pub async fn release_orphan_locks(
        &self,
        topology: &Topology,
    ) -> Result<usize, ironic_model::Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        // Holder → the heartbeat we saw: released only if it has not moved since.
        let dead: std::collections::HashMap<&str, Option<chrono::DateTime<chrono::Utc>>> = snap
            .dead()
            .filter(|c| c.hostname != me)
            .map(|c| (c.hostname.as_str(), c.updated_at))
            .collect();
        if dead.is_empty() {
            return Ok(0);
        }
        let mut released = 0;
        for (id, uuid, driver, group, holder) in self.db.nodes_locked().await? {
            let Some(seen) = dead.get(holder.as_str()) else {
                continue;
            };
            if snap.owner(&group, &driver, &uuid) != Some(me) {
                continue;
            }
            if self.db.node_release_orphan(id, &holder, *seen).await? {
                tracing::warn!(node = %uuid, holder, "released a lock held by a dead conductor");
                released += 1;
            }
        }
        Ok(released)
    }

    /// A heartbeat round's own part (see `Conductor::heartbeat`): heartbeat, refresh
    /// the view of the cluster, start the take-over when a conductor died, release
    /// orphan locks. Returns what failed.
    pub(crate) async fn heartbeat(&self, topology: &Topology) -> Vec<TaskError> {
        let host = self.settings.host.as_str();
        let mut failed = Vec::new();
        match self.beat().await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(host, "conductor row vanished; registering again");
                if let Err(e) = self.register().await {
                    failed.push(TaskError::failed("registering again", e));
                }
            }
            Err(e) => failed.push(TaskError::failed("heartbeating", e)),
        }
        topology.refresh().await;
        self.notice_deaths(topology);
        if let Err(e) = self.release_orphan_locks(topology).await {
            failed.push(TaskError::failed("releasing orphan locks", e));
        }
        failed
    }

    /// Starts the allocation take-over at once when a conductor is newly declared dead
    /// (instead of at the next periodic check).
    fn notice_deaths(&self, topology: &Topology) {
        let snap = topology.snapshot();
        let dead: std::collections::BTreeSet<ironic_model::ConductorId> =
            snap.dead().map(|c| c.id).collect();
        let newly = {
            let mut known = self.known_dead.lock().unwrap_or_else(|p| p.into_inner());
            let newly = dead.difference(&known).count() > 0;
            *known = dead;
            newly
        };
        if newly && let Some(t) = self.takeover.get() {
            t.run_now();
        }
    }

    /// Records a heartbeat on the conductor's own database session (see
    /// [`ironic_db::heartbeat`]); false if the conductor's row is gone.
    async fn beat(&self) -> Result<bool, ironic_model::Error> {
        let id = self.my_id()?;
        let mut hb = self.heartbeat.lock().await;
        let step = self.settings.liveness.timeout / 2;
        let r = hb
            .get_or_insert_with(|| self.db.heartbeat(&self.settings.host, id, step))
            .beat()
            .await;
        if matches!(r, Ok(true))
            && let Ok(mut t) = self.last_beat.lock()
        {
            *t = Some(std::time::Instant::now());
        }
        r
    }

    /// Removes this conductor from the registry (graceful stop).
    pub async fn unregister(&self) {
        let host = self.settings.host.as_str();
        match self.db.conductor_unregister(host).await {
            Ok(()) => tracing::info!(host, "conductor unregistered"),
            Err(e) => {
                tracing::error!(host, error = %ironic_model::error::chain(&e), "could not unregister")
            }
        }
    }
}

/// How often each conductor recounts the nodes it owns (`ironic_conductor_nodes`).
pub const NODE_METRICS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

impl Presence {
    /// Sets `ironic_conductor_nodes` (the nodes this conductor owns, by provision state,
    /// maintenance and power state); `seen` holds the label sets set before, so that a
    /// state no node is in any more drops to zero.
    ///
    /// Every conductor reads every node's state (ownership is the hash ring's, computed
    /// here) through [`EveryNode`]: 2,000 nodes per statement, a pause of a hundredth of
    /// the interval (150 ms) after each page, the pauses adding up to half the interval
    /// at most (beyond 100,000 nodes the rest is read back to back). At 100,000 nodes the
    /// reading is spread over ~7 s.
    /// A stopping conductor leaves the count unfinished (the gauges keep the last whole
    /// count; the run is not an error).
    pub async fn node_metrics(
        &self,
        topology: &Topology,
        seen: &std::sync::Mutex<std::collections::BTreeSet<(String, bool, String)>>,
    ) -> Result<(), TaskError> {
        const PAGE: i64 = 2_000;
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let mut counts: std::collections::BTreeMap<(String, bool, String), f64> =
            Default::default();
        let mut pages = EveryNode::new(
            self.db.clone(),
            PAGE,
            NODE_METRICS_INTERVAL / 100,
            NODE_METRICS_INTERVAL / 2,
            self.work.stop_signal(),
        );
        loop {
            let rows = match pages.next().await {
                Ok(Page::Nodes(rows)) => rows,
                Ok(Page::End) => break,
                Ok(Page::Stopped) => return Ok(()),
                Ok(Page::Bounded) => {
                    tracing::warn!(
                        pages = every_node::MAX_PAGES,
                        page = PAGE,
                        "node metrics: counted the first nodes only; the rest are left out"
                    );
                    break;
                }
                Err(e) => return Err(TaskError::failed("reading node states", e)),
            };
            for n in rows {
                if snap.owner(&n.conductor_group, &n.driver, &n.uuid) == Some(me) {
                    let power = n.power_state.unwrap_or_else(|| "None".into());
                    *counts
                        .entry((n.provision_state, n.maintenance, power))
                        .or_default() += 1.0;
                }
            }
        }
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        for key in seen.iter() {
            if !counts.contains_key(key) {
                gauge(key).set(0.0);
            }
        }
        for (key, n) in &counts {
            gauge(key).set(*n);
            seen.insert(key.clone());
        }
        Ok(())
    }
}

fn gauge((state, maintenance, power): &(String, bool, String)) -> metrics::Gauge {
    metrics::gauge!(
        "ironic_conductor_nodes",
        "provision_state" => state.clone(),
        "maintenance" => maintenance.to_string(),
        "power_state" => power.clone()
    )
}
